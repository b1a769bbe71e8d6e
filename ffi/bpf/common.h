/* Shared by every BPF program of the agent: the CO-RE header, helpers and the lost-event counter convention. */
#ifndef SVC_COMMON_H
#define SVC_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/*
 * Every ring buffer `<name>` has a per-CPU array `<name>_lost` with one u64: reservations that failed
 * in the kernel (the ring was full). The agent sums it over CPUs and reports it as events_lost.
 */
#define SVC_LOST_MAP(name)                         \
  struct {                                         \
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);       \
    __uint(max_entries, 1);                        \
    __type(key, __u32);                            \
    __type(value, __u64);                          \
  } name##_lost SEC(".maps")

static __always_inline void svc_count_lost(void *lost_map)
{
  __u32 zero = 0;
  __u64 *n = bpf_map_lookup_elem(lost_map, &zero);
  if (n)
    *n += 1;
}

#endif
