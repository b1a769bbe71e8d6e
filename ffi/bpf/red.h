/*
 * RED metrics counted in the kernel, shared by the socket capture (network.bpf.c) and the TLS capture (tls.bpf.c):
 * the key and value layouts, the two generations of counts and their configuration (user space gives both sets one
 * kernel map of each: ProgramSetSpec.sharedMaps), and the counting of one exchange. The includer defines IO_READ,
 * IO_WRITE, AF_INET6 and keeps each connection's struct red_conn. See network.bpf.c's header for the scheme.
 */
#ifndef SVC_RED_H
#define SVC_RED_H

/* ---- RED metrics ---- */

#define RED_PATH_BYTES 64
#define RED_PATH_WORDS (RED_PATH_BYTES / 8)
/* Bytes read at a request start on the server side: the longest method and its space (8) and RED_PATH_BYTES. */
#define RED_HEAD_BYTES 80
/* Histogram bounds at most (the conventions' default has 14). */
#define RED_MAX_BOUNDS 16
#define RED_BUCKETS (RED_MAX_BOUNDS + 1)
/* Exchanges moving across a generation at once (red_moves); more are left with the duration their generation saw. */
#define RED_MOVE_KEYS 1024
/* Keys per generation: slots of 88 bytes per possible CPU each, preallocated. */
#define RED_MAX_KEYS 4096

#define RED_IDLE 0
#define RED_AWAITING 1
#define RED_COUNTED 2
/* A 101 answered the request (network.bpf.c struct conn.upgrading): counted with status 101 at end_ns unless the
 * connection turns out HTTP/2, whose stream 1 user space counts. */
#define RED_UPGRADING 3

#define ROLE_SERVER 1
#define ROLE_CLIENT 2

/* 40 bytes. */
struct red_key {
  __u64 path_hash;  /*  0: server: hash of the path bytes; 0 on the client side */
  __u32 pid;        /*  8 */
  __u16 status;     /* 12 */
  __u8 method;      /* 14: METHOD_* (0: other) */
  __u8 role;        /* 15: ROLE_* */
  __u8 peer[16];    /* 16: client: the server's address; server: the client's when loopback or private, else zero */
  __u16 peer_port;  /* 32: client: the server's port; server: the local (listening) port */
  __u16 family;     /* 34 */
  __u8 scheme;      /* 36: RED_SCHEME_* */
  __u8 pad[3];      /* 37 */
};

#define RED_SCHEME_HTTP 0
#define RED_SCHEME_HTTPS 1

/* The connection an exchange is counted on: its owner, addresses (16 bytes each) and ports (host order). */
struct red_peer {
  __u32 pid;
  __u16 family;
  __u16 sport;
  __u16 dport;
  __u8 scheme;      /* RED_SCHEME_* */
  __u8 pad;
  const __u8 *daddr;
};

/* 88 bytes per CPU; counts are signed: a duration moved to a later bucket takes one from its first bucket. */
struct red_value {
  __s64 count;               /*   0 */
  __s64 sum_ns;              /*   8 */
  __s32 buckets[RED_BUCKETS];/*  16 */
  __u32 pad;                 /*  84 */
};

struct red_conn {
  struct red_key key;        /*   0: of the exchange under way (status set by its response) */
  __u64 start_ns;            /*  40: request seen */
  __u64 end_ns;              /*  48: last response-side call of the counted exchange */
  __u32 gen;                 /*  56: generation it was counted in */
  __u8 state;                /*  60: RED_* */
  __u8 req_io;               /*  61: IO_* + 1 of its request */
  __u8 bucket;               /*  62 */
  __u8 pad;                  /*  63 */
  __u64 path[RED_PATH_WORDS];/*  64: server: the path's first bytes, zero from its end on */
  struct red_key slot_key;   /* 128: the key the connection last counted under ... */
  __u32 slot;                /* 168: ... its slot in red_vals_a / red_vals_b ... */
  __u32 slot_gen;            /* 172: ... and the generation + 1 of that slot (0: none) */
};

