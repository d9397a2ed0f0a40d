/* One thread, io_uring (liburing): per loop one io_uring_enter that submits the sends and the
 * next receives and waits for completions; no epoll, no separate recv/send system calls.
 * Usage: uring <port> */
#include "floor.h"
#include <liburing.h>
#include <stdint.h>

struct conn {
  int fd;
  size_t n;
  struct request_state st;
  char in[IN_BYTES];
  char out[OUT_BYTES];
};

enum { ACCEPTED = 1, RECEIVED = 2, SENT = 3 };
static struct io_uring ring;

static void *tagged(struct conn *c, int kind) { return (void *)((uintptr_t)c | (uintptr_t)kind); }

static void receive(struct conn *c) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  io_uring_prep_recv(sqe, c->fd, c->in + c->n, sizeof c->in - c->n, 0);
  io_uring_sqe_set_data(sqe, tagged(c, RECEIVED));
}

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: %s <port>\n", argv[0]), 2;
  int listener = listen_on(argv[1]);
  struct io_uring_params params = {
      .flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN};
  if (io_uring_queue_init_params(1024, &ring, &params) < 0) return perror("io_uring"), 1;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  io_uring_prep_multishot_accept(sqe, listener, NULL, NULL, 0);
  io_uring_sqe_set_data(sqe, tagged(NULL, ACCEPTED));
  for (;;) {
    io_uring_submit_and_wait(&ring, 1);
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      seen++;
      uintptr_t data = (uintptr_t)io_uring_cqe_get_data(cqe);
      struct conn *c = (struct conn *)(data & ~(uintptr_t)7);
      if ((data & 7) == ACCEPTED) {
        if (cqe->res < 0) continue;
        c = aligned_alloc(8, sizeof *c);
        c->fd = cqe->res;
        c->n = 0;
        c->st.skip = 0;
        no_delay(c->fd);
        receive(c);
      } else if ((data & 7) == RECEIVED) {
        if (cqe->res <= 0) {
          close(c->fd), free(c);
          continue;
        }
        c->n += (size_t)cqe->res;
        /* One answer per read: the gets of bench/kernel-floor.sh never fill OUT_BYTES. */
        size_t out_len = 0, used = answer(&c->st, c->in, c->n, c->out, &out_len);
        memmove(c->in, c->in + used, c->n - used);
        c->n -= used;
        if (out_len) { /* a closed-loop client sends again only after this answer */
          struct io_uring_sqe *send = io_uring_get_sqe(&ring);
          io_uring_prep_send(send, c->fd, c->out, out_len, 0);
          io_uring_sqe_set_data(send, tagged(c, SENT));
          send->flags |= IOSQE_CQE_SKIP_SUCCESS;
        }
        receive(c);
      }
    }
    io_uring_cq_advance(&ring, seen);
  }
}
