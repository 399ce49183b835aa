/*
 * lazy/shape.c — the shape and dtype rules named in lazy/ops.def
 * (convolution and pooling rules: shape_conv.c; isin and linear algebra:
 * shape_linalg.c; shared helpers: shape_int.h).
 * See shape.h for the contract. Error paths format messages; success paths
 * do no formatting and no allocation (they run once per traced op).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shape_int.h"
#include "options.h"

/* ----------------------------------------------------------- error helpers */

char *lt_operand_str(const lt_operand *o, char *buf, size_t cap)
{
    char sb[128];
    lt_shape_str(o->shape, sb, sizeof sb);
    snprintf(buf, cap, "%s (%s)", sb, lt_dtype_name(o->dtype));
    return buf;
}

/* "op: [2, 3] (f32), [4] (f32): <msg>" */
lt_status lt_shape_fail(lt_status st, lt_op op, const lt_operand *in, int n,
                        const char *fmt, ...)
{
    char ins[512], msg[384], b[160];
    size_t k = 0;
    ins[0] = 0;
    for (int i = 0; i < n && k < sizeof ins; i++) {
        int w = snprintf(ins + k, sizeof ins - k, "%s%s", i ? ", " : "",
                         lt_operand_str(&in[i], b, sizeof b));
        if (w < 0) break;
        k += (size_t)w;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n > 0)
        return lt_set_error(st, "%s: %s: %s", lt_op_name(op), ins, msg);
    return lt_set_error(st, "%s: %s", lt_op_name(op), msg);
}

lt_status lt_shape_need_attrs(lt_op op, const lt_operand *in, int n,
                              const lt_attrs *a, int k, const char *what)
{
    if (a->n < k)
        return lt_shape_fail(LT_ERR_ARG, op, in, n,
                    "needs %d attributes (%s), got %d", k, what, a->n);
    return LT_OK;
}

static int is_int(lt_dtype d) { return lt_dtype_is_int(d); }

/* -------------------------------------------------------------- dtypes */

static int category(lt_dtype d)
{
    if (d == LT_BOOL) return 0;
    if (lt_dtype_is_complex(d)) return 3;
    if (lt_dtype_is_float(d)) return 2;
    return 1;
}

/* PyTorch's combine_categories(higher, lower); -1 = undefined. */
static int combine(int higher, int lower)
{
    if (higher < 0) return lower;
    if (lower < 0) return higher;
    lt_dtype h = (lt_dtype)higher, l = (lt_dtype)lower;
    if (lt_dtype_is_complex(h)) return higher;
    if (lt_dtype_is_complex(l)) {
        /* a float keeps its precision: f64 + c64 wrapped -> c128 */
        if (lt_dtype_is_float(h)) return (int)lt_dtype_promote(h, l);
        return lower;
    }
    if (lt_dtype_is_float(h)) return higher;
    if (h == LT_BOOL || lt_dtype_is_float(l))
        return lt_dtype_promote(h, l);
    return higher;
}

lt_dtype lt_result_type(const lt_operand *in, int n)
{
    int dim = -1, zero = -1, wrapped = -1;
    for (int i = 0; i < n; i++) {
        lt_dtype d = in[i].dtype;
        int *slot;
        if (in[i].wrapped) {
            /* wrapped numbers count with the default dtypes */
            int c = category(d);
            d = c == 3 ? LT_C64 : c == 2 ? LT_F32 : c == 1 ? LT_I64 : LT_BOOL;
            slot = &wrapped;
        } else if (in[i].shape->ndim == 0) {
            slot = &zero;
        } else {
            slot = &dim;
        }
        if (*slot >= (int)LT_NUM_DTYPES) continue;
        *slot = *slot < 0 ? (int)d : (int)lt_dtype_promote((lt_dtype)*slot, d);
    }
    if (dim >= (int)LT_NUM_DTYPES || zero >= (int)LT_NUM_DTYPES || wrapped >= (int)LT_NUM_DTYPES)
        return LT_NUM_DTYPES;
    int r = combine(dim, combine(zero, wrapped));
    return r < 0 ? LT_F32 : (lt_dtype)r;
}

static int valid_dtype(int64_t d) { return d >= 0 && d < LT_NUM_DTYPES; }

lt_status lt_infer_dtype(lt_op op, const lt_operand *in, int n,
                         const lt_attrs *a, lt_dtype *out)
{
    lt_dtype r;
    switch (lt_op_dtype_rule(op)) {
    case LT_DT_LEAF:
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "leaf ops cannot be traced");
    case LT_DT_PROMOTE:
        r = lt_result_type(in, n);
        break;
    case LT_DT_FLOAT:
        r = lt_result_type(in, n);
        if (!lt_dtype_is_float(r)) r = LT_F32;
        break;
    case LT_DT_BOOL: r = LT_BOOL; break;
    case LT_DT_I64: r = LT_I64; break;
    case LT_DT_SUM:
        r = lt_result_type(in, n);
        if (!lt_dtype_is_float(r)) r = LT_I64;
        break;
    case LT_DT_FIRST: r = in[0].dtype; break;
    case LT_DT_WHERE:
        if (n != 3) return lt_shape_fail(LT_ERR_ARG, op, in, n, "needs 3 inputs");
        if (in[0].dtype != LT_BOOL)
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n,
                        "condition must be bool, got %s", lt_dtype_name(in[0].dtype));
        r = lt_result_type(in + 1, 2);
        break;
    case LT_DT_ATTR:
    case LT_DT_RAND:
        TRY(lt_shape_need_attrs(op, in, n, a, 1, "dtype"));
        if (!valid_dtype(a->i[0]))
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "invalid dtype %lld",
                        (long long)a->i[0]);
        r = (lt_dtype)a->i[0];
        if (lt_op_dtype_rule(op) == LT_DT_RAND && !lt_dtype_is_float(r))
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n,
                        "needs a floating dtype, got %s", lt_dtype_name(r));
        break;
    case LT_DT_REAL:
        r = in[0].dtype == LT_C64 ? LT_F32 : in[0].dtype == LT_C128 ? LT_F64 :
            in[0].dtype == LT_C32 ? LT_F16 : LT_NUM_DTYPES;
        if (r == LT_NUM_DTYPES)
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "needs a complex input");
        break;
    case LT_DT_COMPLEX:
        r = in[0].dtype == LT_F32 ? LT_C64 : in[0].dtype == LT_F64 ? LT_C128 :
            in[0].dtype == LT_F16 ? LT_C32 : LT_NUM_DTYPES;
        if (r == LT_NUM_DTYPES)
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "needs an f32, f64 or f16 input");
        break;
    default:
        return lt_set_error(LT_ERR_INTERNAL, "%s: unknown dtype rule", lt_op_name(op));
    }
    if ((unsigned)r >= LT_NUM_DTYPES)
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "these dtypes have no common dtype");
    *out = r;
    return LT_OK;
}

