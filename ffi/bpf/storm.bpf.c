// SPDX-License-Identifier: GPL-2.0
/*
 * Benchmark program set (bench/ringbuf.ts): one 64-byte record per syscall entered by the process
 * `target_tgid`, reserved and submitted in the ring buffer `events`; failed reservations counted in
 * `events_lost`. Not loaded by the agent.
 */
#include "common.h"

struct storm_event {
  __u64 timestamp_ns; /*  0 */
  __u64 seq;          /*  8: per-CPU sequence */
  __u32 pid;          /* 16 */
  __u32 tid;          /* 20 */
  __s64 syscall_nr;   /* 24 */
  __u64 args[4];      /* 32 */
};                    /* 64 bytes */

const volatile __u32 target_tgid = 0;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 24);
} events SEC(".maps");

SVC_LOST_MAP(events);

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} seqs SEC(".maps");

SEC("tracepoint/raw_syscalls/sys_enter")
int on_sys_enter(struct trace_event_raw_sys_enter *ctx)
{
  __u64 id = bpf_get_current_pid_tgid();
  if ((id >> 32) != target_tgid)
    return 0;
  __u32 zero = 0;
  __u64 *seq = bpf_map_lookup_elem(&seqs, &zero);
  if (!seq)
    return 0;
  struct storm_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    svc_count_lost(&events_lost);
    return 0;
  }
  e->timestamp_ns = bpf_ktime_get_ns();
  e->seq = (*seq)++;
  e->pid = id >> 32;
  e->tid = (__u32)id;
  e->syscall_nr = ctx->id;
  e->args[0] = ctx->args[0];
  e->args[1] = ctx->args[1];
  e->args[2] = ctx->args[2];
  e->args[3] = ctx->args[3];
  bpf_ringbuf_submit(e, 0);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
