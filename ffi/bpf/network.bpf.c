// SPDX-License-Identifier: GPL-2.0
/*
 * Program set `network`: TCP connection lifecycle and the first bytes of HTTP/1.x messages.
 *
 * Connections: `sock/inet_sock_set_state` creates an entry for the socket when an outbound connect starts
 * (CLOSE -> SYN_SENT) or an inbound one is established
 * (SYN_RECV -> ESTABLISHED); `sock/sock_send_length` and `sock/sock_recv_length` add bytes (and create
 * entries lazily for connections older than the agent), `tcp/tcp_retransmit_skb` counts retransmitted segments.
 * Records `struct conn_event` go to the ring buffer `conn_events`: OPEN (outbound established, or inbound
 * once its process is known), FAILED (outbound connect that never got established), CLOSED, and PROGRESS
 * (about every PROGRESS_INTERVAL_UNITS x 1.07 s while a connection moves data; user space counts bytes since the
 * previous report as bytes - reported_*).
 *
 * HTTP: the first HTTP_CAPTURE_BYTES of the bytes a read/write/recvfrom/sendto/readv/writev/recvmsg/sendmsg
 * moved on a TCP socket go into a `struct http_event` on the ring buffer `http_events`, when they start like
 * an HTTP/1.x message (or continue one just seen: a few calls on the request side, and on the response side every
 * call up to HTTP_RESPONSE_RECORDS, so that user space finds the call carrying the response's last byte by its
 * framing). Each record carries the stream offset of its bytes so that user space sees gaps exactly. Two ways to find the buffer (`capture_http`):
 *   CAPTURE_SOCKET (default): at sock_*_length, inside the syscall, from the syscall's arguments in the
 *     task's saved user registers (bpf_task_pt_regs, 5.15+; found once and then read through bpf_rdonly_cast on
 *     6.2+, see syscall_args): no work at all for non-socket I/O;
 *   CAPTURE_SYSCALLS: the syscall tracepoints remember the buffer per thread at entry (`pending`),
 *     sock_*_length marks the call as TCP, and the syscall exit copies the bytes.
 * A request starts an exchange; exchanges beyond `http_requests_per_second` are not captured at all
 * (neither request nor response) and are counted in stats[STAT_HTTP_SAMPLED_OUT], as are those refused while
 * the ring buffer `http_events` is more than half full (the budget adapts to what user space drains: nothing is
 * lost in the ring).
 *
 * RED metrics (`red_enabled`, socket storage programs only; red.h, shared with tls.bpf.c): every exchange, captured
 * or not, is counted in the kernel. A request start records its method, the precise clock and, on the server side, the first
 * RED_PATH_BYTES of its path and a hash of the path up to '?', '#' or the space before the version (behind the
 * connection's entry in its per-socket storage, `conn_store`). The response's status line counts the exchange into the
 * current generation (`red_idx_a`/`red_vals_a` or `_b`, chosen by `red_config.gen`: a key index and per-CPU counts
 * by slot, red.h) under the key (pid, role, method, status, path hash, peer); later calls on the response side move
 * its duration to their time (its last byte) while the generation lasts. User space flips the generation, then
 * takes the other one whole, so nothing counted is lost or counted twice. The path of each new key goes to `red_paths` (hash -> bytes). Keys beyond the map's
 * room are counted per role in `red_overflow` (cumulative; user space takes differences). With `red_body_sizes`,
 * the request's and response's body sizes of each counted exchange too (red-body.h).
 *
 * Where entries live: with kernel BTF (the default) the lifecycle and length programs run as tp_btf and keep
 * each connection in per-socket storage (`conn_store`, BPF_MAP_TYPE_SK_STORAGE: reached from the socket itself,
 * no hash lookup on every read and write, freed with the socket; `live_conns` counts entries against
 * `max_conns`); the classic tracepoint programs (`*_tp`, kernels without BTF, and http_capture `syscalls`,
 * whose syscall exits have no socket pointer) keep them in the `conns` hash keyed by the struct sock address.
 *
 * TLS (`tls_follow`): where the `tls` set is loaded too, the socket storage length programs also run its socket
 * call part (tls-socket.h: the socket under each SSL call), in place of its own programs on the same tracepoints.
 *
 * The agent's own process (`self_tgid`) is never traced, nor the exchanges of the other end of its connections on
 * this host (common.h, svc_self_peers: a local receiver of its exports; a loopback one in the agent connection's own
 * network namespace only), whose connections still count. Layouts are mirrored by src/collectors/network/decoders.ts.
 */
#include "common.h"
#include <bpf/bpf_endian.h>

/*
 * A kfunc (6.2+): `obj` as a read-only pointer to the kernel type `btf_id` (the verifier makes the call a register
 * move; loads through it cannot fault). Used by the socket length programs where the kernel has it (`cast`, a
 * constant per program: on_send_length / on_recv_length); their `_compat` twins, loaded on earlier kernels, call
 * helpers instead and never reach it (a kfunc call is refused there even in dead code).
 */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2
#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_CLOSE 7
#define TCP_LISTEN 10
#define COMM_LEN 16

#define CONN_OPEN 1
#define CONN_FAILED 2
#define CONN_CLOSED 3
#define CONN_PROGRESS 4
/* A connection moving data reports its byte counts at most this often (so long-lived ones show up before they close): 10 units of 2^30 ns, about 10.7 s. */
#define PROGRESS_UNIT_SHIFT 30
#define PROGRESS_INTERVAL_UNITS 10

#define DIR_UNKNOWN 0
#define DIR_OUTBOUND 1
#define DIR_INBOUND 2

#define FLAG_OPEN_REPORTED 1
#define FLAG_IGNORED 2
#define FLAG_PREEXISTING 4
/* An HTTP request was seen on the connection. */
#define FLAG_HTTP 8
/* The connection speaks HTTP/2 (its client preface or a SETTINGS frame opened one direction): every call of it is
 * forwarded, up to H2_CAPTURE_BYTES each, so that user space keeps each direction's HPACK state. */
#define FLAG_H2 16
/* A connection of the agent's own process whose local endpoint is in svc_self_peers (removed at its close). */
#define FLAG_SELF_ENDPOINT 32
/* The other end of an agent's connection (its peer is in svc_self_peers): connection events and metrics as for
 * any connection, but no HTTP capture or RED counting (the agent's exports seen by a local receiver). */
#define FLAG_SELF_PEER 64
/* An HTTP/2 connection no longer forwarded: one of its records was refused (h2_records_per_second, or the ring
 * three quarters full) or lost (ring full). User space cannot go on decoding it: it is forwarded again from a later
 * call that starts with frames (emit_h2), and decoded anew from there. */
#define FLAG_H2_STOPPED 128

#define HTTP_CAPTURE_BYTES 256
#define HTTP_FOLLOW_EVENTS 2
/* Calls on the response side of a captured exchange reported after its start (each with its first bytes): user space
 * follows the response's framing to its last byte. 1024 calls cover 16 MiB read 16 KiB at a time. */
#define HTTP_RESPONSE_RECORDS 1024
/* iovecs of one readv/writev/recvmsg/sendmsg gathered into the captured bytes (a chunk's size line, data and the
 * terminator often travel as separate iovecs of one sendmsg). */
#define HTTP_MAX_IOVECS 4
#define NSEC_PER_SEC 1000000000ULL
/* HTTP/2: the most bytes forwarded of one call (user space skips DATA payloads it did not get exactly, and stops
 * decoding a connection whose HEADERS it missed), and the iovecs of one call gathered. */
#define H2_CAPTURE_BYTES 4096
#define H2_MAX_IOVECS 32
/* An HTTP/2 call on a contiguous buffer (read, write, recvfrom, sendto) goes out as up to this many records of
 * H2_CAPTURE_BYTES each (consecutive stream offsets; the last one's len covers what is left): 32 KiB, so that a
 * large header block, or a gRPC message's HEADERS, DATA and trailers in one call, reach user space whole. */
#define H2_CHUNKS 8
/* struct http_event.flags: a header-only record saying that forwarding of this HTTP/2 connection stopped here
 * because a record was refused (FLAG_H2_STOPPED). */
#define HTTP_EVENT_H2_STOPPED 1
/* struct http_event.flags: a call of an HTTP/2 connection found in its middle (h2_midstream_start): user space decodes it
 * from the first call of each direction that starts with frames, its HPACK tables partial. */
#define HTTP_EVENT_H2_MIDSTREAM 2
/* struct http_event.flags: the first call forwarded of a stopped HTTP/2 connection that resumed, or the first call
 * that starts with frames after one forwarded cut (emit_h2): user space decodes the connection anew from here, as one
 * found in its middle, where it cannot go on decoding it. */
#define HTTP_EVENT_H2_RESUMED 4
/* h2_scratch_value.resuming: the call may resume a stopped connection, or mark the first call with frames after a cut. */
#define H2_RESUME_STOPPED 1
#define H2_RESUME_CUT 2

#define IO_READ 0
#define IO_WRITE 1

#define STAT_CONNS_FULL 0
#define STAT_PENDING_FULL 1
#define STAT_HTTP_SAMPLED_OUT 2
#define STAT_HTTP_EVENTS 3
/* A request started on a connection whose previous request was still unanswered (pipelined): the earlier one is not counted. */
#define STAT_RED_REPLACED 4
/* Exchanges refused a span because the http_events ring was more than half full (also in STAT_HTTP_SAMPLED_OUT). */
#define STAT_HTTP_RING_BUSY 5
/* HTTP/2 connections whose forwarding stopped: a record refused by h2_records_per_second ... */
#define STAT_H2_STOPPED_LIMIT 6
/* ... or a record lost (the ring full). */
#define STAT_H2_STOPPED_LOST 7
/* HTTP/2 calls forwarded cut: more than H2_CHUNKS * H2_CAPTURE_BYTES, or an iovec call over H2_CAPTURE_BYTES (user space
 * skips the rest when it is DATA). */
#define STAT_H2_CUT 8
/* ... or while the ring was three quarters full. */
#define STAT_H2_STOPPED_RING 9
/* Connections found not to carry HTTP (conn.opaque: TLS records, or another protocol's first request bytes): their
 * calls are no longer read for HTTP. */
