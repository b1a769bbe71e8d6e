// SPDX-License-Identifier: GPL-2.0
/*
 * Program set `syscalls`: per-process syscall counts, errors and latency histograms, aggregated in the
 * kernel. `raw_syscalls/sys_enter` remembers the entry time per thread (`inflight`); `raw_syscalls/sys_exit`
 * adds the call to `syscall_stats[{tgid, nr}]`. Nothing goes through a ring buffer: user space reads the
 * maps every interval.
 *
 * Under process churn the maps stay bounded without user space: `sched/sched_process_exit` removes the
 * ending thread's `inflight` entry (exit and exit_group never reach sys_exit), `sched/sched_process_exec`
 * moves the entry of a thread that exec'd from a non-leader thread to its new id, and when the last thread
 * of a process that made fewer than `fold_below_calls` calls ends, its `syscall_stats` entries (found through
 * the `proc_nrs` bitmap of the syscalls it made) are added to `exited_stats[nr]` and deleted. User space
 * exports the entries of the busier ones under their own pid once more, then deletes them, and deletes what
 * the kernel missed (processes whose exit it did not see). Calls not counted because a map was full are counted in
 * `dropped[SC_DROP_STATS_FULL]` and `dropped[SC_DROP_INFLIGHT_FULL]`. Layouts are mirrored by
 * src/collectors/syscalls/decoders.ts.
 */
#include "common.h"

#define SC_BUCKETS 24
/* Bucket i (0 <= i < SC_BUCKETS - 1) holds latencies below 2^(SC_FIRST_BOUND_LOG2 + i) ns; the last one the rest. */
#define SC_FIRST_BOUND_LOG2 10
/* Syscall numbers below SC_MAX_NR are folded into exited_stats when their process ends (x86_64 and arm64: < 470). */
#define SC_MAX_NR 512
#define SC_NR_WORDS (SC_MAX_NR / 64)
/* Indexes of `dropped`. */
#define SC_DROP_STATS_FULL 0
#define SC_DROP_INFLIGHT_FULL 1

const volatile __u32 self_tgid = 0;
/* A process that ends having made fewer calls is folded into exited_stats at once (user space: SC_FOLD_BELOW_CALLS). */
const volatile __u64 fold_below_calls = 1000;

struct inflight {
  __u64 enter_ns;
  __u64 nr;
};

/* 8 bytes. */
struct sc_key {
  __u32 tgid; /* 0 */
  __u32 nr;   /* 4 */
};

/* 24 + 8 * SC_BUCKETS = 216 bytes. */
struct sc_stats {
  __u64 count;            /*  0 */
  __u64 errors;           /*  8: calls that returned -4095..-1 */
  __u64 total_ns;         /* 16 */
  __u64 buckets[SC_BUCKETS]; /* 24 */
};

_Static_assert(sizeof(struct sc_stats) == 216, "struct sc_stats layout is mirrored by the decoder");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct inflight);
} inflight SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 10240);
  __type(key, struct sc_key);
  __type(value, struct sc_stats);
} syscall_stats SEC(".maps");

/* The syscalls each live process made (bit nr of words[nr / 64]): which syscall_stats entries it owns. */
struct proc_nrs {
  __u64 words[SC_NR_WORDS];
};

/* Sized with syscall_stats (at most one process per entry). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 10240);
  __type(key, __u32);
  __type(value, struct proc_nrs);
} proc_nrs SEC(".maps");

/* Cumulative statistics of the processes that ended, per syscall number. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, SC_MAX_NR);
  __type(key, __u32);
  __type(value, struct sc_stats);
} exited_stats SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} dropped SEC(".maps");

static __always_inline void count_dropped(__u32 reason)
{
  __u64 *n = bpf_map_lookup_elem(&dropped, &reason);
  if (n)
    *n += 1;
}

static __always_inline __u32 log2_u64(__u64 v)
{
  __u32 r = 0;
  if (v >> 32) { v >>= 32; r += 32; }
  if (v >> 16) { v >>= 16; r += 16; }
  if (v >> 8) { v >>= 8; r += 8; }
  if (v >> 4) { v >>= 4; r += 4; }
  if (v >> 2) { v >>= 2; r += 2; }
  if (v >> 1) { r += 1; }
  return r;
}

SEC("tracepoint/raw_syscalls/sys_enter")
int sc_enter(struct trace_event_raw_sys_enter *ctx)
{
  __u64 id = bpf_get_current_pid_tgid();
  if ((id >> 32) == self_tgid)
    return 0;
  struct inflight f = { .enter_ns = bpf_ktime_get_ns(), .nr = (__u64)ctx->id };
  if (bpf_map_update_elem(&inflight, &id, &f, BPF_ANY) != 0)
    count_dropped(SC_DROP_INFLIGHT_FULL);
  return 0;
}

SEC("tracepoint/raw_syscalls/sys_exit")
int sc_exit(struct trace_event_raw_sys_exit *ctx)
{
  __u64 id = bpf_get_current_pid_tgid();
  struct inflight *f = bpf_map_lookup_elem(&inflight, &id);
  if (!f)
    return 0;
  __u64 took = bpf_ktime_get_ns() - f->enter_ns;
  struct sc_key key = { .tgid = id >> 32, .nr = (__u32)f->nr };
  bpf_map_delete_elem(&inflight, &id);
  struct sc_stats *s = bpf_map_lookup_elem(&syscall_stats, &key);
  if (!s) {
    struct sc_stats zero = {};
    if (bpf_map_update_elem(&syscall_stats, &key, &zero, BPF_NOEXIST) != 0 && bpf_map_lookup_elem(&syscall_stats, &key) == 0) {
      count_dropped(SC_DROP_STATS_FULL);
      return 0;
    }
    s = bpf_map_lookup_elem(&syscall_stats, &key);
    if (!s)
      return 0;
    if (key.nr < SC_MAX_NR) {
      __u32 tgid = key.tgid;
      struct proc_nrs *p = bpf_map_lookup_elem(&proc_nrs, &tgid);
      if (!p) {
        struct proc_nrs none = {};
        bpf_map_update_elem(&proc_nrs, &tgid, &none, BPF_NOEXIST);
        p = bpf_map_lookup_elem(&proc_nrs, &tgid);
      }
      if (p)
        __sync_fetch_and_or(&p->words[(key.nr / 64) & (SC_NR_WORDS - 1)], 1ULL << (key.nr % 64));
    }
  }
  long ret = ctx->ret;
  __sync_fetch_and_add(&s->count, 1);
  if (ret < 0 && ret >= -4095)
    __sync_fetch_and_add(&s->errors, 1);
  __sync_fetch_and_add(&s->total_ns, took);
  __u32 b = log2_u64(took);
  b = b < SC_FIRST_BOUND_LOG2 ? 0 : b - SC_FIRST_BOUND_LOG2 + 1;
  if (b >= SC_BUCKETS)
    b = SC_BUCKETS - 1;
  __sync_fetch_and_add(&s->buckets[b], 1);
  return 0;
}

/*
 * Moves the statistics of (tgid, nr) into exited_stats[nr]: copied, deleted, then added, so that a reader never
 * sees the calls in both maps (user space reads exited_stats, then syscall_stats). The process has ended: nothing
 * updates the entry any more. The copy is taken before the delete because a deleted element of a preallocated
 * hash map may be reused at once by an insert on another CPU.
 */
