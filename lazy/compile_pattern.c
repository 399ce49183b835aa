/*
 * lazy/compile_pattern.c — kernel epilogues/prologues found in the graph.
 *
 * bmm of merged heads: a reshape [B1, B2, r, c] -> [B1*B2, r, c] that had to
 * be materialised (a transposed source), used only by bmm kernels (directly
 * or with its last two dims swapped) is read in place by the bmms as a 4-D
 * operand (lazy/kernels/matmul.c).
 *
 * cat of reshapes: a reshape that had to be materialised (its source is a
 * strided view, e.g. the transposed per-head gradients of attention) and
 * is used only by a cat is not copied first: the cat reads the source and
 * writes it into its region of the output directly (lazy/kernels/cat.c).
 *
 * Runs after lt_cc_views (every live node classified) and before fusion.
 * A multiplication by a scalar next to a softmax kernel costs a full pass
 * over the (large) attention scores; the softmax kernel applies the scale
 * for free while the row is in registers (lazy/kernels/norm.c takes the
 * scalar as an extra last input):
 *
 *   softmax(mul(x, s))               -> softmax(x, s)          [forward]
 *   mul(softmax_backward(g, y), s)   -> softmax_backward(g, y, s)  [backward]
 *
 * s is a 0-d scalar (constant, scalar parameter or 0-d device tensor); the
 * mul must have x's shape and dtype (no broadcast, no promotion), and the
 * folded node must have no other user and not be a graph output. The
 * folded node becomes CN_DEAD; the kernel step reads its operands instead
 * (lt_cnode.fold_src / fold_scale, used by compile_emit.c). Skipped when
 * fusion is off (LAZYTPU_CHECK_FINITE: one op per step).
 */
#include <string.h>
#include "compile_int.h"
#include "kernels/kutil.h"

/* Position of mul node m's 0-d scalar operand (the other one is returned in
 * *x), or -1. */
static int scalar_operand(lt_cctx *c, int m, int *x)
{
    const lt_node *nd = lt_cc_node(c, m);
    if (nd->op != LT_OP_mul || lt_cc_nin(c, m) != 2 || c->cn[m].kind != CN_EW)
        return -1;
    for (int k = 0; k < 2; k++) {
        int s = lt_cc_in(c, m, k), o = lt_cc_in(c, m, 1 - k);
        const lt_node *sn = lt_cc_node(c, s), *on = lt_cc_node(c, o);
        int kind = c->cn[s].kind;
        if (sn->shape.ndim != 0 || !c->cn[s].has_pv ||
            (kind != CN_CONST && kind != CN_SLOT && kind != CN_PARAM))
            continue;
        if (s == o || !lt_shape_equal(&on->shape, &nd->shape) || on->dtype != nd->dtype ||
            !lt_dtype_is_float(nd->dtype))
            continue;
        *x = o;
        return s;
    }
    return -1;
}

static int single_use(const lt_cctx *c, int p)
{
    return c->cn[p].n_users == 1 && c->cn[p].output < 0;
}

/* cat node i reads input q (a materialising reshape copy used only here)
 * from the copy's strided source instead, when its region of the output
 * can be viewed in the source's shape (lazy/kernels/cat.c). */
static void cat_reads_sources(lt_cctx *c, int i)
{
    const lt_node *nd = lt_cc_node(c, i);
    int ndim = nd->shape.ndim;
    int64_t dim = nd->attrs.n > 0 ? nd->attrs.i[0] : 0;
    if (dim < 0)
        dim += ndim;
    if (dim < 0 || dim >= ndim)
        return;
    for (int k = 0; k < lt_cc_nin(c, i); k++) {
        int q = lt_cc_in(c, i, k);
        lt_cnode *cq = &c->cn[q];
        const lt_node *qn = lt_cc_node(c, q);
        if (cq->kind != CN_KERNEL || !cq->copy_src || qn->op != LT_OP_reshape ||
            !single_use(c, q) || qn->shape.ndim != ndim || qn->dtype != nd->dtype ||
            cq->copy_in.v.dtype != qn->dtype)
            continue;
        lt_view r;
        memset(&r, 0, sizeof r);
        r.dtype = nd->dtype;
        r.shape = nd->shape;
        lt_contiguous_strides(&nd->shape, r.strides);
        r.shape.dims[dim] = qn->shape.dims[dim];
        int64_t st[LT_MAX_DIMS];
        if (!lt_kutil_reshape_strides(&r, &cq->copy_in.v.shape, st))
            continue;
        /* q becomes a view of its source, in the source's shape; its
         * buffer is never produced */
        cq->kind = CN_VIEW;
        cq->copy_src = 0;
        cq->pv = cq->copy_in;
    }
}

/* 1 if every live use of node q is as an operand of a bmm kernel; with
 * allow_t, also through views that swap q's last two dims (permute
 * [0, 2, 1], not outputs) used only by bmm kernels, which are listed in
 * tv[] (*ntv, at most cap). */
