/*
 * The least a memcached-protocol server can do per request, for bench/kernel-floor.sh: every
 * `get <key>` is answered with the same 100-byte value, no store, no parsing beyond the line;
 * `stats` answers rusage_user and rusage_system so `shoal bench load` reads the server's CPU
 * time as it does for memcached and Shoal. Not a server: a measuring stick for what the kernel
 * costs per request on this machine.
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

#define VALUE_BYTES 100
#define IN_BYTES 16384
#define OUT_BYTES 65536

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

/* Answers the complete lines of in[0..n) into out (appending at *out_len); returns the bytes
 * consumed. Lines are short in this benchmark, so out cannot overflow from one read. */
static size_t answer(const char *in, size_t n, char *out, size_t *out_len) {
  static char value[VALUE_BYTES];
  memset(value, 'v', sizeof value);
  size_t used = 0;
  const char *nl;
  while ((nl = memchr(in + used, '\n', n - used)) != NULL) {
    const char *line = in + used;
    size_t len = (size_t)(nl - line) + 1;
    char *o = out + *out_len;
    if (len > 6 && memcmp(line, "get ", 4) == 0) {
      o += sprintf(o, "VALUE %.*s 0 %d\r\n", (int)(len - 6), line + 4, VALUE_BYTES);
      memcpy(o, value, VALUE_BYTES);
      o += VALUE_BYTES;
      o += sprintf(o, "\r\nEND\r\n");
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
