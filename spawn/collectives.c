/*
 * spawn/collectives.c — data movement of the collectives over the shared-
 * memory world (see world.h for the protocol and the failure model).
 *
 * Every collective: publish a descriptor, copy the first chunk of this
 * rank's input into its slot, barrier, check that all descriptors agree
 * (same verdict on every rank), then per chunk: work on the slots, barrier.
 * A slot is only rewritten after a barrier that follows every read of it,
 * so two barriers per chunk suffice and a rank may run ahead into the next
 * collective as soon as it has copied its result out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "reduce.h"
#include "world_int.h"

void lt_wdesc_init(lt_wdesc *d, int op, lt_dtype dt, int64_t count,
                   const lt_shape *shape)
{
    memset(d, 0, sizeof *d);
    d->op = op;
    d->dtype = dt;
    d->reduce = -1;
    d->count = count;
    if (shape) {
        d->shape = *shape;
    } else {
        d->shape.ndim = 1;
        d->shape.dims[0] = count;
    }
}

void lt_wdesc_check(lt_wdesc *d, const void *send, const void *recv,
                    int64_t n, lt_dtype dt)
{
    if (lt_dtype_size(dt) == 0)
        snprintf(d->bad, sizeof d->bad, "invalid dtype %d", (int)dt);
    else if (n < 0)
        snprintf(d->bad, sizeof d->bad, "negative element count %lld",
                 (long long)n);
    else if (n > 0 && (!send || !recv))
        snprintf(d->bad, sizeof d->bad, "NULL buffer");
}

/* ------------------------------------------------------------------ chunks */

/* (lt_chunker: see world_int.h) */
void lt_chunker_init(lt_chunker *c, int64_t outer, int64_t block, int64_t cap)
{
    memset(c, 0, sizeof *c);
    c->outer = outer;
    c->block = block;
    if (cap < 1) cap = 1;
    if (block <= cap) {
        c->cols_per = block;
        c->rows_per = block > 0 ? cap / block : outer;
    } else {
        c->cols_per = cap;
        c->rows_per = 1;
    }
    if (c->rows_per < 1) c->rows_per = 1;
}

/* Advances to the next chunk; the first call always yields one (maybe
 * empty) chunk so that the agreement barrier happens. Returns 0 at the end. */
int lt_chunker_next(lt_chunker *c)
{
    if (!c->started) {
        c->started = 1;
    } else {
        c->j0 += c->cols;
        if (c->j0 >= c->block || c->cols == 0) {
            c->j0 = 0;
            c->o0 += c->rows;
        }
        if (c->o0 >= c->outer || c->block == 0) return 0;
    }
    int64_t left_o = c->outer - c->o0, left_j = c->block - c->j0;
    c->rows = left_o < c->rows_per ? left_o : c->rows_per;
    c->cols = left_j < c->cols_per ? left_j : c->cols_per;
    if (c->rows < 0) c->rows = 0;
    if (c->cols < 0) c->cols = 0;
    return 1;
}

/* -------------------------------------------------------------- all_reduce */

/* A reduction with no world (one rank): recv = reduce(send) * scale. */
static lt_status reduce_alone(const char *what, const void *send, void *recv,
                              int64_t n, lt_dtype dtype,
                              lt_reduce_type reduce, double scale)
{
    if (n <= 0) return LT_OK;
    const void *src[1] = { send };
    if (lt_reduce_slots(recv, src, 1, n, dtype, reduce, scale) != LT_OK)
        return lt_set_error(LT_ERR_ARG, "%s: bad dtype %d or reduce type %d",
                            what, (int)dtype, (int)reduce);
    return LT_OK;
}

lt_status lt_world_all_reduce(lt_world *w, const void *send, void *recv,
                              int64_t n, lt_dtype dtype,
                              lt_reduce_type reduce, double scale,
                              const lt_shape *shape)
{
    const char *what = "all_reduce";
    if (!w)
        return reduce_alone(what, send, recv, n, dtype, reduce, scale);
    if (lt_world_multihost(w))
        return lt_hier_all_reduce(w, send, recv, n, dtype, reduce, scale,
                                  shape);
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_ALL_REDUCE, dtype, n, shape);
    d.reduce = reduce;
    lt_wdesc_check(&d, send, recv, n, dtype);
    if (!d.bad[0] && (reduce < LT_REDUCE_SUM || reduce > LT_REDUCE_OR))
        snprintf(d.bad, sizeof d.bad, "invalid reduce type %d", (int)reduce);
    size_t es = lt_dtype_size(dtype);
    int64_t cap = es ? (int64_t)(w->hdr->chunk_bytes / es) : 0;
    int N = w->size, me = w->rank;
    unsigned char *res = lt_world_slot(w, N);
    lt_world_publish(w, &d);
    int first = 1;
    for (int64_t c0 = 0;; c0 += cap) {
        int64_t m = n - c0 < cap ? n - c0 : cap;
        if (m < 0 || d.bad[0]) m = 0;
        if (m) memcpy(lt_world_slot(w, me), (const char *)send + c0 * es,
                      (size_t)m * es);
        lt_status st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        if (first) {
            first = 0;
            st = lt_world_verify(w, what);
            if (st != LT_OK) return st;
        }
        int64_t lo = m * me / N, hi = m * (me + 1) / N;
        if (hi > lo) {
            const void *srcs[LT_WORLD_MAX_RANKS];
            for (int k = 0; k < N; k++)
                srcs[k] = lt_world_slot(w, k) + lo * es;
            lt_reduce_slots(res + lo * es, srcs, N, hi - lo, dtype, reduce,
                            scale);
        }
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        if (m) memcpy((char *)recv + c0 * es, res, (size_t)m * es);
        if (c0 + m >= n) break;
    }
    return LT_OK;
}

