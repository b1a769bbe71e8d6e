// SPDX-License-Identifier: GPL-2.0
/*
 * Benchmark program set (bench/tls-overhead.ts): what probing SSL calls needs at the least, whatever the design
 * around it. The entry probe keeps the call's buffer and byte-count pointer in the thread's task storage; the return
 * probe reads the byte count (the _ex forms and the internal functions they wrap return it through a pointer) and the
 * first 12 bytes of the plaintext. No parsing, no count, no record, no tie to the socket. Attached at the agent's probe
 * sites (src/collectors/tls/placement.ts) on a libssl the agent does not probe: the requests/s this leaves is the
 * most an uprobe-based design reaches on this host. Not loaded by the agent.
 */
#include "common.h"

struct least_call {
  __u64 buf;
  __u64 count_ptr;
};

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct least_call);
} least_calls SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u8[16]);
} least_scratch SEC(".maps");

static __always_inline int least_enter(__u64 buf, __u64 count_ptr)
{
  struct least_call *c = bpf_task_storage_get(&least_calls, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
  if (c) {
    c->buf = buf;
    c->count_ptr = count_ptr;
  }
  return 0;
}

/* SSL_read, SSL_write: (ssl, buf, num); the byte count is the return value. */
SEC("uprobe")
int BPF_KPROBE(least_enter_plain, void *ssl, void *buf)
{
  return least_enter((__u64)buf, 0);
}

/* SSL_read_ex, SSL_write_ex and what they wrap: (ssl, buf, num, *count). */
SEC("uprobe")
int BPF_KPROBE(least_enter_ex, void *ssl, void *buf, __u64 num, __u64 *count)
{
  return least_enter((__u64)buf, (__u64)count);
}

SEC("uretprobe")
int BPF_KRETPROBE(least_leave, int ret)
{
  struct least_call *c = bpf_task_storage_get(&least_calls, bpf_get_current_task_btf(), 0, 0);
  if (!c || !c->buf || ret <= 0)
    return 0;
  __u64 moved = ret;
  if (c->count_ptr && bpf_probe_read_user(&moved, sizeof(moved), (void *)c->count_ptr) != 0)
    return 0;
  __u32 zero = 0;
  __u8 *head = bpf_map_lookup_elem(&least_scratch, &zero);
  if (head && moved > 0)
    bpf_probe_read_user(head, 12, (void *)c->buf);
  c->buf = 0;
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
