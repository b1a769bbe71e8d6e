// SPDX-License-Identifier: GPL-2.0
/*
 * Program set `tls`: the plaintext of OpenSSL 1.1 / 3 (and BoringSSL) connections, read at the library's API.
 *
 * uprobes on SSL_write / SSL_write_ex / SSL_read / SSL_read_ex remember the call per thread (`active`: the SSL
 * object, the buffer, and for the _ex forms where the byte count is written); the uretprobes copy the first
 * TLS_CAPTURE_BYTES of what the call moved (TLS_H2_CAPTURE_BYTES on HTTP/2 connections and for a direction's first
 * call) into a `struct tls_event` on the ring buffer `tls_events`. User space
 * attaches the probes per library file (every process mapping that file is then traced).
 *
 * Which socket: the SSL object's file descriptor is not read from the BIO (its layout differs between versions,
 * and applications such as curl install their own BIO); instead `sock/sock_send_length` and `sock/sock_recv_length`
 * (tp_btf), which run inside the socket call the library makes underneath on the same thread, record the socket
 * on the thread's active call. Each SSL object keeps its socket, addresses and per-direction stream offsets in
 * `tls_conns` (calls served from already-decrypted data make no socket call). Records carry the stream offset of
 * their bytes so user space sees gaps exactly, as for cleartext capture.
 *
 * The agent's own process (`self_tgid`) is never traced. The layout is mirrored by src/collectors/tls/decoder.ts.
 */
#include "common.h"
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define AF_INET6 10
#define COMM_LEN 16
#define TLS_CAPTURE_BYTES 512
/* HTTP/2 connections (their plaintext opens with the client preface or a SETTINGS frame): up to this many bytes of
 * each call, so that user space sees every header block (HPACK needs them all). */
#define TLS_H2_CAPTURE_BYTES 4096
#define CONN_H2 1
/* An HTTP/2 call goes out as up to this many records of TLS_H2_CAPTURE_BYTES each (consecutive stream offsets):
 * 32 KiB, more than a default-size DATA frame (16 KiB) and the frame header after it. */
#define TLS_H2_CHUNKS 8
#define IO_READ 0
#define IO_WRITE 1
#define FLAG_SOCKET 1

const volatile __u32 self_tgid = 0;

struct tls_call {
  __u64 ssl;
  __u64 buf;
  __u64 count_ptr; /* size_t * of the _ex forms, 0 otherwise */
  __u64 enter_ns;
  __u64 sk;        /* set by sock_*_length during the call */
  __u64 cookie;    /* that socket's cookie (never reused, unlike the struct sock's address) */
  __u32 io;
  __u32 depth;     /* calls of the same SSL object nested inside this one (reported once, at the outermost return) */
};

struct tls_conn_key {
  __u32 tgid;
  __u32 pad;
  __u64 ssl;
};

struct tls_conn {
  __u64 sk;
  __u64 cookie;
  __u64 offset[2]; /* bytes moved per IO_* direction */
  __u16 sport;
  __u16 dport;
  __u16 family;
  __u16 proto;      /* CONN_H2 once the plaintext opened HTTP/2 */
  __u8 saddr[16];
  __u8 daddr[16];
};

/* 112 bytes of header, then up to TLS_CAPTURE_BYTES of plaintext. */
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
  __u8 flags;         /*  55: FLAG_SOCKET when the addresses are known */
  __u16 sport;        /*  56 */
  __u16 dport;        /*  58 */
  __u16 family;       /*  60 */
  __u16 pad;          /*  62 */
  __u8 saddr[16];     /*  64 */
  __u8 daddr[16];     /*  80 */
  char comm[COMM_LEN];/*  96 */
  __u8 data[TLS_CAPTURE_BYTES]; /* 112 */
};

_Static_assert(__builtin_offsetof(struct tls_event, data) == 112, "struct tls_event layout is mirrored by the decoder");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 8192);
  __type(key, __u64);
  __type(value, struct tls_call);
} active SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, struct tls_conn_key);
  __type(value, struct tls_conn);
} tls_conns SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 22);
} tls_events SEC(".maps");

SVC_LOST_MAP(tls_events);

/* The record being built: struct tls_event's header, then up to TLS_H2_CAPTURE_BYTES of plaintext (and room for the
 * verifier's bound on a masked size). */