/* Ops that move or select elements without computing on them: the only
 * ones that take complex and storage-only dtypes (lt_dtype_is_storage_only). */
static int moves_only(lt_op op)
{
    switch (lt_op_kind_of(op)) {
    case LT_KIND_MOVEMENT: case LT_KIND_CONCAT: case LT_KIND_SCATTER: case LT_KIND_BARRIER:
        return 1;
    default:
        return op == LT_OP_index_select || op == LT_OP_view_as_real ||
               op == LT_OP_view_as_complex;
    }
}

static int computed_dtype(lt_dtype d)
{
    return !lt_dtype_is_complex(d) && !lt_dtype_is_storage_only(d);
}

lt_status lt_infer(lt_op op, const lt_operand *in, int n, lt_attrs *attrs,
                   lt_shape *out_shape, lt_dtype *out_dtype)
{
    if ((unsigned)op >= LT_NUM_OPS)
        return lt_set_error(LT_ERR_ARG, "trace: invalid op %d", (int)op);
    if (attrs->n < 0 || attrs->n > LT_MAX_ATTRS)
        return lt_set_error(LT_ERR_ARG, "%s: invalid attribute count %d",
                            lt_op_name(op), attrs->n);
    int ar = lt_op_arity(op);
    if (ar >= 0 && n != ar)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "takes %d inputs, got %d", ar, n);
    if (!moves_only(op)) {
        for (int i = 0; i < n; i++)
            if (!computed_dtype(in[i].dtype))
                return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "dtype %s is stored on the device but "
                            "not computed", lt_dtype_name(in[i].dtype));
        if (lt_op_kind_of(op) == LT_KIND_COLLECTIVE &&
            (in[0].dtype == LT_U8 || in[0].dtype == LT_I8 || in[0].dtype == LT_I16 ||
             in[0].dtype == LT_F16))
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "collectives take f32, bf16, f64, i64, i32 "
                        "or bool tensors");
    } else {
        /* moved bytes are never converted to or from these dtypes */
        /* an index is an integer; a barrier's fence inputs are any tensors */
        int k = op == LT_OP_index_select || op == LT_OP_opt_barrier ? 1 : n;
        for (int i = 1; i < k; i++)
            if (in[i].dtype != in[0].dtype &&
                (!computed_dtype(in[0].dtype) || !computed_dtype(in[i].dtype)))
                return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "mixes %s and %s",
                            lt_dtype_name(in[0].dtype), lt_dtype_name(in[i].dtype));
    }
    TRY(lt_op_shape_rule(op)(op, in, n, attrs, out_shape));
    if (!lt_shape_fits(out_shape, NULL)) {
        char b[160];
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "output shape %s is invalid or too large "
                    "(more than 2^56 elements)", lt_shape_str(out_shape, b, sizeof b));
    }
    TRY(lt_infer_dtype(op, in, n, attrs, out_dtype));
    if (!moves_only(op) && !computed_dtype(*out_dtype))
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "dtype %s is stored on the device but not "
                    "computed", lt_dtype_name(*out_dtype));
    return LT_OK;
}

int lt_shape_fits(const lt_shape *s, int64_t *numel)
{
    if (!s || s->ndim < 0 || s->ndim > LT_MAX_DIMS) return 0;
    int64_t nz = 1;
    int zero = 0;
    for (int d = 0; d < s->ndim; d++) {
        int64_t v = s->dims[d];
        if (v < 0) return 0;
        if (v == 0) {
            zero = 1;
            continue;
        }
        if (__builtin_mul_overflow(nz, v, &nz) || nz > LT_MAX_NUMEL) return 0;
    }
    if (numel) *numel = zero ? 0 : nz;
    return 1;
}

int lt_shape_world_size(void)
{
    return (int)lt_opt_int(LT_OPT_WORLD_SIZE);      /* 1 when unset */
}

/* ------------------------------------------------------------ basic rules */

lt_status lt_shape_rule_leaf(lt_op op, const lt_operand *in, int n,
                             lt_attrs *a, lt_shape *out)
{
    return lt_shape_fail(LT_ERR_ARG, op, in, n,
                "leaf ops are created by lt_tensor_from_host/lt_scalar, not traced");
}

