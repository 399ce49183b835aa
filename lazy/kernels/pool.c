/*
 * lazy/kernels/pool.c — 2-D max / average / adaptive average / adaptive max
 * pooling and their backward passes over [N,C,H,W] or [C,H,W], PyTorch semantics:
 * padding (max pads with -inf), dilation, ceil_mode (output size comes from
 * the output/grad shape computed by the shape rule), count_include_pad,
 * divisor_override. Max: flat h*W+w indices, NaN counts as the max, ties keep
 * the first. Backward passes recompute the window from x and accumulate
 * (overlapping windows add up). Max pooling runs a row of outputs at a
 * time (one vectorised loop per window tap, max_row) on the core's helper
 * threads; average pooling is OpenMP over planes (N*C). Max pooling
 * with 2x2 windows and stride 2 goes to pool_max2.c.
 */
#include <stdatomic.h>
#include "pool.h"
#include "par.h"

/* outputs of a row handled per pass of the general max pooling */
#define POOL_TILE 64
/* widest kernel of the row kernel (wider: per-output scan) */
#define POOL_MAX_KW 64

/* Max: lt_pool_max_at (see pool.h). */
#define POOL_IMPL(T, SUF)                                                                 \
int64_t lt_pool_max_at_##SUF(const pool_geom *q, const T *x, int64_t oy, int64_t ox,      \
                             T *val)                                                      \
{                                                                                         \
    int64_t h0 = oy * q->sh - q->ph, w0 = ox * q->sw - q->pw;                             \
    int64_t h1 = h0 + (q->kh - 1) * q->dh + 1, w1 = w0 + (q->kw - 1) * q->dw + 1;         \
    if (h1 > q->H) h1 = q->H;                                                             \
    if (w1 > q->W) w1 = q->W;                                                             \
    while (h0 < 0) h0 += q->dh;                                                           \
    while (w0 < 0) w0 += q->dw;                                                           \
    int64_t best = h0 * q->W + w0;                                                        \
    T m = -INFINITY;                                                                      \
    for (int64_t h = h0; h < h1; h += q->dh)                                              \
        for (int64_t w = w0; w < w1; w += q->dw) {                                        \
            T v = x[h * q->W + w];                                                        \
            int take = (v > m) | (v != v);  /* selects, not a branch */                  \
            m = take ? v : m;                                                             \
            best = take ? h * q->W + w : best;                                            \
        }                                                                                 \
    *val = m;                                                                             \
    return best;                                                                          \
}                                                                                         \
/* Max pooling over output row oy, outputs [t0, t1) (t1 - t0 <=          \
 * POOL_TILE) of plane x: running max m[] and (when best is non-NULL) flat \
 * index best[] per output, the window's valid taps in row-major order,    \
 * each one loop over the outputs that read it (vectorised): the same scan \
 * as lt_pool_max_at, so the same result. xa/xb: the outputs [xa[j], xb[j]) \
 * whose column tap j is inside the plane (kt_conv_valid_range). */        \