#define STAT_NOT_HTTP 10
/* HTTP/2 connections found in their middle (open before the programs loaded): forwarded from there (FLAG_H2). */
#define STAT_H2_MIDSTREAM 11
/* Stopped HTTP/2 connections forwarded again (emit_h2). */
#define STAT_H2_RESUMED 12
#define STAT_COUNT 13

/* Set before load. */
#define CAPTURE_OFF 0
#define CAPTURE_SYSCALLS 1
#define CAPTURE_SOCKET 2

const volatile __u32 self_tgid = 0;
/* CAPTURE_SYSCALLS: buffers from the syscall tracepoints; CAPTURE_SOCKET: from the syscall's own registers at sock_*_length. */
const volatile __u32 capture_http = CAPTURE_SOCKET;
/* Entries of conn_store at most (per-socket storage has no max_entries of its own). */
const volatile __u32 max_conns = 65536;

/*
 * Limits user space sets before load and may change while the programs run (a reload of max_spans_per_second or
 * http2_records_per_second: no new set, so nothing in flight is missed). Not const: in .data, read at each use.
 */
/* HTTP exchanges captured per second at most (all connections together). */
volatile __u32 http_requests_per_second = 1000;
/* Records of HTTP/2 connections forwarded per second at most (all connections together). */
volatile __u32 h2_records_per_second = 50000;
/* Count every HTTP exchange into the RED maps (socket storage programs only). */
const volatile __u32 red_enabled = 0;

/* Where a program keeps connections: compile-time argument of the inline helpers, one per program. */
#define STORE_HASH 0
#define STORE_SK 1

/* 136 bytes. */
struct conn {
  __u64 start_ns;      /*   0: connect started (outbound) or first seen */
  __u64 established_ns;/*   8: 0 until established */
  __u64 bytes_sent;    /*  16 */
  __u64 bytes_recv;    /*  24 */
  __u64 cgroup_id;     /*  32: of the owning process once known */
  __u32 pid;           /*  40: tgid of the owning process, 0 while unknown */
  __u32 retransmits;   /*  44: segments retransmitted (tcp_skb_pcount per tcp_retransmit_skb the kernel counted), as total_retrans counts */
  __u16 sport;         /*  48: local port, host order */
  __u16 dport;         /*  50: remote port, host order */
  __u16 family;        /*  52: AF_INET or AF_INET6 */
  __u8 direction;      /*  54: DIR_* */
  __u8 flags;          /*  55: FLAG_* */
  __u8 saddr[16];      /*  56: local address (4 bytes used for AF_INET) */
  __u8 daddr[16];      /*  72: remote address */
  char comm[COMM_LEN]; /*  88 */
  __u8 follow[2];      /* 104: HTTP continuation budget per IO_* direction (request side) */
  __u8 sampled;        /* 106: the current HTTP exchange is captured: 0 no, else IO_* + 1 of its request */
  __u8 last_io;        /* 107: IO_* + 1 of the previous call, 0 before the first */
  __u32 progress_s;    /* 108: bpf_ktime >> PROGRESS_UNIT_SHIFT of the last PROGRESS record */
  __u64 reported_sent; /* 112: bytes_sent already reported in PROGRESS records */
  __u64 reported_recv; /* 120: bytes_recv already reported */
  __u32 resp_left;     /* 128: response-side calls of the captured exchange still reported (HTTP_RESPONSE_RECORDS) */
  __u8 upgrading;      /* 132: a 101 answered the captured request; HTTP/2 forwarded until the request side's next
                        * call tells (the client preface: HTTP/2 stays, RFC 9113 section 3.2 for h2c; anything else,
                        * e.g. WebSocket: back to HTTP/1.x capture, and the RED exchange counts with status 101) */
  __u8 opaque;         /* 133: OPAQUE_*: the connection carries no HTTP (TLS records, another protocol), never read for it again */
  __u8 tunnel;         /* 134: a CONNECT request was seen: what follows its answer may be TLS */
  __u8 h2_resync;      /* 135: an HTTP/2 call was forwarded cut: the next one that starts with frames is marked
                        * HTTP_EVENT_H2_RESUMED, for user space to decode anew from there should the cut have lost it a
                        * direction (emit_h2) */
};

/* struct conn.opaque */
#define OPAQUE_TLS 1
#define OPAQUE_OTHER 2

/* 160 bytes. */
struct conn_event {
  __u64 timestamp_ns; /*   0 */
  __u64 sk;           /*   8 */
  __u32 kind;         /*  16: CONN_* */
  __u32 pad;          /*  20 */
  struct conn c;      /*  24 */
};

/* 104 bytes of header, then up to HTTP_CAPTURE_BYTES of data. */
struct http_event {
  __u64 timestamp_ns; /*   0: read: syscall exit; write: syscall entry */
  __u64 sk;           /*   8 */
  __u64 stream_off;   /*  16: bytes moved in this direction on this socket before this call */
  __u64 cgroup_id;    /*  24 */
  __u32 pid;          /*  32 */
  __u32 tid;          /*  36 */
  __u32 len;          /*  40: bytes moved by the call */
  __u16 captured;     /*  44: bytes in data */
  __u8 io;            /*  46: IO_READ or IO_WRITE */
  __u8 direction;     /*  47: DIR_* of the connection */
  __u16 sport;        /*  48 */
  __u16 dport;        /*  50 */
  __u16 family;       /*  52 */
  __u16 flags;        /*  54: HTTP_EVENT_* */
  __u8 saddr[16];     /*  56 */
  __u8 daddr[16];     /*  72 */
  char comm[COMM_LEN];/*  88 */
  __u8 data[HTTP_CAPTURE_BYTES]; /* 104 */
};

_Static_assert(sizeof(struct conn) == 136, "struct conn layout is mirrored by the decoder");
_Static_assert(sizeof(struct conn_event) == 160, "struct conn_event layout is mirrored by the decoder");
_Static_assert(__builtin_offsetof(struct http_event, data) == 104, "struct http_event layout is mirrored by the decoder");

/* pending.is_iov: the buffer is a struct user_msghdr * (recvmsg/sendmsg). */
#define IS_MSGHDR 2

struct pending {
  __u64 buf;          /* user buffer, struct iovec * when is_iov is 1, struct user_msghdr * when IS_MSGHDR */
  __u64 enter_ns;
  __u64 sk;           /* set by sock_*_length when the call went to a TCP socket */
  __u32 io;
  __u32 is_iov;
  __u32 iovcnt;       /* readv/writev: the call's iovec count (a msghdr's comes from the msghdr at exit) */
  __u32 pad;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u64);
  __type(value, struct conn);
} conns SEC(".maps");


struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __s64);
} live_conns SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct pending);
} pending SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} conn_events SEC(".maps");

SVC_LOST_MAP(conn_events);

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 22);
} http_events SEC(".maps");

SVC_LOST_MAP(http_events);

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, STAT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} stats SEC(".maps");


#include "red.h"
#include "red-body.h"

/* A connection in per-socket storage: its entry and, behind it, the RED state of its exchange under way (one
 * storage lookup per call reaches both). */
struct conn_sk {
  struct conn c;
  struct red_conn red;
  struct red_body body;
};

struct {
  __uint(type, BPF_MAP_TYPE_SK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct conn_sk);
} conn_store SEC(".maps");

/* The RED state of a connection entry of conn_store (STORE_SK only). */
static __always_inline struct red_conn *red_of(struct conn *c)
{
  return &((struct conn_sk *)c)->red;
}

/* Its body sizes' state (red-body.h). */
static __always_inline struct red_body *body_of(struct conn *c)
{
  return &((struct conn_sk *)c)->body;
}


/* One global window of http_requests_per_second exchanges (struct rate_window: common.h). */

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct rate_window);
} http_rate SEC(".maps");

/* One global window of h2_records_per_second HTTP/2 records. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct rate_window);
} h2_rate SEC(".maps");

/* The record being built, with room past its data for the verifier's bound on gathered iovecs (an offset below
 * HTTP_CAPTURE_BYTES plus a size masked to 2 * HTTP_CAPTURE_BYTES - 1); only the record itself is sent. */
struct http_scratch_value {
  struct http_event e;
  __u8 spare[2 * HTTP_CAPTURE_BYTES];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct http_scratch_value);
} http_scratch SEC(".maps");

/* An HTTP/2 record being built: struct http_event's header, then up to H2_CAPTURE_BYTES of data (and room for the
 * verifier's bounds: an offset below H2_CAPTURE_BYTES plus a size masked to 2 * H2_CAPTURE_BYTES - 1). */
struct h2_scratch_value {
  struct http_event e;
  __u8 more[3 * H2_CAPTURE_BYTES];
  /* An iovec call's array, read in one user read (not one read per iovec). */
  struct iovec iovs[H2_MAX_IOVECS];
  /* The run of iovecs that continue one another being gathered (emit_h2): in map memory, whose values the verifier
   * does not follow, so that each turn of the loop leaves it in one state. */
  struct iovec run;
  /* What emit_h2's call may do (H2_RESUME_*): kept here, where the verifier does not follow its value, so that it
   * walks the gathering once rather than once per value. */
  __u32 resuming;
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct h2_scratch_value);
} h2_scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct conn_event);
} conn_scratch SEC(".maps");

/* bpf_ktime_get_ns as of the current jiffy, per CPU (see coarse_now). */
struct clock_cache {
  __u64 jiffies;
  __u64 ns;
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct clock_cache);
} clock_cache SEC(".maps");

/* tcp/tcp_retransmit_skb, as in its format file. */
struct tp_tcp_retransmit {
  __u64 common;
  const void *skbaddr;
  const void *skaddr;
};

/* syscalls/sys_enter_*: every argument is 8 bytes from offset 16. */
struct tp_sys_enter {
  __u64 common;
  __s32 nr;
  __u32 pad;
  __u64 args[6];
};

struct tp_sys_exit {
  __u64 common;
  __s32 nr;
  __u32 pad;
  __s64 ret;
};

