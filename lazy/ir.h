/*
 * lazy/ir.h — immutable IR nodes.
 *
 * A node is one traced op: op, attributes, output shape and (storage) dtype,
 * refcounted references to its operands, and three hashes computed once at
 * creation:
 *   hash         node hash: op, attrs, dtype, shape, flags (+ value of a
 *                constant scalar). Not the operands.
 *   dag_hash     hash combined with the operands' dag_hash (structure + shapes)
 *   struct_hash  like dag_hash but without any shape (recompilation analysis:
 *                same structure, different shapes)
 * Leaves: LT_OP_data holds a device buffer; LT_OP_scalar holds a value, which
 * is a graph parameter unless LT_NODE_CONST (0, 1, -1 baked into the graph).
 */
#ifndef LT_IR_H
#define LT_IR_H

#include <stdatomic.h>
#include "lazytpu.h"

struct lt_buffer;
struct lt_fault;

enum {
    LT_NODE_WRAPPED = 1, /* a Python number: weak in dtype promotion */
    LT_NODE_CONST = 2    /* scalar value is part of the graph (0, 1, -1) */
};

typedef struct lt_node {
    atomic_int refs;
    uint16_t op;              /* lt_op */
    uint8_t dtype;            /* lt_dtype as stored on the device */
    uint8_t flags;            /* LT_NODE_* */
    int core;
    int n_in;
    lt_shape shape;
    lt_attrs attrs;
    uint64_t hash, dag_hash, struct_hash;
    struct lt_buffer *buf;    /* LT_OP_data: one owned reference */
    double value;             /* LT_OP_scalar */
    char *frame;              /* owned; the user's code that traced the node,
                                 recorded only for ops that check their input
                                 data at run time (lt_trace), else NULL */
    _Atomic(struct lt_fault *) fault;  /* owned; set (once, by a core's
                                 worker) when a program failed computing this
                                 node: see lt_node_set_fault */
    struct lt_sharding *shard; /* owned reference or NULL: the value's SPMD
                                 sharding, annotated or propagated (spmd.h);
                                 part of the node hash */
    struct lt_node **in;      /* n_in owned references (points at in_inline when n_in <= 3) */
    struct lt_node *in_inline[3];
    uint64_t cap_mark;        /* graph capture (graph.c): the capture that last */
    int cap_pos;              /* placed this node, and its position there */
    uint64_t seq;             /* creation order, process-wide: the user's program
                                 order, which the compiler's step order follows
                                 (compile_plan.c); not part of any hash */
} lt_node;

/* Creates a node holding one new reference to each input (inputs must be
 * non-NULL). Shape/dtype are the already-inferred output. Computes the hashes.
 * Returns NULL only on malloc failure (error set). Caller owns 1 reference. */
lt_node *lt_node_new(lt_op op, lt_node *const *in, int n_in,
                     const lt_attrs *attrs, const lt_shape *shape,
                     lt_dtype dtype, int core, int flags);
/* Leaf for a device buffer; takes over the caller's reference to buf. */
lt_node *lt_node_new_data(struct lt_buffer *buf, const lt_shape *shape,
                          lt_dtype dtype, int core);
/* Scalar leaf (0-dim). LT_NODE_CONST is added for 0, 1, -1. */
lt_node *lt_node_new_scalar(double value, lt_dtype dtype, int core, int flags);

/* Recomputes n's hashes after a field that they cover changed (its
 * sharding); only before n is shared with anyone. */
void lt_node_rehash(lt_node *n);
lt_node *lt_node_retain(lt_node *n);      /* NULL-safe, returns n */
/* A program failed computing n (its kernel found a bad value, or an input
 * of that step was poisoned): n's value is that failure. A later program
 * that contains n again (a value read synced only part of a graph, the
 * rest of it is synced later) fails at once with the same fault instead of
 * running, and failing, a second time (sync.c). The first fault set stays;
 * takes a new reference to f. */
void lt_node_set_fault(lt_node *n, struct lt_fault *f);
/* The fault set on n, or NULL (borrowed; valid while n is referenced). */
struct lt_fault *lt_node_fault(lt_node *n);
/* Drops one reference; frees the node and, iteratively (no recursion, chains
 * can be millions long), any operands that drop to zero. NULL-safe. */
void lt_node_release(lt_node *n);

/* 64-bit hash mixing used everywhere (stable across runs). */
uint64_t lt_hash_mix(uint64_t h, uint64_t v);
/* The same function, inlined for hot loops (capture, node creation). */
static inline uint64_t lt_hash_mix_inline(uint64_t h, uint64_t v)
{
    uint64_t k = v + 0x632BE59BD9B4E019ULL;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    h = (h << 27 | h >> 37) * 0x9E3779B97F4A7C15ULL;
    return h ^ k;
}
uint64_t lt_hash_bytes(uint64_t h, const void *p, size_t n);

#endif
