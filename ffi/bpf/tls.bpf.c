// SPDX-License-Identifier: GPL-2.0
/*
 * Program set `tls`: the plaintext of OpenSSL 1.1 / 3 (and BoringSSL) connections, read at the library's API.
 *
 * uprobes on SSL_write / SSL_write_ex / SSL_read / SSL_read_ex (or, where those wrap an internal function taking
 * the _ex arguments, on that function: src/collectors/tls/placement.ts) remember the call per thread (`active`: the
 * SSL object, the buffer, and for the _ex forms where the byte count is written); the uretprobes copy the first
 * TLS_CAPTURE_BYTES of what the call moved into a `struct tls_event` on the ring buffer `tls_events`. User space
 * attaches the probes per library file (every process mapping that file is then traced).
 *
 * Which socket: the SSL object's file descriptor is not read from the BIO (its layout differs between versions,
 * and applications such as curl install their own BIO); instead `sock/sock_send_length` and `sock/sock_recv_length`
 * (tp_btf), which run inside the socket call the library makes underneath on the same thread, record the socket
 * on the thread's active call (tls-socket.h: run by this set's tls_send_length / tls_recv_length, or, where the
 * network set's socket storage programs run on the same tracepoints, by those: one program a socket call, not
 * two). Each SSL object keeps its socket, addresses and per-direction stream offsets in `tls_conns` (calls served
 * from already-decrypted data make no socket call). Records carry the stream offset of their bytes so user space
 * sees gaps exactly, as for cleartext capture.
 *
 * Memory BIOs (gRPC core, node): the library encrypts into and decrypts from memory, and the process moves the
 * ciphertext through the socket outside the SSL call, on the same thread: a read right before SSL_read, a write right
 * after SSL_write. The sock tracepoints follow, in the thread's call slot (task storage), the threads that made an SSL
 * call and the reading threads of processes using a probed library (`tls_tgids`, kept by user space); any other
 * thread costs them one task storage lookup (writes) or that and a `tls_tgids` lookup (reads). The TCP socket a thread
 * last read is taken by an SSL_read without a socket call, and the next socket written after a socketless SSL_write
 * becomes that SSL object's. A socket so inferred is replaced by one seen inside a later call without starting a
 * new stream (TLS_CONN_INFERRED). A client's first request is written before its socket is known: its RED key takes the addresses
 * when the response comes.
 *
 * What is forwarded, as for cleartext (network.bpf.c): a call whose plaintext starts an HTTP/1.x request takes a
 * token of the per-second exchange budget (`exchanges_per_second`); the exchange is captured (its request calls and
 * up to RESPONSE_RECORDS calls of the other side) or not at all (counted in stats[STAT_SAMPLED_OUT]). A connection
 * whose first bytes in a direction open HTTP/2 (client preface, or a SETTINGS frame) has every call forwarded, up
 * to H2_CAPTURE_BYTES a record and H2_CHUNKS records a call, outside the exchange budget (user space keeps HPACK
 * state), within `h2_records_per_second` calls a second (a window of its own, the same size as the cleartext one): a
 * call refused by it, or arriving while the ring is three quarters full, stops the connection's forwarding, said by
 * a header-only record (FLAG_H2_STOPPED); a record lost in a full ring stops it too (stats[STAT_H2_STOPPED_LOST]).
 * No new HTTP/1.x exchange is captured while the ring is half full (what user space does not drain is refused, not
 * lost). Calls of exchanges not captured cost the probes and an 8-byte read, and reach no ring buffer.
 *
 * RED metrics (`red_enabled`): every HTTP/1.x exchange, captured or not, counts into the RED maps of red.h (one kernel
 * map each with the network set's, which user space reads) with url.scheme https; the first RED_HEAD_BYTES of each
 * call are read for it. A request whose socket closes before its response (`sock/inet_sock_set_state` to TCP_CLOSE,
 * the socket found by its cookie in `tls_socks`) counts with status 0, a transport error, as for cleartext.
 *
 * The agent's own process (`self_tgid`) is never traced, nor the other end of its connections on this host
 * (svc_self_peers, common.h: a loopback one in the agent connection's own network namespace only). The layout is mirrored by src/collectors/tls/decoder.ts.
 */