lt_status lt_shape_rule_ew(lt_op op, const lt_operand *in, int n,
                           lt_attrs *a, lt_shape *out)
{
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (in[i].shape->ndim > nd) nd = in[i].shape->ndim;
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;
        for (int i = 0; i < n; i++) {
            const lt_shape *s = in[i].shape;
            int k = d - (nd - s->ndim);
            if (k < 0) continue;
            int64_t v = s->dims[k];
            if (v == size || v == 1) continue;
            if (size == 1) { size = v; continue; }
            char b[4][160];
            if (n == 2)
                return lt_set_error(LT_ERR_SHAPE, "%s: shapes %s and %s are not broadcastable",
                                    lt_op_name(op), lt_operand_str(&in[0], b[0], 160),
                                    lt_operand_str(&in[1], b[1], 160));
            return lt_set_error(LT_ERR_SHAPE, "%s: shapes %s, %s and %s are not broadcastable",
                                lt_op_name(op), lt_operand_str(&in[0], b[0], 160),
                                lt_operand_str(&in[1], b[1], 160),
                                lt_operand_str(&in[2], b[2], 160));
        }
        out->dims[d] = size;
    }
    if (op == LT_OP_cast && a->n < 1)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "needs attribute i[0] = dtype");
    return LT_OK;
}

/* Checks a dim attribute against ndim (0-dim tensors accept dim 0). */
static lt_status check_dim(lt_op op, const lt_operand *in, int n, int64_t dim,
                           int ndim, const char *what)
{
    int lim = ndim > 0 ? ndim : 1;
    if (dim < 0 || dim >= lim)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "%s %lld out of range for %d dims",
                    what, (long long)dim, ndim);
    return LT_OK;
}

/* layer_norm (x [, w [, b]]), layer_norm_backward (grad, x, mean, rstd
 * [, w]): x's shape; layer_norm_stats (x): [2, *leading];
 * layer_norm_backward_affine (grad, x, mean, rstd): [2, *normalized].
 * i[0] = k normalized (last) dims; w and b hold the normalized shape's
 * elements, mean and rstd one per row; grad has x's shape; float dtypes. */
lt_status lt_shape_rule_lnorm(lt_op op, const lt_operand *in, int n,
                              lt_attrs *a, lt_shape *out)
{
    int fwd = op == LT_OP_layer_norm, stats = op == LT_OP_layer_norm_stats;
    int aff = op == LT_OP_layer_norm_backward_affine, bwd = !fwd && !stats;
    TRY(lt_shape_need_attrs(op, in, n, a, fwd ? 3 : op == LT_OP_layer_norm_backward ? 2 : 1,
                   "normalized dims, affine flags"));
    int nx = bwd ? 4 : 1;
    int want = nx + ((fwd || op == LT_OP_layer_norm_backward) && a->i[1] ? 1 : 0)
             + (fwd && a->i[2] ? 1 : 0);
    if (n != want)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "expected %d operands", want);
    const lt_shape *x = in[bwd ? 1 : 0].shape;
    int k = (int)a->i[0];
    if (a->i[0] < 1 || a->i[0] > x->ndim || a->i[0] + 1 > LT_MAX_DIMS)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "%lld normalized dims for a %d-D input",
                    (long long)a->i[0], x->ndim);
    int64_t D = 1, R = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d >= x->ndim - k) D *= x->dims[d];
        else R *= x->dims[d];
    }
    for (int q = 0; q < n; q++)
        if (!lt_dtype_is_float(in[q].dtype))
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "expected floating operands");
    if (bwd && !lt_shape_equal(in[0].shape, x))
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "grad and input shapes differ");
    if (bwd && (lt_shape_numel(in[2].shape) != R || lt_shape_numel(in[3].shape) != R))
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "mean/rstd of %lld elements expected",
                    (long long)R);
    for (int q = nx; q < n; q++)
        if (lt_shape_numel(in[q].shape) != D)
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "weight/bias of %lld elements expected",
                        (long long)D);
    if (fwd || op == LT_OP_layer_norm_backward) {
        *out = *x;
        return LT_OK;
    }
    out->dims[0] = 2;
    if (aff) {
        out->ndim = 1 + k;
        for (int d = 0; d < k; d++) out->dims[1 + d] = x->dims[x->ndim - k + d];
    } else {
        out->ndim = 1 + x->ndim - k;
        for (int d = 0; d < x->ndim - k; d++) out->dims[1 + d] = x->dims[d];
    }
    return LT_OK;
}

lt_status lt_shape_rule_same(lt_op op, const lt_operand *in, int n,
                             lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    switch (op) {
    case LT_OP_softmax: case LT_OP_log_softmax:
    case LT_OP_softmax_backward: case LT_OP_log_softmax_backward:
        TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim"));
        TRY(check_dim(op, in, n, a->i[0], s->ndim, "dim"));
        if (op == LT_OP_softmax || op == LT_OP_log_softmax) {
            if (!lt_dtype_is_float(in[0].dtype) && !is_int(in[0].dtype) && in[0].dtype != LT_BOOL)
                return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "bad dtype");
        }
        break;
    case LT_OP_opt_barrier:     /* input 0's shape; the fence inputs any */
        *out = *s;
        return LT_OK;
    case LT_OP_cummax_indices:
        TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim"));
        TRY(check_dim(op, in, n, a->i[0], s->ndim, "dim"));
        break;
    case LT_OP_all_reduce:
        TRY(lt_shape_need_attrs(op, in, n, a, 1, "reduce type"));
        if (a->i[0] < LT_REDUCE_SUM || a->i[0] > LT_REDUCE_OR)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "invalid reduce type %lld", (long long)a->i[0]);
        break;
    case LT_OP_broadcast:
        TRY(lt_shape_need_attrs(op, in, n, a, 1, "root"));
        if (a->i[0] < 0 || a->i[0] >= lt_shape_world_size())
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "root %lld out of range for world size %d",
                        (long long)a->i[0], lt_shape_world_size());
        break;
    default:
        break;
    }
    for (int i = 1; i < n; i++)
        if (!lt_shape_equal(in[i].shape, s))
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "input shapes must be equal");
    *out = *s;
    return LT_OK;
}

