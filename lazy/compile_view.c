/*
 * lazy/compile_view.c — classification of live nodes and view folding.
 *
 * Leaves become parameters (data buffers, scalar slots) or program
 * constants. A chain of movement ops (reshape, permute, expand, slice,
 * select, diagonal, as_strided) becomes one strided view (offset + strides)
 * over its source's storage: a parameter, a constant or a materialised
 * intermediate/output. A reshape that cannot be expressed over a strided
 * source (or as_strided over a non-contiguous one) materialises the source
 * first with a copy kernel.
 *
 * An optimization barrier (opt_barrier: the value of input 0, fenced by all
 * of its inputs) becomes a view of input 0's storage through an alias
 * buffer of its own: no copy, and every step reading it (or a view of it)
 * is ordered after the steps producing its inputs (compile_plan.c), so
 * computation on it cannot be scheduled before the fence; the barrier
 * node itself is never merged (compile_cse.c).
 */
#include <stdlib.h>
#include <string.h>
#include "compile_int.h"
#include "kernels/kutil.h"

int lt_cc_fold_view(lt_op op, const lt_attrs *a, const lt_shape *out_shape,
                    const lt_view *src, lt_view *dst)
{
    lt_view v = *src;
    v.shape = *out_shape;
    int nd = src->shape.ndim;
    switch (op) {
    case LT_OP_reshape:
        if (lt_shape_numel(&src->shape) != lt_shape_numel(out_shape))
            return 0;
        if (lt_view_is_contiguous(src)) {
            lt_contiguous_strides(out_shape, v.strides);
            break;
        }
        if (!lt_kutil_reshape_strides(src, out_shape, v.strides))
            return 0;
        break;
    case LT_OP_permute:
        if (a->n != nd)
            return 0;
        for (int k = 0; k < nd; k++) {
            int64_t p = a->i[k];
            if (p < 0 || p >= nd)
                return 0;
            v.strides[k] = src->strides[p];
        }
        break;
    case LT_OP_expand: {
        int off = out_shape->ndim - nd;
        if (off < 0)
            return 0;
        for (int k = 0; k < out_shape->ndim; k++) {
            if (k < off || (src->shape.dims[k - off] == 1 &&
                            out_shape->dims[k] != 1))
                v.strides[k] = 0;
            else
                v.strides[k] = src->strides[k - off];
        }
        break;
    }
    case LT_OP_slice: {
        int64_t d = a->i[0], start = a->i[1], step = a->n > 3 ? a->i[3] : 1;
        if (d < 0 || d >= nd || step <= 0)
            return 0;
        int64_t size = src->shape.dims[d];
        if (start < 0)
            start += size;
        if (start < 0)
            start = 0;
        if (start > size)
            start = size;
        for (int k = 0; k < nd; k++)
            v.strides[k] = src->strides[k];
        v.offset += start * src->strides[d];
        /* a step past the end leaves one element: its stride is never used
         * (and step * stride could overflow) */
        v.strides[d] = out_shape->dims[d] <= 1 ? 0 : src->strides[d] * step;
        break;
    }
    case LT_OP_select: {
        int64_t d = a->i[0], idx = a->i[1];
        if (d < 0 || d >= nd)
            return 0;
        if (idx < 0)
            idx += src->shape.dims[d];
        v.offset += idx * src->strides[d];
        int m = 0;
        for (int k = 0; k < nd; k++)
            if (k != d)
                v.strides[m++] = src->strides[k];
        break;
    }
    case LT_OP_diagonal: {
        int64_t off = a->i[0], d1 = a->i[1], d2 = a->i[2];
        if (d1 < 0 || d1 >= nd || d2 < 0 || d2 >= nd || d1 == d2)
            return 0;
        int m = 0;
        for (int k = 0; k < nd; k++)
            if (k != d1 && k != d2)
                v.strides[m++] = src->strides[k];
        v.strides[m] = src->strides[d1] + src->strides[d2];
        if (out_shape->ndim > 0 && out_shape->dims[m] > 0)
            v.offset += off >= 0 ? off * src->strides[d2]
                                 : -off * src->strides[d1];
        break;
    }
    case LT_OP_as_strided: {
        if (!lt_view_is_contiguous(src))
            return 0;
        int64_t n = a->i[0];
        if (n != out_shape->ndim || a->n < 2 * n + 2)
            return 0;
        for (int k = 0; k < n; k++)      /* size-1 dims: any stride is allowed, use 0 */
            v.strides[k] = out_shape->dims[k] <= 1 ? 0 : a->i[1 + n + k];
        v.offset += a->i[1 + 2 * n];
        break;
    }
    default:
        return 0;
    }
    for (int k = v.shape.ndim; k < LT_MAX_DIMS; k++)
        v.strides[k] = 0;
    *dst = v;
    return 1;
}