#include "common.h"
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define AF_INET6 10
#define COMM_LEN 16
/* Bytes captured per call: HTTP/1.x heads, and HTTP/2 frames (whole header blocks and frame headers). */
#define TLS_CAPTURE_BYTES 512
#define H2_CAPTURE_BYTES 4096
/* An HTTP/2 call goes out as up to this many records of H2_CAPTURE_BYTES each (consecutive stream offsets): 32 KiB,
 * more than a default-size DATA frame (16 KiB) and the frame header after it. */
#define H2_CHUNKS 8
#define IO_READ 0
#define IO_WRITE 1
#define FLAG_SOCKET 1
/* A header-only record: the kernel stopped forwarding this HTTP/2 connection (h2_records_per_second or ring pressure). */
#define FLAG_H2_STOPPED 2
/* A call of an HTTP/2 connection found in its middle (TLS_CONN_H2_MIDSTREAM). */
#define FLAG_H2_MIDSTREAM 4
/* The first call forwarded of a stopped HTTP/2 connection that resumed, or the first call that starts with frames
 * after one forwarded cut (and the further records of that call): user space decodes the connection anew from it. */
#define FLAG_H2_RESUMED 8
/* Calls after a message start on the side that started it (the rest of a head read in pieces). */
#define FOLLOW_RECORDS 2
/* Calls on the response side of a captured exchange (user space follows the response's framing to its end). */
#define RESPONSE_RECORDS 1024


#define TCP_CLOSE 7

#define STAT_SAMPLED_OUT 0
#define STAT_EVENTS 1
/* HTTP/2 connections stopped with no record to say so (a data record, or the stop record itself, lost in a full ring). */
#define STAT_H2_STOPPED_LOST 2
/* HTTP/2 connections stopped by a refused call (said by a FLAG_H2_STOPPED record). */
#define STAT_H2_STOPPED 3
/* HTTP/1.x exchanges refused because the ring was half full (also in STAT_SAMPLED_OUT). */
#define STAT_RING_BUSY 4
/* Connections found to carry HTTP/2 in their middle (TLS_CONN_H2_MIDSTREAM). */
#define STAT_H2_MIDSTREAM 5
/* A request started on a connection whose previous request was still unanswered (pipelined): the earlier one is not counted. */
#define STAT_RED_REPLACED 6
/* Stopped HTTP/2 connections forwarded again. */
#define STAT_H2_RESUMED 7
#define STAT_COUNT 8

#include "red.h"

const volatile __u32 self_tgid = 0;
/* Limits set before load and changed in place by a reload (in .data, read at each use; see network.bpf.c). */
volatile __u32 exchanges_per_second = 1000;
/* HTTP/2 calls forwarded per second, all TLS connections together (agent.ebpf.network.http2_records_per_second). */
volatile __u32 h2_records_per_second = 50000;
/* Count every HTTP/1.x exchange into the RED maps (red.h; the network set's, shared by user space). */
const volatile __u32 red_enabled = 0;
/* 1: the thread's call in task storage (kernel BTF); 0: in the active_by_tid hash. */
const volatile __u32 task_storage = 1;

/* Shared with the network set, which records the agent's own endpoints (user space gives both one map). */
SVC_SELF_PEERS;

#include "tls-socket.h"