lt_status lt_shape_rule_reduce(lt_op op, const lt_operand *in, int n,
                               lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim mask"));
    uint64_t mask = (uint64_t)a->i[0];
    int keep = a->n >= 2 ? a->i[1] != 0 : 0;
    int lim = s->ndim > 0 ? s->ndim : 1;
    if (mask >> lim)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "dim mask 0x%llx names dims beyond %d",
                    (unsigned long long)mask, s->ndim);
    out->ndim = 0;
    for (int d = 0; d < s->ndim; d++) {
        if (mask & (1ull << d)) {
            if (keep) out->dims[out->ndim++] = 1;
        } else {
            out->dims[out->ndim++] = s->dims[d];
        }
    }
    return LT_OK;
}

lt_status lt_shape_rule_argreduce(lt_op op, const lt_operand *in, int n,
                                  lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim"));
    int keep = a->n >= 2 ? a->i[1] != 0 : 0;
    int64_t dim = a->i[0];
    if (dim == -1) {
        if (lt_shape_numel(s) == 0)
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "cannot reduce an empty tensor");
        out->ndim = keep ? s->ndim : 0;
        for (int d = 0; d < out->ndim; d++) out->dims[d] = 1;
        return LT_OK;
    }
    TRY(check_dim(op, in, n, dim, s->ndim, "dim"));
    if (s->ndim > 0 && s->dims[dim] == 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "cannot reduce over an empty dim %lld",
                    (long long)dim);
    out->ndim = 0;
    for (int d = 0; d < s->ndim; d++) {
        if (d == dim) {
            if (keep) out->dims[out->ndim++] = 1;
        } else {
            out->dims[out->ndim++] = s->dims[d];
        }
    }
    return LT_OK;
}

/* ----------------------------------------------------------------- matmul */

static lt_status mm_dtypes(lt_op op, const lt_operand *in, int n)
{
    char b0[160], b1[160];
    if (!lt_dtype_is_float(in[0].dtype) || !lt_dtype_is_float(in[1].dtype) ||
        in[0].dtype != in[1].dtype)
        return lt_set_error(LT_ERR_DTYPE, "%s: %s x %s: needs two tensors of the same floating dtype",
                            lt_op_name(op), lt_operand_str(&in[0], b0, 160),
                            lt_operand_str(&in[1], b1, 160));
    return LT_OK;
}

lt_status lt_shape_rule_mm(lt_op op, const lt_operand *in, int n,
                           lt_attrs *a, lt_shape *out)
{
    const lt_shape *x = in[0].shape, *y = in[1].shape;
    char b0[160], b1[160];
    if (x->ndim != 2 || y->ndim != 2)
        return lt_set_error(LT_ERR_SHAPE, "%s: %s x %s: both inputs must be 2-D",
                            lt_op_name(op), lt_operand_str(&in[0], b0, 160),
                            lt_operand_str(&in[1], b1, 160));
    if (x->dims[1] != y->dims[0])
        return lt_set_error(LT_ERR_SHAPE, "%s: %s x %s: inner dimensions %lld and %lld differ",
                            lt_op_name(op), lt_operand_str(&in[0], b0, 160),
                            lt_operand_str(&in[1], b1, 160),
                            (long long)x->dims[1], (long long)y->dims[0]);
    TRY(mm_dtypes(op, in, n));
    out->ndim = 2;
    out->dims[0] = x->dims[0];
    out->dims[1] = y->dims[1];
    return LT_OK;
}

/* addmm (bias, a, b): mm's rule on (a, b); bias is [N] or [1, N] and takes
 * part in the dtype promotion (a float, like a and b). */
lt_status lt_shape_rule_addmm(lt_op op, const lt_operand *in, int n,
                              lt_attrs *a, lt_shape *out)
{
    if (n != 3)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "expected (bias, a, b)");
    TRY(lt_shape_rule_mm(op, in + 1, 2, a, out));
    const lt_shape *bs = in[0].shape;
    int64_t N = out->dims[1];
    int ok = (bs->ndim == 1 && bs->dims[0] == N) ||
             (bs->ndim == 2 && bs->dims[0] == 1 && bs->dims[1] == N);
    if (!ok)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "bias must be [%lld] or [1, %lld]",
                    (long long)N, (long long)N);
    if (in[0].dtype != in[1].dtype)
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "bias must have the matrices' dtype");
    return LT_OK;
}

