/* One thread, epoll: per request one epoll_wait, one recv, one send. Usage: epoll <port> */
#include "floor.h"
#include <sys/epoll.h>

struct conn {
  int fd;
  size_t n;
  struct request_state st;
  char in[IN_BYTES];
};

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: %s <port>\n", argv[0]), 2;
  int listener = listen_on(argv[1]), ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
  static char out[OUT_BYTES];
  for (;;) {
    struct epoll_event ready[64];
    int k = epoll_wait(ep, ready, 64, -1);
    for (int i = 0; i < k; i++) {
      struct conn *c = ready[i].data.ptr;
      if (c == NULL) {
        /* Blocking, so that a long answer goes out whole; reads never wait (MSG_DONTWAIT). */
        int fd = accept4(listener, NULL, NULL, 0);
        if (fd < 0) continue;
        no_delay(fd);
        c = calloc(1, sizeof *c);
        c->fd = fd;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
        continue;
      }
      ssize_t r = recv(c->fd, c->in + c->n, sizeof c->in - c->n, MSG_DONTWAIT);
      if (r <= 0) { /* closed, full (a line longer than the buffer), or a spurious wakeup */
        if (r == 0) close(c->fd), free(c);
        continue;
      }
      c->n += (size_t)r;
      for (;;) { /* more than one answer only when one read held more than OUT_BYTES of answers */
        size_t out_len = 0, used = answer(&c->st, c->in, c->n, out, &out_len);
        memmove(c->in, c->in + used, c->n - used);
        c->n -= used;
        if (out_len) send(c->fd, out, out_len, 0);
        if (!out_len || !used) break;
      }
    }
  }
}