struct tls_scratch_value {
  struct tls_event e;
  __u8 more[2 * TLS_H2_CAPTURE_BYTES];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct tls_scratch_value);
} tls_scratch SEC(".maps");

static __always_inline int enter(__u64 ssl, __u64 buf, __u64 count_ptr, __u32 io)
{
  __u64 id = bpf_get_current_pid_tgid();
  if ((__u32)(id >> 32) == self_tgid)
    return 0;
  struct tls_call *outer = bpf_map_lookup_elem(&active, &id);
  /* SSL_read calling SSL_read_ex (or a library calling itself): the outermost call is the one reported. */
  if (outer && outer->ssl == ssl) {
    outer->depth += 1;
    return 0;
  }
  struct tls_call c = { .ssl = ssl, .buf = buf, .count_ptr = count_ptr, .enter_ns = bpf_ktime_get_ns(), .io = io };
  bpf_map_update_elem(&active, &id, &c, BPF_ANY);
  return 0;
}

static __always_inline void addrs_from_sk(struct tls_conn *c, struct sock *sk)
{
  c->family = BPF_CORE_READ(sk, __sk_common.skc_family);
  c->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
  c->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
  if (c->family == AF_INET) {
    __u32 s = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
    __u32 d = BPF_CORE_READ(sk, __sk_common.skc_daddr);
    __builtin_memcpy(c->saddr, &s, 4);
    __builtin_memcpy(c->daddr, &d, 4);
  } else {
    BPF_CORE_READ_INTO(&c->saddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
    BPF_CORE_READ_INTO(&c->daddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
  }
}

/* `ret` is the function's return value: a byte count, or for the _ex forms 1 on success with the count at count_ptr. */
static __always_inline int leave(long ret)
{
  __u64 id = bpf_get_current_pid_tgid();
  struct tls_call *call = bpf_map_lookup_elem(&active, &id);
  if (!call)
    return 0;
  if (call->depth > 0) {
    call->depth -= 1;
    return 0;
  }
  struct tls_call c = *call;
  bpf_map_delete_elem(&active, &id);
  __u64 moved = 0;
  /* The four functions return an int: the upper half of the register is not part of it (an SSL_read's -1 of a
   * non-blocking socket would otherwise read as 4294967295 bytes). */
  int r = (int)ret;
  if (c.count_ptr) {
    if (r != 1 || bpf_probe_read_user(&moved, sizeof(moved), (void *)c.count_ptr) != 0)
      return 0;
  } else {
    if (r <= 0)
      return 0;
    moved = r;
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
    /* A first socket, or an SSL object freed and another allocated at its address (perhaps over a socket at the
     * address of the previous one: the cookie tells): a new stream. */
    if (conn->sk) {
      conn->offset[0] = 0;
      conn->offset[1] = 0;
      conn->proto = 0;
    }
    conn->sk = c.sk;
    conn->cookie = c.cookie;
    addrs_from_sk(conn, (struct sock *)c.sk);
  }
  __u32 fidx = c.io & 1;
  __u64 off = conn->offset[fidx];
  conn->offset[fidx] = off + moved;

  __u32 zero = 0;
  struct tls_scratch_value *sv = bpf_map_lookup_elem(&tls_scratch, &zero);
  if (!sv)
    return 0;
  struct tls_event *e = &sv->e;
  /* A direction's first call gets the larger capture too: it may open HTTP/2 and carry its first header block. */
  __u32 limit = (conn->proto == CONN_H2 || off == 0) ? TLS_H2_CAPTURE_BYTES : TLS_CAPTURE_BYTES;
  __u32 n = moved < limit ? moved : limit;
  __u32 size = n;
  /* An opaque mask: clang drops a plain mask it can prove redundant, and the verifier then sees an unbounded size. */
  asm volatile("%0 &= 8191" : "+r"(size));
  if (size > TLS_H2_CAPTURE_BYTES)
    return 0;
  if (bpf_probe_read_user(e->data, size, (void *)c.buf) != 0)
    return 0;
  /* A direction's first bytes: the HTTP/2 client preface, or a SETTINGS frame header (length a multiple of 6,
   * type 4, no flags, stream 0), make the connection HTTP/2. */
  if (off == 0 && n >= 9 && conn->proto != CONN_H2) {
    const __u8 *d = e->data;
    __u32 flen = ((__u32)d[0] << 16) | ((__u32)d[1] << 8) | d[2];
    if ((d[0] == 'P' && d[1] == 'R' && d[2] == 'I' && d[3] == ' ' && d[4] == '*') ||
        (d[3] == 4 && d[4] == 0 && d[5] == 0 && d[6] == 0 && d[7] == 0 && d[8] == 0 && flen % 6 == 0 && flen <= 96))
      conn->proto = CONN_H2;
  }
  e->timestamp_ns = c.io == IO_WRITE ? c.enter_ns : bpf_ktime_get_ns();
  e->ssl = c.ssl;
  e->stream_off = off;
  e->sk = conn->sk;
  e->cgroup_id = bpf_get_current_cgroup_id();
  e->pid = id >> 32;
  e->tid = (__u32)id;
  e->len = moved > 0xffffffffULL ? 0xffffffffU : (__u32)moved;
  e->captured = n;
  e->io = c.io;
  e->flags = conn->sk ? FLAG_SOCKET : 0;
  e->sport = conn->sport;
  e->dport = conn->dport;
  e->family = conn->family;
  e->pad = 0;
  __builtin_memcpy(e->saddr, conn->saddr, 16);
  __builtin_memcpy(e->daddr, conn->daddr, 16);
  bpf_get_current_comm(e->comm, sizeof(e->comm));
  int h2 = conn->proto == CONN_H2;
  if (h2 && moved > n)
    e->len = n; /* the call continues in the records below */
  __u32 total = offsetof(struct tls_event, data) + n;
  asm volatile("%0 &= 8191" : "+r"(total));
  if (total > offsetof(struct tls_event, data) + TLS_H2_CAPTURE_BYTES)
    return 0;
  if (bpf_ringbuf_output(&tls_events, e, total, 0) != 0)
    svc_count_lost(&tls_events_lost);
  if (!h2)
    return 0;
  /* HTTP/2: the rest of the call, one record per TLS_H2_CAPTURE_BYTES; the last one's len covers what is left. */
  for (__u32 i = 1; i < TLS_H2_CHUNKS; i++) {
    __u64 at = (__u64)i * TLS_H2_CAPTURE_BYTES;
    if (at >= moved)
      break;
    __u64 left = moved - at;
    __u32 chunk = left < TLS_H2_CAPTURE_BYTES ? left : TLS_H2_CAPTURE_BYTES;
    __u32 csize = chunk;
    asm volatile("%0 &= 8191" : "+r"(csize));
    if (csize > TLS_H2_CAPTURE_BYTES)
      return 0;
    if (bpf_probe_read_user(e->data, csize, (void *)(c.buf + at)) != 0)
      return 0;
    e->stream_off = off + at;
    e->len = (i == TLS_H2_CHUNKS - 1 && left > 0xffffffffULL) ? 0xffffffffU : (i == TLS_H2_CHUNKS - 1 ? (__u32)left : csize);
    e->captured = csize;
    __u32 ctotal = offsetof(struct tls_event, data) + csize;
    asm volatile("%0 &= 8191" : "+r"(ctotal));
    if (ctotal > offsetof(struct tls_event, data) + TLS_H2_CAPTURE_BYTES)
      return 0;
    if (bpf_ringbuf_output(&tls_events, e, ctotal, 0) != 0)
      svc_count_lost(&tls_events_lost);
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

/* One return program serves the four functions: the active call knows which form it was. */
SEC("uretprobe")
int BPF_KRETPROBE(ssl_leave, long ret)
{
  return leave(ret);
}

static __always_inline int on_socket_call(struct sock *sk)
{
  if (sk->sk_protocol != IPPROTO_TCP)
    return 0;
  __u64 id = bpf_get_current_pid_tgid();
  struct tls_call *call = bpf_map_lookup_elem(&active, &id);
  if (call) {
    call->sk = (__u64)sk;
    call->cookie = bpf_get_socket_cookie(sk);
  }
  return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tls_send_length, struct sock *sk, int ret, int flags)
{
  return on_socket_call(sk);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(tls_recv_length, struct sock *sk, int ret, int flags)
{
  return on_socket_call(sk);
}

char LICENSE[] SEC("license") = "GPL";
