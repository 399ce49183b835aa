/*
 * lazy/kernels/norm.c — softmax, log_softmax and their backward passes along
 * any dim (attrs.i[0]).
 *
 * The input is seen as [outer, D, inner]; rows along D are processed in
 * blocks of up to NORM_BLOCK neighbouring inner positions so that strided
 * rows still stream through memory. Numerically stable (max subtracted).
 * f32/bf16 compute in f32 (exp: vmath.h's vectorised lt_vexpf), f64 in
 * f64; bf16 rounds when stored. Row sums (of exp, of grad, of grad * out)
 * accumulate in double: the backward results are differences of terms as
 * large as the sum, so an f32 sum's rounding (growing with D and with the
 * summation order) would show as a large relative error wherever the
 * difference is small.
 *   softmax_backward(g, y)     = y * (g - sum(g * y))
 *   log_softmax_backward(g, y) = g - exp(y) * sum(g)
 * An optional last 0-d input s (compile_pattern.c's fold of a scalar
 * multiplication) gives softmax(s * x) forward and s * backward(g, y).
 */
#include "kutil.h"
#include "par.h"

#define NORM_BLOCK 64

enum { NK_SOFTMAX, NK_LOG_SOFTMAX, NK_SOFTMAX_BWD, NK_LOG_SOFTMAX_BWD };

/* One row (inner == 1) or one block: element (d, j) at d*inner + j, j < nb.
 * a = x (or grad), b = out (backward only). */