struct red_config_value {
  __u32 gen;
  __u32 nbounds;
  __u64 bounds_ns[RED_MAX_BOUNDS];
  __u64 path_keys;  /* keys with a path created in this generation (user space zeroes it at each flip) */
  __u32 open_gen;   /* the first generation of the metrics interval not exported yet (red_moves: see red_move) */
  __u32 pad;
};

/* Keys with a path per generation at most; further new paths count under RED_PATH_OVERFLOW (their pid, method and
 * status kept), so that the map keeps room for them. */
#define RED_PATH_KEYS_MAX 3072
#define RED_PATH_OVERFLOW 1

_Static_assert(sizeof(struct red_key) == 40, "struct red_key layout is mirrored by the decoder");
_Static_assert(15 + RED_PATH_BYTES <= RED_HEAD_BYTES, "red_request copies the path from the head already read");
_Static_assert(sizeof(struct red_value) == 88, "struct red_value layout is mirrored by the decoder");


/*
 * One generation's counts: each key has a slot (`red_idx_*`: key -> slot, preallocated: an element is taken from a
 * free list in any context, where allocating on demand fails under bursts of new keys), its counts in that slot of
 * the per-CPU array `red_vals_*`. A connection keeps the slot of the key it last counted under (red_conn.slot), so
 * that the next exchange with the same key, the usual case, counts through an array lookup the verifier inlines,
 * without hashing the key or a helper call (the hash lookup was a tenth of the socket programs' time). Slots are
 * taken in order from `red_next[gen & 1]`; user space takes a generation's slots, zeroes them and resets its
 * counter once the generation is old.
 */
#define RED_INDEX_MAP(name)                   \
  struct {                                    \
    __uint(type, BPF_MAP_TYPE_HASH);          \
    __uint(max_entries, RED_MAX_KEYS);        \
    __type(key, struct red_key);              \
    __type(value, __u32);                     \
  } name SEC(".maps")

#define RED_VALUES_MAP(name)                  \
  struct {                                    \
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);  \
    __uint(max_entries, RED_MAX_KEYS);        \
    __type(key, __u32);                       \
    __type(value, struct red_value);          \
  } name SEC(".maps")

RED_INDEX_MAP(red_idx_a);
RED_INDEX_MAP(red_idx_b);
RED_VALUES_MAP(red_vals_a);
RED_VALUES_MAP(red_vals_b);

/* The next free slot of each generation's parity (gen & 1); reset by user space once it took that generation. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} red_next SEC(".maps");

/* Path bytes of each path hash counted (written when its key is new). */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, __u64[RED_PATH_WORDS]);
} red_paths SEC(".maps");

/* Exchanges whose key found no room, per ROLE_* (index 0 unused); cumulative. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 3);
  __type(key, __u32);
  __type(value, struct red_value);
} red_overflow SEC(".maps");

/*
 * A counted exchange's response still moving after its generation was taken (a download, a stream that crosses the
 * one-second flip): its duration's growth, by its key and the generation it was counted in. A value holds no count,
 * only the sum's growth and the bucket it left (-1) and the one it reached (+1); user space adds it to the series
 * while the generation it names belongs to the metrics interval not exported yet, and drops it otherwise (the point
 * was exported with the duration known then). Updated with atomic adds: exchanges of one key on several CPUs.
 */
struct red_move_key {
  struct red_key key;
  __u32 from_gen;
  __u32 pad;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, RED_MOVE_KEYS);
  __type(key, struct red_move_key);
  __type(value, struct red_value);
} red_moves SEC(".maps");

/* Written by user space: the generation counted into and the histogram bounds. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct red_config_value);
} red_config SEC(".maps");

/* ---- RED metrics: every exchange counted (see the header) ---- */