/*
 * The monotonic clock (bpf_ktime_get_ns) as read at most one jiffy ago on this CPU, for the clocks that count in
 * seconds: the progress reports and the exchange budget's window. Reading the clock itself costs ~45 ns a call
 * in this VM, more than a quarter of a sock_*_length run (bpf_stats); jiffies is a plain load. Never ahead of
 * the real clock, so a window found over by it is over. Records take the precise clock.
 */
static __always_inline __u64 coarse_now(void)
{
  /* Kernels before 5.5 have no bpf_jiffies64: libbpf resolves this check at load time and the dead branch goes. */
  if (!bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_jiffies64))
    return bpf_ktime_get_ns();
  __u32 zero = 0;
  struct clock_cache *cc = bpf_map_lookup_elem(&clock_cache, &zero);
  if (!cc)
    return bpf_ktime_get_ns();
  __u64 j = bpf_jiffies64();
  if (cc->jiffies != j) {
    cc->jiffies = j;
    cc->ns = bpf_ktime_get_ns();
  }
  return cc->ns;
}

SVC_MEMORY_GATE;
SVC_SELF_PEERS;

/* 1: the `tls` set is loaded too, and these socket storage programs run its socket call part (tls-socket.h) in place
 * of its own programs on the same tracepoints. 0: the loader leaves that part's maps out and the verifier prunes it. */
const volatile __u32 tls_follow = 0;

#include "tls-socket.h"

/* The agent's own connection `c` (FLAG_IGNORED) of socket `sk`, its local endpoint known: recorded in svc_self_peers
 * (a loopback endpoint with the socket's network namespace). */
static __always_inline void record_self_endpoint(struct conn *c, void *sk)
{
  if (c->sport == 0 || (c->flags & FLAG_SELF_ENDPOINT))
    return;
  c->flags |= FLAG_SELF_ENDPOINT;
  svc_self_endpoint_add(&svc_self_peers, sk, c->family, c->saddr, c->sport, c->daddr, c->dport);
}

static __always_inline void count_stat(__u32 idx)
{
  __u64 *n = bpf_map_lookup_elem(&stats, &idx);
  if (n)
    *n += 1;
}

static __always_inline void emit_conn(void *ctx, __u64 sk, __u32 kind, struct conn *c)
{
  if (svc_gate_refuses(SVC_GATE_EVENT))
    return;
  __u32 zero = 0;
  struct conn_event *e = bpf_map_lookup_elem(&conn_scratch, &zero);
  if (!e)
    return;
  e->timestamp_ns = bpf_ktime_get_ns();
  e->sk = sk;
  e->kind = kind;
  e->pad = 0;
  __builtin_memcpy(&e->c, c, sizeof(*c));
  if (bpf_ringbuf_output(&conn_events, e, sizeof(*e), svc_wakeup_flags(&conn_events, sizeof(*e))) != 0)
    svc_count_lost(&conn_events_lost);
}

static __always_inline void own_by_current(struct conn *c)
{
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  c->pid = tgid;
  c->cgroup_id = bpf_get_current_cgroup_id();
  bpf_get_current_comm(c->comm, sizeof(c->comm));
  if (tgid == self_tgid)
    c->flags |= FLAG_IGNORED;
}

static __always_inline void addrs_from_tp(struct conn *c, struct trace_event_raw_inet_sock_set_state *ctx)
{
  c->sport = ctx->sport;
  c->dport = ctx->dport;
  c->family = ctx->family;
  /* The tracepoint record is read with helpers: the verifier refuses variable offsets into the context. */
  if (ctx->family == AF_INET) {
    bpf_probe_read_kernel(c->saddr, 4, ctx->saddr);
    bpf_probe_read_kernel(c->daddr, 4, ctx->daddr);
  } else {
    bpf_probe_read_kernel(c->saddr, 16, ctx->saddr_v6);
    bpf_probe_read_kernel(c->daddr, 16, ctx->daddr_v6);
  }
}

static __always_inline void addrs_from_sk(struct conn *c, struct sock *sk)
{
  svc_addrs_from_sk(sk, &c->family, &c->sport, &c->dport, c->saddr, c->daddr);
}

/* The connection entry of socket `sk`, or 0. */
static __always_inline struct conn *conn_get(__u32 store, void *sk)
{
  if (store == STORE_SK)
    return bpf_sk_storage_get(&conn_store, sk, 0, 0);
  __u64 key = (__u64)sk;
  return bpf_map_lookup_elem(&conns, &key);
}

/*
 * Creates the entry of `sk` from `init` (replacing an existing one when `replace`, else leaving it alone and
 * returning 0); counts STAT_CONNS_FULL when there is no room.
 */
static __always_inline struct conn *conn_create(__u32 store, void *sk, struct conn *init, int replace)
{
  if (store == STORE_SK) {
    struct conn *c = bpf_sk_storage_get(&conn_store, sk, 0, 0);
    if (c) {
      if (!replace)
        return 0;
      __builtin_memcpy(c, init, sizeof(*c));
      return c;
    }
    __u32 zero = 0;
    __s64 *live = bpf_map_lookup_elem(&live_conns, &zero);
    if (!live)
      return 0;
    if (*(volatile __s64 *)live >= (__s64)max_conns) {
      count_stat(STAT_CONNS_FULL);
      return 0;
    }
    /* Created zeroed (the RED state idle), then the entry copied in. */
    c = bpf_sk_storage_get(&conn_store, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
    if (!c) {
      count_stat(STAT_CONNS_FULL);
      return 0;
    }
    __builtin_memcpy(c, init, sizeof(*c));
    __sync_fetch_and_add(live, 1);
    return c;
  }
  __u64 key = (__u64)sk;
  if (bpf_map_update_elem(&conns, &key, init, replace ? BPF_ANY : BPF_NOEXIST) != 0) {
    if (replace || !bpf_map_lookup_elem(&conns, &key))
      count_stat(STAT_CONNS_FULL);
    return 0;
  }
  return bpf_map_lookup_elem(&conns, &key);
}

static __always_inline void conn_delete(__u32 store, void *sk)
{
  if (store == STORE_SK) {
    if (bpf_sk_storage_delete(&conn_store, sk) == 0) {
      __u32 zero = 0;
      __s64 *live = bpf_map_lookup_elem(&live_conns, &zero);
      if (live)
        __sync_fetch_and_add(live, -1);
    }
    return;
  }
  __u64 key = (__u64)sk;
  bpf_map_delete_elem(&conns, &key);
}

/*
 * The monotonic clock as TCP last read it for this socket (tcp_sock.tcp_clock_cache, ns: refreshed when a segment
 * arrives and when segments are sent, so at a request's or response's packet): a load instead of a clock read
 * (bpf_ktime_get_ns costs ~45 ns a call in this VM); the precise clock when the socket has none.
 */
static __always_inline __u64 red_clock(void *sk, int cast)
{
  /* With `cast` (bpf_rdonly_cast) the socket is read as a tcp_sock without a helper call: on this host a helper's
   * call and return cost more than the load. A stream socket of protocol TCP is a tcp_sock (the programs run only
   * for sk_protocol IPPROTO_TCP). */
  if (cast) {
    if (((struct sock *)sk)->sk_type == SOCK_STREAM) {
      struct tcp_sock *tp = bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct tcp_sock));
      __u64 t = tp->tcp_clock_cache;
      if (t)
        return t;
    }
    return bpf_ktime_get_ns();
  }
  struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
  if (tp) {
    __u64 t = tp->tcp_clock_cache;
    if (t)
      return t;
  }
  return bpf_ktime_get_ns();
}

/* Addresses and ports: from the classic tracepoint's record (`tp`) or, for tp_btf programs, from the socket. */
static __always_inline void conn_addrs(struct conn *c, void *sk, struct trace_event_raw_inet_sock_set_state *tp)
{
  if (tp)
    addrs_from_tp(c, tp);
  else
    addrs_from_sk(c, (struct sock *)sk);
}

static __always_inline int set_state(void *ctx, __u32 store, void *sk, int oldstate, int newstate, struct trace_event_raw_inet_sock_set_state *tp)
{
  if (newstate == TCP_SYN_SENT) {
    /* connect() runs in the calling process: its pid is right here. */
    struct conn c = {};
    c.start_ns = bpf_ktime_get_ns();
    c.direction = DIR_OUTBOUND;
    conn_addrs(&c, sk, tp);
    own_by_current(&c);
    conn_create(store, sk, &c, 1);
    return 0;
  }
  if (newstate == TCP_ESTABLISHED && oldstate == TCP_SYN_RECV) {
    /* An accepted connection, established in softirq: the owning process is learnt at its first read/write. */
    struct conn c = {};
    c.start_ns = bpf_ktime_get_ns();
    c.established_ns = c.start_ns;
    c.direction = DIR_INBOUND;
    conn_addrs(&c, sk, tp);
    conn_create(store, sk, &c, 0);
    return 0;
  }

  struct conn *c = conn_get(store, sk);
  if (!c)
    return 0;
  if (newstate == TCP_ESTABLISHED && oldstate == TCP_SYN_SENT) {
    c->established_ns = bpf_ktime_get_ns();
    conn_addrs(c, sk, tp);
    if (!(c->flags & FLAG_IGNORED)) {
      c->flags |= FLAG_OPEN_REPORTED;
      emit_conn(ctx, (__u64)sk, CONN_OPEN, c);
    } else {
      record_self_endpoint(c, sk);
    }
    return 0;
  }
  if (newstate == TCP_CLOSE) {
    if (store == STORE_SK && red_enabled) {
      /* A request never answered: counted as a transport error (status 0) when its connection closes. */
      struct red_conn *r = red_of(c);
      if (r->state == RED_AWAITING)
        red_count(r, 0, red_clock(sk, 0));
      else if (r && r->state == RED_UPGRADING)
        red_count(r, 101, r->end_ns);
    }
    /* A connect that never got established: its local port was bound after SYN_SENT was recorded, and is
     * released (skc_num 0) before this tracepoint; inet_sport keeps it. */
    if (c->sport == 0)
      c->sport = tp ? tp->sport : bpf_ntohs(BPF_CORE_READ((struct inet_sock *)sk, inet_sport));
    if (c->flags & FLAG_SELF_ENDPOINT)
      svc_self_endpoint_del(&svc_self_peers, sk, c->family, c->saddr, c->sport, c->dport);
    if (!(c->flags & FLAG_IGNORED)) {
      __u32 kind = (c->direction == DIR_OUTBOUND && c->established_ns == 0) ? CONN_FAILED : CONN_CLOSED;
      emit_conn(ctx, (__u64)sk, kind, c);
    }
    conn_delete(store, sk);
  }
  return 0;
}