/* -------------------------------------------------------------- all_gather */

lt_status lt_world_all_gather(lt_world *w, const void *send, void *recv,
                              int64_t outer, int64_t block, lt_dtype dtype,
                              const lt_shape *shape)
{
    const char *what = "all_gather";
    int64_t n = outer * block;
    if (!w) {
        if (n > 0 && send != recv)
            memmove(recv, send, (size_t)n * lt_dtype_size(dtype));
        return LT_OK;
    }
    if (lt_world_multihost(w))
        return lt_hier_all_gather(w, send, recv, outer, block, dtype, shape);
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_ALL_GATHER, dtype, n, shape);
    d.outer = outer;
    d.block = block;
    lt_wdesc_check(&d, send, recv, n, dtype);
    if (!d.bad[0] && (outer < 0 || block < 0))
        snprintf(d.bad, sizeof d.bad, "negative view [%lld][%lld]",
                 (long long)outer, (long long)block);
    size_t es = lt_dtype_size(dtype);
    int64_t cap = es ? (int64_t)(w->hdr->chunk_bytes / es) : 1;
    int N = w->size, me = w->rank;
    lt_world_publish(w, &d);
    lt_chunker c;
    lt_chunker_init(&c, d.bad[0] ? 0 : outer, d.bad[0] ? 0 : block, cap);
    int first = 1;
    while (lt_chunker_next(&c)) {
        unsigned char *mine = lt_world_slot(w, me);
        for (int64_t i = 0; i < c.rows && c.cols > 0; i++)
            memcpy(mine + (size_t)(i * c.cols) * es,
                   (const char *)send + (size_t)((c.o0 + i) * block + c.j0) * es,
                   (size_t)c.cols * es);
        lt_status st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        if (first) {
            first = 0;
            st = lt_world_verify(w, what);
            if (st != LT_OK) return st;
        }
        for (int r = 0; r < N && c.cols > 0; r++) {
            const unsigned char *slot = lt_world_slot(w, r);
            for (int64_t i = 0; i < c.rows; i++)
                memcpy((char *)recv +
                           (size_t)(((c.o0 + i) * N + r) * block + c.j0) * es,
                       slot + (size_t)(i * c.cols) * es, (size_t)c.cols * es);
        }
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
    }
    return LT_OK;
}

/* ---------------------------------------------------------- reduce_scatter */

lt_status lt_world_reduce_scatter(lt_world *w, const void *send, void *recv,
                                  int64_t outer, int64_t block, lt_dtype dtype,
                                  lt_reduce_type reduce, double scale,
                                  const lt_shape *shape)
{
    const char *what = "reduce_scatter";
    int N = w ? w->size : 1;
    int64_t n = outer * block;   /* output elements */
    if (!w)
        return reduce_alone(what, send, recv, n, dtype, reduce, scale);
    if (lt_world_multihost(w))
        return lt_hier_reduce_scatter(w, send, recv, outer, block, dtype,
                                      reduce, scale, shape);
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_REDUCE_SCATTER, dtype, n * N, shape);
    d.reduce = reduce;
    d.outer = outer;
    d.block = block;
    lt_wdesc_check(&d, send, recv, n, dtype);
    if (!d.bad[0] && (reduce < LT_REDUCE_SUM || reduce > LT_REDUCE_OR))
        snprintf(d.bad, sizeof d.bad, "invalid reduce type %d", (int)reduce);
    if (!d.bad[0] && (outer < 0 || block < 0))
        snprintf(d.bad, sizeof d.bad, "negative view [%lld][%lld]",
                 (long long)outer, (long long)block);
    size_t es = lt_dtype_size(dtype);
    int64_t cap = es ? (int64_t)(w->hdr->chunk_bytes / es) / N : 1;
    int me = w->rank;
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
        lt_status st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        if (first) {
            first = 0;
            st = lt_world_verify(w, what);
            if (st != LT_OK) return st;
        }
        for (int64_t i = 0; i < c.rows && c.cols > 0; i++) {
            const void *srcs[LT_WORLD_MAX_RANKS];
            for (int k = 0; k < N; k++)
                srcs[k] = lt_world_slot(w, k) + (size_t)((i * N + me) * c.cols) * es;
            lt_reduce_slots((char *)recv + (size_t)((c.o0 + i) * block + c.j0) * es,
                            srcs, N, c.cols, dtype, reduce, scale);
        }
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
    }
    return LT_OK;
}

