/*
 * lazy/kernels/kernel.h — the interface of library kernels.
 *
 * A kernel computes one op (or one fused group, see fused.h) from strided
 * views of its inputs into a contiguous output. Views let the compiler fold
 * movement ops (transpose, slice, expand, ...) into the consumer: a kernel
 * must honour arbitrary strides (0 = broadcast) and may take fast paths when
 * the strides are contiguous (e.g. matmul turns a transposed view into
 * CblasTrans).
 */
#ifndef LT_KERNEL_H
#define LT_KERNEL_H

#include "lazytpu.h"

typedef struct lt_view {
    void *data;               /* buffer base */
    lt_dtype dtype;
    lt_shape shape;
    int64_t strides[LT_MAX_DIMS];  /* in elements */
    int64_t offset;                /* in elements */
} lt_view;

typedef struct lt_kernel_ctx {
    int core;
    int nthreads;             /* OpenMP budget for this kernel */
    int mm_precision;         /* the program's lt_matmul_precision: how f32
                                 products multiply (mxu.h); 0 = plain f32 */
} lt_kernel_ctx;

/* Computes op on views in[0..n_in) into out (contiguous, out->dtype is the
 * node's storage dtype). Returns LT_OK, or an error (with lt_set_error) for a
 * condition only known at run time (index out of range, collective failure). */
typedef lt_status (*lt_kernel_fn)(lt_op op, const lt_attrs *attrs,
                                  const lt_view *in, int n_in,
                                  const lt_view *out,
                                  const lt_kernel_ctx *ctx);

/* The kernel of a non-fused op, from the op table's kernel column (the map
 * is lazy/ops.c); NULL for fused (elementwise), reduce and leaf ops, which
 * the compiler handles. */
lt_kernel_fn lt_kernel_for(lt_op op);

/* Kernel families (lazy/kernels/<family>.c). */
#define LT_DECLARE_KERNEL(k) \
    lt_status lt_kernel_##k(lt_op, const lt_attrs *, const lt_view *, int, \
                            const lt_view *, const lt_kernel_ctx *);
LT_DECLARE_KERNEL(matmul)
LT_DECLARE_KERNEL(conv)
LT_DECLARE_KERNEL(conv3d)
LT_DECLARE_KERNEL(pool)
LT_DECLARE_KERNEL(norm)
LT_DECLARE_KERNEL(lnorm)       /* layer_norm and its backward (layernorm.c) */
LT_DECLARE_KERNEL(scan)        /* cumsum, cumprod, cummax_indices */
LT_DECLARE_KERNEL(sort)        /* argsort */
LT_DECLARE_KERNEL(view)        /* materialise a view: strided copy */
LT_DECLARE_KERNEL(scatter)
LT_DECLARE_KERNEL(cat)
LT_DECLARE_KERNEL(index)
LT_DECLARE_KERNEL(loss)
LT_DECLARE_KERNEL(random)
LT_DECLARE_KERNEL(collective)
LT_DECLARE_KERNEL(search)      /* isin */
LT_DECLARE_KERNEL(linalg)      /* inv, eigh, svd (linalg.c) */
/* Takes part in the collective `op` (all_reduce, ...) of this process's
 * world as a failure, for a program that cannot provide its operand (an
 * earlier step failed, an input is poisoned): every rank's collective then
 * fails with "<op>: rank R could not take part: <reason>" (the lowest
 * failing rank is named) instead of waiting for this rank. No-op (LT_OK)
 * without a world. Returns the collective's error status (sets the
 * thread's error). */
lt_status lt_collective_abstain(lt_op op, const char *reason);
/* This process's place in its world, for messages: returns the world size
 * (LAZYTPU_WORLD_SIZE; 1 when unset) and writes the rank (LAZYTPU_ORDINAL;
 * 0 when unset) into *rank (may be NULL). Attaches nothing. The collective
 * kernels are lazy/'s one way into spawn/ (scripts/check_layers.py). */
int lt_collective_world(int *rank);
/* A GEMM with a fused elementwise epilogue (matmul.c; contract there). */
struct lt_fused;
lt_status lt_kernel_matmul_epi(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                               const struct lt_fused *epi, const lt_view *epi_in,
                               const lt_view *out, const lt_kernel_ctx *ctx);
LT_DECLARE_KERNEL(reduce)      /* unfused reduce (fused path lives in compile) */
LT_DECLARE_KERNEL(argreduce)

/* Reads element i (linear index in view order) as double / writes double;
 * slow helpers for generic paths and tests. */
double lt_view_get(const lt_view *v, int64_t linear);
/* Contiguous row-major strides for shape. */
void lt_contiguous_strides(const lt_shape *s, int64_t *strides);
/* 1 if the view is contiguous row-major. */
int lt_view_is_contiguous(const lt_view *v);

#endif
