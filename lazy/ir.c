/*
 * lazy/ir.c — IR nodes: creation with hashes, refcounting, iterative release.
 */
#include <stdlib.h>
#include <string.h>
#include "ir.h"
#include "device.h"
#include "fault.h"
#include "spmd.h"

/* ------------------------------------------------------------------ hashing */

uint64_t lt_hash_mix(uint64_t h, uint64_t v)
{
    /* order-dependent: rotate the state, add the mixed value */
    return lt_hash_mix_inline(h, v);
}

uint64_t lt_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, b + i, 8);
        h = lt_hash_mix(h, v);
    }
    if (i < n) {
        uint64_t v = 0;
        memcpy(&v, b + i, n - i);
        h = lt_hash_mix(h, v ^ ((uint64_t)(n - i) << 56));
    }
    return lt_hash_mix(h, n);
}

static uint64_t dbl_bits(double d)
{
    uint64_t u;
    if (d == 0) d = 0;   /* -0.0 and 0.0 hash alike */
    memcpy(&u, &d, 8);
    return u;
}

/* Node hash: op, attrs (n used entries + f), dtype, shape, flags, const value. */
static void node_hashes(lt_node *n)
{
    uint64_t h = 0x4C54u;   /* "LT" */
    h = lt_hash_mix_inline(h, n->op);
    h = lt_hash_mix_inline(h, n->dtype);
    h = lt_hash_mix_inline(h, n->flags);
    h = lt_hash_mix_inline(h, (uint64_t)n->attrs.n);
    for (int i = 0; i < n->attrs.n; i++) h = lt_hash_mix_inline(h, (uint64_t)n->attrs.i[i]);
    h = lt_hash_mix_inline(h, dbl_bits(n->attrs.f[0]));
    h = lt_hash_mix_inline(h, dbl_bits(n->attrs.f[1]));
    if (n->op == LT_OP_scalar && (n->flags & LT_NODE_CONST))
        h = lt_hash_mix_inline(h, dbl_bits(n->value));
    /* struct part: everything above except shapes and attributes (attrs of
     * views and conv backward carry sizes) */
    uint64_t s = 0x5354u;
    s = lt_hash_mix_inline(s, n->op);
    s = lt_hash_mix_inline(s, n->dtype);
    s = lt_hash_mix_inline(s, n->flags);
    if (n->op == LT_OP_scalar && (n->flags & LT_NODE_CONST))
        s = lt_hash_mix_inline(s, dbl_bits(n->value));
    h = lt_hash_mix_inline(h, (uint64_t)n->shape.ndim);
    for (int d = 0; d < n->shape.ndim; d++) h = lt_hash_mix_inline(h, (uint64_t)n->shape.dims[d]);
    if (n->shard) h = lt_hash_mix_inline(h, n->shard->hash);
    n->hash = h;
    uint64_t dh = lt_hash_mix_inline(h, (uint64_t)n->n_in);
    uint64_t sh = lt_hash_mix_inline(s, (uint64_t)n->n_in);
    for (int i = 0; i < n->n_in; i++) {
        dh = lt_hash_mix_inline(dh, n->in[i]->dag_hash);
        sh = lt_hash_mix_inline(sh, n->in[i]->struct_hash);
    }
    n->dag_hash = dh;
    n->struct_hash = sh;
}

/* ------------------------------------------------------------------- nodes */

static _Atomic uint64_t g_node_seq;   /* lt_node.seq */

static lt_node *node_alloc(int n_in)
{
    lt_node *n;
    if (n_in <= 3) {
        n = malloc(sizeof *n);
        if (!n) return NULL;
        n->in = n->in_inline;
    } else {
        n = malloc(sizeof *n + (size_t)n_in * sizeof(lt_node *));
        if (!n) return NULL;
        n->in = (lt_node **)(n + 1);
    }
    n->cap_mark = 0;
    n->cap_pos = -1;
    n->seq = atomic_fetch_add_explicit(&g_node_seq, 1, memory_order_relaxed);
    return n;
}