/* With kernel BTF: the socket itself (per-socket storage), no trace record formatted. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(on_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
  if (sk->sk_protocol != IPPROTO_TCP)
    return 0;
  return set_state(ctx, STORE_SK, (void *)sk, oldstate, newstate, 0);
}

SEC("tracepoint/sock/inet_sock_set_state")
int on_set_state_tp(struct trace_event_raw_inet_sock_set_state *ctx)
{
  if (ctx->protocol != IPPROTO_TCP)
    return 0;
  return set_state(ctx, STORE_HASH, (void *)ctx->skaddr, ctx->oldstate, ctx->newstate, ctx);
}

/* The connection entry of a TCP socket moving data in the current process, created if the agent missed its start. */
static __always_inline struct conn *conn_for_io(void *ctx, __u32 store, void *sk)
{
  struct conn *c = conn_get(store, sk);
  if (!c) {
    struct conn n = {};
    n.start_ns = bpf_ktime_get_ns();
    n.flags = FLAG_PREEXISTING;
    addrs_from_sk(&n, (struct sock *)sk);
    if (n.family != AF_INET && n.family != AF_INET6)
      return 0;
    if (BPF_CORE_READ((struct sock *)sk, __sk_common.skc_state) != TCP_ESTABLISHED)
      return 0;
    c = conn_create(store, sk, &n, 0);
    if (!c)
      return 0;
  }
  if (c->pid == 0) {
    own_by_current(c);
    if (c->flags & FLAG_IGNORED) {
      /* The agent's own connection older than the agent's programs. */
      if (c->flags & FLAG_PREEXISTING)
        record_self_endpoint(c, sk);
    } else if (c->direction != DIR_OUTBOUND && svc_is_self_peer(&svc_self_peers, sk, c->family, c->daddr, c->dport, c->saddr, c->sport)) {
      c->flags |= FLAG_SELF_PEER;
    }
    if (c->direction == DIR_INBOUND && !(c->flags & FLAG_IGNORED)) {
      c->flags |= FLAG_OPEN_REPORTED;
      emit_conn(ctx, (__u64)sk, CONN_OPEN, c);
    }
  }
  return c;
}

/* ---- HTTP capture ---- */

static __always_inline int remember(__u64 buf, __u32 io, __u32 is_iov, __u64 iovcnt)
{
  if (capture_http != CAPTURE_SYSCALLS)
    return 0;
  __u64 id = bpf_get_current_pid_tgid();
  if ((id >> 32) == self_tgid)
    return 0;
  struct pending p = { .buf = buf, .enter_ns = bpf_ktime_get_ns(), .sk = 0, .io = io, .is_iov = is_iov, .iovcnt = iovcnt > H2_MAX_IOVECS ? H2_MAX_IOVECS : (__u32)iovcnt };
  if (bpf_map_update_elem(&pending, &id, &p, BPF_ANY) != 0)
    count_stat(STAT_PENDING_FULL);
  return 0;
}

/* Takes one unit of the per-second exchange budget. */
static __always_inline int take_exchange_token(__u64 now)
{
  __u32 zero = 0;
  struct rate_window *w = bpf_map_lookup_elem(&http_rate, &zero);
  if (!w)
    return 0;
  if (!svc_window_open(w, now, http_requests_per_second))
    return 0;
  /* What user space does not drain is refused here, not lost in the ring: no new exchange while it is half full. */
  if (bpf_ringbuf_query(&http_events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&http_events, BPF_RB_RING_SIZE) / 2) {
    count_stat(STAT_HTTP_RING_BUSY);
    return 0;
  }
  return svc_window_take(w, http_requests_per_second);
}

/* Whether the current window of the exchange budget is spent (read only). */
static __always_inline int budget_spent(__u64 now)
{
  __u32 zero = 0;
  struct rate_window *w = bpf_map_lookup_elem(&http_rate, &zero);
  if (!w)
    return 0;
  return (__s64)(now - w->start_ns) < (__s64)NSEC_PER_SEC && *(volatile __u64 *)&w->count >= http_requests_per_second;
}


/*
 * A call on the request side of a connection already seen carrying HTTP, whose exchange is not captured, while
 * the budget is spent: nothing of it would be captured, so user memory is not read. The first such call after
 * the other side moved data (a turn: the next request of a keep-alive connection) is counted as a refused
 * exchange, as reading its first bytes would have; calls continuing the same side (rest of a request,
 * pipelined requests in further reads) are not.
 */
static __always_inline int refused_unread(struct conn *c, __u32 io, __u8 prev_io, __u64 now)
{
  if (c->sampled || !(c->flags & FLAG_HTTP) || c->direction == DIR_UNKNOWN || !budget_spent(now))
    return 0;
  if (prev_io != io + 1)
    count_stat(STAT_HTTP_SAMPLED_OUT);
  return 1;
}

/* Whether a call that moved `moved` bytes in direction `io` is that direction's first on a connection seen from its start. */
static __always_inline int first_call_from_start(const struct conn *c, __u32 io, __u64 moved)
{
  return (io == IO_READ ? c->bytes_recv : c->bytes_sent) == moved && !(c->flags & FLAG_PREEXISTING);
}

/*
 * Whether HTTP/2 on connection `c` can only have been found in its middle (h2_midstream_start): first seen after it
 * opened, and no HTTP/1.x request seen on it (an h2c Upgrade is one, and decodes from its start).
 */
static __always_inline int seen_midway_without_http(const struct conn *c)
{
  return (c->flags & (FLAG_PREEXISTING | FLAG_HTTP)) == FLAG_PREEXISTING;
}

/*
 * Whether a call must be looked at: always while its connection's exchange is captured; otherwise only on
 * the side requests travel (a server's reads, a client's writes; both when the side is unknown), where a
 * request start takes a token or is counted as sampled out. Responses of exchanges not captured are skipped
 * without reading user memory.
 */
static __always_inline int needs_inspection(struct conn *c, __u32 io, __u64 moved)
{
  if (c->opaque)
    return 0;
  /* HTTP/2 connections also while stopped: emit_h2 resumes them. */
  if (c->sampled || (c->flags & FLAG_H2))
    return 1;
  /* The first call of a direction on a connection seen from its start: it may open HTTP/2 (a server's SETTINGS). */
  if (first_call_from_start(c, io, moved))
    return 1;
  if (c->direction == DIR_INBOUND)
    return io == IO_READ;
  if (c->direction == DIR_OUTBOUND)
    return io == IO_WRITE;
  return 1;
}

/*
 * Appends iovec `i` of `iovp` after the `got` bytes captured so far (up to `cap` and `moved`); returns the new count,
 * or more than `cap` when a read failed. `off_mask` and `size_mask` (constants) bound the offset and size for the
 * verifier within the room behind e->data.
 */
static __always_inline __u32 gather_iov(struct http_event *e, const struct iovec *iov, __u32 got, __u64 moved, __u32 cap,
                                        __u32 off_mask, __u32 size_mask)
{
  __u64 want = cap - got;
  if (moved - got < want)
    want = moved - got;
  if (iov->iov_len < want)
    want = iov->iov_len;
  __u32 off = got;
  __u32 size = want;
  asm volatile("%0 &= %1" : "+r"(off) : "i"(off_mask));
  asm volatile("%0 &= %1" : "+r"(size) : "i"(size_mask));
  if (size == 0)
    return got;
  if (size > cap || bpf_probe_read_user((__u8 *)e->data + off, size, iov->iov_base) != 0)
    return cap + 1;
  return off + size;
}

/* gather_iov for iovec `i` of the user's array `iovp`, read here. */
static __always_inline __u32 gather_iovec(struct http_event *e, __u64 iovp, __u32 i, __u32 got, __u64 moved, __u32 cap,
                                          __u32 off_mask, __u32 size_mask)
{
  if (got >= cap || got >= moved)
    return got;
  struct iovec iov = {};
  if (bpf_probe_read_user(&iov, sizeof(iov), (void *)(iovp + i * sizeof(iov))) != 0)
    return cap + 1;
  return gather_iov(e, &iov, got, moved, cap, off_mask, size_mask);
}

/*
 * Appends the bytes of iovecs 1..HTTP_MAX_IOVECS-1 after the `got` bytes read from the first; returns the bytes
 * captured in all (unrolled by hand: kernels before 5.3 have no bounded loops).
 */
static __always_inline __u32 gather_iovecs(struct http_event *e, __u64 iovp, __u32 got, __u64 moved)
{
  _Static_assert(HTTP_MAX_IOVECS == 4, "gather_iovecs reads iovecs 1 to 3");
  /* The size mask lets HTTP_CAPTURE_BYTES itself through (an empty iovec before one of 256 bytes or more). */
  __u32 n = gather_iovec(e, iovp, 1, got, moved, HTTP_CAPTURE_BYTES, 255, 511);
  if (n > HTTP_CAPTURE_BYTES)
    return got;
  got = n;
  n = gather_iovec(e, iovp, 2, got, moved, HTTP_CAPTURE_BYTES, 255, 511);
  if (n > HTTP_CAPTURE_BYTES)
    return got;
  got = n;
  n = gather_iovec(e, iovp, 3, got, moved, HTTP_CAPTURE_BYTES, 255, 511);
  return n > HTTP_CAPTURE_BYTES ? got : n;
}

/* Fills the header of a record about a call that moved `moved` bytes on `c` (`ts`: 0 for the precise clock now). */
static __always_inline void fill_http_header(struct http_event *e, struct conn *c, __u64 skp, __u32 io, __u64 moved, __u32 n, __u64 ts)
{
  __u64 id = bpf_get_current_pid_tgid();
  e->timestamp_ns = ts ? ts : bpf_ktime_get_ns();
  e->sk = skp;
  e->stream_off = (io == IO_READ ? c->bytes_recv : c->bytes_sent) - moved;
  e->cgroup_id = bpf_get_current_cgroup_id();
  e->pid = id >> 32;
  e->tid = (__u32)id;
  e->len = moved;
  e->captured = n;
  e->io = io;
  e->direction = c->direction;
  e->sport = c->sport;
  e->dport = c->dport;
  e->family = c->family;
  e->flags = 0;
  __builtin_memcpy(e->saddr, c->saddr, 16);
  __builtin_memcpy(e->daddr, c->daddr, 16);
  bpf_get_current_comm(e->comm, sizeof(e->comm));
}