static void max_row_##SUF(const pool_geom *q, const T *x, int64_t oy, int64_t t0,       \
                          int64_t t1, const int64_t *xa, const int64_t *xb,              \
                          T *restrict m, int32_t *restrict best)                         \
{                                                                                         \
    int64_t h0 = oy * q->sh - q->ph, hf = h0, sw = q->sw;                                 \
    if (hf < 0) hf += (-hf + q->dh - 1) / q->dh * q->dh;                                  \
    for (int64_t ox = t0; ox < t1; ox++) m[ox - t0] = -INFINITY;                          \
    if (best)                                                                             \
        for (int64_t ox = t0; ox < t1; ox++) {                                            \
            int64_t wf = ox * sw - q->pw;                                                 \
            if (wf < 0) wf += (-wf + q->dw - 1) / q->dw * q->dw;                          \
            best[ox - t0] = (int32_t)(hf * q->W + wf);                                    \
        }                                                                                 \
    T *restrict mm = m - t0;                                                              \
    int32_t *restrict bb = best ? best - t0 : NULL;                                       \
    for (int64_t i = 0; i < q->kh; i++) {                                                 \
        int64_t h = h0 + i * q->dh;                                                       \
        if (h < 0 || h >= q->H) continue;                                                 \
        const T *xr = x + h * q->W;                                                       \
        for (int64_t j = 0; j < q->kw; j++) {                                             \
            int64_t a = xa[j] < t0 ? t0 : xa[j], b = xb[j] > t1 ? t1 : xb[j];             \
            int64_t off = j * q->dw - q->pw;                                              \
            int32_t base = (int32_t)(h * q->W + off);                                     \
            const T *xo = xr + off;                                                       \
            if (!bb) {                                                                    \
                _Pragma("omp simd")                                                       \
                for (int64_t ox = a; ox < b; ox++) {                                      \
                    T v = xo[ox * sw];                                                    \
                    mm[ox] = ((v > mm[ox]) | (v != v)) ? v : mm[ox];                      \
                }                                                                         \
            } else if (sw == 1) {                                                         \
                _Pragma("omp simd")                                                       \
                for (int64_t ox = a; ox < b; ox++) {                                      \
                    T v = xo[ox];                                                         \
                    int take = (v > mm[ox]) | (v != v);                                   \
                    mm[ox] = take ? v : mm[ox];                                           \
                    bb[ox] = take ? base + (int32_t)ox : bb[ox];                          \
                }                                                                         \
            } else if (sw == 2) {                                                         \
                _Pragma("omp simd")                                                       \
                for (int64_t ox = a; ox < b; ox++) {                                      \
                    T v = xo[2 * ox];                                                     \
                    int take = (v > mm[ox]) | (v != v);                                   \
                    mm[ox] = take ? v : mm[ox];                                           \
                    bb[ox] = take ? base + 2 * (int32_t)ox : bb[ox];                      \
                }                                                                         \
            } else {                                                                      \
                for (int64_t ox = a; ox < b; ox++) {                                      \
                    T v = xo[ox * sw];                                                    \
                    int take = (v > mm[ox]) | (v != v);                                   \
                    mm[ox] = take ? v : mm[ox];                                           \
                    bb[ox] = take ? base + (int32_t)(ox * sw) : bb[ox];                   \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
    }                                                                                     \
}                                                                                         \
/* Planes [p0, p1): forward (values into y and/or indices into idx, either  \
 * may be NULL) or, with g, backward (dx fully written). Planes of more    \
 * than 2^31 elements take lt_pool_max_at per output. */                  \
static void max_planes_##SUF(const pool_geom *q, const T *x, const T *g, T *y, void *idx, \
                             lt_dtype idt, T *dx, int64_t p0, int64_t p1)                 \
{                                                                                         \
    int64_t ohw = q->oh * q->ow, hw = q->H * q->W;                                        \
    T m[POOL_TILE];                                                                       \
    int32_t best[POOL_TILE];                                                              \
    int64_t xa[POOL_MAX_KW], xb[POOL_MAX_KW];                                             \
    int need_idx = idx || dx;                                                             \
    for (int64_t j = 0; j < q->kw; j++)                                                   \
        kt_conv_valid_range(q->W, q->ow, q->sw, q->pw, j * q->dw, &xa[j], &xb[j]);        \
    for (int64_t p = p0; p < p1; p++) {                                                   \
        const T *xp = x + p * hw;                                                         \
        if (dx) memset(dx + p * hw, 0, (size_t)hw * sizeof(T));                           \
        for (int64_t oy = 0; oy < q->oh; oy++)                                            \
            for (int64_t t0 = 0; t0 < q->ow; t0 += POOL_TILE) {                           \
                int64_t t1 = t0 + POOL_TILE < q->ow ? t0 + POOL_TILE : q->ow;             \
                int64_t o = p * ohw + oy * q->ow + t0, n = t1 - t0;                       \
                max_row_##SUF(q, xp, oy, t0, t1, xa, xb, m, need_idx ? best : NULL);      \
                if (dx) {                                                                 \
                    T *dp = dx + p * hw;                                                  \
                    for (int64_t k = 0; k < n; k++)                                       \
                        if (best[k] >= 0 && best[k] < hw) dp[best[k]] += g[o + k];        \
                    continue;                                                             \
                }                                                                         \
                if (y) memcpy(y + o, m, (size_t)n * sizeof(T));                           \
                if (idx && idt == LT_I64)                                                 \
                    for (int64_t k = 0; k < n; k++) ((int64_t *)idx)[o + k] = best[k];    \
                else if (idx && idt == LT_I32) memcpy((int32_t *)idx + o, best, (size_t)n * 4); \
                else if (idx)                                                             \
                    for (int64_t k = 0; k < n; k++) kt_store_i(idx, idt, o + k, best[k]); \
            }                                                                             \
    }                                                                                     \
}                                                                                         \
/* The same by lt_pool_max_at per output (planes >= 2^31 elements, kernels \
 * wider than POOL_MAX_KW). */                                            \
static void max_planes_slow_##SUF(const pool_geom *q, const T *x, const T *g, T *y,      \
                                  void *idx, lt_dtype idt, T *dx, int64_t p0, int64_t p1) \
{                                                                                         \
    int64_t ohw = q->oh * q->ow, hw = q->H * q->W;                                        \
    for (int64_t p = p0; p < p1; p++) {                                                   \
        if (dx) memset(dx + p * hw, 0, (size_t)hw * sizeof(T));                           \
        for (int64_t oy = 0; oy < q->oh; oy++)                                            \
            for (int64_t ox = 0; ox < q->ow; ox++) {                                      \
                T v;                                                                      \
                int64_t k = lt_pool_max_at_##SUF(q, x + p * hw, oy, ox, &v);              \
                int64_t o = p * ohw + oy * q->ow + ox;                                    \
                if (dx) {                                                                 \
                    if (k >= 0 && k < hw) dx[p * hw + k] += g[o];                         \
                    continue;                                                             \
                }                                                                         \
                if (y) y[o] = v;                                                          \
                if (idx) kt_store_i(idx, idt, o, k);                                      \
            }                                                                             \
    }                                                                                     \
}                                                                                         \
/* Average window of output (oy, ox): clipped [h0,h1)x[w0,w1) and its divisor;    \
 * returns 0 when the clipped window is empty. */                                        \
static inline int avg_win_##SUF(const pool_geom *q, int64_t oy, int64_t ox, int64_t *h0,  \
                                int64_t *h1, int64_t *w0, int64_t *w1, T *div)            \
{                                                                                         \
    int64_t a0 = oy * q->sh - q->ph, b0 = ox * q->sw - q->pw;                             \
    int64_t a1 = a0 + q->kh, b1 = b0 + q->kw;                                             \
    if (a1 > q->H + q->ph) a1 = q->H + q->ph;                                             \
    if (b1 > q->W + q->pw) b1 = q->W + q->pw;                                             \
    int64_t full = (a1 - a0) * (b1 - b0);                                                 \
    if (a0 < 0) a0 = 0;                                                                   \
    if (b0 < 0) b0 = 0;                                                                   \
    if (a1 > q->H) a1 = q->H;                                                             \
    if (b1 > q->W) b1 = q->W;                                                             \
    if (a0 >= a1 || b0 >= b1) return 0;                                                   \
    *h0 = a0; *h1 = a1; *w0 = b0; *w1 = b1;                                               \
    *div = (T)(q->divisor ? q->divisor                                                    \
               : q->count_include_pad ? full : (a1 - a0) * (b1 - b0));                    \
    return 1;                                                                             \
}                                                                                         \
static void avg_fwd_##SUF(const pool_geom *q, const T *x, T *y, int nt)                   \
{                                                                                         \
    int64_t ohw = q->oh * q->ow, hw = q->H * q->W;                                        \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (q->P * ohw > 4096)")  \
    for (int64_t p = 0; p < q->P; p++)                                                    \
        for (int64_t oy = 0; oy < q->oh; oy++)                                            \
            for (int64_t ox = 0; ox < q->ow; ox++) {                                      \
                int64_t h0, h1, w0, w1, o = p * ohw + oy * q->ow + ox;                    \
                T div, s = 0;                                                             \
                if (!avg_win_##SUF(q, oy, ox, &h0, &h1, &w0, &w1, &div)) {                \
                    y[o] = 0;                                                             \
                    continue;                                                             \
                }                                                                         \
                for (int64_t h = h0; h < h1; h++)                                         \
                    for (int64_t w = w0; w < w1; w++) s += x[p * hw + h * q->W + w];      \
                y[o] = s / div;                                                           \
            }                                                                             \
}                                                                                         \
static void avg_bwd_##SUF(const pool_geom *q, const T *g, T *dx, int nt)                  \
{                                                                                         \
    int64_t ohw = q->oh * q->ow, hw = q->H * q->W;                                        \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (q->P * ohw > 4096)")  \
    for (int64_t p = 0; p < q->P; p++) {                                                  \
        T *dp = dx + p * hw;                                                              \
        memset(dp, 0, (size_t)hw * sizeof(T));                                            \
        for (int64_t oy = 0; oy < q->oh; oy++)                                            \
            for (int64_t ox = 0; ox < q->ow; ox++) {                                      \
                int64_t h0, h1, w0, w1;                                                   \
                T div;                                                                    \
                if (!avg_win_##SUF(q, oy, ox, &h0, &h1, &w0, &w1, &div)) continue;        \
                T v = g[p * ohw + oy * q->ow + ox] / div;                                 \
                for (int64_t h = h0; h < h1; h++)                                         \
                    for (int64_t w = w0; w < w1; w++) dp[h * q->W + w] += v;              \
            }                                                                             \
    }                                                                                     \
}                                                                                         \
static void adaptive_##SUF(const pool_geom *q, const T *x, const T *g, T *out, int bwd,   \
                           int nt)                                                        \
{                                                                                         \
    int64_t ohw = q->oh * q->ow, hw = q->H * q->W;                                        \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (q->P * hw > 4096)")   \
    for (int64_t p = 0; p < q->P; p++) {                                                  \
        if (bwd) memset(out + p * hw, 0, (size_t)hw * sizeof(T));                         \
        for (int64_t oy = 0; oy < q->oh; oy++) {                                          \
            int64_t h0 = oy * q->H / q->oh, h1 = ((oy + 1) * q->H + q->oh - 1) / q->oh;   \
            for (int64_t ox = 0; ox < q->ow; ox++) {                                      \
                int64_t w0 = ox * q->W / q->ow, w1 = ((ox + 1) * q->W + q->ow - 1) / q->ow; \
                T cnt = (T)((h1 - h0) * (w1 - w0));                                       \
                if (bwd) {                                                                \
                    T v = g[p * ohw + oy * q->ow + ox] / cnt;                             \
                    for (int64_t h = h0; h < h1; h++)                                     \
                        for (int64_t w = w0; w < w1; w++) out[p * hw + h * q->W + w] += v; \
                } else {                                                                  \
                    T s = 0;                                                              \
                    for (int64_t h = h0; h < h1; h++)                                     \
                        for (int64_t w = w0; w < w1; w++) s += x[p * hw + h * q->W + w];  \
                    out[p * ohw + oy * q->ow + ox] = s / cnt;                             \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
    }                                                                                     \
}                                                                                         \
/* Adaptive max pooling: output (oy, ox) takes the max of rows                           \
 * [oy*H/oh, ceil((oy+1)*H/oh)) x the same for columns (PyTorch's windows),              \
 * lt_pool_max_at's rule (the last NaN, else the first maximum); values into              \
 * y and/or flat h*W+w indices into idx (dtype idt), either may be NULL. */               \
