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

/*
 * The peer side of the agent's own connections (`svc_self_peers`, shared by the program sets that trace
 * exchanges: user space makes every set that declares it use one kernel map). When a TCP connection of the agent's
 * own process is established (or first seen), its local endpoint is recorded; a socket on this host whose peer is
 * such an endpoint is the other end of the agent's connection (a local OpenTelemetry Collector receiving the
 * agent's exports): its exchanges are not traced, or each export would give a span that goes out in the next
 * export. Looked up once per connection (at its first sight), never per call. Endpoints are kept as IPv6
 * (IPv4 as ::ffff:a.b.c.d), so a dual-stack server's view of an IPv4 client matches.
 */
struct svc_endpoint {
  __u8 addr[16];
  __u16 port;  /* host order */
  __u16 pad;
  __u32 pad2;
};

#define SVC_SELF_PEERS                                    \
  struct {                                                \
    __uint(type, BPF_MAP_TYPE_LRU_HASH);                  \
    __uint(max_entries, 4096);                            \
    __type(key, struct svc_endpoint);                     \
    __type(value, __u8);                                  \
  } svc_self_peers SEC(".maps")

/* The endpoint (address of `family`: 4 or 16 bytes used, port in host order) as a key. */
static __always_inline void svc_endpoint_of(struct svc_endpoint *k, __u16 family, const __u8 *addr, __u16 port)
{
  __builtin_memset(k, 0, sizeof(*k));
  k->port = port;
  if (family == 2 /* AF_INET */) {
    k->addr[10] = 0xff;
    k->addr[11] = 0xff;
    __builtin_memcpy(&k->addr[12], addr, 4);
  } else {
    __builtin_memcpy(k->addr, addr, 16);
  }
}

/* Records an endpoint of the agent's own connection (`map`: svc_self_peers). */
static __always_inline void svc_self_endpoint_add(void *map, __u16 family, const __u8 *addr, __u16 port)
{
  struct svc_endpoint k;
  svc_endpoint_of(&k, family, addr, port);
  __u8 one = 1;
  bpf_map_update_elem(map, &k, &one, BPF_ANY);
}

static __always_inline void svc_self_endpoint_del(void *map, __u16 family, const __u8 *addr, __u16 port)
{
  struct svc_endpoint k;
  svc_endpoint_of(&k, family, addr, port);
  bpf_map_delete_elem(map, &k);
}

/* Whether the peer (`addr`, `port`) of a socket is an endpoint of the agent's own connection. */
static __always_inline int svc_is_self_peer(void *map, __u16 family, const __u8 *addr, __u16 port)
{
  struct svc_endpoint k;
  svc_endpoint_of(&k, family, addr, port);
  return bpf_map_lookup_elem(map, &k) != 0;
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