/*
 * Whether a call's first bytes (`n` of them) are a TLS record header: on a direction's first call from the
 * connection's start (`first`), a handshake record (a ClientHello, or a server reading one); on any other call, an
 * application data record of TLS 1.2 or 1.3 (a connection seen after it opened). An HTTP/1.x request starts with an
 * uppercase letter and HTTP/2 with its preface or a SETTINGS frame: neither is either.
 */
static __always_inline int tls_record_start(const __u8 *d, __u32 n, int first)
{
  if (n < 5 || d[1] != 0x03 || d[2] > 0x04)
    return 0;
  __u32 len = ((__u32)d[3] << 8) | d[4];
  /* A record's length: 2^14 bytes of plaintext and up to 2048 of expansion (RFC 5246 section 6.2.3). */
  if (len == 0 || len > 16384 + 2048)
    return 0;
  return first ? d[0] == 0x16 : d[0] == 0x17 && d[2] == 0x03;
}

/*
 * Whether the first call of a connection's request side (a server's first read, a client's first write; seen from
 * the connection's start), whose first bytes (`n`) start neither an HTTP/1.x request nor HTTP/2 nor TLS, opens
 * another protocol (a database's, a cache's, a message broker's), whose connection never carries HTTP/1.x after.
 * Not when those bytes may precede HTTP on the same connection: a PROXY protocol header (v1 text, v2 signature), a
 * SOCKS 4/5 greeting, an empty line, a request line with a method http_start does not know; nor on fewer than 8
 * bytes (too short to tell).
 */
static __always_inline int opens_other_protocol(const struct conn *c, __u32 io, const __u8 *d, __u32 n)
{
  if (n < 8)
    return 0;
  if (!(c->direction == DIR_INBOUND ? io == IO_READ : c->direction == DIR_OUTBOUND && io == IO_WRITE))
    return 0;
  if (d[0] == 4 || d[0] == 5 || d[0] == '\r' || d[0] == '\n')
    return 0;
  if (d[0] == 'P' && d[1] == 'R' && d[2] == 'O' && d[3] == 'X' && d[4] == 'Y' && d[5] == ' ')
    return 0;
  if (d[0] == 0x0d && d[1] == 0x0a && d[2] == 0x0d && d[3] == 0x0a && d[4] == 0 && d[5] == 0x0d && d[6] == 0x0a && d[7] == 0x51)
    return 0;
  /* An uppercase token of 3 letters or more then a space, or 8 of them: a request with a method http_start does not
   * know (WebDAV's PROPFIND, QUERY, PURGE), after which the connection may carry ones it knows. */
  __u32 letters = 0;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    __u8 ch = d[i];
    if (ch == ' ')
      break;
    if (!((ch >= 'A' && ch <= 'Z') || ch == '-' || ch == '_'))
      return 1;
    letters += 1;
  }
  return letters < 3;
}

/* Whether a status line (`n` bytes, at least 12 for a yes) is 101 Switching Protocols. */
static __always_inline int is_status_101(const __u8 *d, __u32 n)
{
  return n >= 12 && d[8] == ' ' && d[9] == '1' && d[10] == '0' && d[11] == '1';
}

/* Whether a call (`buf`, a struct iovec * when is_iov) starts with the HTTP/2 client preface ("PRI * HTTP/2.0"). */
static __always_inline int upgraded_to_h2(__u64 buf, __u32 is_iov)
{
  __u8 d[8] = {};
  if (is_iov) {
    struct iovec iov = {};
    if (bpf_probe_read_user(&iov, sizeof(iov), (void *)buf) != 0 || iov.iov_len < 8)
      return 0;
    buf = (__u64)iov.iov_base;
  }
  if (bpf_probe_read_user(d, 8, (void *)buf) != 0)
    return 0;
  return d[0] == 'P' && d[1] == 'R' && d[2] == 'I' && d[3] == ' ' && d[4] == '*' && d[5] == ' ' && d[6] == 'H' && d[7] == 'T';
}

/*
 * Takes one record of the per-second HTTP/2 budget; refused as well while the ring is three quarters full (what
 * user space does not drain stops connections here, counted, rather than losing records of every connection).
 */
static __always_inline int take_h2_token(__u64 now, int count)
{
  __u32 zero = 0;
  struct rate_window *w = bpf_map_lookup_elem(&h2_rate, &zero);
  if (!w)
    return 0;
  if (!svc_window_open(w, now, h2_records_per_second)) {
    if (count)
      count_stat(STAT_H2_STOPPED_LIMIT);
    return 0;
  }
  if (bpf_ringbuf_query(&http_events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&http_events, BPF_RB_RING_SIZE) / 4 * 3) {
    if (count)
      count_stat(STAT_H2_STOPPED_RING);
    return 0;
  }
  if (svc_window_take(w, h2_records_per_second))
    return 1;
  if (count)
    count_stat(STAT_H2_STOPPED_LIMIT);
  return 0;
}

/*
 * Whether the `got` bytes gathered of a call that moved `moved` start with HTTP/2 frames, as h2_midstream_start asks
 * of a connection's first call seen: a stopped connection resumes at such a call.
 */
static __always_inline int h2_gathered_frames(const __u8 *d, __u32 got, __u64 moved)
{
  if (got > H2_CAPTURE_BYTES)
    return 0;
  __u32 n = h2_first_frame(d, got, moved);
  if (n == 0)
    return 0;
  if (n == moved)
    return 1;
  if (n + 9 > got)
    return 0;
  asm volatile("%0 &= 4095" : "+r"(n));
  return h2_frame_start(d + n) != 0;
}

/*
 * HTTP/2: forwards up to H2_CAPTURE_BYTES of a call on a connection flagged FLAG_H2, gathering up to
 * H2_MAX_IOVECS iovecs in order (`buf` a struct iovec * when is_iov). No exchange budget: user space parses
 * frames and keeps HPACK state, which needs every header block of the connection. Bounded by h2_records_per_second
 * and ring pressure instead: a refused call stops the connection's forwarding (FLAG_H2_STOPPED), said by a
 * header-only record (HTTP_EVENT_H2_STOPPED); a record lost in a full ring stops it too. A stopped connection
 * resumes at a later call that starts with frames (h2_gathered_frames) once the ring is under a quarter full and
 * the budget has room: that record says so (HTTP_EVENT_H2_RESUMED), and user space decodes the connection anew from
 * there, as one found in its middle (the header blocks in between, and the HPACK entries they added, are unknown).
 */