#define METHOD_OTHER 0
#define METHOD_GET 1
#define METHOD_POST 2
#define METHOD_PUT 3
#define METHOD_HEAD 4
#define METHOD_DELETE 5
#define METHOD_PATCH 6
#define METHOD_OPTIONS 7
#define METHOD_CONNECT 8
#define METHOD_TRACE 9

/* METHOD_* of a request start (at least 8 bytes) and the length of its method. */
static __always_inline __u8 http_method(const __u8 *d, __u32 *mlen)
{
  __u32 w;
  __builtin_memcpy(&w, d, 4);
#define W(a, b, c, e) ((__u32)(a) | ((__u32)(b) << 8) | ((__u32)(c) << 16) | ((__u32)(e) << 24))
  if (w == W('G', 'E', 'T', ' ')) { *mlen = 3; return METHOD_GET; }
  if (w == W('P', 'O', 'S', 'T')) { *mlen = 4; return METHOD_POST; }
  if (w == W('P', 'U', 'T', ' ')) { *mlen = 3; return METHOD_PUT; }
  if (w == W('H', 'E', 'A', 'D')) { *mlen = 4; return METHOD_HEAD; }
  if (w == W('D', 'E', 'L', 'E')) { *mlen = 6; return METHOD_DELETE; }
  if (w == W('P', 'A', 'T', 'C')) { *mlen = 5; return METHOD_PATCH; }
  if (w == W('O', 'P', 'T', 'I')) { *mlen = 7; return METHOD_OPTIONS; }
  if (w == W('C', 'O', 'N', 'N')) { *mlen = 7; return METHOD_CONNECT; }
  if (w == W('T', 'R', 'A', 'C')) { *mlen = 5; return METHOD_TRACE; }
#undef W
  *mlen = 0;
  return METHOD_OTHER;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* 0x80 in each byte of `x` that is zero (exact for the lowest one, which is all that is used). */
#define ZERO_BYTES(x) (((x) - ONES) & ~(x) & HIGHS)

/*
 * Hash of the path in `words` up to its first ' ', '?', '#' or NUL, eight bytes at a time (no loop per byte);
 * the terminator and what follows it in its word are zeroed, so user space reads the path up to the first NUL.
 */
static __always_inline __u64 path_hash(__u64 *words)
{
  __u64 h = 0xcbf29ce484222325ULL;
#pragma unroll
  for (int i = 0; i < RED_PATH_WORDS; i++) {
    __u64 w = words[i];
    __u64 m = ZERO_BYTES(w ^ (ONES * ' ')) | ZERO_BYTES(w ^ (ONES * '?')) | ZERO_BYTES(w ^ (ONES * '#')) | ZERO_BYTES(w);
    if (m) {
      __u64 low = m & (~m + 1);
      w &= (low >> 7) - 1;
      words[i] = w;
      h = (h ^ w) * 0x100000001b3ULL;
      if (i + 1 < RED_PATH_WORDS)
        words[i + 1] = 0;
      return (h ^ (h >> 31)) | 2;
    }
    h = (h ^ w) * 0x100000001b3ULL;
  }
  return (h ^ (h >> 31)) | 2;
}

/* Loopback or private addresses (RFC 1918, fc00::/7, fe80::/10, and as IPv4-mapped IPv6): kept as the server side's peer. */
static __always_inline int local_class(const __u8 *a, __u16 family)
{
  const __u8 *v4 = a;
  if (family == AF_INET6) {
    __u64 hi;
    __u32 mid;
    __builtin_memcpy(&hi, a, 8);
    __builtin_memcpy(&mid, a + 8, 4);
    if (hi == 0 && mid == 0xffff0000) {
      v4 = a + 12;
    } else {
      if ((a[0] & 0xfe) == 0xfc || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80))
        return 1;
      __u32 lo;
      __builtin_memcpy(&lo, a + 12, 4);
      return hi == 0 && mid == 0 && lo == bpf_htonl(1);
    }
  }
  return v4[0] == 127 || v4[0] == 10 || (v4[0] == 172 && (v4[1] & 0xf0) == 16) || (v4[0] == 192 && v4[1] == 168);
}