static int add_const(lt_cctx *c, double value, lt_dtype dt)
{
    for (int k = 0; k < c->n_consts; k++) {
        uint64_t s;
        lt_slot_store(&s, value, dt);
        if (c->const_dtype[k] == dt && c->consts[k] == s)
            return k;
    }
    if (c->n_consts == c->cap_consts) {
        int nc = c->cap_consts ? 2 * c->cap_consts : 8;
        uint64_t *a = realloc(c->consts, nc * sizeof *a);
        if (!a)
            return -1;
        c->consts = a;
        uint8_t *b = realloc(c->const_dtype, nc);
        if (!b)
            return -1;
        c->const_dtype = b;
        c->cap_consts = nc;
    }
    lt_slot_store(&c->consts[c->n_consts], value, dt);
    c->const_dtype[c->n_consts] = (uint8_t)dt;
    return c->n_consts++;
}

static lt_pview leaf_view(int base, int index, const lt_node *nd)
{
    lt_pview pv;
    memset(&pv, 0, sizeof pv);
    pv.base = (uint8_t)base;
    pv.index = index;
    pv.v.dtype = nd->dtype;
    pv.v.shape = nd->shape;
    if (base == LT_BASE_PARAM)
        lt_contiguous_strides(&nd->shape, pv.v.strides);
    /* scalar slots/consts: strides 0 (a 0-dim value) */
    return pv;
}

/* Appends buffer b to alias a's fence unless there already. */
static int fence_add(lt_cbuf *a, int b)
{
    for (int k = 0; k < a->n_after; k++)
        if (a->after[k] == b)
            return 0;
    int *n = realloc(a->after, (a->n_after + 1) * sizeof *n);
    if (!n)
        return -1;
    a->after = n;
    a->after[a->n_after++] = b;
    return 0;
}

/* Classifies barrier i: every input materialised (a fence input must be a
 * step's result or a leaf to wait for), then i = input 0's view over a new
 * alias buffer whose fence is the inputs' buffers (an input that is itself
 * a barrier's value brings its storage and its fence: aliases never nest). */
static lt_status barrier_view(lt_cctx *c, int i)
{
    int nin = lt_cc_nin(c, i);
    for (int k = 0; k < nin; k++) {
        lt_status st = lt_cc_materialise(c, lt_cc_in(c, i, k));
        if (st != LT_OK)
            return st;
    }
    int b = lt_cc_new_buf(c, 0);
    if (b < 0)
        return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    lt_pview src = c->cn[lt_cc_in(c, i, 0)].pv;
    lt_cc_resolve_alias(c, &src);
    lt_cbuf *a = &c->bufs[b];
    a->is_alias = 1;
    a->al_base = src.base;
    a->al_index = src.index;
    a->al_off = src.byte_off;
    for (int k = 0; k < nin; k++) {
        const lt_pview *pv = &c->cn[lt_cc_in(c, i, k)].pv;
        if (pv->base != LT_BASE_BUF)
            continue;           /* a leaf: there from the start */
        const lt_cbuf *q = &c->bufs[pv->index];
        int bad = 0;
        if (!q->is_alias) {
            bad = fence_add(a, pv->index);
        } else {
            for (int j = 0; j < q->n_after && !bad; j++)
                bad = fence_add(a, q->after[j]);
            if (!bad && q->al_base == LT_BASE_BUF)
                bad = fence_add(a, q->al_index);
        }
        if (bad)
            return lt_set_error(LT_ERR_OOM, "compile: out of host memory");
    }
    lt_cnode *cn = &c->cn[i];
    cn->kind = CN_VIEW;
    cn->pv = c->cn[lt_cc_in(c, i, 0)].pv;
    cn->pv.base = LT_BASE_BUF;
    cn->pv.index = b;
    cn->pv.byte_off = 0;
    cn->has_pv = 1;
    return LT_OK;
}

