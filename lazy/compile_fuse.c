/*
 * lazy/compile_fuse.c — elementwise fusion and reduction absorption.
 *
 * Groups: walking nodes in post-order, an elementwise node joins the groups
 * of its elementwise operands that have the same shape and compute type
 * (several groups may merge through it), unless the merge would create a
 * cycle between steps (a path leaving one group through a non-member and
 * re-entering the other), checked by a bounded backwards search. Groups are
 * multi-output: a member that is also consumed outside the group (or is a
 * graph output) is stored, the rest stays in registers.
 *
 * Reductions: a reduce whose input is a member of a group absorbs the whole
 * group (one pass: evaluate the producer block-wise and accumulate) when the
 * group comes entirely before it, nobody else absorbed it, and any stores
 * the group must still make are in natural iteration order.
 */
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"

#define LT_FUSE_MAX_GROUP 192   /* members per group (bounds cycle checks) */
#define LT_FUSE_MAX_VISIT 4096  /* nodes visited per dependency search */

typedef struct fuse_state {
    int *head, *tail, *nxt;     /* member lists per root (unordered) */
    int *minpos;                /* per root */
} fuse_state;

/* Compute type of elementwise node i: f64 if any tensor input or the output
 * is f64, else f32 if any is a float, else i64. Wrapped (Python) scalars do
 * count only as "a float": f32 * 2.5 computes in f32, i64 == 2.5 in f32,
 * as in PyTorch. */
static lt_dtype node_ctype(lt_cctx *c, int i)
{
    lt_dtype dts[4];
    int n = 0;
    dts[n++] = lt_cc_node(c, i)->dtype;
    for (int k = 0; k < lt_cc_nin(c, i) && k < 3; k++) {
        const lt_node *q = lt_cc_node(c, lt_cc_in(c, i, k));
        if (q->op == LT_OP_scalar && (q->flags & (LT_NODE_WRAPPED | LT_NODE_CONST))) {
            /* a Python float promotes int tensors to the default f32 */
            if (q->dtype == LT_F64 || q->dtype == LT_F32 || q->dtype == LT_BF16)
                dts[n++] = LT_F32;
            continue;
        }
        dts[n++] = q->dtype;
    }
    return lt_fused_ctype(dts, n);
}

/* 1 if x (transitively) depends on a member of group g (root), 0 if not;
 * searches only positions >= lo; gives 1 when the search is too large. */
static int depends_on(lt_cctx *c, int x, int g, int lo)
{
    if (x < lo)
        return 0;
    int gen = ++c->mark_gen;
    int sp = 0, visits = 0;
    c->stack[sp++] = x;
    c->mark[x] = gen;
    while (sp) {
        int v = c->stack[--sp];
        if (c->cn[v].kind == CN_EW && lt_cc_group(c, v) == g)
            return 1;
        if (++visits > LT_FUSE_MAX_VISIT)
            return 1;
        for (int k = 0; k < lt_cc_nin(c, v); k++) {
            int q = lt_cc_in(c, v, k);
            if (q >= lo && c->mark[q] != gen) {
                c->mark[q] = gen;
                c->stack[sp++] = q;
            }
        }
    }
    return 0;
}

static int in_groups(lt_cctx *c, int q, int ga, int gb)
{
    if (c->cn[q].kind != CN_EW)
        return 0;
    int r = lt_cc_group(c, q);
    return r == ga || r == gb;
}

/* 1 if some operand of a member of `from` outside {from, other} depends on
 * group `other`. */
static int ext_depends(lt_cctx *c, fuse_state *fs, int from, int other)
{
    for (int m = fs->head[from]; m >= 0; m = fs->nxt[m])
        for (int k = 0; k < lt_cc_nin(c, m); k++) {
            int q = lt_cc_in(c, m, k);
            if (in_groups(c, q, from, other))
                continue;
            if (depends_on(c, q, other, fs->minpos[other]))
                return 1;
        }
    return 0;
}

static int merge(lt_cctx *c, fuse_state *fs, int a, int b)
{
    /* root = a; append b's members */
    c->uf[b] = a;
    c->gsize[a] += c->gsize[b];
    fs->nxt[fs->tail[a]] = fs->head[b];
    fs->tail[a] = fs->tail[b];
    if (fs->minpos[b] < fs->minpos[a])
        fs->minpos[a] = fs->minpos[b];
    return a;
}