/* 112 bytes of header, then up to TLS_CAPTURE_BYTES (HTTP/2 connections: H2_CAPTURE_BYTES) of plaintext. */
struct tls_event {
  __u64 timestamp_ns; /*   0: write: call entry; read: call return */
  __u64 ssl;          /*   8: the SSL object (identity of the connection within the process) */
  __u64 stream_off;   /*  16: plaintext bytes moved in this direction before this call */
  __u64 sk;           /*  24: struct sock address, 0 while unknown */
  __u64 cgroup_id;    /*  32 */
  __u32 pid;          /*  40 */
  __u32 tid;          /*  44 */
  __u32 len;          /*  48: plaintext bytes moved by the call */
  __u16 captured;     /*  52: bytes in data */
  __u8 io;            /*  54: IO_READ or IO_WRITE */
  __u8 flags;         /*  55: FLAG_SOCKET when the addresses are known; FLAG_H2_STOPPED */
  __u16 sport;        /*  56 */
  __u16 dport;        /*  58 */
  __u16 family;       /*  60 */
  __u16 pad;          /*  62 */
  __u8 saddr[16];     /*  64 */
  __u8 daddr[16];     /*  80 */
  char comm[COMM_LEN];/*  96 */
  __u8 data[H2_CAPTURE_BYTES]; /* 112: up to TLS_CAPTURE_BYTES (HTTP/2: H2_CAPTURE_BYTES) */
};

_Static_assert(__builtin_offsetof(struct tls_event, data) == 112, "struct tls_event layout is mirrored by the decoder");

/* The thread's call without kernel BTF (`task_storage` 0; tls-socket.h's `active` otherwise). */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct tls_call);
} active_by_tid SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 22);
} tls_events SEC(".maps");

SVC_LOST_MAP(tls_events);

/* The record being built, with room past it for the verifier's bound on a masked size. */
struct tls_scratch_value {
  struct tls_event e;
  __u8 spare[H2_CAPTURE_BYTES];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct tls_scratch_value);
} tls_scratch SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct rate_window);
} tls_rate SEC(".maps");

/* One global window of h2_records_per_second HTTP/2 calls. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct rate_window);
} tls_h2_rate SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, STAT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} tls_stats SEC(".maps");

static __always_inline void count_stat(__u32 idx)
{
  __u64 *n = bpf_map_lookup_elem(&tls_stats, &idx);
  if (n)
    *n += 1;
}

/* The call's time: a write's entry time (already in `*ts`), else the clock read once, when first needed. */
static __always_inline __u64 call_time(__u64 *ts)
{
  if (*ts == 0)
    *ts = bpf_ktime_get_ns();
  return *ts;
}

/* Takes one unit of the per-second exchange budget (`now`: the call's time). */
static __always_inline int take_exchange_token(__u64 now)
{
  __u32 zero = 0;
  struct rate_window *w = bpf_map_lookup_elem(&tls_rate, &zero);
  if (!w || !svc_window_open(w, now, exchanges_per_second))
    return 0;
  /* What user space does not drain is refused here, not lost in the ring: no new exchange while it is half full. */
  if (bpf_ringbuf_query(&tls_events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&tls_events, BPF_RB_RING_SIZE) / 2) {
    count_stat(STAT_RING_BUSY);
    return 0;
  }
  return svc_window_take(w, exchanges_per_second);
}

/* Takes one call of the per-second HTTP/2 budget; refused as well while the ring is three quarters full. */
static __always_inline int take_h2_token(__u64 now)
{
  __u32 zero = 0;
  struct rate_window *w = bpf_map_lookup_elem(&tls_h2_rate, &zero);
  if (!w || !svc_window_open(w, now, h2_records_per_second))
    return 0;
  if (bpf_ringbuf_query(&tls_events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&tls_events, BPF_RB_RING_SIZE) / 4 * 3)
    return 0;
  return svc_window_take(w, h2_records_per_second);
}

/* A request counted before its connection's socket was known (memory BIO: a client's first write): its key takes the
 * addresses now, as red_request would have. */
static __always_inline void red_late_peer(struct red_conn *r, const struct tls_conn *conn)
{
  struct red_key *k = &r->key;
  k->family = conn->family;
  if (k->role == ROLE_CLIENT) {
    k->peer_port = conn->dport;
    __builtin_memcpy(k->peer, conn->daddr, 16);
  } else {
    k->peer_port = conn->sport;
    if (local_class(conn->daddr, conn->family))
      __builtin_memcpy(k->peer, conn->daddr, 16);
    else
      __builtin_memset(k->peer, 0, 16);
  }
}