lt_status lt_shape_rule_bmm(lt_op op, const lt_operand *in, int n,
                            lt_attrs *a, lt_shape *out)
{
    const lt_shape *x = in[0].shape, *y = in[1].shape;
    char b0[160], b1[160];
    if (x->ndim != 3 || y->ndim != 3)
        return lt_set_error(LT_ERR_SHAPE, "%s: %s x %s: both inputs must be 3-D",
                            lt_op_name(op), lt_operand_str(&in[0], b0, 160),
                            lt_operand_str(&in[1], b1, 160));
    if (x->dims[0] != y->dims[0])
        return lt_set_error(LT_ERR_SHAPE, "%s: %s x %s: batch sizes %lld and %lld differ",
                            lt_op_name(op), lt_operand_str(&in[0], b0, 160),
                            lt_operand_str(&in[1], b1, 160),
                            (long long)x->dims[0], (long long)y->dims[0]);
    if (x->dims[2] != y->dims[1])
        return lt_set_error(LT_ERR_SHAPE, "%s: %s x %s: inner dimensions %lld and %lld differ",
                            lt_op_name(op), lt_operand_str(&in[0], b0, 160),
                            lt_operand_str(&in[1], b1, 160),
                            (long long)x->dims[2], (long long)y->dims[1]);
    TRY(mm_dtypes(op, in, n));
    out->ndim = 3;
    out->dims[0] = x->dims[0];
    out->dims[1] = x->dims[1];
    out->dims[2] = y->dims[2];
    return LT_OK;
}

/* --------------------------------------------------------------- movement */

lt_status lt_shape_rule_reshape(lt_op op, const lt_operand *in, int n,
                                lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    if (a->n > LT_MAX_DIMS)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "at most %d dims, got %d", LT_MAX_DIMS, a->n);
    int infer = -1;
    int64_t known = 1;
    out->ndim = a->n;
    for (int d = 0; d < a->n; d++) {
        int64_t v = a->i[d];
        if (v == -1 && infer < 0) { infer = d; continue; }
        if (v < 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "invalid size %lld at dim %d", (long long)v, d);
        if (__builtin_mul_overflow(known, v, &known))
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "shape has too many elements");
        out->dims[d] = v;
    }
    int64_t numel = lt_shape_numel(s);
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "cannot infer size -1 for %lld elements",
                        (long long)numel);
        out->dims[infer] = numel / known;
        a->i[infer] = numel / known;
        known = numel;
    }
    if (known != numel) {
        char b[128];
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "shape %s has %lld elements, input has %lld",
                    lt_shape_str(out, b, sizeof b), (long long)known, (long long)numel);
    }
    return LT_OK;
}

lt_status lt_shape_rule_permute(lt_op op, const lt_operand *in, int n,
                                lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    if (a->n != s->ndim)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "permutation has %d entries for %d dims",
                    a->n, s->ndim);
    int seen = 0;
    out->ndim = s->ndim;
    for (int d = 0; d < a->n; d++) {
        int64_t p = a->i[d];
        if (p < 0 || p >= s->ndim || (seen & (1 << p)))
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "invalid permutation (entry %d = %lld)",
                        d, (long long)p);
        seen |= 1 << p;
        out->dims[d] = s->dims[p];
    }
    return LT_OK;
}

lt_status lt_shape_rule_expand(lt_op op, const lt_operand *in, int n,
                               lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    if (a->n < s->ndim || a->n > LT_MAX_DIMS)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "%d target dims for a %d-dim input", a->n, s->ndim);
    int lead = a->n - s->ndim;
    out->ndim = a->n;
    for (int d = 0; d < a->n; d++) {
        int64_t v = a->i[d];
        if (d < lead) {
            if (v < 0)
                return lt_shape_fail(LT_ERR_ARG, op, in, n, "size %lld not allowed in a new leading dim %d",
                            (long long)v, d);
            out->dims[d] = v;
            continue;
        }
        int64_t have = s->dims[d - lead];
        if (v == -1) v = have;
        else if (v < 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "invalid size %lld at dim %d", (long long)v, d);
        if (have != v && have != 1)
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n,
                        "size %lld at dim %d must match the existing size %lld (or it must be 1)",
                        (long long)v, d, (long long)have);
        out->dims[d] = v;
        a->i[d] = v;
    }
    return LT_OK;
}

/* Canonical slice: clamps like PyTorch. */
static lt_status slice_view(lt_op op, const lt_operand *in, int n,
                            lt_attrs *a, const lt_shape *s, lt_shape *out)
{
    TRY(lt_shape_need_attrs(op, in, n, a, 4, "dim, start, end, step"));
    if (s->ndim == 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "cannot slice a 0-dim tensor");
    TRY(check_dim(op, in, n, a->i[0], s->ndim, "dim"));
    int64_t size = s->dims[a->i[0]], st = a->i[1], en = a->i[2], step = a->i[3];
    if (step <= 0)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "step must be > 0, got %lld", (long long)step);
    if (st < 0) st += size;
    if (en < 0) en += size;
    if (st < 0) st = 0; else if (st > size) st = size;
    if (en < st) en = st; else if (en > size) en = size;
    a->i[1] = st;
    a->i[2] = en;
    *out = *s;
    out->dims[a->i[0]] = en == st ? 0 : (en - st - 1) / step + 1;   /* no overflow */
    return LT_OK;
}

lt_status lt_shape_rule_slice(lt_op op, const lt_operand *in, int n,
                              lt_attrs *a, lt_shape *out)
{
    return slice_view(op, in, n, a, in[0].shape, out);
}

static lt_status select_view(lt_op op, const lt_operand *in, int n,
                             lt_attrs *a, const lt_shape *s, lt_shape *out)
{
    TRY(lt_shape_need_attrs(op, in, n, a, 2, "dim, index"));
    if (s->ndim == 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "cannot select from a 0-dim tensor");
    TRY(check_dim(op, in, n, a->i[0], s->ndim, "dim"));
    int64_t d = a->i[0], size = s->dims[d], idx = a->i[1];
    if (idx < -size || idx >= size)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "index %lld out of range for dim %lld of size %lld",
                    (long long)idx, (long long)d, (long long)size);
    if (idx < 0) a->i[1] = idx + size;
    out->ndim = 0;
    for (int k = 0; k < s->ndim; k++)
        if (k != d) out->dims[out->ndim++] = s->dims[k];
    return LT_OK;
}