static int bmm_only_users(lt_cctx *c, int q, int allow_t, int *tv, int *ntv, int cap)
{
    int seen = 0;
    for (int j = q + 1; j < c->n; j++) {
        lt_cnode *cj = &c->cn[j];
        if (cj->kind == CN_DEAD)
            continue;
        for (int k = 0; k < lt_cc_nin(c, j); k++) {
            if (lt_cc_in(c, j, k) != q)
                continue;
            seen++;
            const lt_node *jn = lt_cc_node(c, j);
            if (cj->kind == CN_KERNEL && !cj->copy_src && !cj->fold_src && jn->op == LT_OP_bmm)
                continue;
            if (!allow_t || cj->kind != CN_VIEW || cj->output >= 0 || jn->op != LT_OP_permute ||
                jn->attrs.n != 3 || jn->attrs.i[0] != 0 || jn->attrs.i[1] != 2 ||
                jn->attrs.i[2] != 1 || *ntv >= cap || !bmm_only_users(c, j, 0, NULL, NULL, 0))
                return 0;
            tv[(*ntv)++] = j;
        }
    }
    return seen == c->cn[q].n_users;
}

/* A materialising reshape [B1, B2, r, c] -> [B1*B2, r, c] (the attention's
 * heads merged into the batch) read only by bmm kernels, directly or
 * transposed: the bmms read the strided 4-D source in place instead
 * (lazy/kernels/matmul.c), and the copy is not made. */
static void bmm_reads_source(lt_cctx *c, int q)
{
    lt_cnode *cq = &c->cn[q];
    const lt_node *qn = lt_cc_node(c, q);
    const lt_view *src = &cq->copy_in.v;
    if (qn->op != LT_OP_reshape || cq->output >= 0 || qn->shape.ndim != 3 ||
        src->shape.ndim != 4 || !lt_dtype_is_float(qn->dtype) || src->dtype != qn->dtype ||
        lt_dtype_is_complex(qn->dtype) ||
        src->shape.dims[0] * src->shape.dims[1] != qn->shape.dims[0] ||
        src->shape.dims[2] != qn->shape.dims[1] || src->shape.dims[3] != qn->shape.dims[2])
        return;
    int tv[8], ntv = 0;
    if (!bmm_only_users(c, q, 1, tv, &ntv, 8))
        return;
    cq->kind = CN_VIEW;
    cq->copy_src = 0;
    cq->pv = cq->copy_in;
    for (int t = 0; t < ntv; t++) {
        lt_pview *pv = &c->cn[tv[t]].pv;
        *pv = cq->copy_in;
        int64_t d = pv->v.shape.dims[2], st = pv->v.strides[2];
        pv->v.shape.dims[2] = pv->v.shape.dims[3];
        pv->v.strides[2] = pv->v.strides[3];
        pv->v.shape.dims[3] = d;
        pv->v.strides[3] = st;
    }
}

lt_status lt_cc_patterns(lt_cctx *c)
{
    if (c->no_fuse)
        return LT_OK;
    for (int i = 0; i < c->n; i++) {
        lt_cnode *cn = &c->cn[i];
        const lt_node *nd = lt_cc_node(c, i);
        int x, s;
        if (cn->kind == CN_KERNEL && cn->copy_src) {
            bmm_reads_source(c, i);
        } else if (cn->kind == CN_KERNEL && !cn->copy_src && nd->op == LT_OP_cat) {
            cat_reads_sources(c, i);
        } else if (cn->kind == CN_KERNEL && !cn->copy_src && nd->op == LT_OP_softmax &&
            lt_cc_nin(c, i) == 1) {
            int m = lt_cc_in(c, i, 0);
            if (!single_use(c, m) || (s = scalar_operand(c, m, &x)) < 0)
                continue;
            /* x and s lose the mul as a user and gain the softmax step: their
             * counts stay (an elementwise x is stored: its user is outside) */
            c->cn[m].kind = CN_DEAD;
            cn->fold_src = i + 1;
            cn->fold_scale = s + 1;
            cn->fold_in0 = x + 1;
        } else if (cn->kind == CN_EW && (s = scalar_operand(c, i, &x)) >= 0) {
            const lt_node *xn = lt_cc_node(c, x);
            if (c->cn[x].kind != CN_KERNEL || c->cn[x].copy_src || xn->op != LT_OP_softmax_backward ||
                !single_use(c, x) || lt_cc_nin(c, x) != 2)
                continue;
            /* the mul becomes the softmax_backward step, writing its own buffer */
            c->cn[x].kind = CN_DEAD;
            cn->kind = CN_KERNEL;
            cn->fold_src = x + 1;
            cn->fold_scale = s + 1;
            lt_status st = lt_cc_materialise(c, i);
            if (st != LT_OK)
                return st;
        }
    }
    return LT_OK;
}
