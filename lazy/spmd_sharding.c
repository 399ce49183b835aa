/*
 * lazy/spmd_sharding.c — sharding objects, annotations on tensors, the
 * XLA-style text form, and the "sharding" report lines of a compile.
 * The forward rules live in spmd_propagate.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd.h"
#include "tensor.h"
#include "device.h"

/* ------------------------------------------------------------- rule names */

const char *lt_spmd_rule_name(lt_spmd_rule r)
{
    static const char *names[LT_SPMD_NUM_RULES] = {
        "ew", "contract", "reduce", "norm", "view", "gather", "conv", "collective", "opaque"};
    return (unsigned)r < LT_SPMD_NUM_RULES ? names[r] : "?";
}

/* ---------------------------------------------------------------- objects */

int lt_spmd_axes_count(int64_t code)
{
    int n = 0;
    while (code & 0xF) {
        n++;
        code >>= 4;
    }
    return n;
}

int lt_spmd_axes_get(int64_t code, int k)
{
    return (int)((code >> (4 * k)) & 0xF) - 1;
}

unsigned lt_spmd_axes_mask(int64_t code)
{
    unsigned m = 0;
    for (int k = 0, n = lt_spmd_axes_count(code); k < n; k++)
        m |= 1u << lt_spmd_axes_get(code, k);
    return m;
}

int64_t lt_spmd_code_shards(const int64_t *mesh_shape, int64_t code)
{
    int64_t n = 1;
    for (int k = 0, c = lt_spmd_axes_count(code); k < c; k++)
        n *= mesh_shape[lt_spmd_axes_get(code, k)];
    return n;
}

int64_t lt_spmd_dim_shards(const lt_sharding *s, int d)
{
    if (!s || d < 0 || d >= s->ndim) return 1;
    return lt_spmd_code_shards(s->mesh_shape, s->axes[d]);
}

static uint64_t sharding_hash(const lt_sharding *s)
{
    uint64_t h = 0x5348415244ULL;   /* "SHARD" */
    h = lt_hash_mix(h, (uint64_t)s->mesh_ndim);
    for (int i = 0; i < s->mesh_ndim; i++) h = lt_hash_mix(h, (uint64_t)s->mesh_shape[i]);
    for (int i = 0; i < s->n_dev; i++) h = lt_hash_mix(h, (uint64_t)s->dev[i]);
    h = lt_hash_mix(h, (uint64_t)s->ndim);
    for (int i = 0; i < s->ndim; i++) h = lt_hash_mix(h, (uint64_t)s->axes[i]);
    if (s->manual) h = lt_hash_mix(h, 0x4d414e55414cULL);   /* "MANUAL" */
    return h;
}

lt_sharding *lt_sharding_new_manual(const lt_sharding *mesh, int ndim, int n_cores)
{
    int64_t shape[LT_MAX_DIMS], ids[LT_SPMD_MAX_DEVICES], axes[LT_MAX_DIMS] = {0};
    int mnd = 1;
    if (mesh) {
        mnd = mesh->mesh_ndim;
        for (int a = 0; a < mnd; a++) shape[a] = mesh->mesh_shape[a];
        for (int q = 0; q < mesh->n_dev; q++) ids[q] = mesh->dev[q];
    } else {
        if (n_cores < 1) n_cores = 1;
        if (n_cores > LT_SPMD_MAX_DEVICES) n_cores = LT_SPMD_MAX_DEVICES;
        shape[0] = n_cores;
        for (int q = 0; q < n_cores; q++) ids[q] = q;
    }
    lt_sharding *s = NULL;
    if (lt_sharding_new(mnd, shape, ids, ndim, axes, mesh ? mesh->frame : NULL, &s) != LT_OK) return NULL;
    s->manual = 1;
    s->hash = sharding_hash(s);
    return s;
}

