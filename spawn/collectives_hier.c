/*
 * spawn/collectives_hier.c — the collectives of a world that spans several
 * hosts (world.h, hostlink.h): the intra-host part over the host's segment
 * as in collectives.c, the inter-host part by the host's proxy on the
 * segment's result slot ("res" below).
 *
 *   all_reduce      intra-host reduce into res (each local rank 1/C of a
 *                   cache-sized chunk; bf16 partials kept in f32), repeated
 *                   until res holds a super-chunk; the proxies reduce-
 *                   scatter + all-gather it across hosts; ranks copy out
 *   reduce_scatter  the same intra-host reduction over every global shard;
 *                   the proxies exchange each host's shards and reduce them
 *   all_gather      each rank writes its chunk at its global place in res;
 *                   the proxies all-gather host blocks; ranks copy out
 *   broadcast       the root writes res; the proxies broadcast it
 *   rendezvous      like all_gather with per-rank lengths from the
 *                   agreement (every rank's descriptor count)
 *
 * res ordering: a rank writes res only after a local barrier that follows
 * every rank's last read of it (all_reduce and reduce_scatter write after
 * their first barrier; the others wait for the agreement first), and reads
 * it only after the proxy answered.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hostlink.h"
#include "reduce.h"

/* Common start: the proxy must be connected (inter_bytes known). */
static lt_status hier_begin(lt_world *w, const char *what, size_t *R)
{
    lt_status st = lt_hostlink_ready(w, what);
    if (st != LT_OK) return st;
    *R = lt_hostlink_inter_bytes(w);
    return LT_OK;
}

static void too_small(lt_wdesc *d, const lt_world *w)
{
    if (!d->bad[0])
        snprintf(d->bad, sizeof d->bad, "shared memory too small for %d "
                 "ranks: raise LAZYTPU_SHM_BYTES", lt_world_size(w));
}

static int bad_reduce(int reduce)
{
    return reduce < LT_REDUCE_SUM || reduce > LT_REDUCE_OR;
}

/* -------------------------------------------------------------- all_reduce */

lt_status lt_hier_all_reduce(lt_world *w, const void *send, void *recv,
                             int64_t n, lt_dtype dtype, lt_reduce_type reduce,
                             double scale, const lt_shape *shape)
{
    const char *what = "all_reduce";
    size_t R;
    lt_status st = hier_begin(w, what, &R);
    if (st != LT_OK) return st;
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_ALL_REDUCE, dtype, n, shape);
    d.reduce = reduce;
    lt_wdesc_check(&d, send, recv, n, dtype);
    if (!d.bad[0] && bad_reduce(reduce))
        snprintf(d.bad, sizeof d.bad, "invalid reduce type %d", (int)reduce);
    size_t es = lt_dtype_size(dtype);
    lt_dtype at = lt_reduce_acc_dtype(dtype);
    size_t aes = es ? lt_dtype_size(at) : 1;
    if (!es) es = 1;
    int64_t Mcap = (int64_t)(R / aes);
    int64_t cap = (int64_t)(w->hdr->chunk_bytes / es);
    if (cap > Mcap) cap = Mcap;
    if (cap < 1) too_small(&d, w);
    int C = w->size, me = w->rank;
    unsigned char *res = lt_hostlink_area(w);
    lt_world_publish(w, &d);
    int first = 1;
    for (int64_t s0 = 0;; s0 += Mcap) {
        int64_t M = d.bad[0] ? 0 : (n - s0 < Mcap ? n - s0 : Mcap);
        if (M < 0) M = 0;
        for (int64_t c0 = s0;; c0 += cap) {
            int64_t m = s0 + M - c0 < cap ? s0 + M - c0 : cap;
            if (m < 0) m = 0;
            if (m) memcpy(lt_world_slot(w, me), (const char *)send + c0 * es,
                          (size_t)m * es);
            st = lt_world_wait_all(w, what);
            if (st != LT_OK) return st;
            if (first) {
                first = 0;
                st = lt_world_verify_all(w, what);
                if (st != LT_OK) return st;
            }
            int64_t lo = m * me / C, hi = m * (me + 1) / C;
            if (hi > lo) {
                const void *srcs[LT_WORLD_MAX_RANKS];
                for (int k = 0; k < C; k++)
                    srcs[k] = lt_world_slot(w, k) + lo * es;
                lt_reduce_partial(res + (c0 - s0 + lo) * aes, srcs, C,
                                  hi - lo, dtype, reduce);
            }
            st = lt_world_wait_all(w, what);
            if (st != LT_OK) return st;
            if (c0 + m >= s0 + M) break;
        }
        if (M > 0) {
            lt_hreq q;
            memset(&q, 0, sizeof q);
            q.kind = LT_HREQ_REDUCE;
            q.dtype = dtype;
            q.acc_dtype = at;
            q.reduce = reduce;
            q.scale = scale;
            q.count = M;
            st = lt_hostlink_call(w, &q, what);
            if (st != LT_OK) return st;
            memcpy((char *)recv + s0 * es, res, (size_t)M * es);
        }
        if (s0 + M >= n) break;
    }
    return LT_OK;
}

