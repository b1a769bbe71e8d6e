/*
 * RED body sizes (`red_body_sizes`, off by default; network.bpf.c only, after red.h): the request's and the
 * response's body size of every exchange counted in the RED maps, as two histograms per RED key in the per-CPU hash
 * of the same generation (`red_body_a` / `red_body_b`, taken by user space with the counts of red.h).
 *
 * A body is the bytes of its message after its head: where a message starts, the first RED_BODY_SCAN_BYTES of the
 * call that carries it are searched for the head's end (the blank line "\r\n\r\n", found as the only "\n\r" of a
 * head), which gives the stream offset where the body starts. When the response's status line counts the exchange,
 * the request's body is the bytes moved on the request side since then (bytes the server read, or the client wrote,
 * before the response began), and the response's body the bytes of its own call after its head; later calls on
 * the response side add their bytes and move the count to its bucket while the generation lasts (as durations
 * move). So a size is the bytes transferred: Content-Length for a delimited body, the chunked encoding's bytes
 * (chunk sizes and terminators included) for a chunked one, everything up to the close for a close-delimited one.
 * A message whose head does not end within the first RED_BODY_SCAN_BYTES of its first call is left out of its
 * histogram.
 */
#ifndef SVC_RED_BODY_H
#define SVC_RED_BODY_H

/* Bytes of a message's first call searched for the end of its head. */
#define RED_BODY_SCAN_BYTES 512

const volatile __u32 red_body_sizes = 0;

/* Per connection, behind its struct red_conn (struct conn_sk). */
struct red_body {
  __u64 req_off;    /* request side: stream offset where the request's body starts; 0: its head's end not found */
  __u64 resp_bytes; /* the response's body bytes counted so far */
  __u32 gen;        /* generation the response's body size was counted in */
  __u8 counted;     /* the response's body size is counted (later calls move it) */
  __u8 bucket;      /* its bucket */
  __u8 pad[2];
};

/* 176 bytes per CPU: the request's and the response's body size histograms of one key (sums in bytes). */
struct red_body_value {
  struct red_value req;
  struct red_value resp;
};

_Static_assert(sizeof(struct red_body_value) == 176, "struct red_body_value layout is mirrored by the decoder");

/* One generation's body sizes (user space sizes them to one entry while red_body_sizes is off). */
#define RED_BODY_MAP(name)                    \
  struct {                                    \
    __uint(type, BPF_MAP_TYPE_PERCPU_HASH);   \
    __uint(max_entries, RED_MAX_KEYS);        \
    __type(key, struct red_key);              \
    __type(value, struct red_body_value);     \
  } name SEC(".maps")

RED_BODY_MAP(red_body_a);
RED_BODY_MAP(red_body_b);

/* Written by user space: the body size histogram's bounds (bytes). */
struct red_body_config_value {
  __u32 nbounds;
  __u32 pad;
  __u64 bounds[RED_MAX_BOUNDS];
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct red_body_config_value);
} red_body_config SEC(".maps");

/* A zero red_body_value to create keys from. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct red_body_value);
} red_body_zero SEC(".maps");

/* The bytes searched for a head's end, and one word more (each step reads the next word too). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64[RED_BODY_SCAN_BYTES / 8 + 1]);
} red_body_scan SEC(".maps");

/* 0x80 in each byte of `x` equal to byte `c` (exact: no borrow between bytes). */
static __always_inline __u64 bytes_equal(__u64 x, __u8 c)
{
  __u64 y = x ^ (0x0101010101010101ULL * c);
  __u64 low7 = 0x7f7f7f7f7f7f7f7fULL;
  return ~(((y & low7) + low7) | y | low7);
}

/* Index of the lowest byte flagged 0x80 in a non-zero `m` (no ctz instruction in BPF). */
static __always_inline __u32 lowest_flagged_byte(__u64 m)
{
  __u64 low = m & (~m + 1);
  __u32 k = 0;
  if (low >> 32) {
    k += 4;
    low >>= 32;
  }
  if (low >> 16) {
    k += 2;
    low >>= 16;
  }
  if (low >> 8)
    k += 1;
  return k;
}

/*
 * Where the head of the message starting at user `buf` (`len` bytes in this call) ends: the offset past its blank
 * line, 0 when it does not end within the first RED_BODY_SCAN_BYTES. The first "\n\r" of a head is the blank
 * line's (header lines end in "\r\n" and the next one starts with its name), so the search looks for those two
 * bytes, eight positions a word. A global function: the verifier walks its loop once, not once per path of its
 * callers.
 */
