/*
 * lazy/kernels/pool.h — shared by the pooling kernels: pool.c (every
 * pooling op, any geometry) and pool_max2.c (the 2x2 / stride 2 max
 * pooling fast path).
 */
#ifndef LT_POOL_H
#define LT_POOL_H

#include "kutil.h"

typedef struct pool_geom {
    int64_t P, H, W, oh, ow;        /* planes, input and output spatial */
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int count_include_pad;
    int64_t divisor;                /* 0 = none */
} pool_geom;

/* 1 for max pooling with a 2x2 kernel, stride 2, no padding, dilation 1
 * (any ceil_mode): the case pool_max2.c handles. */
static inline int lt_pool_is_max2(const pool_geom *q)
{
    return q->kh == 2 && q->kw == 2 && q->sh == 2 && q->sw == 2 && q->ph == 0 &&
           q->pw == 0 && q->dh == 1 && q->dw == 1;
}

/* Max of the window of output (oy, ox) of one plane x ([H, W]) into *val
 * and its flat h*W+w index as the return value, PyTorch's rule: the last
 * NaN if any, else the first maximum (first valid element when all are
 * -inf). pool.c. */
int64_t lt_pool_max_at_f(const pool_geom *q, const float *x, int64_t oy, int64_t ox, float *val);
int64_t lt_pool_max_at_d(const pool_geom *q, const double *x, int64_t oy, int64_t ox, double *val);

/* 2x2 / stride 2 max pooling (lt_pool_is_max2(q)) over q->P contiguous
 * planes, same results as the general kernel. Forward: values into y
 * (when non-NULL) and flat indices into idx of dtype idt (when non-NULL);
 * backward: dx = gradient g routed to each window's max (dx fully
 * written, no need to clear it). cdt is LT_F32 or LT_F64; ctx gives the
 * thread budget nt and the core's helper pool. */
void lt_pool_max2_fwd(lt_dtype cdt, const pool_geom *q, const void *x, void *y, void *idx,
                      lt_dtype idt, int nt, const lt_kernel_ctx *ctx);
void lt_pool_max2_bwd(lt_dtype cdt, const pool_geom *q, const void *g, const void *x, void *dx,
                      int nt, const lt_kernel_ctx *ctx);

#endif
