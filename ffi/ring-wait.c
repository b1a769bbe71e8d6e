/*
 * The waiting thread of ffi/ring-wait.ts, compiled at run time by bun:ffi's TinyCC: blocks until the agent hands
 * it an epoll instance (through the eventfd `gate`, as the instance's fd + 1), waits on it until one of its files
 * is readable, calls `ready` (a thread-safe JSCallback: queued to the JavaScript thread) and waits for the next
 * instance; a wait ends after `timeout_ms` without any (`ready(0)`). If the gate cannot be read it calls `ready(-2)`
 * and ends. No headers: the few libc declarations it needs are here, so that it compiles on hosts without C
 * headers.
 */
typedef unsigned long size_t;
typedef long ssize_t;

struct epoll_event {
  unsigned int events;
  unsigned long long data;
} __attribute__((packed));

extern int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout);
extern int pthread_create(unsigned long *thread, const void *attr, void *(*start)(void *), void *arg);
extern int pthread_detach(unsigned long thread);
extern int pthread_sigmask(int how, const void *set, void *oldset);
extern ssize_t read(int fd, void *buf, size_t count);

#define SIG_BLOCK 0
#define SIGSET_BYTES 128

static void (*ready)(int);
static int gate;
static int timeout_ms;

static void *wait_loop(void *unused)
{
  /* Every signal stays with the JavaScript thread (SIGTERM, SIGHUP: the agent's own handlers). */
  unsigned char all[SIGSET_BYTES];
  for (int i = 0; i < SIGSET_BYTES; i++)
    all[i] = 0xff;
  pthread_sigmask(SIG_BLOCK, all, 0);
  for (;;) {
    unsigned long long handed = 0;
    if (read(gate, &handed, sizeof(handed)) != sizeof(handed) || handed == 0) {
      ready(-2);
      return 0;
    }
    struct epoll_event ev;
    int n = epoll_wait((int)(handed - 1), &ev, 1, timeout_ms);
    ready(n);
  }
  return 0;
}

/* Starts the thread; 0 on success, else pthread_create's error number. */
int ring_wait_start(int gate_fd, void (*ready_fn)(int), int wait_timeout_ms)
{
  unsigned long thread;
  gate = gate_fd;
  ready = ready_fn;
  timeout_ms = wait_timeout_ms;
  int err = pthread_create(&thread, 0, wait_loop, 0);
  if (err == 0)
    pthread_detach(thread);
  return err;
}