int lt_spmd_same_mesh(const lt_sharding *a, const lt_sharding *b)
{
    if (a == b) return 1;
    if (!a || !b || a->mesh_ndim != b->mesh_ndim || a->n_dev != b->n_dev) return 0;
    for (int k = 0; k < a->mesh_ndim; k++)
        if (a->mesh_shape[k] != b->mesh_shape[k]) return 0;
    for (int q = 0; q < a->n_dev; q++)
        if (a->dev[q] != b->dev[q]) return 0;
    return 1;
}

lt_status lt_sharding_new(int mesh_ndim, const int64_t *mesh_shape,
                          const int64_t *device_ids, int ndim,
                          const int64_t *dim_axes, const char *frame,
                          lt_sharding **out)
{
    if (!out) return lt_set_error(LT_ERR_ARG, "sharding: NULL out");
    *out = NULL;
    if (mesh_ndim < 1 || mesh_ndim > LT_MAX_DIMS || !mesh_shape || !device_ids)
        return lt_set_error(LT_ERR_ARG, "sharding: a mesh needs 1 to %d axes, got %d",
                            LT_MAX_DIMS, mesh_ndim);
    if (ndim < 0 || ndim > LT_MAX_DIMS || (ndim > 0 && !dim_axes))
        return lt_set_error(LT_ERR_ARG, "sharding: bad tensor rank %d", ndim);
    int64_t n = 1;
    for (int i = 0; i < mesh_ndim; i++) {
        if (mesh_shape[i] < 1 || mesh_shape[i] > LT_SPMD_MAX_DEVICES)
            return lt_set_error(LT_ERR_ARG, "sharding: mesh axis %d has size %lld",
                                i, (long long)mesh_shape[i]);
        n *= mesh_shape[i];
        if (n > LT_SPMD_MAX_DEVICES)
            return lt_set_error(LT_ERR_ARG, "sharding: a mesh of more than %d devices",
                                LT_SPMD_MAX_DEVICES);
    }
    uint64_t seen = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = device_ids[i];
        if (d < 0 || d >= LT_SPMD_MAX_DEVICES || (seen >> d & 1))
            return lt_set_error(LT_ERR_ARG, "sharding: device id %lld at mesh position %lld "
                                "is out of range or repeated", (long long)d, (long long)i);
        seen |= 1ULL << d;
    }
    unsigned used = 0;
    for (int d = 0; d < ndim; d++) {
        int64_t c = dim_axes[d];
        if (c < 0 || (c >> 16) != 0)
            return lt_set_error(LT_ERR_ARG, "sharding: dim %d: bad axes code %lld",
                                d, (long long)c);
        int k = 0;
        for (; k < 4 && ((c >> (4 * k)) & 0xF); k++) {
            int ax = lt_spmd_axes_get(c, k);
            if (ax >= mesh_ndim)
                return lt_set_error(LT_ERR_ARG, "sharding: dim %d is split over mesh axis %d "
                                    "of a mesh of %d axes", d, ax, mesh_ndim);
            if (used >> ax & 1)
                return lt_set_error(LT_ERR_ARG, "sharding: mesh axis %d splits two dims "
                                    "(or one twice)", ax);
            used |= 1u << ax;
        }
        if ((c >> (4 * k)) != 0)
            return lt_set_error(LT_ERR_ARG, "sharding: dim %d: axes code %lld has a gap",
                                d, (long long)c);
    }
    lt_sharding *s = calloc(1, sizeof *s);
    if (!s) return lt_set_error(LT_ERR_INTERNAL, "sharding: out of host memory");
    atomic_init(&s->refs, 1);
    s->mesh_ndim = mesh_ndim;
    for (int i = 0; i < mesh_ndim; i++) s->mesh_shape[i] = mesh_shape[i];
    s->n_dev = (int)n;
    for (int64_t i = 0; i < n; i++) s->dev[i] = (int16_t)device_ids[i];
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++) s->axes[d] = dim_axes[d];
    s->frame = frame && frame[0] ? strdup(frame) : NULL;
    s->hash = sharding_hash(s);
    *out = s;
    return LT_OK;
}