static void form_groups(lt_cctx *c, fuse_state *fs)
{
    for (int i = 0; i < c->n; i++) {
        if (c->cn[i].kind != CN_EW)
            continue;
        c->cn[i].ctype = node_ctype(c, i);
        fs->head[i] = fs->tail[i] = i;
        fs->nxt[i] = -1;
        fs->minpos[i] = i;
        const lt_node *nd = lt_cc_node(c, i);
        int me = i;
        for (int k = 0; k < lt_cc_nin(c, i) && k < 3; k++) {
            int q = lt_cc_in(c, i, k);
            if (c->cn[q].kind != CN_EW)
                continue;
            int g = lt_cc_group(c, q);
            if (g == lt_cc_group(c, me))
                continue;
            if (c->cn[g].ctype != c->cn[i].ctype ||
                !lt_shape_equal(&lt_cc_node(c, q)->shape, &nd->shape) ||
                c->gsize[g] + c->gsize[me] > LT_FUSE_MAX_GROUP)
                continue;
            if (ext_depends(c, fs, me, g) || ext_depends(c, fs, g, me))
                continue;
            me = merge(c, fs, g, lt_cc_group(c, me));
        }
    }
}

/* Uses of each member from inside its own group. */
static void count_internal(lt_cctx *c, int *n_int)
{
    for (int i = 0; i < c->n; i++) {
        if (c->cn[i].kind != CN_EW)
            continue;
        int g = lt_cc_group(c, i);
        for (int k = 0; k < lt_cc_nin(c, i); k++) {
            int q = lt_cc_in(c, i, k);
            if (c->cn[q].kind == CN_EW && lt_cc_group(c, q) == g)
                n_int[q]++;
        }
    }
}

static int identity_perm(const lt_reduce_plan *pl)
{
    for (int k = 0; k < pl->ndim; k++)
        if (pl->perm[k] != k)
            return 0;
    return 1;
}

static void absorb_reductions(lt_cctx *c, fuse_state *fs, int *n_int)
{
    for (int i = 0; i < c->n; i++) {
        if (c->cn[i].kind != CN_REDUCE)
            continue;
        int p = lt_cc_in(c, i, 0);
        if (c->cn[p].kind != CN_EW)
            continue;
        int g = lt_cc_group(c, p);
        if (c->cn[g].absorbed_by >= 0)
            continue;
        const lt_node *rn = lt_cc_node(c, i);
        int stores = 0, late = 0;
        for (int m = fs->head[g]; m >= 0; m = fs->nxt[m]) {
            int ext = c->cn[m].n_users - n_int[m] - (m == p);
            if (ext > 0 || c->cn[m].output >= 0 || c->cn[m].has_pv)
                stores = 1;
            if (m > i)
                late = 1;
        }
        if (late)
            continue;
        if (stores) {
            lt_reduce_plan pl;
            if (lt_reduce_plan_make(rn->op, &rn->attrs,
                                    &lt_cc_node(c, p)->shape, &pl) != LT_OK ||
                !identity_perm(&pl))
                continue;
        }
        c->cn[g].absorbed_by = i;
        n_int[p]++;   /* the absorbed use is internal now */
    }
}

lt_status lt_cc_fuse(lt_cctx *c)
{
    int n1 = c->n ? c->n : 1;
    fuse_state fs;
    fs.head = malloc(n1 * sizeof(int));
    fs.tail = malloc(n1 * sizeof(int));
    fs.nxt = malloc(n1 * sizeof(int));
    fs.minpos = malloc(n1 * sizeof(int));
    int *n_int = calloc(n1, sizeof(int));
    lt_status st = LT_OK;
    if (!fs.head || !fs.tail || !fs.nxt || !fs.minpos || !n_int) {
        st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        goto done;
    }
    form_groups(c, &fs);
    count_internal(c, n_int);
    absorb_reductions(c, &fs, n_int);
    /* store every member needed outside its group (or as an output) */
    for (int i = 0; i < c->n && st == LT_OK; i++) {
        if (c->cn[i].kind != CN_EW)
            continue;
        if (c->cn[i].n_users - n_int[i] > 0 || c->cn[i].output >= 0)
            st = lt_cc_materialise(c, i);
    }
done:
    free(fs.head);
    free(fs.tail);
    free(fs.nxt);
    free(fs.minpos);
    free(n_int);
    return st;
}