lt_status lt_shape_rule_select(lt_op op, const lt_operand *in, int n,
                               lt_attrs *a, lt_shape *out)
{
    return select_view(op, in, n, a, in[0].shape, out);
}

static lt_status diagonal_view(lt_op op, const lt_operand *in, int n,
                               lt_attrs *a, const lt_shape *s, lt_shape *out)
{
    TRY(lt_shape_need_attrs(op, in, n, a, 3, "offset, dim1, dim2"));
    int64_t off = a->i[0], d1 = a->i[1], d2 = a->i[2];
    if (s->ndim < 2)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "needs at least 2 dims");
    TRY(check_dim(op, in, n, d1, s->ndim, "dim1"));
    TRY(check_dim(op, in, n, d2, s->ndim, "dim2"));
    if (d1 == d2)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "dim1 and dim2 must differ (both %lld)", (long long)d1);
    int64_t len;
    if (off >= 0) len = s->dims[d1] < s->dims[d2] - off ? s->dims[d1] : s->dims[d2] - off;
    else len = s->dims[d1] + off < s->dims[d2] ? s->dims[d1] + off : s->dims[d2];
    if (len < 0) len = 0;
    out->ndim = 0;
    for (int k = 0; k < s->ndim; k++)
        if (k != d1 && k != d2) out->dims[out->ndim++] = s->dims[k];
    out->dims[out->ndim++] = len;
    return LT_OK;
}

lt_status lt_shape_rule_diagonal(lt_op op, const lt_operand *in, int n,
                                 lt_attrs *a, lt_shape *out)
{
    return diagonal_view(op, in, n, a, in[0].shape, out);
}

static lt_status as_strided_view(lt_op op, const lt_operand *in, int n,
                                 lt_attrs *a, const lt_shape *s, lt_shape *out)
{
    TRY(lt_shape_need_attrs(op, in, n, a, 1, "ndim, sizes, strides, storage_offset"));
    int64_t nd = a->i[0];
    if (nd < 0 || nd > LT_MAX_DIMS)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "invalid ndim %lld", (long long)nd);
    TRY(lt_shape_need_attrs(op, in, n, a, (int)(2 + 2 * nd), "ndim, sizes, strides, storage_offset"));
    int64_t off = a->i[1 + 2 * nd], maxi = off;
    if (off < 0)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "negative storage offset %lld", (long long)off);
    out->ndim = (int)nd;
    int empty = 0;
    for (int d = 0; d < nd; d++) {
        int64_t sz = a->i[1 + d], st = a->i[1 + nd + d];
        if (sz < 0 || st < 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "negative size or stride at dim %d", d);
        out->dims[d] = sz;
        if (sz == 0) empty = 1;
        else maxi = clamp64((i128)maxi + (i128)(sz - 1) * st);
    }
    int64_t numel = lt_shape_numel(s);
    if (!empty && maxi >= numel) {
        char b[128];
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n,
                    "view %s at offset %lld reaches element %lld but the source has %lld elements",
                    lt_shape_str(out, b, sizeof b), (long long)off, (long long)maxi,
                    (long long)numel);
    }
    return LT_OK;
}

lt_status lt_shape_rule_as_strided(lt_op op, const lt_operand *in, int n,
                                   lt_attrs *a, lt_shape *out)
{
    return as_strided_view(op, in, n, a, in[0].shape, out);
}

lt_status lt_shape_rule_scatter(lt_op op, const lt_operand *in, int n,
                                lt_attrs *a, lt_shape *out)
{
    const lt_shape *base = in[0].shape;
    lt_shape view;
    switch (op) {
    case LT_OP_slice_scatter: TRY(slice_view(op, in, n, a, base, &view)); break;
    case LT_OP_select_scatter: TRY(select_view(op, in, n, a, base, &view)); break;
    case LT_OP_diagonal_scatter: TRY(diagonal_view(op, in, n, a, base, &view)); break;
    case LT_OP_as_strided_scatter: TRY(as_strided_view(op, in, n, a, base, &view)); break;
    default:
        return lt_set_error(LT_ERR_INTERNAL, "%s: not a scatter op", lt_op_name(op));
    }
    if (!lt_shape_equal(&view, in[1].shape)) {
        char b[128];
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "src must have the view shape %s",
                    lt_shape_str(&view, b, sizeof b));
    }
    *out = *base;
    return LT_OK;
}

lt_status lt_shape_rule_cat(lt_op op, const lt_operand *in, int n,
                            lt_attrs *a, lt_shape *out)
{
    if (n < 1)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "needs at least one input");
    TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim"));
    /* Legacy rule: 1-D empty tensors are skipped. */
    const lt_shape *ref = NULL;
    for (int i = 0; i < n; i++) {
        const lt_shape *s = in[i].shape;
        if (s->ndim == 1 && s->dims[0] == 0) continue;
        ref = s;
        break;
    }
    if (!ref) { *out = *in[0].shape; return LT_OK; }
    if (ref->ndim == 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "zero-dim tensors cannot be concatenated");
    int64_t dim = a->i[0];
    TRY(check_dim(op, in, n, dim, ref->ndim, "dim"));
    *out = *ref;
    out->dims[dim] = 0;
    for (int i = 0; i < n; i++) {
        const lt_shape *s = in[i].shape;
        if (s->ndim == 1 && s->dims[0] == 0) continue;
        if (s->ndim != ref->ndim)
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "input %d has %d dims, expected %d",
                        i, s->ndim, ref->ndim);
        for (int d = 0; d < s->ndim; d++)
            if (d != dim && s->dims[d] != ref->dims[d])
                return lt_shape_fail(LT_ERR_SHAPE, op, in, n,
                            "input %d has size %lld at dim %d, expected %lld",
                            i, (long long)s->dims[d], d, (long long)ref->dims[d]);
        if (__builtin_add_overflow(out->dims[dim], s->dims[dim], &out->dims[dim]))
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "the result is too large");
    }
    return LT_OK;
}