static __always_inline void fold(__u32 tgid, __u32 nr)
{
  struct sc_key key = { .tgid = tgid, .nr = nr };
  struct sc_stats *s = bpf_map_lookup_elem(&syscall_stats, &key);
  if (!s)
    return;
  struct sc_stats v = *s;
  if (bpf_map_delete_elem(&syscall_stats, &key) != 0)
    return;
  struct sc_stats *e = bpf_map_lookup_elem(&exited_stats, &nr);
  if (!e)
    return;
  __sync_fetch_and_add(&e->count, v.count);
  __sync_fetch_and_add(&e->errors, v.errors);
  __sync_fetch_and_add(&e->total_ns, v.total_ns);
  for (int i = 0; i < SC_BUCKETS; i++)
    if (v.buckets[i])
      __sync_fetch_and_add(&e->buckets[i], v.buckets[i]);
}

struct fold_ctx {
  __u32 tgid;
  struct proc_nrs *p;
  __u64 calls;
};

static long count_word(__u32 w, struct fold_ctx *c)
{
  if (w >= SC_NR_WORDS)
    return 1;
  __u64 bits = c->p->words[w];
  for (__u32 b = 0; b < 64 && bits; b++, bits >>= 1) {
    if (!(bits & 1))
      continue;
    struct sc_key key = { .tgid = c->tgid, .nr = w * 64 + b };
    struct sc_stats *s = bpf_map_lookup_elem(&syscall_stats, &key);
    if (s)
      c->calls += s->count;
  }
  return c->calls >= fold_below_calls;
}

static long fold_word(__u32 w, struct fold_ctx *c)
{
  if (w >= SC_NR_WORDS)
    return 1;
  __u64 bits = c->p->words[w];
  for (__u32 b = 0; b < 64 && bits; b++, bits >>= 1)
    if (bits & 1)
      fold(c->tgid, w * 64 + b);
  return 0;
}

/* Every ending thread: its in-flight call never returns. The last thread of a quiet process: fold its entries. */
SEC("tracepoint/sched/sched_process_exit")
int sc_task_exit(void *ctx)
{
  __u64 id = bpf_get_current_pid_tgid();
  bpf_map_delete_elem(&inflight, &id);
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  if (BPF_CORE_READ(task, signal, live.counter) != 0)
    return 0;
  __u32 tgid = id >> 32;
  struct fold_ctx c = { .tgid = tgid, .p = bpf_map_lookup_elem(&proc_nrs, &tgid), .calls = 0 };
  if (!c.p)
    return 0;
  bpf_loop(SC_NR_WORDS, count_word, &c, 0);
  if (c.calls < fold_below_calls)
    bpf_loop(SC_NR_WORDS, fold_word, &c, 0);
  bpf_map_delete_elem(&proc_nrs, &tgid);
  return 0;
}

/* A non-leader thread that exec'd takes the process's id: its in-flight execve moves with it. */
SEC("tracepoint/sched/sched_process_exec")
int sc_exec(struct trace_event_raw_sched_process_exec *ctx)
{
  __u64 id = bpf_get_current_pid_tgid();
  __u64 old = (id & 0xFFFFFFFF00000000ULL) | (__u32)ctx->old_pid;
  if (old == id)
    return 0;
  struct inflight *f = bpf_map_lookup_elem(&inflight, &old);
  if (!f)
    return 0;
  struct inflight copy = *f;
  bpf_map_update_elem(&inflight, &id, &copy, BPF_ANY);
  bpf_map_delete_elem(&inflight, &old);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