lt_status lt_cc_views(lt_cctx *c)
{
    for (int i = 0; i < c->n; i++) {
        lt_cnode *cn = &c->cn[i];
        if (cn->kind != -1)
            continue;
        const lt_node *nd = lt_cc_node(c, i);
        lt_op_kind kind = lt_op_kind_of(nd->op);
        if (nd->op == LT_OP_data) {
            cn->kind = CN_PARAM;
            cn->param = c->param_of_pos[i];
            if (cn->param < 0)
                return lt_set_error(LT_ERR_INTERNAL, "compile: data leaf at "
                                    "%d is not a parameter", i);
            cn->pv = leaf_view(LT_BASE_PARAM, cn->param, nd);
            cn->has_pv = 1;
        } else if (nd->op == LT_OP_scalar) {
            if (nd->flags & LT_NODE_CONST) {
                int k = add_const(c, nd->value, nd->dtype);
                if (k < 0)
                    return lt_set_error(LT_ERR_OOM, "compile: out of memory");
                cn->kind = CN_CONST;
                cn->pv = leaf_view(LT_BASE_CONST, k, nd);
            } else {
                cn->kind = CN_SLOT;
                cn->param = c->param_of_pos[i];
                if (cn->param < 0)
                    return lt_set_error(LT_ERR_INTERNAL, "compile: scalar at "
                                        "%d is not a parameter", i);
                cn->pv = leaf_view(LT_BASE_SLOT, cn->param, nd);
            }
            cn->has_pv = 1;
        } else if (kind == LT_KIND_BARRIER) {
            lt_status st = barrier_view(c, i);
            if (st != LT_OK)
                return st;
        } else if (kind == LT_KIND_MOVEMENT) {
            int s = lt_cc_in(c, i, 0);
            lt_status st = lt_cc_materialise(c, s);
            if (st != LT_OK)
                return st;
            lt_view dst;
            if (lt_cc_fold_view(nd->op, &nd->attrs, &nd->shape,
                                &c->cn[s].pv.v, &dst)) {
                cn->kind = CN_VIEW;
                cn->pv = c->cn[s].pv;
                cn->pv.v = dst;
                cn->has_pv = 1;
                continue;
            }
            /* materialise the source contiguously, then view the copy */
            const lt_node *sn = lt_cc_node(c, s);
            cn->kind = CN_KERNEL;
            cn->copy_src = 1;
            cn->copy_in = c->cn[s].pv;
            cn->buf = lt_cc_new_buf(c, (int64_t)lt_shape_numel(&sn->shape) *
                                    (int64_t)lt_cc_esize(sn->dtype));
            if (cn->buf < 0)
                return lt_set_error(LT_ERR_OOM, "compile: out of memory");
            lt_pview base = lt_cc_buf_view(cn->buf, &sn->shape, sn->dtype);
            if (!lt_cc_fold_view(nd->op, &nd->attrs, &nd->shape, &base.v,
                                 &dst))
                return lt_set_error(LT_ERR_SHAPE, "%s: cannot view shape "
                                    "of %lld elements as requested",
                                    lt_op_name(nd->op),
                                    (long long)lt_shape_numel(&sn->shape));
            cn->pv = base;
            cn->pv.v = dst;
            cn->has_pv = 1;
        } else if (kind == LT_KIND_UNARY || kind == LT_KIND_BINARY ||
                   kind == LT_KIND_TERNARY) {
            cn->kind = CN_EW;
        } else if (kind == LT_KIND_REDUCE) {
            cn->kind = CN_REDUCE;
            lt_status st = lt_cc_materialise(c, i);
            if (st != LT_OK)
                return st;
        } else {
            cn->kind = CN_KERNEL;
            if (!lt_kernel_for(nd->op))
                return lt_set_error(LT_ERR_INTERNAL, "%s: no kernel linked "
                                    "for this op", lt_op_name(nd->op));
            lt_status st = lt_cc_materialise(c, i);
            if (st != LT_OK)
                return st;
        }
    }
    return LT_OK;
}
