/*
 * lazy/kernels/pool.c — 2-D max / average / adaptive average pooling and
 * their backward passes over [N,C,H,W] or [C,H,W], PyTorch semantics:
 * padding (max pads with -inf), dilation, ceil_mode (output size comes from
 * the output/grad shape computed by the shape rule), count_include_pad,
 * divisor_override. Max: flat h*W+w indices, NaN counts as the max, ties keep
 * the first. Backward passes recompute the window from x and accumulate
 * (overlapping windows add up). OpenMP over planes (N*C). Max pooling
 * with 2x2 windows and stride 2 goes to pool_max2.c.
 */
#include "pool.h"

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
static void max_fwd_##SUF(const pool_geom *q, const T *x, T *y, void *idx, lt_dtype idt,  \
                          int nt)                                                         \
{                                                                                         \
    int64_t ohw = q->oh * q->ow;                                                          \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (q->P * ohw > 4096)")  \
    for (int64_t p = 0; p < q->P; p++) {                                                  \
        const T *xp = x + p * q->H * q->W;                                                \
        for (int64_t oy = 0; oy < q->oh; oy++)                                            \
            for (int64_t ox = 0; ox < q->ow; ox++) {                                      \
                T v;                                                                      \
                int64_t k = lt_pool_max_at_##SUF(q, xp, oy, ox, &v);                              \
                int64_t o = p * ohw + oy * q->ow + ox;                                    \
                if (y) y[o] = v;                                                          \
                if (idx) kt_store_i(idx, idt, o, k);                                      \
            }                                                                             \
    }                                                                                     \
}                                                                                         \
static void max_bwd_##SUF(const pool_geom *q, const T *g, const T *x, T *dx, int nt)      \
{                                                                                         \
    int64_t ohw = q->oh * q->ow, hw = q->H * q->W;                                        \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (q->P * ohw > 4096)")  \
    for (int64_t p = 0; p < q->P; p++) {                                                  \
        T *dp = dx + p * hw;                                                              \
        memset(dp, 0, (size_t)hw * sizeof(T));                                            \
        for (int64_t oy = 0; oy < q->oh; oy++)                                            \
            for (int64_t ox = 0; ox < q->ow; ox++) {                                      \
                T v;                                                                      \
                int64_t k = lt_pool_max_at_##SUF(q, x + p * hw, oy, ox, &v);                      \
                if (k >= 0 && k < hw) dp[k] += g[p * ohw + oy * q->ow + ox];              \
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
}

POOL_IMPL(float, f)
POOL_IMPL(double, d)

static int is_max(lt_op op)
{
    return op == LT_OP_max_pool2d || op == LT_OP_max_pool2d_indices ||
           op == LT_OP_max_pool2d_backward;
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
    if (op == LT_OP_adaptive_avg_pool2d || op == LT_OP_adaptive_avg_pool2d_backward) return LT_OK;
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
    int bwd = op == LT_OP_max_pool2d_backward || op == LT_OP_avg_pool2d_backward ||
              op == LT_OP_adaptive_avg_pool2d_backward;
    if (n_in != (bwd ? 2 : 1))
        return lt_set_error(LT_ERR_INTERNAL, "pool kernel: op %d with %d inputs", (int)op, n_in);
    const lt_view *x = bwd ? &in[1] : &in[0];
    const lt_view *g = bwd ? &in[0] : NULL;
    int idx_out = op == LT_OP_max_pool2d_indices;
    if (!kt_is_float(x->dtype) || (g && !kt_is_float(g->dtype)) ||
        (idx_out ? !kt_is_index(out->dtype) : !kt_is_float(out->dtype)))
        return lt_kutil_dtype_error(op, in, n_in, out);
    pool_geom q;
    lt_status st = pool_geom_init(op, attrs, x, bwd ? g : out, &q);
    if (st != LT_OK) return st;
    if (kt_numel(&out->shape) == 0) return LT_OK;
    lt_dtype cdt = idx_out ? kt_compute_dt(x->dtype) : kt_compute_dt(out->dtype);
    int dbl = cdt == LT_F64;
    void *xo = NULL, *go = NULL, *yo = NULL;
    const void *xp = NULL, *gp = NULL;
    int need_x = !(op == LT_OP_avg_pool2d_backward || op == LT_OP_adaptive_avg_pool2d_backward);
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
        else if (dbl) max_fwd_d(&q, xp, y, idx_out ? kt_ptr(out) : NULL, out->dtype, nt);
        else max_fwd_f(&q, xp, y, idx_out ? kt_ptr(out) : NULL, out->dtype, nt);
        break;
    case LT_OP_max_pool2d_backward:
        if (lt_pool_is_max2(&q)) lt_pool_max2_bwd(cdt, &q, gp, xp, y, nt, ctx);
        else if (dbl) max_bwd_d(&q, gp, xp, y, nt); else max_bwd_f(&q, gp, xp, y, nt);
        break;
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
    default:
        st = lt_set_error(LT_ERR_INTERNAL, "pool kernel: unexpected op %d", (int)op);
    }
    if (st == LT_OK && yo) lt_kutil_unpack(yo, cdt, out, nt);
    free(xo); free(go); free(yo);
    return st;
}