lt_sharding *lt_sharding_retain(lt_sharding *s)
{
    if (s) atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
    return s;
}

void lt_sharding_release(lt_sharding *s)
{
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
    free(s->frame);
    free(s);
}

int lt_sharding_encode(const lt_sharding *s, int64_t *buf, int cap)
{
    if (!s) return 0;
    int k = 0;
#define PUT(v) do { if (buf && k < cap) buf[k] = (int64_t)(v); k++; } while (0)
    PUT(s->mesh_ndim);
    for (int i = 0; i < s->mesh_ndim; i++) PUT(s->mesh_shape[i]);
    PUT(s->n_dev);
    for (int i = 0; i < s->n_dev; i++) PUT(s->dev[i]);
    PUT(s->ndim);
    for (int i = 0; i < s->ndim; i++) PUT(s->axes[i]);
    if (s->manual) PUT(-1);        /* MANUAL: one more entry */
#undef PUT
    return k;
}

char *lt_sharding_str(const lt_sharding *s, char *buf, size_t cap)
{
    if (!buf || cap == 0) return buf;
    buf[0] = 0;
    if (!s) return buf;
    if (s->manual) {
        snprintf(buf, cap, "{manual}");
        return buf;
    }
    int any = 0;
    for (int d = 0; d < s->ndim; d++) any |= s->axes[d] != 0;
    if (!any) {
        snprintf(buf, cap, "{replicated}");
        return buf;
    }
    /* tile assignment: the mesh transposed to (split axes in dim order,
     * then the unused axes), flattened */
    int perm[LT_MAX_DIMS], np = 0;
    unsigned used = 0;
    for (int d = 0; d < s->ndim; d++)
        for (int k = 0, c = lt_spmd_axes_count(s->axes[d]); k < c; k++) {
            perm[np++] = lt_spmd_axes_get(s->axes[d], k);
            used |= 1u << perm[np - 1];
        }
    int64_t rep = 1;
    for (int a = 0; a < s->mesh_ndim; a++)
        if (!(used >> a & 1)) {
            perm[np++] = a;
            rep *= s->mesh_shape[a];
        }
    size_t len = 0;
#define OUT(...) do { if (len < cap) len += (size_t)snprintf(buf + len, cap - len, __VA_ARGS__); } while (0)
    OUT("{devices=[");
    for (int d = 0; d < s->ndim; d++) OUT("%s%lld", d ? "," : "", (long long)lt_spmd_dim_shards(s, d));
    if (rep > 1) OUT(",%lld", (long long)rep);
    OUT("]");
    int64_t stride[LT_MAX_DIMS];
    int64_t acc = 1;
    for (int a = s->mesh_ndim - 1; a >= 0; a--) {
        stride[a] = acc;
        acc *= s->mesh_shape[a];
    }
    int64_t idx[LT_MAX_DIMS] = {0};
    for (int64_t i = 0; i < s->n_dev; i++) {
        int64_t pos = 0;
        for (int q = 0; q < np; q++) pos += idx[q] * stride[perm[q]];
        OUT("%s%d", i ? "," : "", s->dev[pos]);
        for (int q = np - 1; q >= 0; q--) {
            if (++idx[q] < s->mesh_shape[perm[q]]) break;
            idx[q] = 0;
        }
    }
    if (rep > 1) OUT(" last_tile_dim_replicate");
    OUT("}");
#undef OUT
    if (len >= cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
    return buf;
}

/* ------------------------------------------------------------ annotations */

lt_node *lt_node_with_sharding(lt_node *n, lt_sharding *s, int annotated)
{
    lt_node *m;
    if (n->op == LT_OP_scalar) {
        m = lt_node_new_scalar(n->value, (lt_dtype)n->dtype, n->core,
                               n->flags & ~LT_NODE_SHARD_ANNOT);
    } else if (n->op == LT_OP_data) {
        m = lt_node_new_data(lt_buffer_retain(n->buf), &n->shape, (lt_dtype)n->dtype, n->core);
        if (!m) lt_buffer_release(n->buf);
    } else {
        m = lt_node_new(n->op, n->in, n->n_in, &n->attrs, &n->shape, (lt_dtype)n->dtype,
                        n->core, n->flags & ~LT_NODE_SHARD_ANNOT);
        if (m && n->frame) m->frame = strdup(n->frame);
    }
    if (!m) return NULL;
    lt_sharding_release(m->shard);
    m->shard = lt_sharding_retain(s);
    /* a data value's annotation is its layout, not a constraint inside a
     * graph: unmarked, so the graph key of the next step (whose parameter
     * carries the propagated sharding) is the same */
    if (annotated && s && lt_node_is_pending(m)) m->flags |= LT_NODE_SHARD_ANNOT;
    lt_node_rehash(m);
    return m;
}

void lt_spmd_set_output(lt_node *out, const lt_spmd_plan_out *res, int k)
{
    if (!res->out_shard || k >= res->n_outputs || !res->out_shard[k]) return;
    lt_sharding_release(out->shard);
    out->shard = lt_sharding_retain(res->out_shard[k]);
    lt_node_rehash(out);
}

lt_status lt_tensor_set_sharding(lt_tensor *t, lt_sharding *s)
{
    if (!t) return lt_set_error(LT_ERR_ARG, "set_sharding: NULL tensor");
    if (s) {
        char a[96];
        if (s->ndim != t->shape.ndim)
            return lt_set_error(LT_ERR_SHAPE, "set_sharding: a sharding of %d dims for a "
                                "tensor of shape %s", s->ndim,
                                lt_shape_str(&t->shape, a, sizeof a));
    }
    lt_live_lock(t->core);
    lt_node *old = t->value;
    lt_node *nv = (old->shard == s) ? NULL : lt_node_with_sharding(old, s, s != NULL);
    if (nv) t->value = nv;
    lt_live_unlock(t->core);
    if (!nv) return old->shard == s ? LT_OK : LT_ERR_INTERNAL;
    lt_node_release(old);
    return LT_OK;
}

/* 1 when a and b say the same layout (the user's frame aside). */
static int sharding_same(const lt_sharding *a, const lt_sharding *b)
{
    if (a == b) return 1;
    if (!a || !b || a->hash != b->hash || a->ndim != b->ndim || a->manual != b->manual ||
        !lt_spmd_same_mesh(a, b))
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->axes[d] != b->axes[d]) return 0;
    return 1;
}

lt_sharding *lt_spmd_kept_sharding(const lt_node *old, const lt_node *nv)
{
    lt_sharding *s = old ? old->shard : NULL;
    if (!s || s->manual || !nv || s->ndim != nv->shape.ndim || sharding_same(s, nv->shard))
        return NULL;
    return s;
}

lt_status lt_tensor_keep_sharding(lt_tensor *t, lt_tensor *from)
{
    if (!t || !from) return lt_set_error(LT_ERR_ARG, "keep_sharding: NULL tensor");
    if (t == from) return LT_OK;
    lt_sharding *s = lt_tensor_sharding(from);
    lt_status st = LT_OK;
    if (s && !s->manual && s->ndim == t->shape.ndim) {
        lt_sharding *cur = lt_tensor_sharding(t);
        if (!sharding_same(s, cur)) st = lt_tensor_set_sharding(t, s);
        lt_sharding_release(cur);
    }
    lt_sharding_release(s);
    return st;
}

lt_sharding *lt_tensor_sharding(lt_tensor *t)
{
    if (!t) return NULL;
    lt_live_lock(t->core);
    lt_sharding *s = lt_sharding_retain(t->value->shard);
    lt_live_unlock(t->core);
    return s;
}
