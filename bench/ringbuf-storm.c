/*
 * Producer of bench/ringbuf.ts: waits for a byte on stdin, then calls getppid(2) in a tight loop for
 * argv[1] milliseconds, and prints how many calls it made.
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

int main(int argc, char **argv)
{
  long long duration_ns = (argc > 1 ? atoll(argv[1]) : 3000) * 1000000LL;
  char go;
  if (read(0, &go, 1) != 1)
    return 1;
  long long end = now_ns() + duration_ns;
  long long calls = 0;
  while (1) {
    for (int i = 0; i < 1000; i++)
      syscall(SYS_getppid);
    calls += 1000;
    if (now_ns() >= end)
      break;
  }
  printf("%lld\n", calls);
  return 0;
}
