/*
 * lazy/kernels/layernorm.c — layer norm over the last k dims (attrs.i[0]),
 * forward and backward, one pass over each row.
 *
 * The input is seen as [R, D] (D = product of the last k dims). Each row
 * fits in L1 at transformer widths, so a row's statistics and its result
 * are computed while the row is in cache: the forward reads x once and
 * writes y once, instead of the mean, variance and normalise passes of the
 * decomposed form. Its statistics are a separate op that a lazy graph only
 * computes when the backward (or someone) reads them:
 *   layer_norm(x [, w [, b]])            y = (x - mean) * rstd * w + b
 *   layer_norm_stats(x)                  [2, R]: mean, rstd per row
 *   layer_norm_backward(g, x, mean, rstd [, w])
 *                                        dx = rstd * (gw - mean(gw)
 *                                                 - xhat * mean(gw * xhat)),
 *                                        gw = g * w, xhat = (x - mean) * rstd
 *   layer_norm_backward_affine(g, x, mean, rstd)
 *                                        [2, *normalized]: sum over rows of
 *                                        g * xhat (grad of w), of g (of b)
 * (mean and rstd: R elements each, as the forward's outputs.)
 * rstd = 1 / sqrt(var + eps) with the biased variance, eps = attrs.f[0].
 * f32/bf16 compute in f32 with double row sums (the two-pass variance and
 * the backward's means are differences of large terms; 16 vectorised f32
 * lane partials of at most 32 terms each feed the double), f64 in f64;
 * bf16 rounds when stored. Rows run in parallel on the core's helpers; the
 * affine sums accumulate in the compute type per fixed chunk of 32 rows and
 * add the chunks in order in double, so the result does not depend on which
 * thread ran which chunk.
 */
#include <math.h>
#include <string.h>
#include "kutil.h"
#include "par.h"

enum { LN_FWD, LN_STATS, LN_BWD, LN_AFFINE };

#define LN_ROWS 32      /* rows per chunk of the parallel loop */
#define LN_SPAN 512     /* elements a vector partial takes before joining the double total */

typedef struct ln_job {
    int kind;
    int64_t R, D;
    double eps;
    const void *x, *g, *w, *b;  /* compute type; w, b may be NULL */
    const void *mean, *rstd;    /* BWD, AFFINE: [R] */
    void *y;                    /* FWD/BWD: [R, D]; STATS: [2, R];
                                   AFFINE: per-chunk [2, D] partials, T */
} ln_job;

/* Row sums with GCC vector types (32-byte vectors; plain C fallbacks are
 * what the compiler emits without AVX): two vector partials per sum for
 * LN_SPAN elements at a time, then into double totals, so f32 terms are
 * rounded over at most 32 additions per lane and the double sum is not
 * reassociated. ln_sums_S(a, b, x, m, D, s1, s2):
 *   s1 = sum a[i] * b[i],  s2 = sum a[i] * b[i] * (x[i] - m)   (b NULL: 1)
 * ln_sum_S(x, m, sq, D) = sum (x[i] - m) (sq 0) or its square (sq 1). */