static void adaptive_max_##SUF(const pool_geom *q, const T *x, T *y, void *idx,           \
                               lt_dtype idt, int nt)                                      \
{                                                                                         \
    int64_t ohw = q->oh * q->ow, hw = q->H * q->W;                                        \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (q->P * hw > 4096)")   \
    for (int64_t p = 0; p < q->P; p++) {                                                  \
        const T *xp = x + p * hw;                                                         \
        for (int64_t oy = 0; oy < q->oh; oy++) {                                          \
            int64_t h0 = oy * q->H / q->oh, h1 = ((oy + 1) * q->H + q->oh - 1) / q->oh;   \
            for (int64_t ox = 0; ox < q->ow; ox++) {                                      \
                int64_t w0 = ox * q->W / q->ow, w1 = ((ox + 1) * q->W + q->ow - 1) / q->ow; \
                int64_t best = h0 * q->W + w0, o = p * ohw + oy * q->ow + ox;             \
                T m = -INFINITY;                                                          \
                for (int64_t h = h0; h < h1; h++)                                         \
                    for (int64_t w = w0; w < w1; w++) {                                   \
                        T v = xp[h * q->W + w];                                           \
                        int take = (v > m) | (v != v);                                    \
                        m = take ? v : m;                                                 \
                        best = take ? h * q->W + w : best;                                \
                    }                                                                     \
                if (y) y[o] = m;                                                          \
                if (idx) kt_store_i(idx, idt, o, best);                                   \
            }                                                                             \
        }                                                                                 \
    }                                                                                     \
}

POOL_IMPL(float, f)
POOL_IMPL(double, d)

/* General max pooling over chunks of planes on the core's helper threads. */
typedef struct maxg_job {
    lt_dtype cdt, idt;
    const pool_geom *q;
    const void *x, *g;
    void *y, *idx, *dx;
    int64_t per;                /* planes per chunk */
} maxg_job;

static void maxg_chunk(void *arg, int64_t c, int w)
{
    (void)w;
    const maxg_job *j = arg;
    int64_t p0 = c * j->per, p1 = p0 + j->per < j->q->P ? p0 + j->per : j->q->P;
    int slow = j->q->kw > POOL_MAX_KW || j->q->H * j->q->W > INT32_MAX;
    if (j->cdt == LT_F64)
        (slow ? max_planes_slow_d : max_planes_d)(j->q, j->x, j->g, j->y, j->idx, j->idt, j->dx,
                                                  p0, p1);
    else
        (slow ? max_planes_slow_f : max_planes_f)(j->q, j->x, j->g, j->y, j->idx, j->idt, j->dx,
                                                  p0, p1);
}

/* Forward (y and/or idx) when g is NULL, else backward into dx. Chunks of
 * planes of ~16K input elements; one worker below 64K elements. */
static void max_general(lt_dtype cdt, const pool_geom *q, const void *x, const void *g, void *y,
                        void *idx, lt_dtype idt, void *dx, int nt, const lt_kernel_ctx *ctx)
{
    int64_t hw = q->H * q->W;
    maxg_job j = {cdt, idt, q, x, g, y, idx, dx, hw > 0 ? 16384 / hw : 1};
    if (j.per < 1) j.per = 1;
    if (q->P * hw < 65536) nt = 1;
    lt_par_for(ctx, nt, (q->P + j.per - 1) / j.per, maxg_chunk, &j);
}

static int is_adaptive(lt_op op)
{
    return op == LT_OP_adaptive_avg_pool2d || op == LT_OP_adaptive_avg_pool2d_backward ||
           op == LT_OP_adaptive_max_pool2d || op == LT_OP_adaptive_max_pool2d_indices ||
           op == LT_OP_adaptive_max_pool2d_backward;
}

/* backward ops that scatter the gradient at given flat indices (grad, x, idx) */
static int is_bwd_idx(lt_op op)
{
    return op == LT_OP_max_pool2d_backward_idx || op == LT_OP_adaptive_max_pool2d_backward;
}

static int is_max(lt_op op)
{
    return op == LT_OP_max_pool2d || op == LT_OP_max_pool2d_indices ||
           op == LT_OP_max_pool2d_backward || op == LT_OP_max_pool2d_backward_idx ||
           op == LT_OP_adaptive_max_pool2d || op == LT_OP_adaptive_max_pool2d_indices ||
           op == LT_OP_adaptive_max_pool2d_backward;
}

/* max_pool2d_backward_idx over chunks of planes: dx (cdt, [P, hw]) = g
 * ([P, ohw]) added at each plane's flat indices (i64 or i32), in output
 * order (overlapping windows add up as eager's). An index outside [0, hw)
 * sets bad (the caller reports it) and is skipped. */
typedef struct bwd_idx_job {
    lt_dtype cdt, idt;
    int64_t P, hw, ohw, per;
    const void *g, *idx;
    void *dx;
    atomic_int bad;
} bwd_idx_job;

static void bwd_idx_chunk(void *arg, int64_t c, int w)
{
    (void)w;
    bwd_idx_job *j = arg;
    int64_t p0 = c * j->per, p1 = p0 + j->per < j->P ? p0 + j->per : j->P;
    int bad = 0;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t *i64 = j->idt == LT_I64 ? (const int64_t *)j->idx + p * j->ohw : NULL;
        const int32_t *i32 = j->idt == LT_I32 ? (const int32_t *)j->idx + p * j->ohw : NULL;
        if (j->cdt == LT_F64) {
            double *d = (double *)j->dx + p * j->hw;
            const double *g = (const double *)j->g + p * j->ohw;
            memset(d, 0, (size_t)j->hw * sizeof *d);
            for (int64_t o = 0; o < j->ohw; o++) {
                int64_t k = i64 ? i64[o] : i32[o];
                if ((uint64_t)k < (uint64_t)j->hw) d[k] += g[o];
                else bad = 1;
            }
        } else {
            float *d = (float *)j->dx + p * j->hw;
            const float *g = (const float *)j->g + p * j->ohw;
            memset(d, 0, (size_t)j->hw * sizeof *d);
            for (int64_t o = 0; o < j->ohw; o++) {
                int64_t k = i64 ? i64[o] : i32[o];
                if ((uint64_t)k < (uint64_t)j->hw) d[k] += g[o];
                else bad = 1;
            }
        }
    }
    if (bad) atomic_store(&j->bad, 1);
}