/* The calling thread's call slot; `create`: made when missing. */
static __always_inline struct tls_call *call_slot(int create)
{
  if (task_storage)
    return tls_task_call(create);
  __u64 tid = bpf_get_current_pid_tgid();
  struct tls_call *c = bpf_map_lookup_elem(&active_by_tid, &tid);
  if (c || !create)
    return c;
  struct tls_call fresh = {};
  bpf_map_update_elem(&active_by_tid, &tid, &fresh, BPF_NOEXIST);
  return bpf_map_lookup_elem(&active_by_tid, &tid);
}

static __always_inline int enter(__u64 ssl, __u64 buf, __u64 count_ptr, __u32 io)
{
  __u64 id = bpf_get_current_pid_tgid();
  if ((__u32)(id >> 32) == self_tgid)
    return 0;
  struct tls_call *c = call_slot(1);
  if (!c)
    return 0;
  /* SSL_read calling SSL_read_ex (or a library calling itself): the outermost call is the one reported. */
  if (c->ssl == ssl && ssl) {
    c->depth += 1;
    return 0;
  }
  c->ssl = ssl;
  c->buf = buf;
  c->count_ptr = count_ptr;
  /* A write's time is its entry (its bytes are known then); a read's, its return (read there). */
  c->enter_ns = io == IO_WRITE ? bpf_ktime_get_ns() : 0;
  c->sk = 0;
  c->cookie = 0;
  c->io = io;
  c->depth = 0;
  return 0;
}


/* `ret` is the function's return value: a byte count, or for the _ex forms (and the internal functions they wrap,
 * probed in their place: src/collectors/tls/placement.ts) > 0 on success with the count at count_ptr. */