/* --------------------------------------------------------------- indexing */

lt_status lt_shape_rule_index_select(lt_op op, const lt_operand *in, int n,
                                     lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape, *ix = in[1].shape;
    TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim"));
    if (!is_int(in[1].dtype))
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "index must be i32 or i64");
    if (ix->ndim > 1)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "index must be 0-D or 1-D");
    TRY(check_dim(op, in, n, a->i[0], s->ndim, "dim"));
    *out = *s;
    if (s->ndim == 0) {
        if (lt_shape_numel(ix) != 1)
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "a 0-dim source takes one index");
        return LT_OK;
    }
    out->dims[a->i[0]] = lt_shape_numel(ix);
    return LT_OK;
}

lt_status lt_shape_rule_gather(lt_op op, const lt_operand *in, int n,
                               lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape, *ix = in[1].shape;
    TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim"));
    if (in[1].dtype != LT_I64)
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "index must be i64");
    TRY(check_dim(op, in, n, a->i[0], s->ndim, "dim"));
    if (ix->ndim != s->ndim && !(lt_shape_numel(ix) <= 1 && (ix->ndim <= 1) && (s->ndim <= 1)))
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "index and source must have the same number of dims");
    for (int d = 0; d < ix->ndim && d < s->ndim; d++)
        if (d != a->i[0] && ix->dims[d] > s->dims[d])
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "index size %lld exceeds source size %lld at dim %d",
                        (long long)ix->dims[d], (long long)s->dims[d], d);
    *out = *ix;
    return LT_OK;
}

lt_status lt_shape_rule_scatter_add(lt_op op, const lt_operand *in, int n,
                                    lt_attrs *a, lt_shape *out)
{
    const lt_shape *b = in[0].shape, *ix = in[1].shape, *src = in[2].shape;
    if (op == LT_OP_scatter_reduce) {
        TRY(lt_shape_need_attrs(op, in, n, a, 2, "dim, reduce"));
        if (a->i[1] < 0 || a->i[1] > 3)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "reduce %lld is not 0 (sum), 1 (prod), 2 (amax) or 3 (amin)",
                                 (long long)a->i[1]);
    }
    TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim"));
    if (in[1].dtype != LT_I64)
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "index must be i64");
    if (in[2].dtype != in[0].dtype)
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "src and base dtypes must be equal");
    TRY(check_dim(op, in, n, a->i[0], b->ndim, "dim"));
    if (ix->ndim != b->ndim || src->ndim != b->ndim)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "base, index and src must have the same number of dims");
    for (int d = 0; d < ix->ndim; d++) {
        if (ix->dims[d] > src->dims[d] || (d != a->i[0] && ix->dims[d] > b->dims[d]))
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "index size %lld at dim %d exceeds src or base",
                        (long long)ix->dims[d], d);
    }
    *out = *b;
    return LT_OK;
}

lt_status lt_shape_rule_embedding_bwd(lt_op op, const lt_operand *in, int n,
                                      lt_attrs *a, lt_shape *out)
{
    const lt_shape *g = in[0].shape, *ix = in[1].shape;
    TRY(lt_shape_need_attrs(op, in, n, a, 2, "num_weights, padding_idx"));
    if (!is_int(in[1].dtype))
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "indices must be i32 or i64");
    if (!lt_dtype_is_float(in[0].dtype))
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "grad must be floating");
    if (a->i[0] <= 0)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "num_weights must be > 0, got %lld", (long long)a->i[0]);
    if (g->ndim != ix->ndim + 1)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "grad must be indices shape + [embedding_dim]");
    for (int d = 0; d < ix->ndim; d++)
        if (g->dims[d] != ix->dims[d])
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "grad must be indices shape + [embedding_dim]");
    out->ndim = 2;
    out->dims[0] = a->i[0];
    out->dims[1] = g->dims[g->ndim - 1];
    return LT_OK;
}

lt_status lt_shape_rule_arange(lt_op op, const lt_operand *in, int n,
                               lt_attrs *a, lt_shape *out)
{
    TRY(lt_shape_need_attrs(op, in, n, a, 2, "dtype, n"));
    if (in[0].shape->ndim != 0 || in[1].shape->ndim != 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "start and step must be 0-dim");
    if (a->i[1] < 0)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "length must be >= 0, got %lld", (long long)a->i[1]);
    out->ndim = 1;
    out->dims[0] = a->i[1];
    return LT_OK;
}

/* ----------------------------------------------------------------- losses */

