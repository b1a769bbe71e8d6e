// SPDX-License-Identifier: GPL-2.0
/*
 * Program set `profile`: CPU profiling. `profile_cpu` runs on the software cpu-clock perf event of every CPU
 * (agent.profiling.sample_rate per second), takes the kernel and user stacks of the interrupted task into the
 * stack map `profile_stacks`, and counts samples in the hash `profile_counts` by (pid, user stack, kernel stack,
 * comm): aggregation happens in the kernel, the agent reads and clears the counts once per period.
 * Idle (pid 0) samples are not counted. Failures are counted in `profile_errors` (index PROFILE_ERR_*).
 * The key layout is `struct profile_key`; src/collectors/profiling/decode.ts mirrors it.
 */
#include "common.h"

#define PROFILE_STACK_DEPTH 127
#define COMM_LEN 16

#define PROFILE_ERR_COUNTS_FULL 0   /* profile_counts had no room for a new key */
#define PROFILE_ERR_USER_STACK 1    /* bpf_get_stackid failed for the user stack (not EFAULT) */
#define PROFILE_ERR_KERNEL_STACK 2  /* bpf_get_stackid failed for the kernel stack (not EFAULT) */
#define PROFILE_ERR_MAX 3

/* 32 bytes; offsets mirrored by the decoder. */
struct profile_key {
  __u32 pid;             /*  0: tgid */
  __s32 user_stack_id;   /*  4: id in profile_stacks, or -errno (EFAULT: no user stack, e.g. a kernel thread) */
  __s32 kernel_stack_id; /*  8: id in profile_stacks, or -errno (EFAULT: the sample hit user mode) */
  __u32 pad;             /* 12 */
  char comm[COMM_LEN];   /* 16: comm of the thread */
};

/* 0: every process; otherwise only this tgid (tests and benchmarks). */
const volatile __u32 target_pid = 0;

struct {
  __uint(type, BPF_MAP_TYPE_STACK_TRACE);
  __uint(max_entries, 16384);
  __uint(key_size, sizeof(__u32));
  __uint(value_size, PROFILE_STACK_DEPTH * sizeof(__u64));
} profile_stacks SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, struct profile_key);
  __type(value, __u64);
} profile_counts SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, PROFILE_ERR_MAX);
  __type(key, __u32);
  __type(value, __u64);
} profile_errors SEC(".maps");

static __always_inline void count_error(__u32 which)
{
  __u64 *n = bpf_map_lookup_elem(&profile_errors, &which);
  if (n)
    *n += 1;
}

SEC("perf_event")
int profile_cpu(struct bpf_perf_event_data *ctx)
{
  __u64 id = bpf_get_current_pid_tgid();
  __u32 pid = id >> 32;
  __u32 tid = (__u32)id;
  if (tid == 0)
    return 0;
  if (target_pid != 0 && pid != target_pid)
    return 0;

  struct profile_key key = {};
  key.pid = pid;
  key.user_stack_id = bpf_get_stackid(ctx, &profile_stacks, BPF_F_USER_STACK);
  key.kernel_stack_id = bpf_get_stackid(ctx, &profile_stacks, 0);
  if (key.user_stack_id < 0 && key.user_stack_id != -14)
    count_error(PROFILE_ERR_USER_STACK);
  if (key.kernel_stack_id < 0 && key.kernel_stack_id != -14)
    count_error(PROFILE_ERR_KERNEL_STACK);
  bpf_get_current_comm(&key.comm, sizeof(key.comm));

  __u64 *count = bpf_map_lookup_elem(&profile_counts, &key);
  if (count) {
    __sync_fetch_and_add(count, 1);
    return 0;
  }
  __u64 one = 1;
  if (bpf_map_update_elem(&profile_counts, &key, &one, BPF_NOEXIST) == 0)
    return 0;
  /* Another CPU created the key meanwhile, or the map is full. */
  count = bpf_map_lookup_elem(&profile_counts, &key);
  if (count)
    __sync_fetch_and_add(count, 1);
  else
    count_error(PROFILE_ERR_COUNTS_FULL);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
