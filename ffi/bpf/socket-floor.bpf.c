// SPDX-License-Identifier: GPL-2.0
/*
 * Benchmark program set (bench/lib/socket-floor.ts): programs on the two socket tracepoints the network and TLS
 * sets' socket programs run on, which do nothing (floor_*) or one thing each (part_*). What bpf_stats reports for
 * floor_* is the cost of a program run itself (the tracepoint's dispatch and bpf_stats's own two clock reads), the
 * floor under every program there; each part_* less the floor is what one step of the agent's programs costs on
 * this host. least_* do on each call what counting a request needs at the least (the connection's socket storage,
 * the call's buffer from the saved registers, a 12-byte user read): their cost per run times the runs of a request
 * is the floor under the agent's programs before they parse, count or budget anything. Not loaded by the agent.
 */
#include "common.h"

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

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

/* Where the task's saved user registers lie past its kernel stack's base, learnt once (the network set's way). */
__u64 regs_off = 0;

/*
 * The user buffer of the call running now (the second argument of read, write, recvfrom, sendto: the saved
 * registers), found as the network set's programs find it: from the task's stack base through bpf_rdonly_cast after
 * the first call.
 */
static __always_inline __u64 user_buffer(void)
{
  struct task_struct *task = bpf_get_current_task_btf();
  struct pt_regs *regs;
  if (regs_off != 0) {
    regs = bpf_rdonly_cast((void *)((__u64)task->stack + regs_off), bpf_core_type_id_kernel(struct pt_regs));
  } else {
    regs = (struct pt_regs *)bpf_task_pt_regs(task);
    if (!regs)
      return 0;
    regs_off = (__u64)regs - (__u64)task->stack;
  }
  return regs->si;
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

/* A connection's entry in socket storage, as the network set keeps it (BPF_MAP_TYPE_SK_STORAGE). */
struct {
  __uint(type, BPF_MAP_TYPE_SK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, __u64);
} least_store SEC(".maps");

/* What each socket call of a counted request needs at the least: its connection, its buffer, its first bytes. */
static __always_inline int least(struct sock *sk, int ret)
{
  if (sk->sk_protocol != IPPROTO_TCP || ret <= 0)
    return 0;
  __u64 *conn = bpf_sk_storage_get(&least_store, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
  if (!conn)
    return 0;
  __u32 zero = 0;
  __u8 *buf = bpf_map_lookup_elem(&part_scratch, &zero);
  __u64 from = user_buffer();
  if (buf && from && bpf_probe_read_user(buf, 12, (void *)from) == 0)
    *conn += buf[0];
  return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(least_send_length, struct sock *sk, int ret, int flags)
{
  return least(sk, ret);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(least_recv_length, struct sock *sk, int ret, int flags)
{
  return least(sk, ret);
}

char LICENSE[] SEC("license") = "GPL";