#define LN_SUMS(T, SUF, NL)                                                              \
typedef T ln_v_##SUF __attribute__((vector_size(32)));                                  \
static inline ln_v_##SUF ln_ld_##SUF(const T *p)                                         \
{                                                                                        \
    ln_v_##SUF v;                                                                        \
    memcpy(&v, p, sizeof v);                                                             \
    return v;                                                                            \
}                                                                                        \
static inline double ln_hsum_##SUF(ln_v_##SUF a, ln_v_##SUF b)                           \
{                                                                                        \
    double s = 0;                                                                        \
    for (int l = 0; l < NL; l++) s += (double)a[l] + (double)b[l];                       \
    return s;                                                                            \
}                                                                                        \
static double ln_sum_##SUF(const T *x, T m, int sq, int64_t D)                          \
{                                                                                        \
    double s = 0;                                                                        \
    for (int64_t i0 = 0; i0 < D; i0 += LN_SPAN) {                                        \
        int64_t i1 = i0 + LN_SPAN < D ? i0 + LN_SPAN : D, i = i0;                        \
        ln_v_##SUF p = {0}, q = {0};                                                     \
        if (sq)                                                                          \
            for (; i + 2 * NL <= i1; i += 2 * NL) {                                      \
                ln_v_##SUF a = ln_ld_##SUF(x + i) - m, b = ln_ld_##SUF(x + i + NL) - m;  \
                p += a * a;                                                              \
                q += b * b;                                                              \
            }                                                                            \
        else                                                                             \
            for (; i + 2 * NL <= i1; i += 2 * NL) {                                      \
                p += ln_ld_##SUF(x + i) - m;                                             \
                q += ln_ld_##SUF(x + i + NL) - m;                                        \
            }                                                                            \
        s += ln_hsum_##SUF(p, q);                                                        \
        for (; i < i1; i++) s += sq ? (double)((x[i] - m) * (x[i] - m)) : x[i] - m;     \
    }                                                                                    \
    return s;                                                                            \
}                                                                                        \
static void ln_sums_##SUF(const T *a, const T *b, const T *x, T m, int64_t D,           \
                          double *s1, double *s2)                                        \
{                                                                                        \
    double t1 = 0, t2 = 0;                                                               \
    for (int64_t i0 = 0; i0 < D; i0 += LN_SPAN) {                                        \
        int64_t i1 = i0 + LN_SPAN < D ? i0 + LN_SPAN : D, i = i0;                        \
        ln_v_##SUF p1 = {0}, q1 = {0}, p2 = {0}, q2 = {0};                               \
        for (; i + 2 * NL <= i1; i += 2 * NL) {                                          \
            ln_v_##SUF u = ln_ld_##SUF(a + i), v = ln_ld_##SUF(a + i + NL);              \
            if (b) {                                                                     \
                u *= ln_ld_##SUF(b + i);                                                 \
                v *= ln_ld_##SUF(b + i + NL);                                            \
            }                                                                            \
            p1 += u;                                                                     \
            q1 += v;                                                                     \
            p2 += u * (ln_ld_##SUF(x + i) - m);                                          \
            q2 += v * (ln_ld_##SUF(x + i + NL) - m);                                     \
        }                                                                                \
        t1 += ln_hsum_##SUF(p1, q1);                                                     \
        t2 += ln_hsum_##SUF(p2, q2);                                                     \
        for (; i < i1; i++) {                                                            \
            T u = b ? a[i] * b[i] : a[i];                                                \
            t1 += u;                                                                     \
            t2 += (double)(u * (x[i] - m));                                              \
        }                                                                                \
    }                                                                                    \
    *s1 = t1;                                                                            \
    *s2 = t2;                                                                            \
}

LN_SUMS(float, f, 8)
LN_SUMS(double, d, 4)

#define LN_IMPL(T, SUF, SQRT)                                                            \
static void ln_stats_##SUF(const T *x, int64_t D, double eps, T *mean, T *rstd)          \
{                                                                                        \
    T m = (T)(ln_sum_##SUF(x, 0, 0, D) / (double)D);                                     \
    double v = ln_sum_##SUF(x, m, 1, D);                                                 \
    *mean = m;                                                                           \
    *rstd = (T)(1 / sqrt(v / (double)D + eps));                                          \
}                                                                                        \
static void ln_chunk_##SUF(void *arg, int64_t ci, int wk)                                \
{                                                                                        \
    const ln_job *j = arg;                                                               \
    (void)wk;                                                                            \
    int64_t D = j->D, lo = ci * LN_ROWS;                                                 \
    int64_t hi = lo + LN_ROWS < j->R ? lo + LN_ROWS : j->R;                              \
    const T *w = j->w, *b = j->b;                                                        \
    T *acc = j->kind == LN_AFFINE ? (T *)j->y + ci * 2 * D : NULL;                       \
    if (acc) memset(acc, 0, (size_t)(2 * D) * sizeof *acc);                              \
    for (int64_t r = lo; r < hi; r++) {                                                  \
        const T *x = (const T *)j->x + r * D;                                            \
        T m, rs;                                                                         \
        if (j->kind == LN_FWD || j->kind == LN_STATS) {                                  \
            ln_stats_##SUF(x, D, j->eps, &m, &rs);                                       \
        } else {                                                                         \
            m = ((const T *)j->mean)[r];                                                 \
            rs = ((const T *)j->rstd)[r];                                                \
        }                                                                                \
        if (j->kind == LN_STATS) {                                                       \
            ((T *)j->y)[r] = m;                                                          \
            ((T *)j->y)[j->R + r] = rs;                                                  \
            continue;                                                                    \
        }                                                                                \
        if (j->kind == LN_FWD) {                                                         \
            T *y = (T *)j->y + r * D;                                                    \
            if (w && b) {                                                                \
                _Pragma("omp simd")                                                      \
                for (int64_t d = 0; d < D; d++) y[d] = (x[d] - m) * rs * w[d] + b[d];   \
            } else if (w) {                                                              \
                _Pragma("omp simd")                                                      \
                for (int64_t d = 0; d < D; d++) y[d] = (x[d] - m) * rs * w[d];          \
            } else if (b) {                                                              \
                _Pragma("omp simd")                                                      \
                for (int64_t d = 0; d < D; d++) y[d] = (x[d] - m) * rs + b[d];          \
            } else {                                                                     \
                _Pragma("omp simd")                                                      \
                for (int64_t d = 0; d < D; d++) y[d] = (x[d] - m) * rs;                 \
            }                                                                            \
            continue;                                                                    \
        }                                                                                \
        const T *g = (const T *)j->g + r * D;                                            \
        if (j->kind == LN_AFFINE) {     /* T partials over LN_ROWS rows */               \
            T *aw = acc, *ab = acc + D;                                                  \
            _Pragma("omp simd")                                                          \
            for (int64_t d = 0; d < D; d++) {                                            \
                aw[d] += g[d] * ((x[d] - m) * rs);                                       \
                ab[d] += g[d];                                                           \
            }                                                                            \
            continue;                                                                    \
        }                                                                                \
        /* mean(gw) and mean(gw * xhat) = rs * mean(gw * (x - m)) */                     \
        double s1, s2;                                                                   \
        ln_sums_##SUF(g, w, x, m, D, &s1, &s2);                                          \
        T m1 = (T)(s1 / (double)D), m2 = (T)(s2 * (double)rs / (double)D);               \
        T *y = (T *)j->y + r * D;                                                        \
        T k2 = rs * m2;                                                                  \
        if (w) {                                                                         \
            _Pragma("omp simd")                                                          \
            for (int64_t d = 0; d < D; d++)                                              \
                y[d] = rs * (g[d] * w[d] - m1 - (x[d] - m) * k2);                        \
        } else {                                                                         \
            _Pragma("omp simd")                                                          \
            for (int64_t d = 0; d < D; d++)                                              \
                y[d] = rs * (g[d] - m1 - (x[d] - m) * k2);                               \
        }                                                                                \
    }                                                                                    \
}

LN_IMPL(float, f, sqrtf)
LN_IMPL(double, d, sqrt)

/* layer_norm (x [, w [, b]]), layer_norm_stats (x), layer_norm_backward
 * (grad, x, mean, rstd [, w]) and layer_norm_backward_affine (grad, x,
 * mean, rstd) into contiguous out; see the file comment. attrs: i[0] = k
 * (normalized dims), i[1] = has w, i[2] = has b (layer_norm;
 * layer_norm_backward: i[1] only), f[0] = eps. Float dtypes only
 * (LT_ERR_DTYPE otherwise); LT_ERR_SHAPE when operands do not match;
 * LT_ERR_OOM if scratch cannot be allocated. */
lt_status lt_kernel_lnorm(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                          const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    int kind = op == LT_OP_layer_norm ? LN_FWD
             : op == LT_OP_layer_norm_stats ? LN_STATS
             : op == LT_OP_layer_norm_backward ? LN_BWD
             : op == LT_OP_layer_norm_backward_affine ? LN_AFFINE : -1;
    if (kind < 0 || !attrs || attrs->n < 1)
        return lt_set_error(LT_ERR_INTERNAL, "layer norm kernel: unexpected op %d", (int)op);
    int has_w = (kind == LN_FWD || kind == LN_BWD) && attrs->n > 1 && attrs->i[1];
    int has_b = kind == LN_FWD && attrs->n > 2 && attrs->i[2];
    int bwd = kind == LN_BWD || kind == LN_AFFINE;
    int nx = bwd ? 4 : 1;                       /* operands before w */
    int xi = bwd ? 1 : 0;
    if (n_in != nx + has_w + has_b)
        return lt_set_error(LT_ERR_INTERNAL, "%s: %d inputs", lt_op_name(op), n_in);
    for (int k = 0; k < n_in; k++)
        if (!kt_is_float(in[k].dtype)) return lt_kutil_dtype_error(op, in, n_in, out);
    if (!kt_is_float(out->dtype)) return lt_kutil_dtype_error(op, in, n_in, out);
    const lt_shape *s = &in[xi].shape;
    int64_t k = attrs->i[0];
    if (k < 1 || k > s->ndim)
        return lt_set_error(LT_ERR_ARG, "%s: %lld normalized dims for a %d-D input",
                            lt_op_name(op), (long long)k, s->ndim);
    int64_t D = 1, R = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (d >= s->ndim - k) D *= s->dims[d];
        else R *= s->dims[d];
    }
    int bad = kt_numel(&in[0].shape) != R * D;
    if (bwd) bad |= kt_numel(&in[2].shape) != R || kt_numel(&in[3].shape) != R;
    for (int q = nx; q < n_in; q++) bad |= kt_numel(&in[q].shape) != D;
    int64_t on = kind == LN_AFFINE ? 2 * D : kind == LN_STATS ? 2 * R : R * D;
    if (bad || kt_numel(&out->shape) != on)
        return lt_set_error(LT_ERR_SHAPE, "%s: operands do not match the input's last %lld "
                            "dims", lt_op_name(op), (long long)k);
    if (on == 0) return LT_OK;
    if (R * D == 0) {   /* affine grads of no rows: zeros; stats of empty rows */
        lt_view o = kt_contig_view(kt_ptr(out), out->dtype, &out->shape);
        for (int64_t d = 0; d < on; d++)
            kt_store(o.data, o.dtype, d, kind == LN_AFFINE ? 0.0 : NAN);
        return LT_OK;
    }
    lt_dtype cdt = kt_compute_dt(out->dtype);
    size_t es = kt_dtsize(cdt);
    void *own[6] = {NULL}, *yo = NULL;
    const void *p[6] = {NULL};
    lt_status st = LT_OK;
    for (int q = 0; q < n_in && st == LT_OK; q++)
        if (!(p[q] = lt_kutil_pack(&in[q], cdt, nt, &own[q]))) st = LT_ERR_OOM;
    int64_t nch = (R + LN_ROWS - 1) / LN_ROWS;
    void *y = kt_ptr(out);
    if (st == LT_OK && kind == LN_AFFINE)
        y = yo = lt_kutil_alloc((size_t)(nch * 2 * D) * es, "layer norm");
    else if (st == LT_OK && out->dtype != cdt)
        y = yo = lt_kutil_alloc((size_t)on * es, "layer norm");
    if (st == LT_OK && !y) st = LT_ERR_OOM;
    if (st != LT_OK) {
        for (int q = 0; q < 6; q++) free(own[q]);
        return lt_set_error(LT_ERR_OOM, "%s: cannot allocate host scratch", lt_op_name(op));
    }
    ln_job j = {kind, R, D, attrs->f[0], p[xi], bwd ? p[0] : NULL,
                has_w ? p[nx] : NULL, has_b ? p[nx + has_w] : NULL,
                bwd ? p[2] : NULL, bwd ? p[3] : NULL, y};
    lt_par_for(ctx, R * D > 16384 ? nt : 1, nch, cdt == LT_F64 ? ln_chunk_d : ln_chunk_f, &j);
    if (kind == LN_AFFINE) {
        /* chunk partials added in chunk order: deterministic */
        lt_view o = kt_contig_view(kt_ptr(out), out->dtype, &out->shape);
        for (int64_t d = 0; d < 2 * D; d++) {
            double t = 0;
            if (cdt == LT_F64)
                for (int64_t c = 0; c < nch; c++) t += ((const double *)yo)[c * 2 * D + d];
            else
                for (int64_t c = 0; c < nch; c++) t += ((const float *)yo)[c * 2 * D + d];
            kt_store(o.data, o.dtype, d, t);
        }
    } else if (yo) {
        lt_kutil_unpack(yo, cdt, out, nt);
    }
    for (int q = 0; q < 6; q++) free(own[q]);
    free(yo);
    return LT_OK;
}
