/*
 * lazy/kernels/mxu.h — f32 products as a TPU's MXU computes them at XLA's
 * precision levels (lt_matmul_precision; the arithmetic in mxu.c).
 *
 * The MXU multiplies bf16 values exactly and accumulates in f32. An f32
 * product at level p is p passes: each operand is split into bf16 parts
 * (f32 arrays holding bf16 values), the f32 kernel (GEMM, convolution)
 * multiplies pairs of parts (exact products, f32 accumulation), and the
 * pass results are summed elementwise in f32 in XLA's order. Kernels call
 * lt_mxu_product with their own f32 routine as the pass.
 */
#ifndef LT_MXU_H
#define LT_MXU_H

#include "kernel.h"

/* 1 when a product whose operands are stored as da and db, computed in cdt,
 * multiplies in bf16 passes in ctx's program: the program's level is not
 * LT_MATMUL_F32, cdt is f32 and the operands are not both bf16 (bf16
 * operands multiply exactly in one pass at every level). */
int lt_mxu_applies(const lt_kernel_ctx *ctx, lt_dtype cdt, lt_dtype da, lt_dtype db);

/* The parts an operand is split into at level p: 1 (DEFAULT), 2 (HIGH),
 * 3 (HIGHEST); 0 for another value. */
int lt_mxu_parts(int p);

/* Splits n f32 values x into the parts of level p, part k of x[i] at
 * parts[k * n + i] (f32 holding a bf16 value), as XLA's BF16_BF16_F32
 * algorithms do: DEFAULT rounds x to bf16 (nearest even); HIGH: hi =
 * x truncated to bf16 (low 16 bits cleared), lo = bf16(x - hi); HIGHEST:
 * hi = trunc(x), mid = trunc(x - hi), lo = bf16(x - hi - mid). Uses up to
 * nt workers of ctx's core (lt_par_for; ctx may be NULL). */
void lt_mxu_split(int p, const float *x, int64_t n, float *parts, int nt,
                  const lt_kernel_ctx *ctx);

/* v (any strides, float dtype) split at level p: the parts of numel(v)
 * values each, one after the other, in one malloc'd block the caller frees
 * (NULL, LT_ERR_OOM set, on OOM). *part0 is the view of part 0 (part k: the
 * same view k * numel(v) floats further): an f32 view that fills a dense
 * block (contiguous, transposed, permuted) keeps its strides, any other is
 * packed contiguous first. */
float *lt_mxu_split_view(int p, const lt_view *v, int nt, const lt_kernel_ctx *ctx,
                         lt_view *part0);

/* The passes of level p in XLA's order as (part of a, part of b) pairs
 * (part 0 = hi): *pairs points at a static table; returns their number (1,
 * 3, 6; 0 for another p). The results are summed as
 *   acc = P[0]; acc += P[k] for 0 < k < n-1; acc = nan0(acc) + P[n-1]
 * (nan0: NaN -> 0, which keeps an infinite hi*hi product from turning into
 * NaN through its 0 * inf low passes). */
int lt_mxu_passes(int p, const unsigned char (**pairs)[2]);

/* One f32 product of a and b (f32 views with the operands' shapes,
 * strided as lt_mxu_split_view leaves them) into out (a contiguous f32
 * view of the result's shape). */
typedef lt_status (*lt_mxu_pass_fn)(void *arg, const lt_view *a, const lt_view *b,
                                    const lt_view *out);

/* The product `pass` computes, at level p (lt_mxu_parts(p) > 0): a and b
 * (any strides, float dtypes) are split (lt_mxu_split), pass runs once per
 * pair of lt_mxu_passes, the first into res, the others into scratch, and
 * the results are summed into res (contiguous f32, the numel of out_shape).
 * Returns LT_OK, LT_ERR_OOM (scratch) or the first error of pass. */
lt_status lt_mxu_product(int p, const lt_view *a, const lt_view *b, const lt_shape *out_shape,
                         float *res, lt_mxu_pass_fn pass, void *arg, int nt,
                         const lt_kernel_ctx *ctx);

#endif