/* -------------------------------------------------------------- all_gather */

/* Publish, barrier, agree: for the ops that write res before their first
 * data barrier. */
static lt_status hier_agree_first(lt_world *w, lt_wdesc *d, const char *what)
{
    lt_world_publish(w, d);
    lt_status st = lt_world_wait_all(w, what);
    if (st != LT_OK) return st;
    return lt_world_verify_all(w, what);
}

lt_status lt_hier_all_gather(lt_world *w, const void *send, void *recv,
                             int64_t outer, int64_t block, lt_dtype dtype,
                             const lt_shape *shape)
{
    const char *what = "all_gather";
    size_t R;
    lt_status st = hier_begin(w, what, &R);
    if (st != LT_OK) return st;
    int64_t n = outer * block;
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_ALL_GATHER, dtype, n, shape);
    d.outer = outer;
    d.block = block;
    lt_wdesc_check(&d, send, recv, n, dtype);
    if (!d.bad[0] && (outer < 0 || block < 0))
        snprintf(d.bad, sizeof d.bad, "negative view [%lld][%lld]",
                 (long long)outer, (long long)block);
    int N = lt_world_size(w), C = w->size;
    size_t es = lt_dtype_size(dtype);
    if (!es) es = 1;
    int64_t cap = (int64_t)(R / ((size_t)N * es));
    if (cap < 1) too_small(&d, w);
    st = hier_agree_first(w, &d, what);
    if (st != LT_OK) return st;
    unsigned char *res = lt_hostlink_area(w);
    int g = lt_world_grank(w, w->rank);
    lt_chunker c;
    lt_chunker_init(&c, outer, block, cap);
    while (lt_chunker_next(&c)) {
        int64_t k = c.rows * c.cols;
        if (k <= 0) break;
        unsigned char *mine = res + (size_t)g * (size_t)k * es;
        for (int64_t i = 0; i < c.rows; i++)
            memcpy(mine + (size_t)(i * c.cols) * es,
                   (const char *)send + (size_t)((c.o0 + i) * block + c.j0) * es,
                   (size_t)c.cols * es);
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        lt_hreq q;
        memset(&q, 0, sizeof q);
        q.kind = LT_HREQ_GATHER;
        q.count = (int64_t)((size_t)C * (size_t)k * es);
        st = lt_hostlink_call(w, &q, what);
        if (st != LT_OK) return st;
        for (int r = 0; r < N; r++) {
            const unsigned char *src = res + (size_t)r * (size_t)k * es;
            for (int64_t i = 0; i < c.rows; i++)
                memcpy((char *)recv +
                           (size_t)(((c.o0 + i) * N + r) * block + c.j0) * es,
                       src + (size_t)(i * c.cols) * es, (size_t)c.cols * es);
        }
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
    }
    return LT_OK;
}

/* ---------------------------------------------------------- reduce_scatter */