#define NORM_IMPL(T, SUF, EXP)                                                           \
static void norm_row_##SUF(int kind, const T *a, const T *b, T *y, int64_t D, T sc)      \
{                                                                                        \
    double s = 0;                                                                        \
    if (kind == NK_SOFTMAX || kind == NK_LOG_SOFTMAX) {                                  \
        T m = -INFINITY;                                                                 \
        _Pragma("omp simd reduction(max : m)")                                          \
        for (int64_t d = 0; d < D; d++) m = a[d] * sc > m ? a[d] * sc : m;               \
        if (isinf(m) && m < 0) m = 0; /* all -inf: keep NaN-free shift */               \
        if (kind == NK_SOFTMAX) {                                                        \
            _Pragma("omp simd reduction(+ : s)")                                        \
            for (int64_t d = 0; d < D; d++) { y[d] = EXP(a[d] * sc - m); s += y[d]; }    \
            T r = (T)(1 / s);                                                            \
            _Pragma("omp simd")                                                         \
            for (int64_t d = 0; d < D; d++) y[d] *= r;                                   \
        } else {                                                                         \
            _Pragma("omp simd reduction(+ : s)")                                        \
            for (int64_t d = 0; d < D; d++) s += EXP(a[d] * sc - m);                     \
            T l = m + (T)log(s);                                                         \
            _Pragma("omp simd")                                                         \
            for (int64_t d = 0; d < D; d++) y[d] = a[d] * sc - l;                        \
        }                                                                                \
    } else if (kind == NK_SOFTMAX_BWD) {                                                 \
        _Pragma("omp simd reduction(+ : s)")                                            \
        for (int64_t d = 0; d < D; d++) s += (double)a[d] * b[d];                        \
        T st = (T)s;                                                                     \
        _Pragma("omp simd")                                                             \
        for (int64_t d = 0; d < D; d++) y[d] = b[d] * (a[d] - st) * sc;                  \
    } else {                                                                             \
        _Pragma("omp simd reduction(+ : s)")                                            \
        for (int64_t d = 0; d < D; d++) s += a[d];                                       \
        T st = (T)s;                                                                     \
        _Pragma("omp simd")                                                             \
        for (int64_t d = 0; d < D; d++) y[d] = (a[d] - EXP(b[d]) * st) * sc;             \
    }                                                                                    \
}                                                                                        \
static void norm_block_##SUF(int kind, const T *a, const T *b, T *y, int64_t D,          \
                             int64_t inner, int64_t nb, T sc)                            \
{                                                                                        \
    T m[NORM_BLOCK], st[NORM_BLOCK];                                                     \
    double s[NORM_BLOCK];                                                                \
    for (int64_t j = 0; j < nb; j++) { m[j] = -INFINITY; s[j] = 0; }                     \
    if (kind == NK_SOFTMAX || kind == NK_LOG_SOFTMAX) {                                  \
        for (int64_t d = 0; d < D; d++)                                                  \
            _Pragma("omp simd")                                                          \
            for (int64_t j = 0; j < nb; j++) {                                           \
                T v = a[d * inner + j] * sc;                                             \
                m[j] = v > m[j] ? v : m[j];                                              \
            }                                                                            \
        for (int64_t j = 0; j < nb; j++) if (isinf(m[j]) && m[j] < 0) m[j] = 0;          \
        for (int64_t d = 0; d < D; d++)                                                  \
            _Pragma("omp simd")                                                          \
            for (int64_t j = 0; j < nb; j++) {                                           \
                T e = EXP(a[d * inner + j] * sc - m[j]);                                 \
                if (kind == NK_SOFTMAX) y[d * inner + j] = e;                            \
                s[j] += e;                                                               \
            }                                                                            \
        if (kind == NK_SOFTMAX) {                                                        \
            for (int64_t j = 0; j < nb; j++) st[j] = (T)(1 / s[j]);                      \
            for (int64_t d = 0; d < D; d++)                                              \
                for (int64_t j = 0; j < nb; j++) y[d * inner + j] *= st[j];              \
        } else {                                                                         \
            for (int64_t j = 0; j < nb; j++) st[j] = m[j] + (T)log(s[j]);                \
            for (int64_t d = 0; d < D; d++)                                              \
                for (int64_t j = 0; j < nb; j++)                                         \
                    y[d * inner + j] = a[d * inner + j] * sc - st[j];                    \
        }                                                                                \
    } else {                                                                             \
        int sm = kind == NK_SOFTMAX_BWD;                                                 \
        for (int64_t d = 0; d < D; d++)                                                  \
            for (int64_t j = 0; j < nb; j++)                                             \
                s[j] += sm ? (double)a[d * inner + j] * b[d * inner + j]                 \
                           : (double)a[d * inner + j];                                   \
        for (int64_t j = 0; j < nb; j++) st[j] = (T)s[j];                                \
        for (int64_t d = 0; d < D; d++)                                                  \
            for (int64_t j = 0; j < nb; j++) {                                           \
                int64_t k = d * inner + j;                                               \
                y[k] = (sm ? b[k] * (a[k] - st[j]) : a[k] - EXP(b[k]) * st[j]) * sc;     \
            }                                                                            \
    }                                                                                    \
}                                                                                        \
typedef struct norm_job_##SUF {                                                          \
    int kind;                                                                            \
    const T *a, *b;                                                                      \
    T *y, sc;                                                                            \
    int64_t D, inner, nblk, tasks, per;                                                  \
} norm_job_##SUF;                                                                        \
static void norm_chunk_##SUF(void *arg, int64_t ci, int w)                               \
{                                                                                        \
    const norm_job_##SUF *j = arg;                                                       \
    (void)w;                                                                             \
    int64_t lo = ci * j->per, hi = lo + j->per < j->tasks ? lo + j->per : j->tasks;      \
    for (int64_t t = lo; t < hi; t++) {                                                  \
        int64_t o = t / j->nblk, j0 = (t % j->nblk) * NORM_BLOCK;                        \
        int64_t nb = j->inner - j0 < NORM_BLOCK ? j->inner - j0 : NORM_BLOCK;            \
        int64_t base = o * j->D * j->inner + j0;                                         \
        const T *b = j->b ? j->b + base : NULL;                                          \
        if (j->inner == 1)                                                               \
            norm_row_##SUF(j->kind, j->a + base, b, j->y + base, j->D, j->sc);           \
        else                                                                             \
            norm_block_##SUF(j->kind, j->a + base, b, j->y + base, j->D, j->inner, nb, j->sc); \
    }                                                                                    \
}                                                                                        \
/* rows (blocks) in chunks claimed on the core's helpers (par.h) */                     \
static void norm_run_##SUF(const lt_kernel_ctx *ctx, int kind, const T *a, const T *b,   \
                           T *y, int64_t outer, int64_t D, int64_t inner, int nt, T sc)  \
{                                                                                        \
    int64_t nblk = (inner + NORM_BLOCK - 1) / NORM_BLOCK;                                \
    int64_t tasks = outer * nblk;                                                        \
    if (outer * D * inner <= 16384) nt = 1;                                              \
    int64_t nch = (int64_t)nt * 8;                                                       \
    if (nch > tasks) nch = tasks;                                                        \
    int64_t per = (tasks + nch - 1) / nch;                                               \
    norm_job_##SUF j = {kind, a, b, y, sc, D, inner, nblk, tasks, per};                  \
    lt_par_for(ctx, nt, (tasks + per - 1) / per, norm_chunk_##SUF, &j);                  \
}

NORM_IMPL(float, f, lt_vexpf)
NORM_IMPL(double, d, exp)

/* softmax / log_softmax (x[, s]) and their backward (grad, out[, s]) along attrs.i[0]
 * into contiguous out. Float outputs only (integer inputs are converted);
 * LT_ERR_ARG for a bad dim, LT_ERR_OOM if scratch fails. */
lt_status lt_kernel_norm(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                         const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    int kind;
    switch (op) {
    case LT_OP_softmax: kind = NK_SOFTMAX; break;
    case LT_OP_log_softmax: kind = NK_LOG_SOFTMAX; break;
    case LT_OP_softmax_backward: kind = NK_SOFTMAX_BWD; break;
    case LT_OP_log_softmax_backward: kind = NK_LOG_SOFTMAX_BWD; break;
    default: return lt_set_error(LT_ERR_INTERNAL, "norm kernel: unexpected op %d", (int)op);
    }
    int bwd = kind >= NK_SOFTMAX_BWD;
    /* an optional last 0-d input scales the result (backward) or the input
     * (forward): compile_pattern.c folds a multiplication by a scalar */
    int scaled = n_in == (bwd ? 3 : 2);
    if (n_in != (bwd ? 2 : 1) && !scaled)
        return lt_set_error(LT_ERR_INTERNAL, "norm kernel: op %d with %d inputs", (int)op, n_in);
    if (!kt_is_float(out->dtype) || (bwd && (!kt_is_float(in[0].dtype) || !kt_is_float(in[1].dtype))))
        return lt_kutil_dtype_error(op, in, n_in, out);
    const lt_shape *s = &in[0].shape;
    int nd = s->ndim;
    int64_t dim = attrs && attrs->n > 0 ? attrs->i[0] : 0;
    if (dim < 0) dim += nd;
    if (nd > 0 && (dim < 0 || dim >= nd))
        return lt_set_error(LT_ERR_ARG, "softmax: dim %lld out of range for %d-D input",
                            (long long)(attrs ? attrs->i[0] : 0), nd);
    int64_t outer = 1, D = 1, inner = 1;
    for (int d = 0; d < nd; d++) {
        if (d < dim) outer *= s->dims[d];
        else if (d == dim) D = s->dims[d];
        else inner *= s->dims[d];
    }
    if (outer * D * inner == 0) return LT_OK;
    lt_dtype cdt = kt_compute_dt(out->dtype);
    double sc = 1.0;
    if (scaled) {
        const lt_view *sv = &in[n_in - 1];
        if (kt_numel(&sv->shape) != 1)
            return lt_set_error(LT_ERR_SHAPE, "softmax: the scale input must be a scalar");
        sc = kt_load(sv->data, sv->dtype, sv->offset);
    }
    void *ao = NULL, *bo = NULL, *yo = NULL;
    const void *a = lt_kutil_pack(&in[0], cdt, nt, &ao);
    const void *b = NULL;
    if (!a) return LT_ERR_OOM;
    if (bwd && !(b = lt_kutil_pack(&in[1], cdt, nt, &bo))) { free(ao); return LT_ERR_OOM; }
    void *y = kt_ptr(out);
    if (out->dtype != cdt &&
        !(y = yo = lt_kutil_alloc((size_t)(outer * D * inner) * kt_dtsize(cdt), "softmax"))) {
        free(ao); free(bo);
        return LT_ERR_OOM;
    }
    if (cdt == LT_F64) norm_run_d(ctx, kind, a, b, y, outer, D, inner, nt, sc);
    else norm_run_f(ctx, kind, a, b, y, outer, D, inner, nt, (float)sc);
    if (yo) lt_kutil_unpack(yo, cdt, out, nt);
    free(ao); free(bo); free(yo);
    return LT_OK;
}
