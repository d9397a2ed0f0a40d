/*
 * The least a memcached-protocol server can do per request, for bench/kernel-floor.sh and
 * bench/server-vs-memcached.sh: every key of a `get <key>...` is answered with the same value
 * (as long as the last `set` was, 100 bytes before any), every `set` is answered `STORED` and
 * its data skipped, nothing is stored and nothing parsed beyond the line; `stats` answers
 * rusage_user and rusage_system so `shoal bench load` reads the server's CPU time as it does
 * for memcached and Shoal. Not a server: a measuring stick for what the kernel costs per
 * request on this machine.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define FIRST_VALUE_BYTES 100
#define MAX_VALUE_BYTES (1024 * 1024)
#define IN_BYTES 16384
/* Room for the largest answer to one read: 8 pipelined 10-key gets of 16 KiB values. */
#define OUT_BYTES (2 * 1024 * 1024)

/* What a connection is in the middle of: the data block of a `set` still to be skipped. */
struct request_state {
  size_t skip;
};

static int listen_on(const char *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(port))};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1024) < 0) {
    perror("listen");
    exit(1);
  }
  return fd;
}

static void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* The value every get is answered with; its length follows the last set's. */
static char value[MAX_VALUE_BYTES];
static size_t value_len = FIRST_VALUE_BYTES;

/* Appends one key's VALUE block to o; returns the new end. */
static char *value_block(char *o, const char *key, size_t key_len) {
  o += sprintf(o, "VALUE %.*s 0 %zu\r\n", (int)key_len, key, value_len);
  memcpy(o, value, value_len);
  o += value_len;
  return memcpy(o, "\r\n", 2), o + 2;
}

/* Answers the complete requests of in[0..n) into out (appending at *out_len, stopping before
 * an answer could pass OUT_BYTES); returns the bytes consumed. */
static size_t answer(struct request_state *st, const char *in, size_t n, char *out, size_t *out_len) {
  size_t used = 0;
  const char *nl;
  for (;;) {
    if (st->skip) { /* a set's data block, possibly across reads */
      size_t k = n - used < st->skip ? n - used : st->skip;
      used += k, st->skip -= k;
      if (st->skip) break;
      continue;
    }
    if ((nl = memchr(in + used, '\n', n - used)) == NULL) break;
    const char *line = in + used;
    size_t len = (size_t)(nl - line) + 1, keys = 0;
    if (len > 6 && memcmp(line, "get ", 4) == 0)
      for (size_t i = 3; i < len - 2; i++) keys += line[i] == ' ' && line[i + 1] != ' ';
    if (*out_len + keys * (value_len + 300) + 512 > OUT_BYTES) break;
    char *o = out + *out_len;
    unsigned long data_len;
    if (keys) {
      const char *end = line + len - 2, *k = line + 4;
      while (k < end) {
        const char *space = memchr(k, ' ', (size_t)(end - k));
        const char *key_end = space ? space : end;
        if (key_end > k) o = value_block(o, k, (size_t)(key_end - k));
        k = key_end + 1;
      }
      o += sprintf(o, "END\r\n");
    } else if (len > 4 && memcmp(line, "set ", 4) == 0 &&
               sscanf(line, "set %*s %*s %*s %lu", &data_len) == 1 && data_len <= MAX_VALUE_BYTES) {
      value_len = data_len;
      st->skip = data_len + 2;
      o += sprintf(o, "STORED\r\n");
    } else if (len >= 5 && memcmp(line, "stats", 5) == 0) {
      struct rusage ru;
      getrusage(RUSAGE_SELF, &ru);
      o += sprintf(o, "STAT rusage_user %ld.%06ld\r\nSTAT rusage_system %ld.%06ld\r\nEND\r\n",
                   (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec,
                   (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    } else {
      o += sprintf(o, "ERROR\r\n");
    }
    *out_len = (size_t)(o - out);
    used += len;
  }
  return used;
}
