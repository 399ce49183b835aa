/*
 * lazy/kernels/search.c — set membership: isin(elements, test_elements).
 *
 * The test elements are copied, sorted and searched by bisection for each
 * element: O((n + m) log m) time and O(m) scratch, whatever the sizes (a
 * broadcast comparison would need n * m). Values compare as double when
 * either input is a float dtype, else as int64; the shim first casts both
 * inputs to their PyTorch result type, so the comparison is eager's. NaN is
 * never a member (NaN != NaN), as in eager.
 */
#include "kutil.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_i(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* 1 when v is in the sorted t[0..m) */
static int member_d(const double *t, int64_t m, double v)
{
    int64_t lo = 0, hi = m;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (t[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo < m && t[lo] == v;
}

static int member_i(const int64_t *t, int64_t m, int64_t v)
{
    int64_t lo = 0, hi = m;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (t[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo < m && t[lo] == v;
}

/* isin (elements, test_elements) into contiguous bool out of the elements'
 * shape; attrs.i[0] != 0 inverts (not in). Any computed dtypes. LT_ERR_OOM
 * when scratch fails. */
lt_status lt_kernel_search(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                           const lt_view *out, const lt_kernel_ctx *ctx)
{
    if (op != LT_OP_isin || n_in != 2)
        return lt_set_error(LT_ERR_INTERNAL, "search kernel: unexpected op %d / %d inputs",
                            (int)op, n_in);
    int nt = kt_nthreads(ctx);
    int invert = attrs && attrs->n > 0 && attrs->i[0] != 0;
    int64_t n = kt_numel(&in[0].shape), m = kt_numel(&in[1].shape);
    if (n == 0) return LT_OK;
    int isf = kt_is_float(in[0].dtype) || kt_is_float(in[1].dtype);
    lt_dtype cdt = isf ? LT_F64 : LT_I64;
    void *eo = NULL;
    const void *e = lt_kutil_pack(&in[0], cdt, nt, &eo);
    if (!e) return LT_ERR_OOM;
    /* the sorted copy is always a fresh buffer (the input may be a view) */
    void *t = lt_kutil_alloc((size_t)(m > 0 ? m : 1) * 8, "isin");
    if (!t) {
        free(eo);
        return LT_ERR_OOM;
    }
    if (m > 0) {
        lt_view tv = kt_contig_view(t, cdt, &in[1].shape);
        lt_kutil_copy(&in[1], &tv, nt);
    }
    /* NaN never matches: drop it from the set before sorting */
    int64_t k = m;
    if (isf) {
        double *td = t;
        k = 0;
        for (int64_t j = 0; j < m; j++)
            if (td[j] == td[j]) td[k++] = td[j];
        qsort(td, (size_t)k, sizeof *td, cmp_d);
    } else {
        qsort(t, (size_t)k, sizeof(int64_t), cmp_i);
    }
    uint8_t *y = kt_ptr(out);
    if (isf) {
        const double *ed = e, *td = t;
        _Pragma("omp parallel for num_threads(nt) schedule(static) if (n > 16384)")
        for (int64_t i = 0; i < n; i++) y[i] = (uint8_t)(member_d(td, k, ed[i]) != invert);
    } else {
        const int64_t *ei = e, *ti = t;
        _Pragma("omp parallel for num_threads(nt) schedule(static) if (n > 16384)")
        for (int64_t i = 0; i < n; i++) y[i] = (uint8_t)(member_i(ti, k, ei[i]) != invert);
    }
    free(t);
    free(eo);
    return LT_OK;
}