lt_status lt_hier_reduce_scatter(lt_world *w, const void *send, void *recv,
                                 int64_t outer, int64_t block, lt_dtype dtype,
                                 lt_reduce_type reduce, double scale,
                                 const lt_shape *shape)
{
    const char *what = "reduce_scatter";
    size_t R;
    lt_status st = hier_begin(w, what, &R);
    if (st != LT_OK) return st;
    int N = lt_world_size(w), C = w->size, me = w->rank;
    int64_t n = outer * block;   /* output elements */
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_REDUCE_SCATTER, dtype, n * N, shape);
    d.reduce = reduce;
    d.outer = outer;
    d.block = block;
    lt_wdesc_check(&d, send, recv, n, dtype);
    if (!d.bad[0] && bad_reduce(reduce))
        snprintf(d.bad, sizeof d.bad, "invalid reduce type %d", (int)reduce);
    if (!d.bad[0] && (outer < 0 || block < 0))
        snprintf(d.bad, sizeof d.bad, "negative view [%lld][%lld]",
                 (long long)outer, (long long)block);
    size_t es = lt_dtype_size(dtype);
    lt_dtype at = lt_reduce_acc_dtype(dtype);
    size_t aes = es ? lt_dtype_size(at) : 1;
    if (!es) es = 1;
    /* a chunk of rows x cols outputs needs rows*N*cols elements in this
     * rank's slot (dtype) and in res (partials) */
    int64_t cap1 = (int64_t)(w->hdr->slot_bytes / ((size_t)N * es));
    int64_t cap2 = (int64_t)(R / ((size_t)N * aes));
    int64_t cap = cap1 < cap2 ? cap1 : cap2;
    if (cap < 1) too_small(&d, w);
    unsigned char *res = lt_hostlink_area(w);
    lt_world_publish(w, &d);
    lt_chunker c;
    lt_chunker_init(&c, d.bad[0] ? 0 : outer, d.bad[0] ? 0 : block, cap);
    int first = 1;
    while (lt_chunker_next(&c)) {
        unsigned char *mine = lt_world_slot(w, me);
        for (int64_t i = 0; i < c.rows && c.cols > 0; i++)
            for (int r = 0; r < N; r++)
                memcpy(mine + (size_t)((i * N + r) * c.cols) * es,
                       (const char *)send +
                           (size_t)(((c.o0 + i) * N + r) * block + c.j0) * es,
                       (size_t)c.cols * es);
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        if (first) {
            first = 0;
            st = lt_world_verify_all(w, what);
            if (st != LT_OK) return st;
        }
        int64_t k = c.rows * c.cols;
        if (k <= 0) break;
        int64_t E = k * N, lo = E * me / C, hi = E * (me + 1) / C;
        if (hi > lo) {
            const void *srcs[LT_WORLD_MAX_RANKS];
            for (int q = 0; q < C; q++)
                srcs[q] = lt_world_slot(w, q) + (size_t)lo * es;
            lt_reduce_partial(res + (size_t)lo * aes, srcs, C, hi - lo, dtype,
                              reduce);
        }
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        lt_hreq q;
        memset(&q, 0, sizeof q);
        q.kind = LT_HREQ_RSCATTER;
        q.dtype = dtype;
        q.acc_dtype = at;
        q.reduce = reduce;
        q.scale = scale;
        q.count = c.rows;
        q.cols = c.cols;
        st = lt_hostlink_call(w, &q, what);
        if (st != LT_OK) return st;
        for (int64_t i = 0; i < c.rows; i++)
            memcpy((char *)recv + (size_t)((c.o0 + i) * block + c.j0) * es,
                   res + (size_t)((i * C + me) * c.cols) * es,
                   (size_t)c.cols * es);
    }
    return LT_OK;
}

/* --------------------------------------------------------------- broadcast */