static __always_inline int emit_h2(struct conn *c, __u64 skp, __u32 io, __u64 buf, __u32 is_iov, __u64 iovcnt, __u64 moved, __u64 now, __u64 ts)
{
  __u32 zero = 0;
  struct h2_scratch_value *sv = bpf_map_lookup_elem(&h2_scratch, &zero);
  if (!sv)
    return 0;
  struct http_event *e = &sv->e;
  sv->resuming = (c->flags & FLAG_H2_STOPPED) ? H2_RESUME_STOPPED : c->h2_resync ? H2_RESUME_CUT : 0;
  if ((c->flags & FLAG_H2_STOPPED) && bpf_ringbuf_query(&http_events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&http_events, BPF_RB_RING_SIZE) / 4)
    return 0;
  if (!take_h2_token(now, *(volatile __u32 *)&sv->resuming != H2_RESUME_STOPPED)) {
    /* A stopped connection stays stopped while the budget has no room: said once, when it stopped. */
    if (*(volatile __u32 *)&sv->resuming == H2_RESUME_STOPPED)
      return 0;
    c->flags |= FLAG_H2_STOPPED;
    fill_http_header(e, c, skp, io, moved, 0, ts);
    e->flags = HTTP_EVENT_H2_STOPPED;
    /* Lost, the record that would have said so: counted as a connection stopped by a lost record. */
    if (bpf_ringbuf_output(&http_events, e, offsetof(struct http_event, data), svc_wakeup_flags(&http_events, offsetof(struct http_event, data))) != 0) {
      svc_count_lost(&http_events_lost);
      count_stat(STAT_H2_STOPPED_LOST);
    }
    return 0;
  }
  __u32 got = 0;
  if (!is_iov) {
    __u32 size = moved < H2_CAPTURE_BYTES ? moved : H2_CAPTURE_BYTES;
    asm volatile("%0 &= 8191" : "+r"(size));
    if (size > H2_CAPTURE_BYTES)
      return 0;
    if (size > 0 && bpf_probe_read_user(e->data, size, (void *)buf) != 0)
      return 0;
    got = size;
  } else {
    /* The iovec array in one read (a writev of ten HTTP/2 responses carries thirty of them). */
    __u32 cnt = iovcnt < H2_MAX_IOVECS ? iovcnt : H2_MAX_IOVECS;
    __u32 array = cnt * sizeof(struct iovec);
    asm volatile("%0 &= 1023" : "+r"(array));
    if (array == 0 || array > sizeof(sv->iovs) || bpf_probe_read_user(sv->iovs, array, (void *)buf) != 0)
      return 0;
    /* Iovecs that continue one another in memory are read as one run (Node's HTTP/2 writes carry such runs):
     * sv->run is the pending one, its length grown by each iovec that continues it. */
    _Static_assert((H2_MAX_IOVECS & (H2_MAX_IOVECS - 1)) == 0, "iovec indexes are masked with H2_MAX_IOVECS - 1");
    sv->run = sv->iovs[0];
    /* `got` in the one state the loop leaves it in (read back from the record): a run gathered or not, each turn
     * starts alike. */
    e->captured = 0;
    got = *(volatile __u16 *)&e->captured;
    for (__u32 i = 1; i <= H2_MAX_IOVECS; i++) {
      struct iovec *next = &sv->iovs[i & (H2_MAX_IOVECS - 1)];
      if (i < cnt && i < H2_MAX_IOVECS && (__u64)sv->run.iov_base + sv->run.iov_len == (__u64)next->iov_base) {
        sv->run.iov_len += next->iov_len;
        continue;
      }
      if (got >= H2_CAPTURE_BYTES || got >= moved)
        break;
      __u32 n = gather_iov(e, &sv->run, got, moved, H2_CAPTURE_BYTES, 4095, 8191);
      if (n > H2_CAPTURE_BYTES)
        break;
      /* Through the record, as below: one range of `got` for the next iteration, whatever this one took. */
      e->captured = n;
      got = *(volatile __u16 *)&e->captured;
      if (i >= cnt || i >= H2_MAX_IOVECS)
        break;
      sv->run = *next;
    }
  }
  __u32 resuming = *(volatile __u32 *)&sv->resuming;
  if (resuming) {
    int frames = h2_gathered_frames(e->data, got, moved);
    /* A stopped connection stays stopped until a call starts with frames; after a cut, calls go on meanwhile. */
    if (!frames && resuming == H2_RESUME_STOPPED)
      return 0;
    if (!frames)
      resuming = 0;
    else if (resuming == H2_RESUME_STOPPED)
      count_stat(STAT_H2_RESUMED);
    c->flags &= ~FLAG_H2_STOPPED;
    if (frames)
      c->h2_resync = 0;
  }
  fill_http_header(e, c, skp, io, moved, got, ts);
  if (seen_midway_without_http(c))
    e->flags = HTTP_EVENT_H2_MIDSTREAM;
  if (resuming)
    e->flags |= HTTP_EVENT_H2_RESUMED;
  /* Read back from the record (memory the verifier does not follow): each way out of the loops above leaves `got`
   * with a range of its own, and the verifier would walk the rest once per range. */
  got = *(volatile __u16 *)&e->captured;
  /* A contiguous buffer's call continues in the records below (an iovec call goes out as one record: gathering
   * iovecs from an offset for each record makes the programs too large for the verifier). */
  if (!is_iov && moved > H2_CAPTURE_BYTES && got == H2_CAPTURE_BYTES)
    e->len = H2_CAPTURE_BYTES;
  if (moved > (is_iov ? H2_CAPTURE_BYTES : (__u64)H2_CHUNKS * H2_CAPTURE_BYTES)) {
    count_stat(STAT_H2_CUT);
    c->h2_resync = 1;
  }
  __u64 base = e->stream_off;
  for (__u32 k = 0; k < H2_CHUNKS; k++) {
    if (k > 0) {
      __u64 at = (__u64)k * H2_CAPTURE_BYTES;
      if (at >= moved)
        break;
      __u64 left = moved - at;
      __u32 size = left < H2_CAPTURE_BYTES ? left : H2_CAPTURE_BYTES;
      asm volatile("%0 &= 8191" : "+r"(size));
      if (size > H2_CAPTURE_BYTES || bpf_probe_read_user(e->data, size, (void *)(buf + at)) != 0)
        break;
      got = size;
      e->stream_off = base + at;
      e->captured = got;
      /* The last record's len covers the rest of the call (beyond H2_CHUNKS records: not forwarded). */
      e->len = (k < H2_CHUNKS - 1 && left > H2_CAPTURE_BYTES && got == H2_CAPTURE_BYTES) ? H2_CAPTURE_BYTES : (left > 0xffffffffULL ? 0xffffffffU : (__u32)left);
    }
    __u32 total = offsetof(struct http_event, data) + got;
    asm volatile("%0 &= 8191" : "+r"(total));
    if (total > offsetof(struct http_event, data) + H2_CAPTURE_BYTES)
      return 0;
    if (bpf_ringbuf_output(&http_events, e, total, svc_wakeup_flags(&http_events, total)) != 0) {
      svc_count_lost(&http_events_lost);
      c->flags |= FLAG_H2_STOPPED;
      count_stat(STAT_H2_STOPPED_LOST);
      return 0;
    }
    count_stat(STAT_HTTP_EVENTS);
    /* This record's len reaches the end of the call. */
    if (e->stream_off - base + e->len >= moved)
      break;
  }
  return 0;
}

/*
 * Emits the first bytes of `buf` (a struct iovec * when is_iov) that a call moved (`moved` > 0) on connection `c`;
 * `now` is the clock read once by the calling program (coarse_now or precise), `ts` the record's timestamp (0: the
 * precise clock, read here once the call is known to be captured). With `red` (a constant: socket storage programs),
 * request starts and the status lines answering them are counted (`r`: the connection's RED state, red_of; `sk`:
 * its socket).
 */
static __always_inline int emit_http(struct conn *c, __u64 skp, __u32 io, __u64 buf, __u32 is_iov, __u64 iovcnt, __u64 moved, __u64 now, __u64 ts, int red, struct red_conn *r, void *sk, int cast)
{
  __u64 len = moved;
  __u64 iovp = buf;
  if (c->flags & FLAG_H2) {
    if (!c->upgrading || c->sampled != io + 1)
      goto h2;
    /* The request side's first call after a 101: the client preface, or the connection left HTTP. */
    int h2 = upgraded_to_h2(buf, is_iov);
    c->upgrading = 0;
    if (!h2)
      c->flags &= ~FLAG_H2;
    if (red && red_enabled && r->state == RED_UPGRADING) {
      if (h2)
        r->state = RED_IDLE;
      else
        red_count(r, 101, r->end_ns);
    }
    if (h2)
      goto h2;
  }
  if (is_iov) {
    /* The first iovec that holds bytes (leading empty ones move nothing): the message's start is there. */
    struct iovec iov = {};
#pragma unroll
    for (int i = 0; i < HTTP_MAX_IOVECS; i++) {
      if (bpf_probe_read_user(&iov, sizeof(iov), (void *)iovp) != 0)
        return 0;
      if (iov.iov_len > 0)
        break;
      iovp += sizeof(iov);
      iovcnt--;
    }
    if (iov.iov_len == 0 || iovcnt == 0)
      return 0;
    buf = (__u64)iov.iov_base;
    if (iov.iov_len < len)
      len = iov.iov_len;
  }
  __u32 zero = 0;
  struct http_scratch_value *sv = bpf_map_lookup_elem(&http_scratch, &zero);
  if (!sv)
    return 0;
  struct http_event *e = &sv->e;
  /* 12 bytes: a status line's code ends there; a server's request read with RED on: RED_HEAD_BYTES, its path too. */
  __u32 want = 12;
  if (red && red_enabled && io == IO_READ && c->direction != DIR_OUTBOUND) {
    want = RED_HEAD_BYTES;
    __builtin_memset(e->data, 0, RED_HEAD_BYTES);
  }
  __u32 head = len < want ? len : want;
  /* An opaque mask: clang drops a plain `& 127` it can prove redundant, and the verifier then sees an unbounded size. */
  asm volatile("%0 &= 127" : "+r"(head));
  if (head > RED_HEAD_BYTES || bpf_probe_read_user(e->data, head, (void *)buf) != 0)
    return 0;
  int start = http_start(e->data, head);
  int first = first_call_from_start(c, io, moved);
  if (start == START_NONE && first && h2_opening(e->data, head)) {
    c->flags |= FLAG_H2;
    goto h2;
  }
  /* A long-lived HTTP/2 connection open before the agent (or before a reload of this set): decoded from this call on
   * (HTTP_EVENT_H2_MIDSTREAM); the spare bytes past those read above, in the record emit_h2 overwrites. */
  if (start == START_NONE && seen_midway_without_http(c) && !c->sampled &&
      h2_midstream_start(e->data, head, buf, len, is_iov ? iovp : 0, is_iov ? iovcnt : 0, moved, e->data + RED_HEAD_BYTES)) {
    c->flags |= FLAG_H2;
    count_stat(STAT_H2_MIDSTREAM);
    goto h2;
  }
  if (start == START_NONE && !(c->flags & FLAG_HTTP) && !c->sampled) {
    /* Ciphertext (its plaintext, where a probed library makes it, comes through the tls set), or a connection
     * that opened with another protocol: no call of it is read for HTTP again. */
    __u8 opaque = tls_record_start(e->data, head, first) ? OPAQUE_TLS : first && opens_other_protocol(c, io, e->data, head) ? OPAQUE_OTHER : 0;
    if (opaque) {
      c->opaque = opaque;
      count_stat(STAT_NOT_HTTP);
      return 0;
    }
  }
  if (start == START_REQUEST && e->data[0] == 'C' && e->data[1] == 'O' && e->data[2] == 'N' && e->data[3] == 'N')
    c->tunnel = 1;
  __u8 fidx = io & 1;
  if (red && red_enabled) {
    if (start == START_REQUEST) {
      struct red_peer peer = { .pid = c->pid, .family = c->family, .sport = c->sport, .dport = c->dport, .scheme = RED_SCHEME_HTTP, .daddr = c->daddr };
      if (red_request(r, &peer, io, e->data, red_clock(sk, cast)))
        count_stat(STAT_RED_REPLACED);
      if (red_body_sizes) {
        struct red_body *b = body_of(c);
        __u32 end = head_end(buf, len);
        b->req_off = end ? (io == IO_READ ? c->bytes_recv : c->bytes_sent) - moved + end : 0;
        b->counted = 0;
      }
    } else if (start == START_STATUS && r->state == RED_AWAITING && r->req_io != io + 1) {
      /* A response sent before TCP read its clock again (a deferred transmit) ends at the precise clock. */
      __u64 at = red_clock(sk, cast);
      at = (__s64)(at - r->start_ns) > 0 ? at : bpf_ktime_get_ns();
      if (c->sampled && c->sampled != io + 1 && is_status_101(e->data, head))
        red_upgrading(r, at);
      else
        red_response(r, e->data, head, at);
      if (red_body_sizes && r->state == RED_COUNTED) {
        __u64 resp_total = io == IO_READ ? c->bytes_recv : c->bytes_sent;
        __u64 req_total = io == IO_READ ? c->bytes_sent : c->bytes_recv;
        red_body_count(r, body_of(c), req_total, resp_total - moved, head_end(buf, len), resp_total);
      }
    }
  }
  if (start == START_STATUS && c->sampled && c->sampled != io + 1 && is_status_101(e->data, head)) {
    /* 101 Switching Protocols answering a captured request: forwarded whole from here (conn.upgrading). */
    c->flags |= FLAG_H2;
    c->upgrading = 1;
    goto h2;
  }
  if (start == START_REQUEST) {
    c->flags |= FLAG_HTTP;
    /* A request (read by a server or written by a client) decides whether its whole exchange is captured. */
    /* Above the agent's memory soft limit the exchange is refused (counted by the gate), not sampled out. */
    if (svc_gate_refuses(SVC_GATE_EXCHANGE))
      c->sampled = 0;
    else if (!(c->sampled = take_exchange_token(now) ? io + 1 : 0))
      count_stat(STAT_HTTP_SAMPLED_OUT);
    c->resp_left = HTTP_RESPONSE_RECORDS;
  }
  if (!c->sampled)
    return 0;
  if (start != START_NONE) {
    c->follow[fidx] = HTTP_FOLLOW_EVENTS;
  } else if (c->sampled != io + 1) {
    /* The response side: every call up to the budget, so that user space sees where the response ends. */
    if (c->resp_left == 0)
      return 0;
    c->resp_left -= 1;
  } else {
    if (c->follow[fidx] == 0)
      return 0;
    c->follow[fidx] -= 1;
  }
  __u32 n = len < HTTP_CAPTURE_BYTES ? len : HTTP_CAPTURE_BYTES;
  __u32 size = n;
  asm volatile("%0 &= 511" : "+r"(size));
  if (size > HTTP_CAPTURE_BYTES)
    return 0;
  if (n > head && bpf_probe_read_user(e->data, size, (void *)buf) != 0)
    return 0;
  if (is_iov && n < HTTP_CAPTURE_BYTES && n < moved) {
    n = gather_iovecs(e, iovp, n, moved);
  }
  fill_http_header(e, c, skp, io, moved, n, ts);
  __u32 total = offsetof(struct http_event, data) + n;
  /* Opaque to clang, which would otherwise turn the bound below (never hit) into a test the verifier cannot relate to `total`. */
  asm volatile("%0 &= 1023" : "+r"(total));
  if (total > sizeof(*e))
    return 0;
  if (bpf_ringbuf_output(&http_events, e, total, svc_wakeup_flags(&http_events, total)) != 0)
    svc_count_lost(&http_events_lost);
  else
    count_stat(STAT_HTTP_EVENTS);
  return 0;
h2:
  /* The one call site of emit_h2 (each would be a copy of it for the verifier to walk). */
  return emit_h2(c, skp, io, iovp, is_iov, iovcnt, moved, now, ts);
}

