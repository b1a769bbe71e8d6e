/*
 * The part of the `tls` set that runs in every TCP socket call (tls.bpf.c's header tells the scheme): the socket an
 * SSL call moves its ciphertext through and, for memory BIOs, the socket a thread read last and the first it writes
 * after a socketless SSL_write. tls.bpf.c runs it from its own sock_send_length / sock_recv_length programs; where the
 * network set's socket storage programs run on those tracepoints (kernel BTF, http_capture socket), they run it
 * instead (network.bpf.c, `tls_follow`), so that each socket call of every process runs one program, not two. The
 * maps below are then one kernel map in both sets (ProgramSetSpec.sharedMaps: TLS_SOCKET_SHARED_MAPS).
 *
 * Task storage needs kernel BTF, as tp_btf programs do: where there is none these functions are never loaded.
 * The includer includes common.h (after SVC_SELF_PEERS) and red.h, and defines IO_READ, IO_WRITE and `red_enabled`.
 */
#ifndef SVC_TLS_SOCKET_H
#define SVC_TLS_SOCKET_H

/* tls_conn.flags */
#define TLS_CONN_H2 1
/* The other end of an agent's connection (common.h, svc_self_peers): nothing forwarded. */
#define TLS_CONN_SELF_PEER 2
/* The socket was inferred from the thread's socket calls around the SSL calls (memory BIOs): a socket seen inside a
 * later call replaces it without starting a new stream (a library over a socket BIO whose first read was served
 * from data already decrypted, on an event loop whose last read was another connection's). */
#define TLS_CONN_INFERRED 4
/* An HTTP/2 connection no longer forwarded: a call refused (h2_records_per_second, or the ring three quarters full)
 * or a record lost in a full ring. */
#define TLS_CONN_H2_STOPPED 8
/* An HTTP/1.x request was seen on the connection: it is not taken for HTTP/2 found in its middle. */
#define TLS_CONN_HTTP 16
/* HTTP/2 found in the middle of a connection first seen after it opened (h2_midstream_start): its records say so
 * (FLAG_H2_MIDSTREAM), and user space decodes it with partial HPACK tables. */
#define TLS_CONN_H2_MIDSTREAM 32
/* An HTTP/2 call was forwarded cut (over H2_CHUNKS records): the next one that starts with frames is marked
 * FLAG_H2_RESUMED, for user space to decode anew from there should the cut have lost it a direction. */
#define TLS_CONN_H2_RESYNC 64

/* The thread's SSL call in progress (`active`); ssl 0: none. */
struct tls_call {
  __u64 ssl;
  __u64 buf;
  __u64 count_ptr; /* size_t * of the _ex forms, 0 otherwise */
  __u64 enter_ns;
  __u64 sk;        /* set by sock_*_length during the call */
  __u64 cookie;    /* that socket's cookie (never reused, unlike the struct sock's address) */
  __u32 io;
  __u32 depth;     /* calls of the same SSL object nested inside this one (reported once, at the outermost return) */
  /* Kept across calls, for memory BIOs (see the header): */
  __u64 recv_sk;     /* the TCP socket the thread last read */
  __u64 recv_cookie;
  __u64 write_ssl;   /* the SSL object of its last SSL_write without a socket, until the next socket write */
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
  __u8 flags;      /* TLS_CONN_* */
  __u8 sampled;    /* the current exchange is captured: IO_* + 1 of its request's side, 0 when not */
  __u8 saddr[16];
  __u8 daddr[16];
  __u16 resp_left; /* RESPONSE_RECORDS budget of the current exchange */
  __u8 follow[2];  /* FOLLOW_RECORDS budget per IO_* direction */
  __u32 pad;
  struct red_conn red; /* the exchange counted in the RED maps (red_enabled) */
};

/* Per thread (task storage: no hashing or bucket lock on the path of every call, and freed with the thread). It needs
 * kernel BTF (bpf_get_current_task_btf): without it (tls.bpf.c's `task_storage` 0) the loader leaves `active` out,
 * the verifier prunes its branch, and the calls live in `active_by_tid` instead (sized to one entry when unused). */
struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct tls_call);
} active SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, struct tls_conn_key);
  __type(value, struct tls_conn);
} tls_conns SEC(".maps");

/* The SSL connection of each socket known (by socket cookie): a close ends its exchange awaiting a response. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct tls_conn_key);
} tls_socks SEC(".maps");

/* Processes whose TLS library is probed (user space keeps it): their threads' socket reads are followed from the
 * first, so that a memory BIO's first SSL_read finds its socket. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, __u8);
} tls_tgids SEC(".maps");

/* A socket for the connection `key`: its addresses, and the cookie that finds the connection at close. */
static __always_inline void conn_bind(struct tls_conn *conn, const struct tls_conn_key *key, __u64 sk, __u64 cookie)
{
  conn->sk = sk;
  conn->cookie = cookie;
  svc_addrs_from_sk((struct sock *)sk, &conn->family, &conn->sport, &conn->dport, conn->saddr, conn->daddr);
  if (svc_is_self_peer(&svc_self_peers, (void *)sk, conn->family, conn->daddr, conn->dport, conn->saddr, conn->sport))
    conn->flags |= TLS_CONN_SELF_PEER;
  if (red_enabled)
    bpf_map_update_elem(&tls_socks, &cookie, key, BPF_ANY);
}

/* The calling thread's SSL call slot (task storage); `create`: made when missing. */
static __always_inline struct tls_call *tls_task_call(int create)
{
  return bpf_task_storage_get(&active, bpf_get_current_task_btf(), 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* A TCP socket call of the current thread (sock_send_length / sock_recv_length, whatever its return value). */
static __always_inline void tls_socket_call(struct sock *sk, __u32 io)
{
  struct tls_call *call = tls_task_call(0);
  if (!call) {
    /* A thread that has made no SSL call: only the reads of processes using a probed library are followed, so that a
     * memory BIO's first SSL_read finds its socket. Any other thread costs this lookup and nothing more. */
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (io != IO_READ || !bpf_map_lookup_elem(&tls_tgids, &tgid))
      return;
    call = tls_task_call(1);
    if (!call)
      return;
  }
  if (call->ssl) {
    call->sk = (__u64)sk;
    call->cookie = bpf_get_socket_cookie(sk);
    return;
  }
  /* Outside an SSL call (memory BIOs): the socket last read, and the first socket written after a socketless SSL_write. */
  if (io == IO_READ) {
    call->recv_sk = (__u64)sk;
    call->recv_cookie = bpf_get_socket_cookie(sk);
    return;
  }
  if (!call->write_ssl)
    return;
  struct tls_conn_key key = { .tgid = bpf_get_current_pid_tgid() >> 32, .ssl = call->write_ssl };
  call->write_ssl = 0;
  struct tls_conn *conn = bpf_map_lookup_elem(&tls_conns, &key);
  if (conn && !conn->sk) {
    conn_bind(conn, &key, (__u64)sk, bpf_get_socket_cookie(sk));
    conn->flags |= TLS_CONN_INFERRED;
  }
}

#endif
