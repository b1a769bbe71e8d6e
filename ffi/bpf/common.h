/* Shared by every BPF program of the agent: the CO-RE header, helpers and the lost-event counter convention. */
#ifndef SVC_COMMON_H
#define SVC_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

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
 * The flags of a `len`-byte record's bpf_ringbuf_output into `ring`: the agent's reader is woken by the record that
 * takes the ring's pending bytes across a multiple of a sixteenth of its size (SVC_WAKEUP_SHARE), and by no other.
 * A trickle that stays below the first sixteenth wakes nobody: the reader reads on its own schedule (src/ebpf/pump.ts:
 * its timer while records come often, else a wait that ends at the latest after a timeout), where the kernel's
 * adaptive default woke it for every record that found it caught up. A busy ring wakes it at most 16 times a fill
 * (forcing a wakeup on every record past the first sixteenth cost ~4 us a request at cap 100000: each is an
 * irq_work), and a crossing missed by two CPUs writing at once is made up at the next one.
 */
#define SVC_WAKEUP_SHARE 16
#define SVC_RINGBUF_HDR_BYTES 8
static __always_inline __u64 svc_wakeup_flags(void *ring, __u64 len)
{
  __u64 share = bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) / SVC_WAKEUP_SHARE;
  __u64 avail = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);
  /* What the record adds: its header and the padding to 8 bytes. */
  __u64 after = avail + ((len + SVC_RINGBUF_HDR_BYTES + 7) & ~7ULL);
  /* share is a power of two: a multiple of it lies between avail and after when they differ at its bit or above.
   * Without a branch (the sign of share - 1 - x; both are below 2^63): a branch here made two paths of everything
   * after each output for the verifier to walk. */
  return BPF_RB_NO_WAKEUP + ((share - 1 - (avail ^ after)) >> 63) * (BPF_RB_FORCE_WAKEUP - BPF_RB_NO_WAKEUP);
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
 * own process is established (or first seen), its local endpoint is recorded with its remote port (and address:
 * struct svc_peer_end); a socket on this host whose peer is such an endpoint and whose own port is that remote port
 * is the other end of the agent's connection (a local OpenTelemetry Collector receiving the
 * agent's exports): its exchanges are not traced, or each export would give a span that goes out in the next
 * export. Looked up once per connection (at its first sight), never per call. Endpoints are kept as IPv6
 * (IPv4 as ::ffff:a.b.c.d), so a dual-stack server's view of an IPv4 client matches.
 *
 * A loopback endpoint (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) exists once per network namespace: the key holds
 * the namespace of the socket (its inode number, as /proc/<pid>/ns/net shows it), so that a loopback connection
 * in another namespace (a pod's sidecar proxy and its application) from the same address and port as the agent's
 * own is traced. Any other address keeps 0 there and matches across namespaces: the agent on the host exporting
 * to a collector in a container or pod at its own address is seen there from the host's address and port.
 */
struct svc_endpoint {
  __u8 addr[16];
  __u16 port;  /* host order */
  __u16 rport; /* the agent connection's remote port, host order: the peer socket's own port */
  __u32 netns; /* inode number of the socket's network namespace for a loopback address, else 0 */
};

/*
 * The key holds the agent connection's remote port, and the value its remote address (as IPv6): a local port is
 * not the agent's alone, connect() gives the same one to connections to different destinations, so another
 * process's connection from the agent's address and port to a server on this host happens. A peer socket
 * matches only when its own port is the agent connection's remote port and, where that address is a loopback
 * one, its address too; any other address may have been translated on the way (a Service's address to a pod's),
 * so only the port is compared there.
 */
struct svc_peer_end {
  __u8 addr[16];
};

#define SVC_SELF_PEERS                                    \
  struct {                                                \
    __uint(type, BPF_MAP_TYPE_LRU_HASH);                  \
    __uint(max_entries, 4096);                            \
    __type(key, struct svc_endpoint);                     \
    __type(value, struct svc_peer_end);                   \
  } svc_self_peers SEC(".maps")

/* Whether an address (IPv6 or IPv4-mapped, 16 bytes) is a loopback address. */
static __always_inline int svc_addr_loopback(const __u8 *a)
{
  __u32 w[4];
  __builtin_memcpy(w, a, 16);
  if (w[0] | w[1])
    return 0;
  if (w[2] == 0)
    return w[3] == bpf_htonl(1);
  return w[2] == bpf_htonl(0xffff) && a[12] == 127;
}

/* An address of `family` (4 or 16 bytes used) as IPv6 (IPv4 as ::ffff:a.b.c.d) in `out`. */
static __always_inline void svc_addr_v6(__u8 *out, __u16 family, const __u8 *addr)
{
  if (family == 2 /* AF_INET */) {
    __builtin_memset(out, 0, 10);
    out[10] = 0xff;
    out[11] = 0xff;
    __builtin_memcpy(&out[12], addr, 4);
  } else {
    __builtin_memcpy(out, addr, 16);
  }
}

/* The inode number of the network namespace of `sk` (0 on a kernel built without network namespaces). */
static __always_inline __u32 svc_netns_of(struct sock *sk)
{
  if (!bpf_core_field_exists(sk->__sk_common.skc_net.net))
    return 0;
  return BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
}

/* The endpoint (address of `family`: 4 or 16 bytes used, port in host order) of a socket `sk` as a key. */
static __always_inline void svc_endpoint_of(struct svc_endpoint *k, void *sk, __u16 family, const __u8 *addr, __u16 port, __u16 rport)
{
  __builtin_memset(k, 0, sizeof(*k));
  k->port = port;
  k->rport = rport;
  svc_addr_v6(k->addr, family, addr);
  if (svc_addr_loopback(k->addr))
    k->netns = svc_netns_of((struct sock *)sk);
}

/* Records the local endpoint (`addr`, `port`) of the agent's own connection on socket `sk`, with its remote one
 * (`raddr`, `rport`) (`map`: svc_self_peers). */
static __always_inline void svc_self_endpoint_add(void *map, void *sk, __u16 family, const __u8 *addr, __u16 port, const __u8 *raddr, __u16 rport)
{
  struct svc_endpoint k;
  svc_endpoint_of(&k, sk, family, addr, port, rport);
  struct svc_peer_end v;
  svc_addr_v6(v.addr, family, raddr);
  bpf_map_update_elem(map, &k, &v, BPF_ANY);
}

static __always_inline void svc_self_endpoint_del(void *map, void *sk, __u16 family, const __u8 *addr, __u16 port, __u16 rport)
{
  struct svc_endpoint k;
  svc_endpoint_of(&k, sk, family, addr, port, rport);
  bpf_map_delete_elem(map, &k);
}

/* Whether socket `sk`, whose peer is (`addr`, `port`) and own endpoint (`laddr`, `lport`), is the other end of an
 * agent's connection (struct svc_peer_end says how the two are compared). */
static __always_inline int svc_is_self_peer(void *map, void *sk, __u16 family, const __u8 *addr, __u16 port, const __u8 *laddr, __u16 lport)
{
  struct svc_endpoint k;
  svc_endpoint_of(&k, sk, family, addr, port, lport);
  struct svc_peer_end *v = bpf_map_lookup_elem(map, &k);
  if (!v)
    return 0;
  if (!svc_addr_loopback(v->addr))
    return 1;
  __u8 own[16];
  svc_addr_v6(own, family, laddr);
  __u64 a0, a1, b0, b1;
  __builtin_memcpy(&a0, v->addr, 8);
  __builtin_memcpy(&a1, v->addr + 8, 8);
  __builtin_memcpy(&b0, own, 8);
  __builtin_memcpy(&b1, own + 8, 8);
  return a0 == b0 && a1 == b1;
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

/*
 * Whether the 9 bytes at `d` can be an HTTP/2 frame header (RFC 9113 section 6): a known type with its own flags
 * only, its stream 0 or not as the type requires, a fixed length where the type has one, the reserved bit clear, at
 * most 16,384 bytes of payload (SETTINGS_MAX_FRAME_SIZE's initial value). Returns the frame's length with its
 * header, or 0. User space's h2FrameAt (h2.ts) asks the same.
 */
static __always_inline __u32 h2_frame_start(const __u8 *d)
{
  __u32 len = ((__u32)d[0] << 16) | ((__u32)d[1] << 8) | d[2];
  __u8 type = d[3], flags = d[4];
  if (len > 16384 || (d[5] & 0x80))
    return 0;
  int stream = (d[5] | d[6] | d[7] | d[8]) != 0;
  int ok = 0;
  switch (type) {
  case 0: ok = stream && !(flags & ~0x09); break;                             /* DATA */
  case 1: ok = stream && !(flags & ~0x2d); break;                             /* HEADERS */
  case 2: ok = stream && len == 5 && flags == 0; break;                       /* PRIORITY */
  case 3: ok = stream && len == 4 && flags == 0; break;                       /* RST_STREAM */
  case 4: ok = !stream && (flags == 0 ? len % 6 == 0 : flags == 1 && len == 0); break; /* SETTINGS */
  case 5: ok = stream && !(flags & ~0x0c) && len >= 4; break;                 /* PUSH_PROMISE */
  case 6: ok = !stream && len == 8 && !(flags & ~0x01); break;                /* PING */
  case 7: ok = !stream && len >= 8 && flags == 0; break;                      /* GOAWAY */
  case 8: ok = len == 4 && flags == 0; break;                                 /* WINDOW_UPDATE */
  case 9: ok = stream && !(flags & ~0x04); break;                             /* CONTINUATION */
  }
  return ok ? len + 9 : 0;
}

/*
 * The whole length of the first frame of a call (`moved` bytes, the first `head` of them at `d`) where decoding may
 * start at it: a frame header (h2_frame_start) whose frame ends within the call, not a CONTINUATION's (it follows a
 * HEADERS frame, rarely at a call's start) nor an empty HEADERS frame's (their looser shapes would let more of
 * another protocol's bytes pass); else 0.
 */
static __always_inline __u32 h2_first_frame(const __u8 *d, __u32 head, __u64 moved)
{
  if (head < 9)
    return 0;
  __u32 n = h2_frame_start(d);
  if (n == 0 || n > moved || d[3] == 9 || (d[3] == 1 && n == 9))
    return 0;
  return n;
}

/* Iovecs after the first that h2_midstream_start looks through for the second frame header. */
#define H2_MIDSTREAM_IOVECS 4

/*
 * Whether a call whose first bytes (`head` of them at `d`) were read starts with HTTP/2 frames, for a connection
 * seen only after it opened: a first frame (h2_first_frame) that ends where the call (`moved` bytes) does, or is
 * followed by another frame header (read into `spare`, 9 bytes of map memory: one more read of user memory). That
 * header is looked for in the call's first
 * `len` contiguous bytes at `buf` and, for an iovec call (`iovcnt` iovecs at `iovp`, `buf` the first's bytes), in
 * the next H2_MIDSTREAM_IOVECS iovecs, whole in one of them (Node's HTTP/2 client writes a request's frame header,
 * header block and DATA frame in iovecs of their own).
 */
static __always_inline int h2_midstream_start(const __u8 *d, __u32 head, __u64 buf, __u64 len, __u64 iovp, __u64 iovcnt, __u64 moved, __u8 *spare)
{
  __u32 n = h2_first_frame(d, head, moved);
  if (n == 0)
    return 0;
  if (n == moved)
    return 1;
  __u64 at = 0;
  if (n + 9 <= len) {
    at = buf + n;
  } else {
    /* The bytes of the iovecs before the one read from. */
    __u64 off = len;
    for (__u32 k = 1; k <= H2_MIDSTREAM_IOVECS; k++) {
      if (k >= iovcnt)
        return 0;
      struct iovec iov = {};
      if (bpf_probe_read_user(&iov, sizeof(iov), (void *)(iovp + k * sizeof(iov))) != 0)
        return 0;
      if (n < off + iov.iov_len) {
        if (n + 9 > off + iov.iov_len)
          return 0;
        at = (__u64)iov.iov_base + (n - off);
        break;
      }
      off += iov.iov_len;
    }
    if (at == 0)
      return 0;
  }
  if (bpf_probe_read_user(spare, 9, (void *)at) != 0)
    return 0;
  return h2_frame_start(spare) != 0;
}

/* ---- HTTP/1.x message starts, the exchange budget and socket addresses: shared by the socket and TLS captures ---- */

#define START_NONE 0
#define START_REQUEST 1
#define START_STATUS 2
/* Too short to tell (under 8 bytes) but may start one (an uppercase letter). */
#define START_MAYBE 3

/* Whether a chunk starts a request line, a status line, or is too short to tell but may. */
static __always_inline int http_start(const __u8 *d, __u32 n)
{
  if (n < 8)
    return (n > 0 && d[0] >= 'A' && d[0] <= 'Z') ? START_MAYBE : START_NONE;
  __u32 w;
  __builtin_memcpy(&w, d, 4);
#define W(a, b, c, e) ((__u32)(a) | ((__u32)(b) << 8) | ((__u32)(c) << 16) | ((__u32)(e) << 24))
  if (w == W('H', 'T', 'T', 'P'))
    return (d[4] == '/' && d[5] == '1' && d[6] == '.') ? START_STATUS : START_NONE;
  if (w == W('G', 'E', 'T', ' ') || w == W('P', 'O', 'S', 'T') || w == W('P', 'U', 'T', ' ') ||
      w == W('H', 'E', 'A', 'D') || w == W('D', 'E', 'L', 'E') || w == W('P', 'A', 'T', 'C') ||
      w == W('O', 'P', 'T', 'I') || w == W('C', 'O', 'N', 'N') || w == W('T', 'R', 'A', 'C'))
    return START_REQUEST;
#undef W
  return START_NONE;
}

/* The per-second exchange budget: one global window (an array map of one entry). */
struct rate_window {
  __u64 start_ns;
  __u64 count;
};

/*
 * Whether window `w` (of `limit` exchanges a second) has room at `now` (which may be up to a jiffy old), starting a
 * new window when a second has passed. Once the window is spent it is only read: refused requests (most of them
 * under load) leave the shared cache line alone instead of bouncing it between CPUs with an atomic add each.
 */
static __always_inline int svc_window_open(struct rate_window *w, __u64 now, __u64 limit)
{
  /* Signed: another CPU may have started the window at a time later than `now`; that must not look like a window
   * a whole u64 old and reset the count again. */
  if ((__s64)(now - w->start_ns) >= (__s64)1000000000LL) {
    /* The new window starts at the precise time, so none is shorter than a second. */
    w->start_ns = bpf_ktime_get_ns();
    w->count = 0;
  }
  return *(volatile __u64 *)&w->count < limit;
}

/* Takes one unit of window `w` (after svc_window_open). */
static __always_inline int svc_window_take(struct rate_window *w, __u64 limit)
{
  return __sync_fetch_and_add(&w->count, 1) < limit;
}

/* A TCP socket's addresses: family, local and remote ports (host order), local and remote addresses (16 bytes
 * each, 4 used for AF_INET). */
static __always_inline void svc_addrs_from_sk(struct sock *sk, __u16 *family, __u16 *sport, __u16 *dport, __u8 *saddr, __u8 *daddr)
{
  *family = BPF_CORE_READ(sk, __sk_common.skc_family);
  *sport = BPF_CORE_READ(sk, __sk_common.skc_num);
  *dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
  if (*family == 2 /* AF_INET */) {
    __u32 s = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
    __u32 d = BPF_CORE_READ(sk, __sk_common.skc_daddr);
    __builtin_memcpy(saddr, &s, 4);
    __builtin_memcpy(daddr, &d, 4);
  } else {
    /* 16 bytes each (BPF_CORE_READ_INTO would read sizeof(*saddr), one byte). */
    bpf_core_read(saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
    bpf_core_read(daddr, 16, &sk->__sk_common.skc_v6_daddr.in6_u.u6_addr8);
  }
}

#endif