/* A recvmsg/sendmsg's struct user_msghdr at `*buf`: its iovec array and count in their place; 0 when unreadable. */
static __always_inline int msghdr_iovecs(__u64 *buf, __u64 *iovcnt)
{
  struct user_msghdr msg = {};
  if (bpf_probe_read_user(&msg, sizeof(msg), (void *)*buf) != 0)
    return 0;
  *buf = (__u64)msg.msg_iov;
  *iovcnt = msg.msg_iovlen;
  return 1;
}

/* x86_64 syscall numbers whose buffer argument is read from the saved registers. */
#define NR_READ 0
#define NR_WRITE 1
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47

/* Where the current task's saved user registers lie past its kernel stack's base (task_pt_regs: the same for every
 * task), learnt from bpf_task_pt_regs at the first call of a `cast` program (0: not yet). */
__u64 user_regs_off = 0;

/*
 * The number, second and third arguments of the syscall running now, from the saved user registers (direct loads:
 * no helper call per field). With `cast` (bpf_rdonly_cast) the registers are found from the task's stack base and
 * user_regs_off, without the bpf_task_pt_regs call after the first: on this host a helper's call and return cost
 * more than the loads (with red_clock's cast: 1,208-1,269 -> 1,088-1,104 ns of the socket programs per HTTP/1.1
 * request with both ends traced, bench/findings.md). Returns 0 when they cannot be read.
 */
static __always_inline int syscall_args(long *nr, __u64 *arg1, __u64 *arg2, int cast)
{
  struct task_struct *task = bpf_get_current_task_btf();
  struct pt_regs *regs;
  __u64 off = user_regs_off;
  if (cast && off != 0) {
    regs = bpf_rdonly_cast((void *)((__u64)task->stack + off), bpf_core_type_id_kernel(struct pt_regs));
  } else {
    regs = (struct pt_regs *)bpf_task_pt_regs(task);
    if (!regs)
      return 0;
    if (cast)
      user_regs_off = (__u64)regs - (__u64)task->stack;
  }
  *nr = regs->orig_ax;
  *arg1 = regs->si;
  *arg2 = regs->dx;
  return 1;
}

/* CAPTURE_SOCKET: the buffer of the syscall running now, from its arguments in the saved user registers. */
static __always_inline int capture_from_regs(void *ctx, struct conn *c, __u64 skp, __u32 io, int moved, __u64 now, int red, struct red_conn *r, void *sk, int cast)
{
#if defined(__TARGET_ARCH_x86)
  long nr;
  __u64 buf, iovcnt;
  if (!syscall_args(&nr, &buf, &iovcnt, cast))
    return 0;
  __u32 is_iov = 0;
  /* One call site of emit_http (each would be a copy of it for the verifier to walk). */
  if (nr == NR_RECVMSG || nr == NR_SENDMSG) {
    if (!msghdr_iovecs(&buf, &iovcnt))
      return 0;
    is_iov = 1;
  } else if (io == IO_READ ? nr == NR_READV : nr == NR_WRITEV) {
    is_iov = 1;
  } else if (!(io == IO_READ ? (nr == NR_READ || nr == NR_RECVFROM) : (nr == NR_WRITE || nr == NR_SENDTO))) {
    return 0;
  }
  return emit_http(c, skp, io, buf, is_iov, iovcnt, moved, now, 0, red, r, sk, cast);
#endif
  return 0;
}

/* CAPTURE_SYSCALLS: at syscall exit, the buffer remembered at entry if sock_*_length marked the call as TCP. */
static __always_inline int capture(void *ctx, struct tp_sys_exit *tp, __u32 io)
{
  __u64 id = bpf_get_current_pid_tgid();
  struct pending *p = bpf_map_lookup_elem(&pending, &id);
  if (!p)
    return 0;
  __u64 skp = p->sk;
  __u64 buf = p->buf;
  __u64 enter_ns = p->enter_ns;
  __u32 is_iov = p->is_iov;
  __u32 pio = p->io;
  __u64 iovcnt = p->iovcnt;
  bpf_map_delete_elem(&pending, &id);
  if (skp == 0 || pio != io || tp->ret <= 0)
    return 0;
  struct conn *c = conn_get(STORE_HASH, (void *)skp);
  if (!c || !needs_inspection(c, io, tp->ret))
    return 0;
  if (is_iov == IS_MSGHDR) {
    if (!msghdr_iovecs(&buf, &iovcnt))
      return 0;
    is_iov = 1;
  }
  __u64 now = bpf_ktime_get_ns();
  return emit_http(c, skp, io, buf, is_iov, iovcnt, tp->ret, now, io == IO_READ ? now : enter_ns, 0, 0, 0, 0);
}

/*
 * Whether a connection's bytes are known to be cleartext, so that no SSL call moves ciphertext through it: it
 * carried an HTTP/1.x request (but CONNECT, after which a tunnel may carry TLS) or HTTP/2 (h2c), with every
 * request read (RED on, so that a CONNECT is seen whatever the budget), or it opened with another protocol.
 * The TLS set's socket part (tls_socket_call) is not run for it: its task storage and tls_tgids lookups on every
 * call of every cleartext connection, and the socket it would note as a memory BIO's last read is not one.
 */
static __always_inline int known_cleartext(const struct conn *c)
{
  if (c->opaque)
    return c->opaque == OPAQUE_OTHER;
  return red_enabled && (c->flags & (FLAG_HTTP | FLAG_H2)) && !c->tunnel;
}

static __always_inline int on_length(void *ctx, __u32 store, void *sk, int ret, int flags, __u32 io, int cast)
{
  if (io == IO_READ && (flags & MSG_PEEK)) {
    if (store == STORE_SK && tls_follow)
      tls_socket_call(sk, io);
    return 0;
  }
  __u64 skp = (__u64)sk;
  struct conn *c = conn_for_io(ctx, store, sk);
  if (store == STORE_SK && tls_follow && !(c && known_cleartext(c)))
    tls_socket_call(sk, io);
  if (!c)
    return 0;
  if (io == IO_READ)
    __sync_fetch_and_add(&c->bytes_recv, ret);
  else
    __sync_fetch_and_add(&c->bytes_sent, ret);
  /* The clock as of this jiffy (coarse_now), shared by the progress clock and the exchange budget; progress in
   * units of 2^30 ns (about 1.07 s): a shift, not a 64-bit division, on every call. */
  __u64 now = coarse_now();
  __u32 now_u = now >> PROGRESS_UNIT_SHIFT;
  if (c->progress_s == 0) {
    c->progress_s = now_u;
  } else if (now_u - c->progress_s >= PROGRESS_INTERVAL_UNITS && !(c->flags & FLAG_IGNORED)) {
    c->progress_s = now_u;
    emit_conn(ctx, skp, CONN_PROGRESS, c);
    c->reported_sent = c->bytes_sent;
    c->reported_recv = c->bytes_recv;
  }
  __u8 prev_io = c->last_io;
  c->last_io = io + 1;
  if (capture_http == CAPTURE_OFF || (c->flags & (FLAG_IGNORED | FLAG_SELF_PEER)) || c->opaque)
    return 0;
  if (capture_http == CAPTURE_SOCKET) {
    if (store == STORE_SK && red_enabled) {
      /* Every request is read (to be counted), and the status line of each awaited response. */
      struct red_conn *r = red_of(c);
      int awaited = 0;
      if (r->req_io != io + 1) {
        if (r->state == RED_COUNTED) {
          red_move(r, red_clock(sk, cast));
          if (red_body_sizes)
            red_body_move(r, body_of(c), ret);
        }
        awaited = r->state == RED_AWAITING;
      }
      if (!needs_inspection(c, io, ret) && !awaited)
        return 0;
      return capture_from_regs(ctx, c, skp, io, ret, now, 1, r, sk, cast);
    }
    if (!needs_inspection(c, io, ret) || refused_unread(c, io, prev_io, now))
      return 0;
    return capture_from_regs(ctx, c, skp, io, ret, now, 0, 0, 0, cast);
  }
  __u64 id = bpf_get_current_pid_tgid();
  struct pending *p = bpf_map_lookup_elem(&pending, &id);
  if (p && p->io == io)
    p->sk = skp;
  return 0;
}

