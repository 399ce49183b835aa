/*
 * lazy/kernels/sort.c — argsort along one dim (attrs.i[0]), ascending or
 * descending (attrs.i[1] != 0), always stable: equal keys keep their
 * order, like PyTorch's CPU sort with stable=True.
 *
 * NaN sorts above every number (last ascending, first descending), as in
 * PyTorch. Values are compared as double (float dtypes) or int64 (integer
 * and bool dtypes); both are exact for every stored dtype. sort / topk /
 * argsort / msort are composed in the shim: argsort, then a gather of the
 * values (and a slice for topk).
 */
#include "kutil.h"

#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* a before b (strictly) in the requested order */
static inline int key_less_f(double a, double b, int desc)
{
    int an = a != a, bn = b != b;
    if (an || bn) return desc ? (an && !bn) : (!an && bn);
    return desc ? a > b : a < b;
}
static inline int key_less_i(int64_t a, int64_t b, int desc) { return desc ? a > b : a < b; }

/* Stable bottom-up merge sort of idx[0..n) by key (tmp: n scratch). */
#define SORT_LINE(NAME, T, LESS)                                                    \
static void NAME(const T *key, int64_t *idx, int64_t *tmp, int64_t n, int desc)     \
{                                                                                   \
    for (int64_t i = 0; i < n; i++) idx[i] = i;                                     \
    int64_t *src = idx, *dst = tmp;                                                 \
    for (int64_t w = 1; w < n; w *= 2) {                                            \
        for (int64_t lo = 0; lo < n; lo += 2 * w) {                                 \
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n; \
            int64_t i = lo, j = mid, k = lo;                                        \
            while (i < mid && j < hi)                                               \
                dst[k++] = LESS(key[src[j]], key[src[i]], desc) ? src[j++] : src[i++]; \
            while (i < mid) dst[k++] = src[i++];                                    \
            while (j < hi) dst[k++] = src[j++];                                     \
        }                                                                           \
        int64_t *t = src; src = dst; dst = t;                                       \
    }                                                                               \
    if (src != idx) memcpy(idx, src, (size_t)n * sizeof *idx);                      \
}
SORT_LINE(sort_line_f, double, key_less_f)
SORT_LINE(sort_line_i, int64_t, key_less_i)

/* argsort (x) along attrs.i[0] into contiguous int64 out. LT_ERR_ARG for a
 * bad dim, LT_ERR_OOM when scratch fails. */
lt_status lt_kernel_sort(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                         const lt_view *out, const lt_kernel_ctx *ctx)
{
    if (op != LT_OP_argsort || n_in != 1)
        return lt_set_error(LT_ERR_INTERNAL, "sort kernel: unexpected op %d / %d inputs",
                            (int)op, n_in);
    int nt = kt_nthreads(ctx);
    const lt_shape *s = &in[0].shape;
    int nd = s->ndim;
    int64_t dim = attrs && attrs->n > 0 ? attrs->i[0] : 0;
    int desc = attrs && attrs->n > 1 && attrs->i[1] != 0;
    if (nd > 0 && (dim < 0 || dim >= nd))
        return lt_set_error(LT_ERR_ARG, "argsort: dim %lld out of range for %d-D input",
                            (long long)dim, nd);
    int64_t outer = 1, D = 1, inner = 1;
    for (int d = 0; d < nd; d++) {
        if (d < dim) outer *= s->dims[d];
        else if (d == dim) D = s->dims[d];
        else inner *= s->dims[d];
    }
    int64_t n = outer * D * inner;
    if (n == 0) return LT_OK;
    int isf = kt_is_float(in[0].dtype);
    lt_dtype kdt = isf ? LT_F64 : LT_I64;
    void *ko = NULL;
    const void *key = lt_kutil_pack(&in[0], kdt, nt, &ko);
    if (!key) return LT_ERR_OOM;
    int64_t *y = kt_ptr(out);
    int64_t lines = outer * inner;
    /* per line: a contiguous key copy, the index and the merge scratch */
    size_t per = (size_t)D * (sizeof(double) + 2 * sizeof(int64_t));
    char *scratch = lt_kutil_alloc(per * (size_t)(nt > 0 ? nt : 1), "argsort");
    if (!scratch) {
        free(ko);
        return LT_ERR_OOM;
    }
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (n > 32768)")
    for (int64_t l = 0; l < lines; l++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        char *sc = scratch + per * (size_t)tid;
        int64_t *idx = (int64_t *)sc, *tmp = idx + D;
        void *line = tmp + D;
        int64_t o = l / inner, q = l % inner, base = o * D * inner + q;
        if (isf) {
            double *k = line;
            for (int64_t d = 0; d < D; d++) k[d] = ((const double *)key)[base + d * inner];
            sort_line_f(k, idx, tmp, D, desc);
        } else {
            int64_t *k = line;
            for (int64_t d = 0; d < D; d++) k[d] = ((const int64_t *)key)[base + d * inner];
            sort_line_i(k, idx, tmp, D, desc);
        }
        for (int64_t d = 0; d < D; d++) y[base + d * inner] = idx[d];
    }
    free(scratch);
    free(ko);
    return LT_OK;
}
