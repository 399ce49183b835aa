/*
 * lazy/buffer_parts.c — values held as per-core parts (SPMD: each core of a
 * mesh keeps its shard): the parts record, assembling the global value once
 * when a reader or a one-core program needs it, and the storage identity of
 * two part-held buffers. The buffer records and their accounting are
 * device.c's (lt_buffer_new_parts, lt_buffer_adopt).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "device.h"

lt_buffer_parts *lt_buffer_parts_new(int n)
{
    lt_buffer_parts *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n;
    p->part = calloc((size_t)n, sizeof *p->part);
    p->off = calloc((size_t)n, sizeof *p->off);
    p->owner = calloc((size_t)n, 1);
    if (!p->part || !p->off || !p->owner) {
        lt_buffer_parts_free(p);
        return NULL;
    }
    return p;
}

void lt_buffer_parts_free(lt_buffer_parts *p)
{
    if (!p)
        return;
    for (int q = 0; q < p->n && p->part; q++)
        lt_buffer_release(p->part[q]);
    free(p->part);
    free(p->off);
    free(p->owner);
    free(p);
}

void lt_buffer_parts_assemble(const lt_buffer_parts *p, size_t es, void *dst)
{
    int nd = p->ndim;
    int64_t rows = 1, run = nd ? p->ldims[nd - 1] : 1;
    for (int d = 0; d + 1 < nd; d++)
        rows *= p->ldims[d];
    for (int q = 0; q < p->n; q++) {
        if (!p->owner[q])
            continue;
        const char *src = p->part[q]->data;
        int64_t idx[LT_MAX_DIMS] = {0};
        for (int64_t r = 0; r < rows; r++) {
            int64_t go = 0;
            for (int d = 0; d < nd; d++)
                go = go * p->dims[d] + p->off[q][d] + (d + 1 < nd ? idx[d] : 0);
            memcpy((char *)dst + (size_t)go * es, src + (size_t)(r * run) * es, (size_t)run * es);
            for (int d = nd - 2; d >= 0; d--) {
                if (++idx[d] < p->ldims[d])
                    break;
                idx[d] = 0;
            }
        }
    }
}

static pthread_mutex_t g_whole_mu = PTHREAD_MUTEX_INITIALIZER;

lt_status lt_buffer_whole(lt_buffer *b)
{
    if (!b || !b->parts)
        return LT_OK;
    if (b->parts->manual)
        return lt_set_error(LT_ERR_SHAPE, "a manual-sharded value (per-core values of a manual "
                            "region, %lld elements per core) has no whole value to read or to "
                            "run on one core: pass it through disable_manual_sharding / "
                            "_spmd_shard_to_full_shape first (XLA cannot read it either)",
                            (long long)b->numel);
    pthread_mutex_lock(&g_whole_mu);
    lt_status st = LT_OK;
    if (!b->data) {
        lt_buffer *t = NULL;
        st = lt_buffer_alloc(b->core, b->dtype, b->numel, &t);
        if (st == LT_OK) {
            lt_buffer_parts_assemble(b->parts, lt_dtype_size(b->dtype), t->data);
            lt_buffer_adopt(b, t);
        }
    }
    pthread_mutex_unlock(&g_whole_mu);
    return st;
}

int lt_buffer_same_storage(lt_buffer *a, lt_buffer *b)
{
    if (a == b)
        return a != NULL;
    if (!a || !b || a->dtype != b->dtype || a->numel != b->numel)
        return 0;
    pthread_mutex_lock(&g_whole_mu);
    const lt_buffer_parts *p = a->parts, *q = b->parts;
    int same = p && q && p->n == q->n && p->ndim == q->ndim &&
               p->layout_key == q->layout_key;
    for (int d = 0; same && d < p->ndim; d++)
        same = p->dims[d] == q->dims[d] && p->ldims[d] == q->ldims[d];
    for (int k = 0; same && k < p->n; k++)
        same = p->part[k] == q->part[k];
    pthread_mutex_unlock(&g_whole_mu);
    return same;
}

lt_status lt_buffer_unpart(lt_buffer *b)
{
    lt_status st = lt_buffer_whole(b);
    if (st != LT_OK || !b || !b->parts)
        return st;
    pthread_mutex_lock(&g_whole_mu);
    lt_buffer_parts *p = b->parts;
    b->parts = NULL;
    pthread_mutex_unlock(&g_whole_mu);
    lt_buffer_parts_free(p);
    return LT_OK;
}