static lt_status pool_geom_init(lt_op op, const lt_attrs *at, const lt_view *x,
                                const lt_view *y, pool_geom *q)
{
    int nd = x->shape.ndim;
    if (nd != 3 && nd != 4)
        return lt_set_error(LT_ERR_SHAPE, "%s: expected a 3-D or 4-D input, got %d-D",
                            is_max(op) ? "max_pool2d" : "avg_pool2d", nd);
    if (y->shape.ndim != nd)
        return lt_set_error(LT_ERR_SHAPE, "pool: output/grad rank %d differs from input rank %d",
                            y->shape.ndim, nd);
    memset(q, 0, sizeof *q);
    q->H = x->shape.dims[nd - 2];
    q->W = x->shape.dims[nd - 1];
    q->P = (q->H > 0 && q->W > 0) ? kt_numel(&x->shape) / (q->H * q->W) : 0;
    q->oh = y->shape.dims[nd - 2];
    q->ow = y->shape.dims[nd - 1];
    int64_t a[9] = {1, 1, 1, 1, 0, 0, 1, 1, 0};
    for (int k = 0; k < 9 && k < at->n; k++) a[k] = at->i[k];
    if (is_adaptive(op)) return LT_OK;
    q->kh = a[0]; q->kw = a[1];
    q->sh = a[2] > 0 ? a[2] : a[0]; q->sw = a[3] > 0 ? a[3] : a[1];
    q->ph = a[4]; q->pw = a[5];
    if (is_max(op)) {
        q->dh = a[6] > 0 ? a[6] : 1;
        q->dw = a[7] > 0 ? a[7] : 1;
    } else {
        q->dh = q->dw = 1;
        q->count_include_pad = at->n > 7 ? (int)at->i[7] : 1;
        q->divisor = at->n > 8 ? at->i[8] : 0;
    }
    if (q->kh <= 0 || q->kw <= 0 || q->sh <= 0 || q->sw <= 0)
        return lt_set_error(LT_ERR_ARG, "pool: kernel %lldx%lld and stride %lldx%lld must be positive",
                            (long long)q->kh, (long long)q->kw, (long long)q->sh, (long long)q->sw);
    return LT_OK;
}

