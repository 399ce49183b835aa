/*
 * lazy/kernels/reduce.h — reductions over a fused elementwise producer.
 *
 * A reduction runs over an iteration space that is the reduce input's shape
 * permuted so that the reduced dims are either innermost ("inner": outputs
 * are consecutive runs of r positions) or outermost ("outer": position
 * ri * n_out + o). The values reduced are the result value of a fused
 * program (lt_fused) evaluated block-wise, so an elementwise producer chain
 * never materialises. Accumulation: f32/bf16 in double, f64 in double,
 * integers in int64.
 */
#ifndef LT_REDUCE_H
#define LT_REDUCE_H

#include "fused.h"

typedef struct lt_reduce_plan {
    int perm[LT_MAX_DIMS]; /* iteration dim k = input dim perm[k] */
    int ndim;
    int inner;             /* 1: reduced dims innermost; 0: outermost */
    int64_t n_out;         /* kept elements */
    int64_t r;             /* reduced elements per output */
} lt_reduce_plan;

/* Plans op (sum/mean/prod/amax/amin/any/all with attrs i[0] = dim mask;
 * argmax/argmin with i[0] = dim or -1) over an input of shape `in`.
 * Returns LT_OK or LT_ERR_ARG for a bad dim. */
lt_status lt_reduce_plan_make(lt_op op, const lt_attrs *attrs,
                              const lt_shape *in, lt_reduce_plan *plan);

/* Permutes a view of the reduce input's shape into the plan's iteration
 * order (strides follow). */
void lt_reduce_permute_view(const lt_reduce_plan *plan, lt_view *v);

/* Runs the reduction: prod is a finished fused program over the iteration
 * shape whose result value is reduced; in[] are its input views (already
 * permuted); stores (may be NULL) receive prod's stores (only valid when the
 * permutation is the identity); out is the contiguous result (n_out
 * elements, any dtype; i64 for argmax/argmin). */
lt_status lt_reduce_run(lt_op op, const lt_reduce_plan *plan,
                        const lt_fused *prod, const lt_view *in,
                        const lt_view *stores, const lt_view *out,
                        const lt_kernel_ctx *ctx);

#endif