/*
 * A request start on connection `c`: the exchange it opens awaits its response. `head`: its first bytes (at least 8;
 * for a request read, RED_HEAD_BYTES of the buffer, zero past what was read). Returns 1 when it replaced a request
 * still awaiting its response (pipelined: the earlier one is not counted).
 */
static __always_inline int red_request(struct red_conn *r, const struct red_peer *c, __u32 io, const __u8 *head, __u64 ts)
{
  int replaced = r->state == RED_AWAITING;
  __u32 mlen = 0;
  struct red_key *k = &r->key;
  k->method = http_method(head, &mlen);
  /* The method's length goes through memory, as red_bound_index's index does: each method would otherwise be a
   * path of its own to the end. */
  r->path[0] = mlen;
  mlen = *(volatile __u64 *)&r->path[0];
  k->pid = c->pid;
  k->status = 0;
  k->family = c->family;
  k->scheme = c->scheme;
  __builtin_memset(k->pad, 0, sizeof(k->pad));
  r->state = RED_AWAITING;
  r->req_io = io + 1;
  r->start_ns = ts;
  if (io == IO_WRITE) {
    k->role = ROLE_CLIENT;
    k->path_hash = 0;
    k->peer_port = c->dport;
    __builtin_memcpy(k->peer, c->daddr, 16);
    return replaced;
  }
  k->role = ROLE_SERVER;
  k->peer_port = c->sport;
  if (local_class(c->daddr, c->family))
    __builtin_memcpy(k->peer, c->daddr, 16);
  else
    __builtin_memset(k->peer, 0, 16);
  /* The path follows the method and its space, within the head already read (no second read of user memory),
   * copied a word at a time: 8-byte loads at the method's odd offset (the verifier lets them be unaligned where
   * the CPU does; `head` is a map value of at least RED_HEAD_BYTES, and 15 + RED_PATH_BYTES fits). */
  if (mlen == 0) {
    __builtin_memset(r->path, 0, RED_PATH_BYTES);
  } else {
    __u64 off = mlen + 1;
    asm volatile("%0 &= 15" : "+r"(off));
    const __u8 *p = head + off;
#pragma unroll
    for (int i = 0; i < RED_PATH_WORDS; i++) {
      __u64 w;
      asm volatile("%0 = *(u64 *)(%1 + 0)" : "=r"(w) : "r"(p + 8 * i));
      r->path[i] = w;
    }
  }
  k->path_hash = path_hash(r->path);
  return replaced;
}

/* The first of the first `n` of `bounds` that is >= x (OTLP explicit bounds), else n (the last bucket). */
static __always_inline __u32 red_first_bound(const __u64 *bounds, __u32 n, __u64 x)
{
#pragma unroll
  for (__u32 i = 0; i < RED_MAX_BOUNDS; i++) {
    if (i >= n)
      return i;
    if (x <= bounds[i])
      return i;
  }
  return RED_MAX_BOUNDS;
}

/*
 * The histogram bucket of `x` among the first `n` of `bounds` (red_first_bound), stored in `slot` (a byte of a map
 * value) and returned as loaded back from there. The verifier walks each exit of red_first_bound as a path of its
 * own, the index a known constant in each, and so would walk everything after it once per bucket; loaded from
 * memory it does not follow, the index is one unknown value (callers bound it below RED_BUCKETS before indexing)
 * and the paths merge at the next check (on_recv_length with RED on: 327,334 -> 170,827 instructions verified).
 */
static __always_inline __u32 red_bound_index(const __u64 *bounds, __u32 n, __u64 x, __u8 *slot)
{
  *slot = red_first_bound(bounds, n, x);
  return *(volatile __u8 *)slot;
}