lt_node *lt_node_new(lt_op op, lt_node *const *in, int n_in,
                     const lt_attrs *attrs, const lt_shape *shape,
                     lt_dtype dtype, int core, int flags)
{
    lt_node *n = node_alloc(n_in);
    if (!n) {
        lt_set_error(LT_ERR_INTERNAL, "%s: out of host memory", lt_op_name(op));
        return NULL;
    }
    atomic_init(&n->refs, 1);
    n->op = (uint16_t)op;
    n->dtype = (uint8_t)dtype;
    n->flags = (uint8_t)flags;
    n->core = core;
    n->n_in = n_in;
    n->shape = *shape;
    for (int d = shape->ndim; d < LT_MAX_DIMS; d++) n->shape.dims[d] = 0;
    if (attrs) {
        n->attrs.n = attrs->n;
        memcpy(n->attrs.i, attrs->i, (size_t)attrs->n * sizeof(int64_t));
        memset(n->attrs.i + attrs->n, 0, (size_t)(LT_MAX_ATTRS - attrs->n) * sizeof(int64_t));
        n->attrs.f[0] = attrs->f[0];
        n->attrs.f[1] = attrs->f[1];
    } else {
        memset(&n->attrs, 0, sizeof n->attrs);
    }
    n->buf = NULL;
    n->value = 0;
    n->frame = NULL;
    atomic_init(&n->fault, NULL);
    n->shard = NULL;
    int sharded = 0;
    for (int i = 0; i < n_in; i++) {
        n->in[i] = in[i];
        atomic_fetch_add_explicit(&in[i]->refs, 1, memory_order_relaxed);
        sharded |= in[i]->shard != NULL;
    }
    if (sharded) n->shard = lt_spmd_forward(op, &n->attrs, n->in, n_in, &n->shape);
    node_hashes(n);
    return n;
}

lt_node *lt_node_new_data(struct lt_buffer *buf, const lt_shape *shape,
                          lt_dtype dtype, int core)
{
    lt_node *n = lt_node_new(LT_OP_data, NULL, 0, NULL, shape, dtype, core, 0);
    if (n) n->buf = buf;
    return n;
}

lt_node *lt_node_new_scalar(double value, lt_dtype dtype, int core, int flags)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    if (value == 0 || value == 1 || value == -1) flags |= LT_NODE_CONST;
    else flags &= ~LT_NODE_CONST;
    lt_node *n = node_alloc(0);
    if (!n) {
        lt_set_error(LT_ERR_INTERNAL, "scalar: out of host memory");
        return NULL;
    }
    atomic_init(&n->refs, 1);
    n->op = LT_OP_scalar;
    n->dtype = (uint8_t)dtype;
    n->flags = (uint8_t)flags;
    n->core = core;
    n->n_in = 0;
    n->shape = s;
    memset(&n->attrs, 0, sizeof n->attrs);
    n->buf = NULL;
    n->value = value;
    n->frame = NULL;
    n->shard = NULL;
    atomic_init(&n->fault, NULL);
    node_hashes(n);
    return n;
}

void lt_node_rehash(lt_node *n) { node_hashes(n); }

lt_node *lt_node_retain(lt_node *n)
{
    if (n) atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
    return n;
}

static int node_unref(lt_node *n)
{
    return atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1;
}

static void node_free_one(lt_node *n)
{
    if (n->buf) lt_buffer_release(n->buf);
    lt_sharding_release(n->shard);
    lt_fault_release(atomic_load(&n->fault));
    free(n->frame);
    free(n);
}

void lt_node_set_fault(lt_node *n, struct lt_fault *f)
{
    if (!n || !f) return;
    lt_fault *none = NULL;
    lt_fault_retain(f);
    if (!atomic_compare_exchange_strong(&n->fault, &none, f)) lt_fault_release(f);
}

struct lt_fault *lt_node_fault(lt_node *n)
{
    return n ? atomic_load_explicit(&n->fault, memory_order_acquire) : NULL;
}

void lt_node_release(lt_node *n)
{
    if (!n || !node_unref(n)) return;
    /* Explicit stack of nodes whose count reached zero. */
    lt_node *small[64];
    lt_node **stack = small;
    size_t cap = 64, top = 0;
    stack[top++] = n;
    while (top > 0) {
        lt_node *x = stack[--top];
        for (int i = 0; i < x->n_in; i++) {
            lt_node *c = x->in[i];
            if (!node_unref(c)) continue;
            if (top == cap) {
                size_t ncap = cap * 2;
                lt_node **ns = malloc(ncap * sizeof *ns);
                if (!ns) {
                    /* cannot grow: leak rather than recurse (never expected) */
                    continue;
                }
                memcpy(ns, stack, top * sizeof *ns);
                if (stack != small) free(stack);
                stack = ns;
                cap = ncap;
            }
            stack[top++] = c;
        }
        node_free_one(x);
    }
    if (stack != small) free(stack);
}
