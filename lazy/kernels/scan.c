/*
 * lazy/kernels/scan.c — inclusive scans along one dim (attrs.i[0]):
 * cumsum, cumprod, and cummax_indices (the index of the running max or,
 * attrs.i[1] != 0, min: cummax / cummin are a gather of x at it).
 *
 * The input is seen as [outer, D, inner]; each (outer, inner) line is scanned
 * in order d = 0..D-1, so results match a sequential loop (PyTorch's CPU
 * kernel is sequential too). Lines are processed inner-block-wise so a
 * strided line still streams through memory. Float dtypes accumulate in their
 * compute type (f32 for f32/bf16, f64 for f64), rounding bf16 only when
 * stored; integer and bool inputs accumulate in int64 (the SUM dtype rule
 * makes the output int64).
 */
#include "kutil.h"

#define SCAN_BLOCK 64

#define SCAN_IMPL(T, SUF)                                                             \
static void scan_run_##SUF(int prod, const T *a, T *y, int64_t outer, int64_t D,     \
                           int64_t inner, int nt)                                    \
{                                                                                     \
    int64_t nblk = (inner + SCAN_BLOCK - 1) / SCAN_BLOCK;                             \
    int64_t tasks = outer * nblk;                                                     \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (outer * D * inner > 32768)") \
    for (int64_t t = 0; t < tasks; t++) {                                             \
        int64_t o = t / nblk, j0 = (t % nblk) * SCAN_BLOCK;                           \
        int64_t nb = inner - j0 < SCAN_BLOCK ? inner - j0 : SCAN_BLOCK;               \
        const T *ap = a + o * D * inner + j0;                                         \
        T *yp = y + o * D * inner + j0;                                               \
        T acc[SCAN_BLOCK];                                                            \
        for (int64_t j = 0; j < nb; j++) acc[j] = prod ? (T)1 : (T)0;                 \
        for (int64_t d = 0; d < D; d++) {                                             \
            const T *ar = ap + d * inner;                                             \
            T *yr = yp + d * inner;                                                   \
            if (prod)                                                                 \
                for (int64_t j = 0; j < nb; j++) { acc[j] *= ar[j]; yr[j] = acc[j]; } \
            else                                                                      \
                for (int64_t j = 0; j < nb; j++) { acc[j] += ar[j]; yr[j] = acc[j]; } \
        }                                                                             \
    }                                                                                 \
}

SCAN_IMPL(float, f)
SCAN_IMPL(double, d)
SCAN_IMPL(int64_t, i)

/* Index of the running max (min when mn) per line, eager's rule: element d
 * replaces the best when it is NaN, or when the best is not NaN and
 * x[d] >= best (<= for min): ties and NaN take the latest index. */
#define ARGSCAN_IMPL(T, SUF, ISNAN)                                                    \
static void argscan_run_##SUF(int mn, const T *a, int64_t *y, int64_t outer, int64_t D, \
                              int64_t inner, int nt)                                  \
{                                                                                     \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (outer * D * inner > 32768)") \
    for (int64_t l = 0; l < outer * inner; l++) {                                     \
        int64_t o = l / inner, j = l % inner, base = o * D * inner + j, bi = 0;       \
        T best = a[base];                                                             \
        for (int64_t d = 0; d < D; d++) {                                             \
            T v = a[base + d * inner];                                                \
            if (ISNAN(v) || (!ISNAN(best) && (mn ? v <= best : v >= best))) {         \
                best = v;                                                             \
                bi = d;                                                               \
            }                                                                         \
            y[base + d * inner] = bi;                                                 \
        }                                                                             \
    }                                                                                 \
}
#define SCAN_ISNAN(v) ((v) != (v))
#define SCAN_NONAN(v) 0
ARGSCAN_IMPL(double, d, SCAN_ISNAN)
ARGSCAN_IMPL(int64_t, i, SCAN_NONAN)

/* cumsum / cumprod (x) along attrs.i[0] into contiguous out (dtype by the
 * SUM rule), cummax_indices into contiguous int64 out. LT_ERR_ARG for a bad
 * dim, LT_ERR_OOM if scratch fails. */
lt_status lt_kernel_scan(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                         const lt_view *out, const lt_kernel_ctx *ctx)
{
    if (op != LT_OP_cumsum && op != LT_OP_cumprod && op != LT_OP_cummax_indices)
        return lt_set_error(LT_ERR_INTERNAL, "scan kernel: unexpected op %d", (int)op);
    if (n_in != 1)
        return lt_set_error(LT_ERR_INTERNAL, "scan kernel: %d inputs", n_in);
    int nt = kt_nthreads(ctx);
    const lt_shape *s = &in[0].shape;
    int nd = s->ndim;
    int64_t dim = attrs && attrs->n > 0 ? attrs->i[0] : 0;
    if (nd > 0 && (dim < 0 || dim >= nd))
        return lt_set_error(LT_ERR_ARG, "%s: dim %lld out of range for %d-D input",
                            lt_op_name(op), (long long)dim, nd);
    int64_t outer = 1, D = 1, inner = 1;
    for (int d = 0; d < nd; d++) {
        if (d < dim) outer *= s->dims[d];
        else if (d == dim) D = s->dims[d];
        else inner *= s->dims[d];
    }
    if (outer * D * inner == 0) return LT_OK;
    if (op == LT_OP_cummax_indices) {
        lt_dtype kdt = kt_is_float(in[0].dtype) ? LT_F64 : LT_I64;
        void *ko = NULL;
        const void *k = lt_kutil_pack(&in[0], kdt, nt, &ko);
        if (!k) return LT_ERR_OOM;
        int mn = attrs && attrs->n > 1 && attrs->i[1] != 0;
        if (kdt == LT_F64) argscan_run_d(mn, k, kt_ptr(out), outer, D, inner, nt);
        else argscan_run_i(mn, k, kt_ptr(out), outer, D, inner, nt);
        free(ko);
        return LT_OK;
    }
    lt_dtype cdt = kt_is_float(out->dtype) ? kt_compute_dt(out->dtype) : LT_I64;
    void *ao = NULL, *yo = NULL;
    const void *a = lt_kutil_pack(&in[0], cdt, nt, &ao);
    if (!a) return LT_ERR_OOM;
    void *y = kt_ptr(out);
    if (out->dtype != cdt &&
        !(y = yo = lt_kutil_alloc((size_t)(outer * D * inner) * kt_dtsize(cdt), lt_op_name(op)))) {
        free(ao);
        return LT_ERR_OOM;
    }
    int prod = op == LT_OP_cumprod;
    if (cdt == LT_F64) scan_run_d(prod, a, y, outer, D, inner, nt);
    else if (cdt == LT_F32) scan_run_f(prod, a, y, outer, D, inner, nt);
    else scan_run_i(prod, a, y, outer, D, inner, nt);
    if (yo) lt_kutil_unpack(yo, cdt, out, nt);
    free(ao);
    free(yo);
    return LT_OK;
}