/* Pooling ops of ops.def into contiguous out. Float dtypes only
 * (max_pool2d_indices: i64/i32 out); LT_ERR_OOM if scratch fails. */
lt_status lt_kernel_pool(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                         const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    int bwd = op == LT_OP_max_pool2d_backward || is_bwd_idx(op) ||
              op == LT_OP_avg_pool2d_backward ||
              op == LT_OP_adaptive_avg_pool2d_backward;
    if (n_in != (is_bwd_idx(op) ? 3 : bwd ? 2 : 1))
        return lt_set_error(LT_ERR_INTERNAL, "pool kernel: op %d with %d inputs", (int)op, n_in);
    const lt_view *x = bwd ? &in[1] : &in[0];
    const lt_view *g = bwd ? &in[0] : NULL;
    int idx_out = op == LT_OP_max_pool2d_indices || op == LT_OP_adaptive_max_pool2d_indices;
    if (!kt_is_float(x->dtype) || (g && !kt_is_float(g->dtype)) ||
        (idx_out ? !kt_is_index(out->dtype) : !kt_is_float(out->dtype)) ||
        (n_in == 3 && !kt_is_index(in[2].dtype)))
        return lt_kutil_dtype_error(op, in, n_in, out);
    pool_geom q;
    lt_status st = pool_geom_init(op, attrs, x, bwd ? g : out, &q);
    if (st != LT_OK) return st;
    if (kt_numel(&out->shape) == 0) return LT_OK;
    lt_dtype cdt = idx_out ? kt_compute_dt(x->dtype) : kt_compute_dt(out->dtype);
    int dbl = cdt == LT_F64;
    void *xo = NULL, *go = NULL, *yo = NULL;
    const void *xp = NULL, *gp = NULL;
    int need_x = !(op == LT_OP_avg_pool2d_backward || op == LT_OP_adaptive_avg_pool2d_backward ||
                   is_bwd_idx(op));
    if (need_x && !(xp = lt_kutil_pack(x, cdt, nt, &xo))) return LT_ERR_OOM;
    if (g && !(gp = lt_kutil_pack(g, cdt, nt, &go))) { free(xo); return LT_ERR_OOM; }
    void *y = NULL;
    if (!idx_out) {
        y = kt_ptr(out);
        if (out->dtype != cdt &&
            !(y = yo = lt_kutil_alloc((size_t)kt_numel(&out->shape) * kt_dtsize(cdt), "pool"))) {
            free(xo); free(go);
            return LT_ERR_OOM;
        }
    }
    switch (op) {
    case LT_OP_max_pool2d:
    case LT_OP_max_pool2d_indices:
        if (lt_pool_is_max2(&q))
            lt_pool_max2_fwd(cdt, &q, xp, y, idx_out ? kt_ptr(out) : NULL, out->dtype, nt, ctx);
        else max_general(cdt, &q, xp, NULL, y, idx_out ? kt_ptr(out) : NULL, out->dtype, NULL, nt,
                         ctx);
        break;
    case LT_OP_max_pool2d_backward:
        if (lt_pool_is_max2(&q)) lt_pool_max2_bwd(cdt, &q, gp, xp, y, nt, ctx);
        else max_general(cdt, &q, xp, gp, NULL, NULL, LT_F32, y, nt, ctx);
        break;
    case LT_OP_max_pool2d_backward_idx:
    case LT_OP_adaptive_max_pool2d_backward: {
        void *io = NULL;
        const void *ip = lt_kutil_pack(&in[2], in[2].dtype, nt, &io);
        if (!ip) { st = LT_ERR_OOM; break; }
        int64_t hw = q.H * q.W, ohw = q.oh * q.ow;
        bwd_idx_job j = {cdt, in[2].dtype, q.P, hw, ohw, 1, gp, ip, y, 0};
        if (kt_numel(&in[2].shape) != q.P * ohw)
            st = lt_set_error(LT_ERR_SHAPE, "%s: %lld indices for a %lld-element grad",
                              lt_op_name(op), (long long)kt_numel(&in[2].shape), (long long)(q.P * ohw));
        if (st == LT_OK) {
            j.per = hw > 0 ? 16384 / hw : 1;
            if (j.per < 1) j.per = 1;
            lt_par_for(ctx, q.P * hw < 65536 ? 1 : nt, (q.P + j.per - 1) / j.per, bwd_idx_chunk, &j);
            if (atomic_load(&j.bad))
                st = lt_set_error(LT_ERR_ARG, "%s: an index is outside the "
                                  "%lldx%lld input plane", lt_op_name(op), (long long)q.H, (long long)q.W);
        }
        free(io);
        break;
    }
    case LT_OP_avg_pool2d:
        if (dbl) avg_fwd_d(&q, xp, y, nt); else avg_fwd_f(&q, xp, y, nt);
        break;
    case LT_OP_avg_pool2d_backward:
        if (dbl) avg_bwd_d(&q, gp, y, nt); else avg_bwd_f(&q, gp, y, nt);
        break;
    case LT_OP_adaptive_avg_pool2d:
    case LT_OP_adaptive_avg_pool2d_backward:
        if (dbl) adaptive_d(&q, xp, gp, y, bwd, nt); else adaptive_f(&q, xp, gp, y, bwd, nt);
        break;
    case LT_OP_adaptive_max_pool2d:
    case LT_OP_adaptive_max_pool2d_indices: {
        void *ix = idx_out ? kt_ptr(out) : NULL;
        if (dbl) adaptive_max_d(&q, xp, y, ix, out->dtype, nt);
        else adaptive_max_f(&q, xp, y, ix, out->dtype, nt);
        break;
    }
    default:
        st = lt_set_error(LT_ERR_INTERNAL, "pool kernel: unexpected op %d", (int)op);
    }
    if (st == LT_OK && yo) lt_kutil_unpack(yo, cdt, out, nt);
    free(xo); free(go); free(yo);
    return st;
}