/* --------------------------------------------------------------- broadcast */

lt_status lt_world_broadcast(lt_world *w, const void *send, void *recv,
                             int64_t n, lt_dtype dtype, int root,
                             const lt_shape *shape)
{
    const char *what = "broadcast";
    size_t es = lt_dtype_size(dtype);
    if (!w) {
        if (root != 0)
            return lt_set_error(LT_ERR_ARG, "broadcast: root %d but the world "
                                "has 1 rank", root);
        if (n > 0 && send != recv) memmove(recv, send, (size_t)n * es);
        return LT_OK;
    }
    if (lt_world_multihost(w))
        return lt_hier_broadcast(w, send, recv, n, dtype, root, shape);
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_BROADCAST, dtype, n, shape);
    d.arg = root;
    lt_wdesc_check(&d, send, recv, n, dtype);
    int N = w->size, me = w->rank;
    if (!d.bad[0] && (root < 0 || root >= N))
        snprintf(d.bad, sizeof d.bad, "root %d out of range 0..%d", root, N - 1);
    int64_t cap = es ? (int64_t)(w->hdr->chunk_bytes / es) : 0;
    lt_world_publish(w, &d);
    int first = 1;
    for (int64_t c0 = 0;; c0 += cap) {
        int64_t m = n - c0 < cap ? n - c0 : cap;
        if (m < 0 || d.bad[0]) m = 0;
        if (m && me == root)
            memcpy(lt_world_slot(w, root), (const char *)send + c0 * es,
                   (size_t)m * es);
        lt_status st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        if (first) {
            first = 0;
            st = lt_world_verify(w, what);
            if (st != LT_OK) return st;
        }
        if (m && (me != root || send != recv))
            memcpy((char *)recv + c0 * es, lt_world_slot(w, root),
                   (size_t)m * es);
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) return st;
        if (c0 + m >= n) break;
    }
    return LT_OK;
}

/* ---------------------------------------------------------------- exchange */

lt_status lt_world_exchange(lt_world *w, const char *tag, const void *payload,
                            size_t len, void **all, size_t *lens)
{
    const char *what = "rendezvous";
    *all = NULL;
    if (!w) {
        lens[0] = len;
        if (len) {
            *all = malloc(len);
            if (!*all) return lt_set_error(LT_ERR_OOM, "rendezvous: out of "
                                           "host memory (%zu bytes)", len);
            memcpy(*all, payload, len);
        }
        return LT_OK;
    }
    if (lt_world_multihost(w))
        return lt_hier_exchange(w, tag, payload, len, all, lens);
    lt_wdesc d;
    lt_wdesc_init(&d, LT_WOP_EXCHANGE, LT_BOOL, (int64_t)len, NULL);
    if (!tag) tag = "";
    if (strlen(tag) >= LT_WORLD_TAG_MAX)
        snprintf(d.bad, sizeof d.bad, "tag '%.40s...' longer than %d chars",
                 tag, LT_WORLD_TAG_MAX - 1);
    else if (len && !payload)
        snprintf(d.bad, sizeof d.bad, "NULL payload of %zu bytes", len);
    snprintf(d.tag, sizeof d.tag, "%.*s", LT_WORLD_TAG_MAX - 1, tag);
    int N = w->size, me = w->rank;
    size_t cap = w->hdr->slot_bytes;
    size_t off[LT_WORLD_MAX_RANKS + 1];
    size_t maxlen = 0;
    unsigned char *buf = NULL;
    int oom = 0;
    lt_world_publish(w, &d);
    for (size_t c0 = 0;; c0 += cap) {
        size_t mylen = d.bad[0] ? 0 : len;
        size_t m = mylen > c0 ? (mylen - c0 < cap ? mylen - c0 : cap) : 0;
        if (m) memcpy(lt_world_slot(w, me), (const char *)payload + c0, m);
        lt_status st = lt_world_wait_all(w, what);
        if (st != LT_OK) goto fail;
        if (c0 == 0) {
            st = lt_world_verify(w, what);
            if (st != LT_OK) return st;
            off[0] = 0;
            for (int k = 0; k < N; k++) {
                lens[k] = (size_t)w->hdr->desc[k].count;
                off[k + 1] = off[k] + lens[k];
                if (lens[k] > maxlen) maxlen = lens[k];
            }
            if (off[N]) {
                buf = malloc(off[N]);
                oom = buf == NULL;
            }
        }
        for (int k = 0; k < N && buf; k++) {
            if (lens[k] <= c0) continue;
            size_t mk = lens[k] - c0 < cap ? lens[k] - c0 : cap;
            memcpy(buf + off[k] + c0, lt_world_slot(w, k), mk);
        }
        st = lt_world_wait_all(w, what);
        if (st != LT_OK) goto fail;
        if (c0 + cap >= maxlen) break;
    }
    if (oom)
        return lt_set_error(LT_ERR_OOM, "rendezvous: out of host memory "
                            "(%zu bytes)", off[N]);
    *all = buf;
    return LT_OK;
fail:
    free(buf);
    return LT_ERR_COLLECTIVE;
}
