/*
 * Connect storm for bench/footprint.ts: a loopback TCP listener (one accepting thread that closes each
 * connection at once) and a client that opens and resets connections (SO_LINGER 0: no TIME_WAIT) at a paced
 * rate. Each connection is a CONNECT span candidate and several eBPF connection events in the agent.
 * Usage: connect-storm CONNS_PER_SECOND SECONDS; prints "connections=N seconds=S" at the end.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SLICE_NS 1000000L

static int listener;

static void *acceptor(void *arg)
{
  (void)arg;
  for (;;) {
    int fd = accept(listener, NULL, NULL);
    if (fd >= 0)
      close(fd);
  }
  return NULL;
}

static long now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int main(int argc, char **argv)
{
  if (argc < 3) {
    fprintf(stderr, "usage: connect-storm CONNS_PER_SECOND SECONDS\n");
    return 2;
  }
  double rate = atof(argv[1]);
  double seconds = atof(argv[2]);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
  socklen_t len = sizeof(addr);
  listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listener, (struct sockaddr *)&addr, sizeof(addr)) || listen(listener, 4096) || getsockname(listener, (struct sockaddr *)&addr, &len)) {
    perror("listen");
    return 1;
  }
  pthread_t t;
  pthread_create(&t, NULL, acceptor, NULL);
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  long start = now_ns();
  long end = start + (long)(seconds * 1e9);
  long made = 0;
  for (long now = start; now < end; now = now_ns()) {
    long due = (long)((double)(now - start) / 1e9 * rate);
    while (made < due && now_ns() < end) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0)
        break;
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
        made++;
      close(fd);
    }
    struct timespec slice = {.tv_sec = 0, .tv_nsec = SLICE_NS};
    nanosleep(&slice, NULL);
  }
  printf("connections=%ld seconds=%.3f\n", made, (now_ns() - start) / 1e9);
  return 0;
}