static __always_inline int leave(long ret)
{
  __u64 id = bpf_get_current_pid_tgid();
  struct tls_call *call = call_slot(0);
  if (!call || !call->ssl)
    return 0;
  if (call->depth > 0) {
    call->depth -= 1;
    return 0;
  }
  struct tls_call c = *call;
  call->ssl = 0;
  __u64 moved = 0;
  if (c.count_ptr) {
    if (ret <= 0 || bpf_probe_read_user(&moved, sizeof(moved), (void *)c.count_ptr) != 0)
      return 0;
  } else {
    if (ret <= 0)
      return 0;
    moved = ret;
  }
  if (moved == 0)
    return 0;

  struct tls_conn_key key = { .tgid = id >> 32, .ssl = c.ssl };
  struct tls_conn *conn = bpf_map_lookup_elem(&tls_conns, &key);
  if (!conn) {
    struct tls_conn fresh = {};
    bpf_map_update_elem(&tls_conns, &key, &fresh, BPF_NOEXIST);
    conn = bpf_map_lookup_elem(&tls_conns, &key);
    if (!conn)
      return 0;
  }
  if (c.sk && (c.sk != conn->sk || c.cookie != conn->cookie)) {
    /* A first socket, or an SSL object freed and another allocated at its address (perhaps over a new socket at
     * the previous one's address: the cookie tells): a new stream. An inferred socket is only corrected. */
    if (conn->sk && !(conn->flags & TLS_CONN_INFERRED)) {
      conn->offset[0] = 0;
      conn->offset[1] = 0;
      conn->flags = 0;
      conn->sampled = 0;
      conn->red.state = RED_IDLE;
    }
    conn->flags &= ~TLS_CONN_INFERRED;
    conn_bind(conn, &key, c.sk, c.cookie);
  } else if (!c.sk) {
    /* No socket call inside: a memory BIO (see the header). */
    if (!conn->sk) {
      if (c.io == IO_READ && c.recv_sk) {
        conn_bind(conn, &key, c.recv_sk, c.recv_cookie);
        conn->flags |= TLS_CONN_INFERRED;
      } else if (c.io == IO_WRITE)
        call->write_ssl = c.ssl;
    }
  }
  __u32 fidx = c.io & 1;
  __u64 off = conn->offset[fidx];
  conn->offset[fidx] = off + moved;
  if (conn->flags & TLS_CONN_SELF_PEER)
    return 0;

  __u32 zero = 0;
  struct tls_scratch_value *sv = bpf_map_lookup_elem(&tls_scratch, &zero);
  if (!sv)
    return 0;
  struct tls_event *e = &sv->e;
  /* 9 bytes tell a message start (or an HTTP/2 frame header); with RED on, RED_HEAD_BYTES (a request's method and path,
   * zero past the call's bytes). */
  __u32 want = 9;
  if (red_enabled) {
    want = RED_HEAD_BYTES;
    __builtin_memset(e->data, 0, RED_HEAD_BYTES);
  }
  __u32 head = moved < want ? moved : want;
  /* An opaque mask: the verifier sees the bound on the register passed. */
  asm volatile("%0 &= 127" : "+r"(head));
  if (head > RED_HEAD_BYTES || bpf_probe_read_user(e->data, head, (void *)c.buf) != 0)
    return 0;
  __u32 cap = TLS_CAPTURE_BYTES;
  int h2_stop = 0;
  /* The call's time, read at most once (call_time). */
  __u64 ts = c.io == IO_WRITE ? c.enter_ns : 0;
  if (!(conn->flags & TLS_CONN_H2) && off == 0 && h2_opening(e->data, head)) {
    conn->flags |= TLS_CONN_H2;
  } else if (!(conn->flags & (TLS_CONN_H2 | TLS_CONN_HTTP)) && !conn->sampled &&
             h2_midstream_start(e->data, head, c.buf, moved, 0, 0, moved, e->data + RED_HEAD_BYTES)) {
    /* An HTTP/2 connection older than the probes (an SSL object first seen in its middle): decoded from here on. */
    conn->flags |= TLS_CONN_H2 | TLS_CONN_H2_MIDSTREAM;
    count_stat(STAT_H2_MIDSTREAM);
  }
  int resumed = 0;
  if (conn->flags & TLS_CONN_H2) {
    cap = H2_CAPTURE_BYTES;
    /* A stopped connection, or one whose last call went out cut: does this call start with frames? */
    int frames = (conn->flags & (TLS_CONN_H2_STOPPED | TLS_CONN_H2_RESYNC)) && h2_midstream_start(e->data, head, c.buf, moved, 0, 0, moved, e->data + RED_HEAD_BYTES);
    if (conn->flags & TLS_CONN_H2_STOPPED) {
      /* Forwarded again from a call that starts with frames, once the ring is under a quarter full and the budget
       * has room; said by its records (FLAG_H2_RESUMED). */
      if (!frames || bpf_ringbuf_query(&tls_events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&tls_events, BPF_RB_RING_SIZE) / 4 ||
          !take_h2_token(call_time(&ts)))
        return 0;
      conn->flags &= ~TLS_CONN_H2_STOPPED;
      count_stat(STAT_H2_RESUMED);
    } else if (!take_h2_token(call_time(&ts))) {
      /* Refused: the connection is no longer forwarded, said by a header-only record. */
      conn->flags |= TLS_CONN_H2_STOPPED;
      count_stat(STAT_H2_STOPPED);
      h2_stop = 1;
      cap = 0;
    }
    if (frames && !h2_stop) {
      resumed = 1;
      conn->flags &= ~TLS_CONN_H2_RESYNC;
    }
  } else {
    int start = http_start(e->data, head);
    /* Under 8 bytes: not taken as a message start. */
    if (start == START_MAYBE)
      start = START_NONE;
    if (red_enabled) {
      /* Every exchange counts, captured or not: a write at its entry, a read at its return (as the records). */
      __u64 at = call_time(&ts);
      struct red_conn *r = &conn->red;
      if (start == START_REQUEST) {
        struct red_peer peer = { .pid = id >> 32, .family = conn->family, .sport = conn->sport, .dport = conn->dport, .scheme = RED_SCHEME_HTTPS, .daddr = conn->daddr };
        if (red_request(r, &peer, c.io, e->data, at))
          count_stat(STAT_RED_REPLACED);
      } else if (r->req_io != c.io + 1) {
        if (start == START_STATUS && r->state == RED_AWAITING) {
          if (r->key.peer_port == 0 && conn->sk)
            red_late_peer(r, conn);
          red_response(r, e->data, head, at);
        }
        else if (r->state == RED_COUNTED)
          red_move(r, at);
      }
    }
    if (start == START_REQUEST) {
      conn->flags |= TLS_CONN_HTTP;
      /* A request decides whether its whole exchange is captured. */
      conn->sampled = take_exchange_token(call_time(&ts)) ? c.io + 1 : 0;
      if (!conn->sampled)
        count_stat(STAT_SAMPLED_OUT);
      conn->resp_left = RESPONSE_RECORDS;
    }
    if (!conn->sampled)
      return 0;
    if (start != START_NONE) {
      conn->follow[fidx] = FOLLOW_RECORDS;
    } else if (conn->sampled != c.io + 1) {
      if (conn->resp_left == 0)
        return 0;
      conn->resp_left -= 1;
    } else {
      if (conn->follow[fidx] == 0)
        return 0;
      conn->follow[fidx] -= 1;
    }
  }
  __u32 n = moved < cap ? moved : cap;
  __u32 size = n;
  /* An opaque mask: clang drops a plain `& 8191` it can prove redundant, and the verifier then sees an unbounded size. */
  asm volatile("%0 &= 8191" : "+r"(size));
  if (size > H2_CAPTURE_BYTES)
    return 0;
  if (size > head && bpf_probe_read_user(e->data, size, (void *)c.buf) != 0)
    return 0;
  e->timestamp_ns = call_time(&ts);
  e->ssl = c.ssl;
  e->stream_off = off;
  e->sk = conn->sk;
  e->cgroup_id = bpf_get_current_cgroup_id();
  e->pid = id >> 32;
  e->tid = (__u32)id;
  e->len = moved > 0xffffffffULL ? 0xffffffffU : (__u32)moved;
  e->captured = n;
  e->io = c.io;
  e->flags = (conn->sk ? FLAG_SOCKET : 0) | (h2_stop ? FLAG_H2_STOPPED : 0) | ((conn->flags & TLS_CONN_H2_MIDSTREAM) ? FLAG_H2_MIDSTREAM : 0) |
             (resumed ? FLAG_H2_RESUMED : 0);
  e->sport = conn->sport;
  e->dport = conn->dport;
  e->family = conn->family;
  e->pad = 0;
  __builtin_memcpy(e->saddr, conn->saddr, 16);
  __builtin_memcpy(e->daddr, conn->daddr, 16);
  bpf_get_current_comm(e->comm, sizeof(e->comm));
  int h2 = (conn->flags & TLS_CONN_H2) != 0;
  if (h2 && !h2_stop && moved > n)
    e->len = n; /* the call continues in the records below */
  /* Over what the records below carry: the rest is not forwarded, and may hold a header block. */
  if (h2 && !h2_stop && moved > (__u64)H2_CHUNKS * H2_CAPTURE_BYTES)
    conn->flags |= TLS_CONN_H2_RESYNC;
  __u32 total = offsetof(struct tls_event, data) + n;
  if (total > sizeof(*e))
    total = sizeof(*e);
  if (bpf_ringbuf_output(&tls_events, e, total, svc_wakeup_flags(&tls_events, total)) != 0) {
    svc_count_lost(&tls_events_lost);
    /* An HTTP/2 record lost (or the record that said it stopped): the connection stops, with no record to say so. */
    if (h2) {
      conn->flags |= TLS_CONN_H2_STOPPED;
      count_stat(STAT_H2_STOPPED_LOST);
    }
    return 0;
  }
  count_stat(STAT_EVENTS);
  if (!h2 || h2_stop)
    return 0;
  /* HTTP/2: the rest of the call, one record per H2_CAPTURE_BYTES; the last one's len covers what is left. */
  for (__u32 i = 1; i < H2_CHUNKS; i++) {
    __u64 at = (__u64)i * H2_CAPTURE_BYTES;
    if (at >= moved)
      break;
    __u64 left = moved - at;
    __u32 csize = left < H2_CAPTURE_BYTES ? left : H2_CAPTURE_BYTES;
    asm volatile("%0 &= 8191" : "+r"(csize));
    if (csize > H2_CAPTURE_BYTES)
      return 0;
    if (bpf_probe_read_user(e->data, csize, (void *)(c.buf + at)) != 0)
      return 0;
    e->stream_off = off + at;
    if (i < H2_CHUNKS - 1)
      e->len = csize;
    else
      e->len = left > 0xffffffffULL ? 0xffffffffU : (__u32)left;
    e->captured = csize;
    __u32 ctotal = offsetof(struct tls_event, data) + csize;
    asm volatile("%0 &= 8191" : "+r"(ctotal));
    if (ctotal > sizeof(*e))
      return 0;
    if (bpf_ringbuf_output(&tls_events, e, ctotal, svc_wakeup_flags(&tls_events, ctotal)) != 0) {
      svc_count_lost(&tls_events_lost);
      conn->flags |= TLS_CONN_H2_STOPPED;
      count_stat(STAT_H2_STOPPED_LOST);
      return 0;
    }
    count_stat(STAT_EVENTS);
  }
  return 0;
}

