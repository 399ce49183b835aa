/*
 * lazy/shape_linalg.c — the shape rules of isin and of the linear-algebra
 * ops (ops.def's isin, inv, eigh, svd rules; the packed layouts are
 * documented there). See shape.h for the contract.
 */
#include "shape_int.h"

lt_status lt_shape_rule_isin(lt_op op, const lt_operand *in, int n,
                             lt_attrs *a, lt_shape *out)
{
    if (in[0].dtype == LT_BOOL || in[1].dtype == LT_BOOL)
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "bool inputs are not supported "
                    "(eager: Unsupported input type encountered for isin(): Bool)");
    *out = *in[0].shape;
    return LT_OK;
}

/* [.., m, n] of one floating dtype */
static lt_status matrix_in(lt_op op, const lt_operand *in, int n, int square)
{
    const lt_shape *x = in[0].shape;
    if (x->ndim < 2)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "needs a matrix or a batch of "
                    "matrices [.., m, n], got %d dims", x->ndim);
    if (square && x->dims[x->ndim - 1] != x->dims[x->ndim - 2])
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "needs square matrices");
    if (!lt_dtype_is_float(in[0].dtype))
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "needs a floating dtype");
    return LT_OK;
}

lt_status lt_shape_rule_inv(lt_op op, const lt_operand *in, int n,
                            lt_attrs *a, lt_shape *out)
{
    TRY(matrix_in(op, in, n, 1));
    *out = *in[0].shape;
    out->dims[out->ndim - 1] += 1;
    return LT_OK;
}

lt_status lt_shape_rule_eigh(lt_op op, const lt_operand *in, int n,
                             lt_attrs *a, lt_shape *out)
{
    TRY(matrix_in(op, in, n, 1));
    *out = *in[0].shape;
    out->dims[out->ndim - 2] += 1;
    return LT_OK;
}

lt_status lt_shape_rule_svd(lt_op op, const lt_operand *in, int n,
                            lt_attrs *a, lt_shape *out)
{
    TRY(matrix_in(op, in, n, 0));
    const lt_shape *x = in[0].shape;
    int64_t m = x->dims[x->ndim - 2], c = x->dims[x->ndim - 1];
    int full = a->n > 0 && a->i[0] != 0;
    int64_t k = m < c ? m : c, r = full ? c : k;
    *out = *x;
    out->dims[out->ndim - 2] = m + 1 + r;
    out->dims[out->ndim - 1] = m > c ? m : c;
    return LT_OK;
}
