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

/*
 * The memory gate (src/memory): a set that produces events declares SVC_MEMORY_GATE; user space sets
 * `svc_gate[0]` to 1 while the agent is above its memory soft limit, and the set's producers then refuse new
 * events, counting them in `svc_gate_refused[reason]` (SVC_GATE_EXCHANGE: an HTTP exchange, one span;
 * SVC_GATE_EVENT: any other event).
 */
#define SVC_GATE_EXCHANGE 0
#define SVC_GATE_EVENT 1
#define SVC_MEMORY_GATE                            \
  struct {                                         \
    __uint(type, BPF_MAP_TYPE_ARRAY);              \
    __uint(max_entries, 1);                        \
    __type(key, __u32);                            \
    __type(value, __u32);                          \
  } svc_gate SEC(".maps");                         \
  struct {                                         \
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);       \
    __uint(max_entries, 2);                        \
    __type(key, __u32);                            \
    __type(value, __u64);                          \
  } svc_gate_refused SEC(".maps");                 \
  static __always_inline int svc_gate_refuses(__u32 reason) \
  {                                                \
    __u32 zero = 0;                                \
    __u32 *on = bpf_map_lookup_elem(&svc_gate, &zero); \
    if (!on || !*(volatile __u32 *)on)             \
      return 0;                                    \
    __u64 *n = bpf_map_lookup_elem(&svc_gate_refused, &reason); \
    if (n)                                         \
      *n += 1;                                     \
    return 1;                                      \
  }

/* Whether the first 8 bytes of a direction open HTTP/2: the client preface ("PRI * HTTP/2.0...") or a SETTINGS
 * frame header (length a multiple of 6, type 4, no flags, stream 0). Shared by the socket and TLS captures. */
static __always_inline int h2_opening(const __u8 *d, __u32 n)
{
  if (n < 8)
    return 0;
  if (d[0] == 'P' && d[1] == 'R' && d[2] == 'I' && d[3] == ' ' && d[4] == '*' && d[5] == ' ' && d[6] == 'H' && d[7] == 'T')
    return 1;
  __u32 flen = ((__u32)d[0] << 16) | ((__u32)d[1] << 8) | d[2];
  return d[3] == 4 && d[4] == 0 && d[5] == 0 && d[6] == 0 && d[7] == 0 && flen % 6 == 0 && flen <= 6 * 16;
}

#endif
