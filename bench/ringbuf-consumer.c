/*
 * Reference consumer of bench/ringbuf.ts: loads build/storm.bpf.o with libbpf for target pid argv[2],
 * ring buffer of argv[3] bytes, and consumes with a counting callback, either with ring_buffer__poll
 * (argv[4] "epoll": woken by the kernel) or with ring_buffer__consume every 20 ms ("timer": the agent's
 * schedule). Prints "ready" once attached; on SIGINT drains and prints
 * "events=N lost=L cpu_ns=C" (CPU from attach to the end, getrusage).
 */
#include <bpf/libbpf.h>
#include <bpf/bpf.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define TIMER_INTERVAL_US 20000

struct storm_event {
  uint64_t timestamp_ns, seq;
  uint32_t pid, tid;
  int64_t syscall_nr;
  uint64_t args[4];
};

static volatile sig_atomic_t stop;
static uint64_t events, checksum;

static void on_sigint(int sig) { (void)sig; stop = 1; }

static int on_event(void *ctx, void *data, size_t size)
{
  (void)ctx;
  const struct storm_event *e = data;
  if (size >= sizeof(*e))
    checksum += e->seq + e->pid;
  events++;
  return 0;
}

static long long cpu_ns(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
}

int main(int argc, char **argv)
{
  if (argc < 5) {
    fprintf(stderr, "usage: %s storm.bpf.o target_pid ringbuf_bytes epoll|timer\n", argv[0]);
    return 2;
  }
  uint32_t target = (uint32_t)atoi(argv[2]);
  struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
  if (!obj) { fprintf(stderr, "open: %s\n", strerror(errno)); return 1; }
  struct bpf_map *map, *rodata = NULL, *ring = NULL, *lost = NULL;
  bpf_object__for_each_map(map, obj) {
    const char *n = bpf_map__name(map);
    if (strstr(n, ".rodata")) rodata = map;
    else if (!strcmp(n, "events")) ring = map;
    else if (!strcmp(n, "events_lost")) lost = map;
  }
  if (!rodata || !ring || !lost) { fprintf(stderr, "maps missing\n"); return 1; }
  if (bpf_map__set_initial_value(rodata, &target, sizeof(target))) { fprintf(stderr, "rodata\n"); return 1; }
  bpf_map__set_max_entries(ring, (uint32_t)atoll(argv[3]));
  if (bpf_object__load(obj)) { fprintf(stderr, "load: %s\n", strerror(errno)); return 1; }
  struct bpf_program *prog = bpf_object__find_program_by_name(obj, "on_sys_enter");
  struct bpf_link *link = bpf_program__attach(prog);
  if (!link) { fprintf(stderr, "attach: %s\n", strerror(errno)); return 1; }
  struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(ring), on_event, NULL, NULL);
  if (!rb) { fprintf(stderr, "ring_buffer__new: %s\n", strerror(errno)); return 1; }
  signal(SIGINT, on_sigint);
  long long start = cpu_ns();
  printf("ready\n");
  fflush(stdout);
  int timer = !strcmp(argv[4], "timer");
  while (!stop) {
    int r;
    if (timer) {
      usleep(TIMER_INTERVAL_US);
      r = ring_buffer__consume(rb);
    } else {
      r = ring_buffer__poll(rb, 100);
    }
    if (r < 0 && r != -EINTR) { fprintf(stderr, "consume: %d\n", r); break; }
  }
  ring_buffer__consume(rb);
  long long used = cpu_ns() - start;
  int ncpu = libbpf_num_possible_cpus();
  uint64_t values[ncpu], lost_total = 0;
  uint32_t zero = 0;
  if (bpf_map_lookup_elem(bpf_map__fd(lost), &zero, values) == 0)
    for (int i = 0; i < ncpu; i++) lost_total += values[i];
  printf("events=%llu lost=%llu cpu_ns=%lld checksum=%llu\n", (unsigned long long)events, (unsigned long long)lost_total, used, (unsigned long long)checksum);
  ring_buffer__free(rb);
  bpf_link__destroy(link);
  bpf_object__close(obj);
  return 0;
}
