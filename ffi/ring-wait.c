/*
 * The waiting thread of ffi/ring-wait.ts, compiled at run time by bun:ffi's TinyCC. It lives as long as the process
 * and blocks in epoll_wait on one epoll instance for good; the JavaScript thread adds the rings' fds to that instance
 * (edge-triggered: the thread wakes when the kernel wakes the ring's readers, not while records merely wait) and arms
 * a wait by storing its number in `armed` (ring_wait_arm: a store, no system call, no wakeup of this thread).
 *
 * When epoll_wait returns with an event and a wait is armed, the thread takes it (compare-and-swap to 0) and calls
 * `ready(wait)` (a thread-safe JSCallback: queued to the JavaScript thread); on a timeout with a wait armed,
 * `ready(-wait)`. An event while no wait is armed only sets `missed`, and the next ring_wait_arm then reports it (the
 * wakeup came between the JavaScript thread's last poll and its arming). If epoll_wait fails the thread calls
 * `ready(0)` and ends. No headers: the few libc declarations it needs are here, so that it compiles on hosts without
 * C headers.
 */
typedef unsigned long size_t;

struct epoll_event {
  unsigned int events;
  unsigned long long data;
} __attribute__((packed));

extern int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout);
extern int pthread_create(unsigned long *thread, const void *attr, void *(*start)(void *), void *arg);
extern int pthread_detach(unsigned long thread);
extern int pthread_sigmask(int how, const void *set, void *oldset);
extern int *__errno_location(void);

/* Atomics: TinyCC has no __sync or __atomic builtins, so x86-64's own instructions (elsewhere the file does not
 * compile, and the agent polls on its timer alone). */
#if !defined(__x86_64__)
#error "ring-wait.c: x86-64 only"
#endif
static int cas(volatile int *p, int expect, int want)
{
  unsigned char ok;
  __asm__ __volatile__("lock; cmpxchgl %3, %1\n\tsete %0" : "=q"(ok), "+m"(*p), "+a"(expect) : "r"(want) : "memory", "cc");
  return ok;
}
static int swap(volatile int *p, int v)
{
  __asm__ __volatile__("xchgl %0, %1" : "+r"(v), "+m"(*p) : : "memory");
  return v;
}
static void fence(void)
{
  __asm__ __volatile__("mfence" : : : "memory");
}

#define SIG_BLOCK 0
#define SIGSET_BYTES 128
#define EINTR 4
#define MAX_EVENTS 16

static void (*ready)(int);
static int epoll_fd;
static int timeout_ms;
/* The armed wait's number (> 0), or 0. */
static volatile int armed;
/* 1 when an event came while no wait was armed. */
static volatile int missed;

static void *wait_loop(void *unused)
{
  /* Every signal stays with the JavaScript thread (SIGTERM, SIGHUP: the agent's own handlers). */
  unsigned char all[SIGSET_BYTES];
  for (int i = 0; i < SIGSET_BYTES; i++)
    all[i] = 0xff;
  pthread_sigmask(SIG_BLOCK, all, 0);
  struct epoll_event events[MAX_EVENTS];
  for (;;) {
    int n = epoll_wait(epoll_fd, events, MAX_EVENTS, timeout_ms);
    if (n < 0) {
      if (*__errno_location() == EINTR)
        continue;
      ready(0);
      return 0;
    }
    int wait = armed;
    if (wait != 0 && cas(&armed, wait, 0)) {
      ready(n > 0 ? wait : -wait);
      continue;
    }
    if (n == 0)
      continue;
    /* Noted for the next arming; and taken now if a wait was armed meanwhile (ring_wait_arm may have looked at
     * `missed` before it was set). Whichever side swaps `missed` back to 0 reports it. */
    missed = 1;
    fence();
    wait = armed;
    if (wait != 0 && swap(&missed, 0) && cas(&armed, wait, 0))
      ready(wait);
  }
  return 0;
}

/* Starts the thread on `epoll`; 0 on success, else pthread_create's error number. */
int ring_wait_start(int epoll, void (*ready_fn)(int), int wait_timeout_ms)
{
  unsigned long thread;
  epoll_fd = epoll;
  ready = ready_fn;
  timeout_ms = wait_timeout_ms;
  int err = pthread_create(&thread, 0, wait_loop, 0);
  if (err == 0)
    pthread_detach(thread);
  return err;
}

/*
 * Arms wait `wait` (> 0). Returns 1 when an event came since the last wait was taken and none was armed: the wait is
 * then not armed, and the caller treats it as woken at once.
 */
int ring_wait_arm(int wait)
{
  armed = wait;
  fence();
  if (swap(&missed, 0) && cas(&armed, wait, 0))
    return 1;
  return 0;
}

/* Disarms whatever wait is armed (its ready() may already be queued: the caller ignores it by its number). */
void ring_wait_disarm(void)
{
  armed = 0;
}
