// UDP packet generator for bench/capture.ts (compiled by it with cc):
// sends datagrams from SRC to DST:PORT..PORT+PORTS-1 (round robin; IPv4 or
// IPv6, by the form of SRC) at PPS
// (0 = as fast as possible) for SECONDS, in sendmmsg batches; prints the
// number of datagrams the kernel accepted.
//   capture-blast SRC DST PORT PORTS PPS SECONDS PAYLOAD
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 32

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: %s SRC DST PORT PORTS PPS SECONDS PAYLOAD\n", argv[0]);
    return 2;
  }
  int v6 = strchr(argv[1], ':') != NULL;
  struct sockaddr_in6 src6 = {.sin6_family = AF_INET6}, dst6[BATCH];
  struct sockaddr_in src = {.sin_family = AF_INET}, dst[BATCH];
  struct in_addr daddr;
  struct in6_addr daddr6;
  if (v6 ? inet_pton(AF_INET6, argv[1], &src6.sin6_addr) != 1 : inet_pton(AF_INET, argv[1], &src.sin_addr) != 1)
    return fprintf(stderr, "bad SRC\n"), 2;
  if (v6 ? inet_pton(AF_INET6, argv[2], &daddr6) != 1 : inet_pton(AF_INET, argv[2], &daddr) != 1)
    return fprintf(stderr, "bad DST\n"), 2;
  int port = atoi(argv[3]), ports = atoi(argv[4]);
  double pps = atof(argv[5]), seconds = atof(argv[6]);
  size_t payload = (size_t)atoi(argv[7]);
  if (ports < 1 || port < 1 || port + ports - 1 > 65535) return fprintf(stderr, "bad PORT/PORTS\n"), 2;

  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM, 0);
  if (fd < 0 || (v6 ? bind(fd, (struct sockaddr *)&src6, sizeof src6) : bind(fd, (struct sockaddr *)&src, sizeof src)) < 0)
    return perror("socket/bind"), 1;
  int sndbuf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);

  char *buf = calloc(1, payload ? payload : 1);
  struct mmsghdr msgs[BATCH];
  struct iovec iov[BATCH];
  memset(msgs, 0, sizeof msgs);
  for (int i = 0; i < BATCH; i++) {
    iov[i].iov_base = buf;
    iov[i].iov_len = payload;
    dst[i].sin_family = AF_INET;
    dst[i].sin_addr = daddr;
    dst6[i].sin6_family = AF_INET6;
    dst6[i].sin6_addr = daddr6;
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = v6 ? (void *)&dst6[i] : (void *)&dst[i];
    msgs[i].msg_hdr.msg_namelen = v6 ? sizeof dst6[i] : sizeof dst[i];
  }

  unsigned long long sent = 0, next_port = 0;
  double start = now(), end = start + seconds;
  for (;;) {
    double t = now();
    if (t >= end) break;
    if (pps > 0 && sent >= (t - start) * pps) {
      struct timespec nap = {0, 20000};
      nanosleep(&nap, NULL);
      continue;
    }
    for (int i = 0; i < BATCH; i++) {
      uint16_t p = htons((uint16_t)(port + (next_port + i) % ports));
      dst[i].sin_port = p;
      dst6[i].sin6_port = p;
    }
    int n = sendmmsg(fd, msgs, BATCH, 0);
    if (n > 0) {
      sent += n;
      next_port += n;
    }
  }
  printf("%llu\n", sent);
  return 0;
}