/*
 * BTF-enabled tracepoints (kernels with BTF, the default): the kernel calls the program directly with the
 * tracepoint's arguments, without formatting a trace record first, which the classic tracepoints below do on
 * every socket read and write of every process; the entry is the socket's own storage. Not with
 * http_capture `syscalls`, whose syscall exits find connections by socket address in `conns`.
 */
/* A socket length program's body: `io` the call's direction, `cast` whether bpf_rdonly_cast is used (a constant). */
static __always_inline int socket_length(void *ctx, struct sock *sk, int ret, int flags, __u32 io, int cast)
{
  if (sk->sk_protocol != IPPROTO_TCP)
    return 0;
  if (ret <= 0) {
    if (tls_follow)
      tls_socket_call(sk, io);
    return 0;
  }
  /* on_length runs the TLS set's socket part (tls_follow) once it knows the connection. */
  return on_length(ctx, STORE_SK, sk, ret, flags, io, cast);
}

#define SOCKET_LENGTH_PROGRAM(name, tracepoint, io, cast)          \
  SEC("tp_btf/" tracepoint)                                       \
  int BPF_PROG(name, struct sock *sk, int ret, int flags)         \
  {                                                               \
    return socket_length(ctx, sk, ret, flags, io, cast);          \
  }

/* Kernels with bpf_rdonly_cast (6.2+): see its declaration. */
SOCKET_LENGTH_PROGRAM(on_send_length, "sock_send_length", IO_WRITE, 1)
SOCKET_LENGTH_PROGRAM(on_recv_length, "sock_recv_length", IO_READ, 1)
/* The same through helpers only, for kernels with BTF but without bpf_rdonly_cast. */
SOCKET_LENGTH_PROGRAM(on_send_length_compat, "sock_send_length", IO_WRITE, 0)
SOCKET_LENGTH_PROGRAM(on_recv_length_compat, "sock_recv_length", IO_READ, 0)

/* The same through the classic tracepoints and the `conns` hash. */
SEC("tracepoint/sock/sock_send_length")
int on_send_length_tp(struct trace_event_raw_sock_msg_length *ctx)
{
  if (ctx->protocol != IPPROTO_TCP || ctx->ret <= 0)
    return 0;
  return on_length(ctx, STORE_HASH, ctx->sk, ctx->ret, ctx->flags, IO_WRITE, 0);
}

SEC("tracepoint/sock/sock_recv_length")
int on_recv_length_tp(struct trace_event_raw_sock_msg_length *ctx)
{
  if (ctx->protocol != IPPROTO_TCP || ctx->ret <= 0)
    return 0;
  return on_length(ctx, STORE_HASH, ctx->sk, ctx->ret, ctx->flags, IO_READ, 0);
}

/*
 * Segments one tcp_retransmit_skb event retransmitted: tcp_skb_pcount(skb), TCP_SKB_CB(skb)->tcp_gso_segs, what
 * the kernel adds to tcp_sock.total_retrans and to RetransSegs (under TSO/GSO one skb carries many segments).
 */
static __always_inline __u32 retransmitted_segments(const struct sk_buff *skb)
{
  const struct tcp_skb_cb *cb = (const void *)__builtin_preserve_access_index(&skb->cb[0]);
  __u16 segs = 0;
  bpf_probe_read_kernel(&segs, sizeof(segs), __builtin_preserve_access_index(&cb->tcp_gso_segs));
  return segs ? segs : 1;
}

/*
 * The tracepoint's record where it carries the attempt's outcome: kernels with that field fire it on every attempt,
 * also on those __tcp_retransmit_skb gave up before counting (earlier kernels fire it on successful ones only).
 */
struct trace_event_raw_tcp_retransmit_skb___err {
  int err;
} __attribute__((preserve_access_index));

#define RETRANSMIT_HAS_ERR bpf_core_field_exists(struct trace_event_raw_tcp_retransmit_skb___err, err)

/*
 * Whether the kernel counted an attempt that ended in `err` in total_retrans: the attempts __tcp_retransmit_skb gives
 * up on before it counts end in -EBUSY (the previous copy still in the host's queues), -EINVAL, -ENOMEM (trimming,
 * fragmenting), -EHOSTUNREACH (no route: rebuild_header) or -EAGAIN (no window); an error of the transmission itself
 * (-ENOBUFS, a netfilter -EPERM, a qdisc's drop) comes after the count. A route lost between the two checks would
 * also end in -EHOSTUNREACH after counting: taken as the earlier one (the route was just checked).
 */
static __always_inline int retransmit_counted(int err)
{
  return err != -16 /* EBUSY */ && err != -22 /* EINVAL */ && err != -12 /* ENOMEM */ && err != -113 /* EHOSTUNREACH */ &&
         err != -11 /* EAGAIN */;
}

/* tp_btf: arguments (sk, skb) and, where the tracepoint carries it, err. */
SEC("tp_btf/tcp_retransmit_skb")
int on_retransmit(__u64 *ctx)
{
  if (RETRANSMIT_HAS_ERR && !retransmit_counted((int)ctx[2]))
    return 0;
  struct conn *c = conn_get(STORE_SK, (void *)ctx[0]);
  if (c)
    __sync_fetch_and_add(&c->retransmits, retransmitted_segments((const struct sk_buff *)ctx[1]));
  return 0;
}

SEC("tracepoint/tcp/tcp_retransmit_skb")
int on_retransmit_tp(struct tp_tcp_retransmit *ctx)
{
  if (RETRANSMIT_HAS_ERR && !retransmit_counted(((struct trace_event_raw_tcp_retransmit_skb___err *)ctx)->err))
    return 0;
  struct conn *c = conn_get(STORE_HASH, (void *)ctx->skaddr);
  if (c)
    __sync_fetch_and_add(&c->retransmits, retransmitted_segments(ctx->skbaddr));
  return 0;
}

/*
 * Optional precision where kprobes exist: the owner of a connect, read in the connecting task itself, for entries
 * in the `conns` hash (the classic family; kprobes cannot reach per-socket storage, and SYN_SENT already records
 * the owner in both families).
 */
SEC("kprobe/tcp_connect")
int BPF_KPROBE(on_tcp_connect, struct sock *sk)
{
  __u64 skp = (__u64)sk;
  struct conn *c = bpf_map_lookup_elem(&conns, &skp);
  if (c && c->pid == 0)
    own_by_current(c);
  return 0;
}

SEC("tracepoint/syscalls/sys_enter_read")
int enter_read(struct tp_sys_enter *ctx) { return remember(ctx->args[1], IO_READ, 0, 0); }
SEC("tracepoint/syscalls/sys_exit_read")
int exit_read(struct tp_sys_exit *ctx) { return capture(ctx, ctx, IO_READ); }
SEC("tracepoint/syscalls/sys_enter_recvfrom")
int enter_recvfrom(struct tp_sys_enter *ctx) { return remember(ctx->args[1], IO_READ, 0, 0); }
SEC("tracepoint/syscalls/sys_exit_recvfrom")
int exit_recvfrom(struct tp_sys_exit *ctx) { return capture(ctx, ctx, IO_READ); }
SEC("tracepoint/syscalls/sys_enter_readv")
int enter_readv(struct tp_sys_enter *ctx) { return remember(ctx->args[1], IO_READ, 1, ctx->args[2]); }
SEC("tracepoint/syscalls/sys_exit_readv")
int exit_readv(struct tp_sys_exit *ctx) { return capture(ctx, ctx, IO_READ); }
SEC("tracepoint/syscalls/sys_enter_write")
int enter_write(struct tp_sys_enter *ctx) { return remember(ctx->args[1], IO_WRITE, 0, 0); }
SEC("tracepoint/syscalls/sys_exit_write")
int exit_write(struct tp_sys_exit *ctx) { return capture(ctx, ctx, IO_WRITE); }
SEC("tracepoint/syscalls/sys_enter_sendto")
int enter_sendto(struct tp_sys_enter *ctx) { return remember(ctx->args[1], IO_WRITE, 0, 0); }
SEC("tracepoint/syscalls/sys_exit_sendto")
int exit_sendto(struct tp_sys_exit *ctx) { return capture(ctx, ctx, IO_WRITE); }
/* recvmsg/sendmsg: the buffer argument is a struct user_msghdr; capture() follows it to its iovecs. */
SEC("tracepoint/syscalls/sys_enter_recvmsg")
int enter_recvmsg(struct tp_sys_enter *ctx) { return remember(ctx->args[1], IO_READ, IS_MSGHDR, 0); }
SEC("tracepoint/syscalls/sys_exit_recvmsg")
int exit_recvmsg(struct tp_sys_exit *ctx) { return capture(ctx, ctx, IO_READ); }
SEC("tracepoint/syscalls/sys_enter_sendmsg")
int enter_sendmsg(struct tp_sys_enter *ctx) { return remember(ctx->args[1], IO_WRITE, IS_MSGHDR, 0); }
SEC("tracepoint/syscalls/sys_exit_sendmsg")
int exit_sendmsg(struct tp_sys_exit *ctx) { return capture(ctx, ctx, IO_WRITE); }
SEC("tracepoint/syscalls/sys_enter_writev")
int enter_writev(struct tp_sys_enter *ctx) { return remember(ctx->args[1], IO_WRITE, 1, ctx->args[2]); }
SEC("tracepoint/syscalls/sys_exit_writev")
int exit_writev(struct tp_sys_exit *ctx) { return capture(ctx, ctx, IO_WRITE); }

char LICENSE[] SEC("license") = "GPL";