/* The duration histogram's bucket of `d` ns (also stored in `slot`: red_bound_index). */
static __always_inline __u32 red_bucket(struct red_config_value *cfg, __u64 d, __u8 *slot)
{
  return red_bound_index(cfg->bounds_ns, cfg->nbounds, d, slot);
}

/* Whether two keys are equal (five 8-byte words). */
static __always_inline int red_key_eq(const struct red_key *a, const struct red_key *b)
{
  const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
  return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3] && x[4] == y[4];
}

/*
 * The counts of `r->key` in generation `gen` (its maps `idx` and `vals`): through the connection's slot when it
 * counted under the same key in this generation before, else found or given a slot (its path recorded when new) and
 * remembered; 0 when there is no room (the caller counts it as overflow). The key's path hash becomes
 * RED_PATH_OVERFLOW when the generation has no room for another path.
 */
static __always_inline struct red_value *red_slot(void *idx, void *vals, struct red_conn *r, __u32 gen, struct red_config_value *cfg)
{
  struct red_key *k = &r->key;
  __u32 slot;
  if (r->slot_gen == gen + 1 && red_key_eq(&r->slot_key, k)) {
    slot = r->slot;
    return bpf_map_lookup_elem(vals, &slot);
  }
  __u32 *found = bpf_map_lookup_elem(idx, k);
  if (!found && k->path_hash > RED_PATH_OVERFLOW && __sync_fetch_and_add(&cfg->path_keys, 1) >= RED_PATH_KEYS_MAX) {
    k->path_hash = RED_PATH_OVERFLOW;
    found = bpf_map_lookup_elem(idx, k);
  }
  if (found) {
    slot = *found;
  } else {
    __u32 parity = gen & 1;
    __u64 *next = bpf_map_lookup_elem(&red_next, &parity);
    if (!next)
      return 0;
    __u64 given = __sync_fetch_and_add(next, 1);
    if (given >= RED_MAX_KEYS)
      return 0;
    slot = given;
    if (bpf_map_update_elem(idx, k, &slot, BPF_NOEXIST) != 0) {
      /* Another CPU gave the key a slot first (this one stays unused), or the index is full. */
      found = bpf_map_lookup_elem(idx, k);
      if (!found)
        return 0;
      slot = *found;
    } else if (k->path_hash > RED_PATH_OVERFLOW) {
      bpf_map_update_elem(&red_paths, &k->path_hash, r->path, BPF_ANY);
    }
  }
  r->slot_key = *k;
  r->slot = slot;
  r->slot_gen = gen + 1;
  return bpf_map_lookup_elem(vals, &slot);
}

static __always_inline void red_add(struct red_value *v, __u64 b, __u64 d)
{
  if (b >= RED_BUCKETS)
    return;
  v->count += 1;
  v->sum_ns += d;
  v->buckets[b] += 1;
}

/* Counts the awaited exchange of `r` with `status` (0: the connection closed before a response) at `ts`; a 101's ends
 * there. */
static __always_inline void red_count(struct red_conn *r, __u16 status, __u64 ts)
{
  __u32 zero = 0;
  struct red_config_value *cfg = bpf_map_lookup_elem(&red_config, &zero);
  if (!cfg)
    return;
  r->key.status = status;
  __u32 gen = cfg->gen;
  __u64 d = (__s64)(ts - r->start_ns) > 0 ? ts - r->start_ns : 0;
  __u64 b = red_bucket(cfg, d, &r->bucket);
  struct red_value *v = (gen & 1) ? red_slot(&red_idx_b, &red_vals_b, r, gen, cfg) : red_slot(&red_idx_a, &red_vals_a, r, gen, cfg);
  if (!v) {
    /* Counted in no slot: red_move leaves it alone. */
    r->slot_gen = 0;
    __u32 role = r->key.role == ROLE_CLIENT ? ROLE_CLIENT : ROLE_SERVER;
    v = bpf_map_lookup_elem(&red_overflow, &role);
  }
  if (v)
    red_add(v, b, d);
  /* After a 101 the connection carries another protocol: none of its later calls is this exchange's (red_move
   * would stretch its duration to a WebSocket frame's time). */
  r->state = status == 101 ? RED_IDLE : RED_COUNTED;
  r->gen = gen;
  r->end_ns = ts;
  r->bucket = b;
}

