// SPDX-License-Identifier: GPL-2.0
/*
 * Test-only program set (test/privileged/ebpf): one program per attach kind the loader supports.
 * Each program counts its hits in `hits[<index>]`; the tracepoint also sends a record to `events`
 * and fills the hash map `seen_pids` so map entry counting can be checked.
 */
#include "../common.h"

#define HIT_TRACEPOINT 0
#define HIT_RAW_TP 1
#define HIT_PERF_EVENT 2
#define HIT_UPROBE 3
#define HIT_KPROBE 4
#define HIT_TP_BTF 5

const volatile __u32 target_tgid = 0;
const volatile __u64 magic = 0;

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 8);
  __type(key, __u32);
  __type(value, __u64);
} hits SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, __u64);
} seen_pids SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 16);
} events SEC(".maps");

SVC_LOST_MAP(events);

struct probe_event {
  __u64 magic; /* 0: the constant `magic`, proving constants reach the program */
  __u32 pid;   /* 8 */
  __u32 kind;  /* 12: HIT_* */
};

static __always_inline void hit(__u32 idx)
{
  __u64 *n = bpf_map_lookup_elem(&hits, &idx);
  if (n)
    __sync_fetch_and_add(n, 1);
}

static __always_inline int mine(void)
{
  return target_tgid == 0 || (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

SEC("tracepoint/syscalls/sys_enter_getppid")
int tp_getppid(void *ctx)
{
  if (!mine())
    return 0;
  hit(HIT_TRACEPOINT);
  __u32 pid = bpf_get_current_pid_tgid() >> 32;
  __u64 one = 1;
  bpf_map_update_elem(&seen_pids, &pid, &one, BPF_ANY);
  struct probe_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) {
    svc_count_lost(&events_lost);
    return 0;
  }
  e->magic = magic;
  e->pid = pid;
  e->kind = HIT_TRACEPOINT;
  bpf_ringbuf_submit(e, 0);
  return 0;
}

SEC("raw_tp/sys_enter")
int raw_sys_enter(void *ctx)
{
  if (!mine())
    return 0;
  hit(HIT_RAW_TP);
  return 0;
}

SEC("tp_btf/sched_process_fork")
int btf_fork(void *ctx)
{
  hit(HIT_TP_BTF);
  return 0;
}

SEC("perf_event")
int on_cpu_clock(void *ctx)
{
  hit(HIT_PERF_EVENT);
  return 0;
}

SEC("uprobe")
int on_uprobe(void *ctx)
{
  if (!mine())
    return 0;
  hit(HIT_UPROBE);
  return 0;
}

SEC("kprobe/do_nanosleep")
int on_kprobe(void *ctx)
{
  hit(HIT_KPROBE);
  return 0;
}

/* Rejected by the verifier (map value used without a NULL check): exercises load retries and verifier logs. */
SEC("tracepoint/syscalls/sys_enter_getppid")
int bad_verifier(void *ctx)
{
  __u32 k = 0;
  __u64 *v = bpf_map_lookup_elem(&seen_pids, &k); /* a hash map: the result may be NULL */
  return *v ? 1 : 0;
}

char LICENSE[] SEC("license") = "GPL";
