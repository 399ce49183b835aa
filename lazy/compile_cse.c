/*
 * lazy/compile_cse.c — common subexpression elimination and dead code
 * elimination over a captured graph.
 *
 * CSE key: node hash + canonical operand positions; candidates are compared
 * in full (op, dtype, shape, attrs, flags, scalar value, operands) so hash
 * collisions never merge different nodes. Parameters (data leaves, scalar
 * parameters), random and collective ops are never merged. DCE keeps what
 * the outputs reach. One forward and one backward pass, no recursion.
 * Optimization barriers are never merged either: computation on a barrier's
 * value stays distinct from the same computation on its input (activation
 * checkpointing's recomputation), since the barrier is a node of its own.
 *
 * Algebraic identities are folded in the same forward pass by making the
 * node's representative its operand: x op u for a binary op whose identity
 * u is given by ops.def's ident column (x + 0, 0 + x, x - 0, x * 1, 1 * x,
 * x / 1), where u is a constant scalar (LT_NODE_CONST) seen through
 * any movement ops (e.g. zero_grad's expand(0) + grad), and only when the
 * result has x's shape and dtype (else a broadcast or cast is still
 * needed). x + 0 turns -0 into +0 in IEEE arithmetic; that sign is dropped.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"
#include "ops.h"

static int mergeable(const lt_node *n)
{
    if (n->op == LT_OP_data)
        return 0;
    if (n->op == LT_OP_scalar && !(n->flags & LT_NODE_CONST))
        return 0;
    lt_op_kind k = lt_op_kind_of(n->op);
    return k != LT_KIND_RANDOM && k != LT_KIND_COLLECTIVE && k != LT_KIND_BARRIER;
}

/* 1 if canonical position q is the constant `value` (a constant scalar,
 * possibly under movement ops: every element of a view of it is it). */
static int is_const_value(const lt_cctx *c, int q, double value)
{
    for (int guard = 0; guard < 64; guard++) {
        const lt_node *n = lt_cc_node(c, q);
        if (n->op == LT_OP_scalar)
            return (n->flags & LT_NODE_CONST) && n->value == value;
        if (lt_op_kind_of(n->op) != LT_KIND_MOVEMENT || lt_cc_nin(c, q) != 1)
            return 0;
        q = lt_cc_in(c, q, 0);
    }
    return 0;
}

/* The canonical operand node i reduces to by an identity (see top), or -1. */
static int identity_operand(const lt_cctx *c, int i)
{
    const lt_node *nd = lt_cc_node(c, i);
    double unit;
    int commutes = 1;
    if (lt_op_kind_of(nd->op) != LT_KIND_BINARY)
        return -1;
    switch (lt_op_ident_of(nd->op)) {   /* ops.def's ident column */
    case LT_IDENT_zero_r: commutes = 0; /* fall through */
    case LT_IDENT_zero: unit = 0; break;
    case LT_IDENT_one_r: commutes = 0; /* fall through */
    case LT_IDENT_one: unit = 1; break;
    case LT_IDENT_lowest: unit = -INFINITY; break;
    case LT_IDENT_highest: unit = INFINITY; break;
    default: return -1;
    }
    if (lt_cc_nin(c, i) != 2)
        return -1;
    for (int k = 0; k < 2; k++) {
        if (k == 0 && !commutes)
            continue;
        int x = lt_cc_in(c, i, 1 - k), u = lt_cc_in(c, i, k);
        const lt_node *xn = lt_cc_node(c, x);
        if (xn->dtype == nd->dtype && lt_shape_equal(&xn->shape, &nd->shape) &&
            is_const_value(c, u, unit))
            return x;
    }
    return -1;
}

static int same_node(const lt_cctx *c, int a, int b)
{
    const lt_node *x = lt_cc_node(c, a), *y = lt_cc_node(c, b);
    if (x->op != y->op || x->dtype != y->dtype || x->flags != y->flags ||
        x->n_in != y->n_in || !lt_shape_equal(&x->shape, &y->shape))
        return 0;
    if (x->attrs.n != y->attrs.n ||
        memcmp(x->attrs.i, y->attrs.i, x->attrs.n * sizeof(int64_t)) ||
        memcmp(x->attrs.f, y->attrs.f, sizeof x->attrs.f))
        return 0;
    if (x->op == LT_OP_scalar && memcmp(&x->value, &y->value, sizeof(double)))
        return 0;
    int na = lt_cc_nin(c, a);
    if (na != lt_cc_nin(c, b))
        return 0;
    for (int k = 0; k < na; k++)
        if (lt_cc_in(c, a, k) != lt_cc_in(c, b, k))
            return 0;
    return 1;
}

lt_status lt_cc_cse(lt_cctx *c)
{
    int n = c->n;
    int cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    int *table = malloc(cap * sizeof *table);
    uint8_t *live = calloc(n ? n : 1, 1);
    if (!table || !live) {
        free(table);
        free(live);
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    for (int i = 0; i < cap; i++)
        table[i] = -1;
    for (int i = 0; i < n; i++) {
        c->cn[i].canon = i;
        const lt_node *nd = lt_cc_node(c, i);
        if (!mergeable(nd))
            continue;
        int x = identity_operand(c, i);
        if (x >= 0) {
            c->cn[i].canon = x;   /* x is canonical: operands come first */
            continue;
        }
        uint64_t h = lt_hash_mix(nd->hash, (uint64_t)nd->op);
        for (int k = 0; k < lt_cc_nin(c, i); k++)
            h = lt_hash_mix(h, (uint64_t)lt_cc_in(c, i, k) + 1);
        size_t slot = h & (cap - 1);
        for (;;) {
            int j = table[slot];
            if (j < 0) {
                table[slot] = i;
                break;
            }
            if (same_node(c, i, j)) {
                c->cn[i].canon = j;
                break;
            }
            slot = (slot + 1) & (cap - 1);
        }
    }
    free(table);
    /* DCE: outputs and, backwards, the operands of live nodes */
    for (int k = 0; k < c->g->n_outputs; k++)
        live[c->cn[c->g->output_pos[k]].canon] = 1;
    for (int i = n - 1; i >= 0; i--) {
        c->cn[i].kind = CN_DEAD;
        c->cn[i].output = -1;
        c->cn[i].buf = -1;
        c->cn[i].step = -1;
        c->cn[i].absorbed_by = -1;
        if (!live[i] || c->cn[i].canon != i)
            continue;
        for (int k = 0; k < lt_cc_nin(c, i); k++) {
            int p = lt_cc_in(c, i, k);
            live[p] = 1;
            c->cn[p].n_users++;
        }
    }
    for (int i = 0; i < n; i++)
        if (live[i] && c->cn[i].canon == i)
            c->cn[i].kind = -1;   /* live, classified by lt_cc_views */
    for (int k = 0; k < c->g->n_outputs; k++) {
        int p = c->cn[c->g->output_pos[k]].canon;
        if (c->cn[p].output < 0)
            c->cn[p].output = k;
    }
    free(live);
    return LT_OK;
}