__noinline __u32 head_end(__u64 buf, __u64 len)
{
  __u32 zero = 0;
  __u64 *w = bpf_map_lookup_elem(&red_body_scan, &zero);
  if (!w)
    return 0;
  __u32 n = len < RED_BODY_SCAN_BYTES ? len : RED_BODY_SCAN_BYTES;
  asm volatile("%0 &= 1023" : "+r"(n));
  if (n < 4 || n > RED_BODY_SCAN_BYTES || bpf_probe_read_user(w, n, (void *)buf) != 0)
    return 0;
  /* Bytes past `n` are from an earlier search: a find there is no find. */
  __u64 next = w[0];
#pragma clang loop unroll(disable)
  for (__u32 j = 0; j < RED_BODY_SCAN_BYTES / 8; j++) {
    if (j * 8 >= n)
      return 0;
    __u64 cur = next;
    next = w[j + 1];
    __u64 m = bytes_equal(cur, '\n') & bytes_equal((cur >> 8) | (next << 56), '\r');
    if (m) {
      __u32 end = j * 8 + lowest_flagged_byte(m) + 3;
      return end <= n ? end : 0;
    }
  }
  return 0;
}

/* The body size histogram's bucket of `x` bytes (also stored in `slot`: red_bound_index). */
static __always_inline __u32 red_body_bucket(struct red_body_config_value *cfg, __u64 x, __u8 *slot)
{
  return red_bound_index(cfg->bounds, cfg->nbounds, x, slot);
}

/* The body sizes of `k` in generation `gen`, created from zero when new; 0 when there is no room. */
static __always_inline struct red_body_value *red_body_slot(__u32 gen, struct red_key *k)
{
  void *map = (gen & 1) ? (void *)&red_body_b : (void *)&red_body_a;
  struct red_body_value *v = bpf_map_lookup_elem(map, k);
  if (v)
    return v;
  __u32 zero = 0;
  struct red_body_value *z = bpf_map_lookup_elem(&red_body_zero, &zero);
  if (!z)
    return 0;
  bpf_map_update_elem(map, k, z, BPF_NOEXIST);
  return bpf_map_lookup_elem(map, k);
}

/*
 * The exchange of `r` was just counted (its response's status line, in a call that left `resp_total` bytes moved on
 * the response side; the head ended `resp_end` bytes into the call, which started at `resp_off`): counts its
 * request's body (`req_total`: bytes moved on the request side so far) and its response's body so far.
 */
static __always_inline void red_body_count(struct red_conn *r, struct red_body *b, __u64 req_total, __u64 resp_off, __u32 resp_end, __u64 resp_total)
{
  b->counted = 0;
  __u32 zero = 0;
  struct red_body_config_value *cfg = bpf_map_lookup_elem(&red_body_config, &zero);
  if (!cfg)
    return;
  struct red_body_value *v = red_body_slot(r->gen, &r->key);
  if (!v)
    return;
  if (b->req_off != 0 && req_total >= b->req_off) {
    __u64 bytes = req_total - b->req_off;
    red_add(&v->req, red_body_bucket(cfg, bytes, &b->bucket), bytes);
  }
  if (resp_end == 0 || resp_total < resp_off + resp_end)
    return;
  __u64 bytes = resp_total - (resp_off + resp_end);
  __u64 bucket = red_body_bucket(cfg, bytes, &b->bucket);
  red_add(&v->resp, bucket, bytes);
  b->counted = 1;
  b->gen = r->gen;
  b->bucket = bucket;
  b->resp_bytes = bytes;
}

/* A later call on the response side of the counted exchange of `r` moved `n` bytes: its response's body grows. */
static __always_inline void red_body_move(struct red_conn *r, struct red_body *b, __u64 n)
{
  if (!b->counted)
    return;
  __u32 zero = 0;
  struct red_config_value *gen = bpf_map_lookup_elem(&red_config, &zero);
  struct red_body_config_value *cfg = bpf_map_lookup_elem(&red_body_config, &zero);
  if (!gen || !cfg || gen->gen != b->gen)
    return;
  struct red_body_value *v = (b->gen & 1) ? bpf_map_lookup_elem(&red_body_b, &r->key) : bpf_map_lookup_elem(&red_body_a, &r->key);
  if (!v)
    return;
  __u64 bytes = b->resp_bytes + n;
  __u64 old = b->bucket;
  __u64 bucket = red_body_bucket(cfg, bytes, &b->bucket);
  if (bucket >= RED_BUCKETS || old >= RED_BUCKETS)
    return;
  v->resp.sum_ns += n;
  if (bucket != old) {
    v->resp.buckets[old] -= 1;
    v->resp.buckets[bucket] += 1;
    b->bucket = bucket;
  }
  b->resp_bytes = bytes;
}

#endif
