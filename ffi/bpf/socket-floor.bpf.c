// SPDX-License-Identifier: GPL-2.0
/*
 * Benchmark program set (bench/lib/socket-floor.ts): programs on the two socket tracepoints the network and TLS
 * sets' socket programs run on, which do nothing (floor_*) or one thing each (part_*). What bpf_stats reports for
 * floor_* is the cost of a program run itself (the tracepoint's dispatch and bpf_stats's own two clock reads), the
 * floor under every program there; each part_* less the floor is what one step of the agent's programs costs on
 * this host. Not loaded by the agent.
 */
#include "common.h"

SEC("tp_btf/sock_send_length")
int BPF_PROG(floor_send_length, struct sock *sk, int ret, int flags)
{
  return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(floor_recv_length, struct sock *sk, int ret, int flags)
{
  return 0;
}

/* A key the size of the RED counting key (struct red_key: 40 bytes). */
struct part_key {
  __u64 words[5];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, 256);
  __type(key, struct part_key);
  __type(value, __u64);
} part_counts SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u8[16]);
} part_scratch SEC(".maps");

/* The user buffer of the read running now (the second argument of read, recvfrom: the saved registers). */
static __always_inline __u64 user_buffer(void)
{
  struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
  return regs ? regs->si : 0;
}

/* The clock (the network programs read TCP's own where they can). */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(part_clock, struct sock *sk, int ret, int flags)
{
  return bpf_ktime_get_ns() == 0;
}

/* The first 12 bytes the call read (a status line's code ends there), as emit_http reads them. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(part_read_user, struct sock *sk, int ret, int flags)
{
  __u32 zero = 0;
  __u8 *buf = bpf_map_lookup_elem(&part_scratch, &zero);
  __u64 from = user_buffer();
  if (buf && from)
    bpf_probe_read_user(buf, 12, (void *)from);
  return 0;
}

/* One count into a per-CPU hash under a 40-byte key, as red_count does. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(part_count, struct sock *sk, int ret, int flags)
{
  struct part_key key = { .words = { ret & 0xff, 1, 2, 3, 4 } };
  __u64 *n = bpf_map_lookup_elem(&part_counts, &key);
  if (n) {
    *n += 1;
    return 0;
  }
  __u64 one = 1;
  bpf_map_update_elem(&part_counts, &key, &one, BPF_NOEXIST);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
