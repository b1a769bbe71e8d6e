/*
 * Producer of bench/ringbuf.ts: for each byte read on stdin, calls getppid(2) in a tight loop for argv[1]
 * milliseconds ('g') or argv[2] milliseconds ('w', a warm-up round), then prints how many calls it made.
 * Ends at end of input. One process serves several rounds, so a reader filtering on its pid is loaded once.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long storm(long long duration_ns)
{
  long long end = now_ns() + duration_ns;
  long long calls = 0;
  while (1) {
    for (int i = 0; i < 1000; i++)
      syscall(SYS_getppid);
    calls += 1000;
    if (now_ns() >= end)
      break;
  }
  return calls;
}

int main(int argc, char **argv)
{
  long long round_ns = (argc > 1 ? atoll(argv[1]) : 3000) * 1000000LL;
  long long warmup_ns = (argc > 2 ? atoll(argv[2]) : 1000) * 1000000LL;
  char go;
  while (read(0, &go, 1) == 1) {
    if (go != 'g' && go != 'w')
      continue;
    printf("%lld\n", storm(go == 'w' ? warmup_ns : round_ns));
    fflush(stdout);
  }
  return 0;
}