static lt_status nll_common(lt_op op, const lt_operand *in, int n, lt_attrs *a,
                            const lt_operand *lp, const lt_operand *tg,
                            const lt_operand *w)
{
    TRY(lt_shape_need_attrs(op, in, n, a, 2, "reduction, ignore_index"));
    if (a->i[0] < 0 || a->i[0] > 2)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "reduction must be 0 (none), 1 (mean) or 2 (sum)");
    const lt_shape *s = lp->shape, *t = tg->shape;
    if (s->ndim != 1 && s->ndim != 2)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "input must be [N, C] or [C]");
    if (tg->dtype != LT_I64)
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "target must be i64");
    if (!lt_dtype_is_float(lp->dtype))
        return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "input must be floating");
    if ((s->ndim == 2 && (t->ndim != 1 || t->dims[0] != s->dims[0])) ||
        (s->ndim == 1 && t->ndim != 0))
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "target must be [N] for input [N, C] (or [] for [C])");
    if (w) {
        if (w->shape->ndim != 1 || w->shape->dims[0] != s->dims[s->ndim - 1])
            return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "weight must be [C]");
        if (w->dtype != lp->dtype)
            return lt_shape_fail(LT_ERR_DTYPE, op, in, n, "weight dtype must equal the input dtype");
    }
    return LT_OK;
}

static void nll_out(const lt_attrs *a, const lt_shape *s, lt_shape *out)
{
    if (a->i[0] == 0 && s->ndim == 2) {
        out->ndim = 1;
        out->dims[0] = s->dims[0];
    } else {
        out->ndim = 0;
    }
}

lt_status lt_shape_rule_nll(lt_op op, const lt_operand *in, int n,
                            lt_attrs *a, lt_shape *out)
{
    if (n != 2 && n != 3)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "takes 2 or 3 inputs, got %d", n);
    TRY(nll_common(op, in, n, a, &in[0], &in[1], n == 3 ? &in[2] : NULL));
    nll_out(a, in[0].shape, out);
    return LT_OK;
}

lt_status lt_shape_rule_nll_bwd(lt_op op, const lt_operand *in, int n,
                                lt_attrs *a, lt_shape *out)
{
    if (n != 3 && n != 4)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "takes 3 or 4 inputs, got %d", n);
    TRY(nll_common(op, in, n, a, &in[1], &in[2], n == 4 ? &in[3] : NULL));
    lt_shape g;
    nll_out(a, in[1].shape, &g);
    if (!lt_shape_equal(&g, in[0].shape)) {
        char b[128];
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "grad must have shape %s",
                    lt_shape_str(&g, b, sizeof b));
    }
    *out = *in[1].shape;
    return LT_OK;
}

/* ------------------------------------------------------- random, collective */

lt_status lt_shape_rule_rand(lt_op op, const lt_operand *in, int n,
                             lt_attrs *a, lt_shape *out)
{
    if (n < 1 || n > 2)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "takes a seed and an optional counter offset");
    TRY(lt_shape_need_attrs(op, in, n, a, 2, "dtype, ndim, dims..."));
    int64_t nd = a->i[1];
    if (nd < 0 || nd > LT_MAX_DIMS)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "invalid ndim %lld", (long long)nd);
    TRY(lt_shape_need_attrs(op, in, n, a, (int)(2 + nd), "dtype, ndim, dims..."));
    if (in[0].shape->ndim != 0 || !is_int(in[0].dtype))
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "seed must be a 0-dim integer tensor");
    if (n == 2 && (in[1].shape->ndim != 0 || (in[1].dtype != LT_I64 && in[1].dtype != LT_I32)))
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "counter offset must be a 0-dim int64 or int32 tensor");
    out->ndim = (int)nd;
    for (int d = 0; d < nd; d++) {
        if (a->i[2 + d] < 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "negative size at dim %d", d);
        out->dims[d] = a->i[2 + d];
    }
    return LT_OK;
}

lt_status lt_shape_rule_all_gather(lt_op op, const lt_operand *in, int n,
                                   lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    TRY(lt_shape_need_attrs(op, in, n, a, 1, "dim"));
    if (s->ndim == 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "cannot gather 0-dim tensors");
    TRY(check_dim(op, in, n, a->i[0], s->ndim, "dim"));
    *out = *s;
    out->dims[a->i[0]] *= lt_shape_world_size();
    return LT_OK;
}

lt_status lt_shape_rule_reduce_scatter(lt_op op, const lt_operand *in, int n,
                                       lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    TRY(lt_shape_need_attrs(op, in, n, a, 2, "reduce type, dim"));
    if (a->i[0] < LT_REDUCE_SUM || a->i[0] > LT_REDUCE_OR)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "invalid reduce type %lld", (long long)a->i[0]);
    if (s->ndim == 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "cannot scatter 0-dim tensors");
    TRY(check_dim(op, in, n, a->i[1], s->ndim, "dim"));
    int w = lt_shape_world_size();
    if (s->dims[a->i[1]] % w != 0)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "size %lld of dim %lld is not divisible by world size %d",
                    (long long)s->dims[a->i[1]], (long long)a->i[1], w);
    *out = *s;
    out->dims[a->i[1]] /= w;
    return LT_OK;
}

/* ---------------------------------------------------- complex <-> real */

lt_status lt_shape_rule_view_as_real(lt_op op, const lt_operand *in, int n,
                                     lt_attrs *a, lt_shape *out)
{
    if (in[0].shape->ndim >= LT_MAX_DIMS)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "too many dims (at most %d after adding one)",
                    LT_MAX_DIMS);
    *out = *in[0].shape;
    out->dims[out->ndim++] = 2;
    return LT_OK;
}

lt_status lt_shape_rule_view_as_complex(lt_op op, const lt_operand *in, int n,
                                        lt_attrs *a, lt_shape *out)
{
    const lt_shape *s = in[0].shape;
    if (s->ndim < 1 || s->dims[s->ndim - 1] != 2)
        return lt_shape_fail(LT_ERR_SHAPE, op, in, n, "the last dim must be of size 2");
    *out = *s;
    out->ndim--;
    return LT_OK;
}
