// SPDX-License-Identifier: GPL-2.0
/*
 * Program set `process`: program starts (sched_process_exec), new processes (sched_process_fork of a new
 * thread group, not of a thread; BTF-enabled, optional) and ends (sched_process_exit of the thread-group
 * leader), one record per event, into the ring buffer `events` (or the perf buffer
 * `events_perf` on kernels older than 5.8, chosen by the constant `use_perfbuf`).
 * The record layout is `struct process_event`; src/ebpf/sets/process-decoder.ts decodes it.
 */
#include "common.h"

#define PROCESS_EXEC 1
#define PROCESS_EXIT 2
#define PROCESS_FORK 3
#define COMM_LEN 16
#define FILENAME_LEN 256

/* 312 bytes; offsets in comments, mirrored by the decoder. */
struct process_event {
  __u64 timestamp_ns; /*   0: bpf_ktime_get_ns (monotonic) */
  __u64 cgroup_id;    /*   8: cgroup v2 id of the task */
  __u32 kind;         /*  16: PROCESS_EXEC, PROCESS_EXIT or PROCESS_FORK */
  __u32 pid;          /*  20: tgid (fork: the child's) */
  __u32 tid;          /*  24 */
  __u32 ppid;         /*  28: real_parent's tgid (fork: the forking process) */
  __u32 uid;          /*  32 */
  __s32 exit_code;    /*  36: exit status (exit_code >> 8) and signal (& 0x7f) as the kernel keeps it */
  char comm[COMM_LEN];         /*  40 */
  char filename[FILENAME_LEN]; /*  56: exec only: the path passed to execve */
};

const volatile __u32 use_perfbuf = 0;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 24);
} events SEC(".maps");

SVC_LOST_MAP(events);

struct {
  __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
  __uint(key_size, sizeof(__u32));
  __uint(value_size, sizeof(__u32));
} events_perf SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct process_event);
} scratch SEC(".maps");

static __always_inline struct process_event *fill_common(__u32 kind)
{
  __u32 zero = 0;
  struct process_event *e = bpf_map_lookup_elem(&scratch, &zero);
  if (!e)
    return 0;
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  __u64 id = bpf_get_current_pid_tgid();
  e->timestamp_ns = bpf_ktime_get_ns();
  e->cgroup_id = bpf_get_current_cgroup_id();
  e->kind = kind;
  e->pid = id >> 32;
  e->tid = (__u32)id;
  e->ppid = BPF_CORE_READ(task, real_parent, tgid);
  e->uid = (__u32)bpf_get_current_uid_gid();
  e->exit_code = 0;
  bpf_get_current_comm(e->comm, sizeof(e->comm));
  e->filename[0] = 0;
  return e;
}

static __always_inline void emit(void *ctx, struct process_event *e)
{
  if (use_perfbuf) {
    bpf_perf_event_output(ctx, &events_perf, BPF_F_CURRENT_CPU, e, sizeof(*e));
    return;
  }
  if (bpf_ringbuf_output(&events, e, sizeof(*e), svc_wakeup_flags(&events, sizeof(*e))) != 0)
    svc_count_lost(&events_lost);
}

SEC("tracepoint/sched/sched_process_exec")
int handle_exec(struct trace_event_raw_sched_process_exec *ctx)
{
  struct process_event *e = fill_common(PROCESS_EXEC);
  if (!e)
    return 0;
  unsigned int loc = ctx->__data_loc_filename & 0xFFFF;
  bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), (void *)ctx + loc);
  emit(ctx, e);
  return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int handle_exit(struct trace_event_raw_sched_process_template *ctx)
{
  __u64 id = bpf_get_current_pid_tgid();
  if ((id >> 32) != (__u32)id)
    return 0; /* a thread ended, not the process */
  struct process_event *e = fill_common(PROCESS_EXIT);
  if (!e)
    return 0;
  struct task_struct *task = (struct task_struct *)bpf_get_current_task();
  e->exit_code = BPF_CORE_READ(task, exit_code);
  emit(ctx, e);
  return 0;
}

/* Runs in the parent; a new thread of an existing process (child->pid != child->tgid) is not reported. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(handle_fork, struct task_struct *parent, struct task_struct *child)
{
  __u32 child_tgid = BPF_CORE_READ(child, tgid);
  if (BPF_CORE_READ(child, pid) != child_tgid)
    return 0;
  struct process_event *e = fill_common(PROCESS_FORK);
  if (!e)
    return 0;
  e->ppid = e->pid;
  e->pid = child_tgid;
  e->tid = child_tgid;
  emit(ctx, e);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
