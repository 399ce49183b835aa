/*
 * lazy/compile_fuse.c — elementwise fusion and reduction absorption.
 *
 * Groups: walking nodes in post-order, an elementwise node joins the groups
 * of its elementwise operands that have the same shape and compute type
 * (several groups may merge through it), unless the merge would create a
 * cycle between steps (a path leaving one group through a non-member and
 * re-entering the other), checked by a bounded backwards search. Groups are
 * multi-output: a member that is also consumed outside the group (or is a
 * graph output) is stored, the rest stays in registers. A small, cheap
 * group of a smaller (broadcast) shape used only by one consumer is
 * recomputed inside the consumer's group instead of being materialised:
 * its loads are broadcast to the consumer's shape.
 *
 * Reductions: a reduce whose input is a member of a group absorbs the whole
 * group (one pass: evaluate the producer block-wise and accumulate) when the
 * group comes entirely before it, nobody else absorbed it, and any stores
 * the group must still make are in natural iteration order.
 */
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"
#include "ops.h"

#define LT_FUSE_MAX_GROUP 192   /* members per group (bounds cycle checks) */
#define LT_FUSE_MAX_VISIT 4096  /* nodes visited per dependency search */

typedef struct fuse_state {
    int *head, *tail, *nxt;     /* member lists per root (unordered) */
    int *minpos;                /* per root */
    uint8_t *mixed;             /* per root: holds an inlined broadcast
                                   producer (members of other shapes) */
} fuse_state;

/* A broadcast producer is recomputed inside its consumer's group when its
 * (members x consumer elements) stays below this: then that costs less
 * than a step of its own plus a buffer round trip (~0.1 ns per op and
 * element vs a few microseconds per step). */
#define LT_FUSE_RECOMPUTE_MAX 65536
#define LT_FUSE_RECOMPUTE_MEMBERS 4

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
 * searches only positions >= lo; gives 1 when the search is too large.
 * Dependencies are those of the steps the groups become: reaching a member
 * of another group reaches every member of it (the group runs as one step,
 * after all of its members' inputs), so a merge that would make two groups
 * wait on each other through a third one is seen too. */
static int depends_on(lt_cctx *c, fuse_state *fs, int x, int g, int lo)
{
    if (x < lo)
        return 0;
    int gen = ++c->mark_gen;
    int sp = 0, visits = 0;
    c->stack[sp++] = x;
    c->mark[x] = gen;
    while (sp) {
        int v = c->stack[--sp];
        int grp = c->cn[v].kind == CN_EW ? lt_cc_group(c, v) : -1;
        if (grp == g)
            return 1;
        if (++visits > LT_FUSE_MAX_VISIT)
            return 1;
        /* v's own inputs, or those of its whole group (members marked
         * first: the group is expanded once) */
        if (grp >= 0)
            for (int m = fs->head[grp]; m >= 0; m = fs->nxt[m])
                c->mark[m] = gen;
        for (int m = grp >= 0 ? fs->head[grp] : v; m >= 0;
             m = grp >= 0 ? fs->nxt[m] : -1) {
            for (int k = 0; k < lt_cc_nin(c, m); k++) {
                int q = lt_cc_in(c, m, k);
                if (q >= lo && c->mark[q] != gen) {
                    if (sp >= c->n)
                        return 1;   /* cannot happen: each node pushed once */
                    c->mark[q] = gen;
                    c->stack[sp++] = q;
                }
            }
            if (++visits > LT_FUSE_MAX_VISIT)
                return 1;
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
            if (depends_on(c, fs, q, other, fs->minpos[other]))
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

/* 1 if group g (a pure group of a smaller shape than consumer i) may be
 * recomputed inside i's group `me` (which i is a member of): small and
 * cheap, of i's compute type, and every use of its members is inside g or
 * `me`, so nothing of g is stored or needed elsewhere (its values then
 * exist only broadcast). */
static int can_inline_bcast(lt_cctx *c, fuse_state *fs, int g, int i, int me)
{
    const lt_node *nd = lt_cc_node(c, i);
    int64_t n_cons = lt_shape_numel(&nd->shape);
    if (fs->mixed[g] || c->cn[g].ctype != c->cn[i].ctype ||
        c->gsize[g] > LT_FUSE_RECOMPUTE_MEMBERS ||
        (int64_t)c->gsize[g] * n_cons > LT_FUSE_RECOMPUTE_MAX ||
        lt_shape_numel(&lt_cc_node(c, g)->shape) >= n_cons ||
        c->gsize[g] + c->gsize[me] > LT_FUSE_MAX_GROUP)
        return 0;
    for (int m = fs->head[g]; m >= 0; m = fs->nxt[m]) {
        if (!lt_op_cheap((lt_op)lt_cc_node(c, m)->op) || c->cn[m].output >= 0 ||
            c->cn[m].has_pv)
            return 0;
        int uses = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int m2 = fs->head[pass ? g : me]; m2 >= 0; m2 = fs->nxt[m2])
                for (int k = 0; k < lt_cc_nin(c, m2); k++)
                    uses += lt_cc_in(c, m2, k) == m;
        if (uses != c->cn[m].n_users)
            return 0;
    }
    return !ext_depends(c, fs, me, g) && !ext_depends(c, fs, g, me);
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
        fs->mixed[i] = 0;
        if (c->no_fuse)
            continue;
        const lt_node *nd = lt_cc_node(c, i);
        int me = i;
        for (int k = 0; k < lt_cc_nin(c, i) && k < 3; k++) {
            int q = lt_cc_in(c, i, k);
            if (c->cn[q].kind != CN_EW)
                continue;
            int g = lt_cc_group(c, q);
            if (g == lt_cc_group(c, me))
                continue;
            if (!lt_shape_equal(&lt_cc_node(c, q)->shape, &nd->shape)) {
                /* a broadcast producer: recompute it here (the group
                 * keeps i's shape: i's group stays the root) */
                int r = lt_cc_group(c, me);
                if (can_inline_bcast(c, fs, g, i, r)) {
                    me = merge(c, fs, r, g);
                    fs->mixed[me] = 1;
                }
                continue;
            }
            if (c->cn[g].ctype != c->cn[i].ctype ||
                c->gsize[g] + c->gsize[me] > LT_FUSE_MAX_GROUP)
                continue;
            if (ext_depends(c, fs, me, g) || ext_depends(c, fs, g, me))
                continue;
            int mx = fs->mixed[g] | fs->mixed[lt_cc_group(c, me)];
            me = merge(c, fs, g, lt_cc_group(c, me));
            fs->mixed[me] = (uint8_t)mx;
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
    fs.mixed = calloc(n1, 1);
    int *n_int = calloc(n1, sizeof(int));
    lt_status st = LT_OK;
    if (!fs.head || !fs.tail || !fs.nxt || !fs.minpos || !fs.mixed || !n_int) {
        st = lt_set_error(LT_ERR_OOM, "compile: out of host memory");
        goto done;
    }
    form_groups(c, &fs);
    count_internal(c, n_int);
    if (!c->no_fuse)
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
    free(fs.mixed);
    free(n_int);
    return st;
}