/* A response's status line (`head`, `n` bytes) answering the awaited request: the exchange is counted. */
static __always_inline void red_response(struct red_conn *r, const __u8 *head, __u32 n, __u64 ts)
{
  if (n < 12 || head[8] != ' ')
    return;
  __u8 d0 = head[9] - '0', d1 = head[10] - '0', d2 = head[11] - '0';
  if (d0 > 9 || d1 > 9 || d2 > 9)
    return;
  __u16 status = d0 * 100 + d1 * 10 + d2;
  /* Interim responses (1xx but 101 Switching Protocols) leave the exchange awaiting its final one. */
  if (status < 200 && status != 101)
    return;
  red_count(r, status, ts);
}

/* A 101 answering the awaited request at `ts`: counted later (RED_UPGRADING), once the next protocol is known. */
static __always_inline void red_upgrading(struct red_conn *r, __u64 ts)
{
  r->state = RED_UPGRADING;
  r->end_ns = ts;
}

/* The red_moves entry of the exchange of `r` (its key and the generation it was counted in), created when new. */
static __always_inline struct red_value *red_move_entry(struct red_conn *r)
{
  struct red_move_key mk = { .key = r->slot_key, .from_gen = r->gen };
  struct red_value *v = bpf_map_lookup_elem(&red_moves, &mk);
  if (v)
    return v;
  struct red_value fresh = {};
  bpf_map_update_elem(&red_moves, &mk, &fresh, BPF_NOEXIST);
  return bpf_map_lookup_elem(&red_moves, &mk);
}

/*
 * A later call on the response side of the counted exchange, at `ts`: its duration ends there. While its generation
 * lasts, in the slot it was counted in (this CPU's copy); once the generation was taken, in red_moves (shared by
 * every CPU: atomic adds), as long as the metrics interval it was counted in is not exported.
 */
static __always_inline void red_move(struct red_conn *r, __u64 ts)
{
  __u32 zero = 0;
  struct red_config_value *cfg = bpf_map_lookup_elem(&red_config, &zero);
  if (!cfg)
    return;
  if ((__s64)(ts - r->end_ns) <= 0)
    return;
  /* The slot red_count counted the exchange in (slot_gen: that generation's). */
  if (r->slot_gen != r->gen + 1)
    return;
  int later = cfg->gen != r->gen;
  struct red_value *v;
  if (later) {
    /* Counted in an interval already exported: its duration stays what was known then. */
    if ((__s32)(r->gen - cfg->open_gen) < 0)
      return;
    v = red_move_entry(r);
  } else {
    __u32 slot = r->slot;
    v = (r->gen & 1) ? bpf_map_lookup_elem(&red_vals_b, &slot) : bpf_map_lookup_elem(&red_vals_a, &slot);
  }
  if (!v)
    return;
  /* 64-bit indexes: the verifier sees the bound on the register that indexes. */
  __u64 old = r->bucket;
  __u64 b = red_bucket(cfg, ts - r->start_ns, &r->bucket);
  if (b >= RED_BUCKETS || old >= RED_BUCKETS)
    return;
  __s64 grown = ts - r->end_ns;
  if (later)
    __sync_fetch_and_add(&v->sum_ns, grown);
  else
    v->sum_ns += grown;
  if (b != old) {
    if (later) {
      __sync_fetch_and_add(&v->buckets[old], -1);
      __sync_fetch_and_add(&v->buckets[b], 1);
    } else {
      v->buckets[old] -= 1;
      v->buckets[b] += 1;
    }
    r->bucket = b;
  }
  r->end_ns = ts;
}

#endif