/* int SSL_write(SSL *ssl, const void *buf, int num) */
SEC("uprobe")
int BPF_KPROBE(ssl_write_enter, void *ssl, const void *buf)
{
  return enter((__u64)ssl, (__u64)buf, 0, IO_WRITE);
}

/* int SSL_write_ex(SSL *s, const void *buf, size_t num, size_t *written) */
SEC("uprobe")
int BPF_KPROBE(ssl_write_ex_enter, void *ssl, const void *buf, __u64 num, __u64 *written)
{
  return enter((__u64)ssl, (__u64)buf, (__u64)written, IO_WRITE);
}

/* int SSL_read(SSL *ssl, void *buf, int num) */
SEC("uprobe")
int BPF_KPROBE(ssl_read_enter, void *ssl, void *buf)
{
  return enter((__u64)ssl, (__u64)buf, 0, IO_READ);
}

/* int SSL_read_ex(SSL *ssl, void *buf, size_t num, size_t *readbytes) */
SEC("uprobe")
int BPF_KPROBE(ssl_read_ex_enter, void *ssl, void *buf, __u64 num, __u64 *readbytes)
{
  return enter((__u64)ssl, (__u64)buf, (__u64)readbytes, IO_READ);
}

/*
 * One return program serves the four functions: the active call knows which form it was. All four return an
 * int: only the low 32 bits of the register are the value (SSL_read's -1, WANT_READ on a non-blocking socket,
 * reads 0xffffffff as a long).
 */
