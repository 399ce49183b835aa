/*
 * lazy/shape.h — shape and dtype rules of the op table (lazy/ops.def).
 *
 * Rules run on LOGICAL dtypes (what PyTorch sees; f32 even in bf16 mode).
 * Every rule checks its attributes (never reads past attrs->n), shapes and
 * dtypes, and on a mismatch returns LT_ERR_SHAPE / LT_ERR_DTYPE / LT_ERR_ARG
 * with a user-facing message naming the op, the input shapes and dtypes, e.g.
 *   "add: shapes [2, 3] (f32) and [4] (f32) are not broadcastable".
 * Some rules canonicalise their attributes in place (slice clamps start/end
 * like PyTorch, select normalises a negative index), so kernels and hashes see
 * one form per view.
 */
#ifndef LT_SHAPE_H
#define LT_SHAPE_H

#include "lazytpu.h"

/* One input as the rules see it. */
typedef struct lt_operand {
    const lt_shape *shape;
    lt_dtype dtype;      /* logical dtype */
    int wrapped;         /* 1 = wrapped number (Python scalar): weakest tier */
} lt_operand;

typedef lt_status (*lt_shape_rule_fn)(lt_op op, const lt_operand *in, int n,
                                      lt_attrs *attrs, lt_shape *out);

/* Shape rules (one per name in ops.def's shape column). */
#define LT_DECLARE_SHAPE_RULE(r) \
    lt_status lt_shape_rule_##r(lt_op, const lt_operand *, int, lt_attrs *, lt_shape *);
LT_DECLARE_SHAPE_RULE(leaf)
LT_DECLARE_SHAPE_RULE(ew)
LT_DECLARE_SHAPE_RULE(same)
LT_DECLARE_SHAPE_RULE(lnorm)
LT_DECLARE_SHAPE_RULE(reduce)
LT_DECLARE_SHAPE_RULE(argreduce)
LT_DECLARE_SHAPE_RULE(mm)
LT_DECLARE_SHAPE_RULE(bmm)
LT_DECLARE_SHAPE_RULE(addmm)
LT_DECLARE_SHAPE_RULE(conv2d)
LT_DECLARE_SHAPE_RULE(conv2d_bwd_in)
LT_DECLARE_SHAPE_RULE(conv2d_bwd_w)
LT_DECLARE_SHAPE_RULE(conv3d)
LT_DECLARE_SHAPE_RULE(conv3d_bwd_in)
LT_DECLARE_SHAPE_RULE(conv3d_bwd_w)
LT_DECLARE_SHAPE_RULE(pool)
LT_DECLARE_SHAPE_RULE(pool_bwd)
LT_DECLARE_SHAPE_RULE(adaptive_pool)
LT_DECLARE_SHAPE_RULE(reshape)
LT_DECLARE_SHAPE_RULE(permute)
LT_DECLARE_SHAPE_RULE(expand)
LT_DECLARE_SHAPE_RULE(slice)
LT_DECLARE_SHAPE_RULE(select)
LT_DECLARE_SHAPE_RULE(diagonal)
LT_DECLARE_SHAPE_RULE(as_strided)
LT_DECLARE_SHAPE_RULE(scatter)
LT_DECLARE_SHAPE_RULE(cat)
LT_DECLARE_SHAPE_RULE(index_select)
LT_DECLARE_SHAPE_RULE(gather)
LT_DECLARE_SHAPE_RULE(scatter_add)
LT_DECLARE_SHAPE_RULE(embedding_bwd)
LT_DECLARE_SHAPE_RULE(arange)
LT_DECLARE_SHAPE_RULE(nll)
LT_DECLARE_SHAPE_RULE(nll_bwd)
LT_DECLARE_SHAPE_RULE(rand)
LT_DECLARE_SHAPE_RULE(all_gather)
LT_DECLARE_SHAPE_RULE(reduce_scatter)
LT_DECLARE_SHAPE_RULE(view_as_real)
LT_DECLARE_SHAPE_RULE(view_as_complex)
LT_DECLARE_SHAPE_RULE(isin)          /* shape_linalg.c */
LT_DECLARE_SHAPE_RULE(inv)
LT_DECLARE_SHAPE_RULE(eigh)
LT_DECLARE_SHAPE_RULE(svd)
LT_DECLARE_SHAPE_RULE(spmd_manual)   /* lazy/spmd_manual.c */

/* Dtype rules of ops.def's dtype column. */
typedef enum lt_dtype_rule {
    LT_DT_LEAF, LT_DT_PROMOTE, LT_DT_FLOAT, LT_DT_BOOL, LT_DT_I64, LT_DT_SUM,
    LT_DT_FIRST, LT_DT_WHERE, LT_DT_ATTR, LT_DT_RAND, LT_DT_REAL, LT_DT_COMPLEX
} lt_dtype_rule;

/* The op's dtype and shape rules (the rows of lazy/ops.c); LT_DT_LEAF / NULL
 * for an invalid op. */
lt_dtype_rule lt_op_dtype_rule(lt_op op);
lt_shape_rule_fn lt_op_shape_rule(lt_op op);

/* PyTorch's result_type over operands with three priority tiers:
 * dimensioned tensors > zero-dim tensors > wrapped numbers. A lower tier
 * matters only when its category (bool < integer < float) is higher than the
 * higher tiers'. A float wrapped number counts as f32 (the default dtype), an
 * integer one as i64. n >= 1. */
lt_dtype lt_result_type(const lt_operand *in, int n);

/* Output dtype of op (logical). Fails with LT_ERR_DTYPE/LT_ERR_ARG. */
lt_status lt_infer_dtype(lt_op op, const lt_operand *in, int n,
                         const lt_attrs *attrs, lt_dtype *out);

/* Output shape and logical dtype of op on in[0..n) with attrs (may be
 * canonicalised in place, see above). Checks arity. Creates nothing. */
lt_status lt_infer(lt_op op, const lt_operand *in, int n, lt_attrs *attrs,
                   lt_shape *out_shape, lt_dtype *out_dtype);

/* The largest tensor lazytpu accepts: 2^56 elements, and the product of
 * the non-zero dims of a shape at most that too (so that element counts,
 * byte sizes and contiguous strides of every shape fit in int64 without
 * overflow, even for 0-size shapes with huge other dims). */
#define LT_MAX_NUMEL ((int64_t)1 << 56)

/* 1 if s is a valid tensor shape: 0 <= ndim <= LT_MAX_DIMS, every dim >= 0,
 * product of the non-zero dims <= LT_MAX_NUMEL. Sets *numel (may be NULL)
 * when valid. Every shape entering the core (host transfers, shape rules'
 * outputs) is checked with it. */
int lt_shape_fits(const lt_shape *s, int64_t *numel);

/* Storage dtype of a logical dtype: f32 -> bf16 when bf16_mode. */
static inline lt_dtype lt_storage_dtype(lt_dtype logical, int bf16_mode)
{
    return (logical == LT_F32 && bf16_mode) ? LT_BF16 : logical;
}

/* World size for collectives: LAZYTPU_WORLD_SIZE (default 1). */
int lt_shape_world_size(void);

/* "[2, 3] (f32)" into buf; returns buf. */
char *lt_operand_str(const lt_operand *o, char *buf, size_t cap);

#endif