lt_status lt_hier_broadcast(lt_world *w, const void *send, void *recv,
                            int64_t n, lt_dtype dtype, int root,
                            const lt_shape *shape)
{
    const char *what = "broadcast";
    size_t R;
    lt_status st = hier_begin(w, what, &R);
    if (st != LT_OK) return st;
    int N = lt_world_size(w), C = w->size;
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_BROADCAST, dtype, n, shape);
    d.arg = root;
    lt_wdesc_check(&d, send, recv, n, dtype);
    if (!d.bad[0] && (root < 0 || root >= N))
        snprintf(d.bad, sizeof d.bad, "root %d out of range 0..%d", root, N - 1);
    size_t es = lt_dtype_size(dtype);
    if (!es) es = 1;
    int64_t cap = (int64_t)(R / es);
    if (cap < 1) too_small(&d, w);
    st = hier_agree_first(w, &d, what);
    if (st != LT_OK) return st;
    unsigned char *res = lt_hostlink_area(w);
    int g = lt_world_grank(w, w->rank);
    for (int64_t c0 = 0; c0 < n; c0 += cap) {
        int64_t m = n - c0 < cap ? n - c0 : cap;
        if (g == root) memcpy(res, (const char *)send + c0 * es, (size_t)m * es);
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        lt_hreq q;
        memset(&q, 0, sizeof q);
        q.kind = LT_HREQ_BCAST;
        q.count = (int64_t)((size_t)m * es);
        q.root_host = root / C;
        st = lt_hostlink_call(w, &q, what);
        if (st != LT_OK) return st;
        if (g != root || send != recv)
            memcpy((char *)recv + c0 * es, res, (size_t)m * es);
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
    }
    return LT_OK;
}

/* ---------------------------------------------------------------- exchange */

lt_status lt_hier_exchange(lt_world *w, const char *tag, const void *payload,
                           size_t len, void **all, size_t *lens)
{
    const char *what = "rendezvous";
    *all = NULL;
    size_t R;
    lt_status st = hier_begin(w, what, &R);
    if (st != LT_OK) return st;
    int N = lt_world_size(w), C = w->size;
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_EXCHANGE, LT_BOOL, (int64_t)len, NULL);
    if (!tag) tag = "";
    if (strlen(tag) >= LT_WORLD_TAG_MAX)
        snprintf(d.bad, sizeof d.bad, "tag '%.40s...' longer than %d chars",
                 tag, LT_WORLD_TAG_MAX - 1);
    else if (len && !payload)
        snprintf(d.bad, sizeof d.bad, "NULL payload of %zu bytes", len);
    snprintf(d.tag, sizeof d.tag, "%.*s", LT_WORLD_TAG_MAX - 1, tag);
    size_t cap = R / (size_t)N;
    if (cap < 1) too_small(&d, w);
    st = hier_agree_first(w, &d, what);
    if (st != LT_OK) return st;
    size_t *off = malloc(((size_t)N + 1) * sizeof *off);
    if (!off) return lt_set_error(LT_ERR_OOM, "rendezvous: out of host memory");
    size_t maxlen = 0;
    off[0] = 0;
    for (int k = 0; k < N; k++) {
        lens[k] = (size_t)lt_hostlink_count(w, k);
        off[k + 1] = off[k] + lens[k];
        if (lens[k] > maxlen) maxlen = lens[k];
    }
    unsigned char *buf = off[N] ? malloc(off[N]) : NULL;
    int oom = off[N] && !buf;
    unsigned char *res = lt_hostlink_area(w);
    int g = lt_world_grank(w, w->rank);
    for (size_t c0 = 0; c0 < maxlen; c0 += cap) {
        size_t m = len > c0 ? (len - c0 < cap ? len - c0 : cap) : 0;
        if (m) memcpy(res + (size_t)g * cap, (const char *)payload + c0, m);
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) goto fail;
        lt_hreq q;
        memset(&q, 0, sizeof q);
        q.kind = LT_HREQ_GATHER;
        q.count = (int64_t)((size_t)C * cap);
        st = lt_hostlink_call(w, &q, what);
        if (st != LT_OK) goto fail;
        for (int k = 0; k < N && buf; k++) {
            if (lens[k] <= c0) continue;
            size_t mk = lens[k] - c0 < cap ? lens[k] - c0 : cap;
            memcpy(buf + off[k] + c0, res + (size_t)k * cap, mk);
        }
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) goto fail;
    }
    if (oom) {
        size_t total = off[N];
        free(off);
        return lt_set_error(LT_ERR_OOM, "rendezvous: out of host memory "
                            "(%zu bytes)", total);
    }
    free(off);
    *all = buf;
    return LT_OK;
fail:
    free(buf);
    free(off);
    return st;
}