SEC("uretprobe")
int BPF_KRETPROBE(ssl_leave, int ret)
{
  return leave(ret);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tls_send_length, struct sock *sk, int ret, int flags)
{
  if (sk->sk_protocol == IPPROTO_TCP)
    tls_socket_call(sk, IO_WRITE);
  return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(tls_recv_length, struct sock *sk, int ret, int flags)
{
  if (sk->sk_protocol == IPPROTO_TCP)
    tls_socket_call(sk, IO_READ);
  return 0;
}

/* A socket closing: an HTTP/1.x request of its SSL connection still awaiting a response counts as a transport error. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tls_sock_close, const struct sock *sk, const int oldstate, const int newstate)
{
  if (newstate != TCP_CLOSE || !red_enabled || sk->sk_protocol != IPPROTO_TCP)
    return 0;
  __u64 cookie = bpf_get_socket_cookie((void *)sk);
  struct tls_conn_key *key = bpf_map_lookup_elem(&tls_socks, &cookie);
  if (!key)
    return 0;
  struct tls_conn_key k = *key;
  bpf_map_delete_elem(&tls_socks, &cookie);
  struct tls_conn *conn = bpf_map_lookup_elem(&tls_conns, &k);
  if (conn && conn->cookie == cookie && conn->red.state == RED_AWAITING)
    red_count(&conn->red, 0, bpf_ktime_get_ns());
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
