// SPDX-License-Identifier: GPL-2.0
/*
 * Program set `syscalls`: per-process syscall counts, errors and latency histograms, aggregated in the
 * kernel. `raw_syscalls/sys_enter` remembers the entry time per thread (`inflight`); `raw_syscalls/sys_exit`
 * adds the call to `syscall_stats[{tgid, nr}]`. Nothing goes through a ring buffer: user space reads the
 * map periodically and deletes the entries of processes that ended. When the map is full, calls are
 * counted in `dropped[0]`. Layouts are mirrored by src/collectors/syscalls/decoders.ts.
 */
#include "common.h"

#define SC_BUCKETS 24
/* Bucket i (0 <= i < SC_BUCKETS - 1) holds latencies below 2^(SC_FIRST_BOUND_LOG2 + i) ns; the last one the rest. */
#define SC_FIRST_BOUND_LOG2 10

const volatile __u32 self_tgid = 0;

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

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} dropped SEC(".maps");

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
  bpf_map_update_elem(&inflight, &id, &f, BPF_ANY);
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
      __u32 z = 0;
      __u64 *n = bpf_map_lookup_elem(&dropped, &z);
      if (n)
        *n += 1;
      return 0;
    }
    s = bpf_map_lookup_elem(&syscall_stats, &key);
    if (!s)
      return 0;
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

char LICENSE[] SEC("license") = "GPL";
