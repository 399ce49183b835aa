/* lazy/kernels/kutil.c — strided copy / pack helpers of the library kernels
 * (see kutil.h). */
#include <stdio.h>
#include <cblas.h>
#include "kutil.h"
#include "par.h"

const char *lt_kutil_shape_str(const lt_shape *s, char *buf, size_t cap)
{
    size_t k = 0;
    k += snprintf(buf + k, cap - k, "[");
    for (int d = 0; d < s->ndim && k < cap; d++)
        k += snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)s->dims[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

lt_status lt_kutil_dtype_error(lt_op op, const lt_view *in, int n_in, const lt_view *out)
{
    char b[256];
    size_t k = 0;
    b[0] = 0;
    for (int i = 0; i < n_in && k < sizeof b; i++)
        k += snprintf(b + k, sizeof b - k, "%s%s", i ? ", " : "", kt_dtname(in[i].dtype));
    return lt_set_error(LT_ERR_DTYPE, "%s: unsupported dtypes (%s) -> %s", lt_op_name(op), b,
                        out ? kt_dtname(out->dtype) : "?");
}

void *lt_kutil_alloc(size_t n, const char *what)
{
    void *p = malloc(n ? n : 1);
    if (!p) lt_set_error(LT_ERR_OOM, "%s: cannot allocate %zu bytes of host scratch", what, n);
    return p;
}

/* Merges dims that are contiguous in both views and drops size-1 dims.
 * Returns the new ndim; dims/ss/ds receive the result. */
static int coalesce(const lt_view *s, const lt_view *d, int64_t *dims, int64_t *ss, int64_t *ds)
{
    int n = 0;
    for (int i = 0; i < s->shape.ndim; i++) {
        int64_t len = s->shape.dims[i];
        if (len == 1) continue;
        if (n > 0 && ss[n - 1] == s->strides[i] * len && ds[n - 1] == d->strides[i] * len) {
            dims[n - 1] *= len;
            ss[n - 1] = s->strides[i];
            ds[n - 1] = d->strides[i];
        } else {
            dims[n] = len;
            ss[n] = s->strides[i];
            ds[n] = d->strides[i];
            n++;
        }
    }
    return n;
}

/* Inner loop: len elements with strides. */
static void copy_run(const void *sb, lt_dtype sdt, int64_t so, int64_t sst,
                     void *db, lt_dtype ddt, int64_t dof, int64_t dst, int64_t len)
{
    if (sdt == ddt) {
        size_t es = kt_dtsize(sdt);
        if (sst == 1 && dst == 1) {
            memcpy((char *)db + dof * es, (const char *)sb + so * es, (size_t)len * es);
            return;
        }
        switch (es) {
        case 16: { const int64_t *s = (const int64_t *)sb + 2 * so; int64_t *d = (int64_t *)db + 2 * dof;
                   for (int64_t i = 0; i < len; i++) {
                       d[2 * i * dst] = s[2 * i * sst]; d[2 * i * dst + 1] = s[2 * i * sst + 1];
                   } return; }
        case 8: { const int64_t *s = (const int64_t *)sb + so; int64_t *d = (int64_t *)db + dof;
                  for (int64_t i = 0; i < len; i++) { d[i * dst] = s[i * sst]; } return; }
        case 4: { const int32_t *s = (const int32_t *)sb + so; int32_t *d = (int32_t *)db + dof;
                  for (int64_t i = 0; i < len; i++) { d[i * dst] = s[i * sst]; } return; }
        case 2: { const uint16_t *s = (const uint16_t *)sb + so; uint16_t *d = (uint16_t *)db + dof;
                  for (int64_t i = 0; i < len; i++) { d[i * dst] = s[i * sst]; } return; }
        default: { const uint8_t *s = (const uint8_t *)sb + so; uint8_t *d = (uint8_t *)db + dof;
                   for (int64_t i = 0; i < len; i++) { d[i * dst] = s[i * sst]; } return; }
        }
    }
    if (sdt == LT_BF16 && ddt == LT_F32) {
        const uint16_t *s = (const uint16_t *)sb + so; float *d = (float *)db + dof;
        for (int64_t i = 0; i < len; i++) d[i * dst] = lt_bf16_to_f32_inline(s[i * sst]);
        return;
    }
    if (sdt == LT_F32 && ddt == LT_BF16) {
        const float *s = (const float *)sb + so; uint16_t *d = (uint16_t *)db + dof;
        for (int64_t i = 0; i < len; i++) d[i * dst] = lt_bf16_from_f32(s[i * sst]);
        return;
    }
    if (sdt == LT_F32 && ddt == LT_F64) {
        const float *s = (const float *)sb + so; double *d = (double *)db + dof;
        for (int64_t i = 0; i < len; i++) d[i * dst] = s[i * sst];
        return;
    }
    if (sdt == LT_F64 && ddt == LT_F32) {
        const double *s = (const double *)sb + so; float *d = (float *)db + dof;
        for (int64_t i = 0; i < len; i++) d[i * dst] = (float)s[i * sst];
        return;
    }
    for (int64_t i = 0; i < len; i++) kt_cvt(sb, sdt, so + i * sst, db, ddt, dof + i * dst);
}

void lt_kutil_copy(const lt_view *src, const lt_view *dst, int nthreads)
{
    int64_t dims[LT_MAX_DIMS], ss[LT_MAX_DIMS], ds[LT_MAX_DIMS];
    int64_t total = kt_numel(&src->shape);
    if (total <= 0) return;
    int n = coalesce(src, dst, dims, ss, ds);
    if (n == 0) {
        kt_cvt(src->data, src->dtype, src->offset, dst->data, dst->dtype, dst->offset);
        return;
    }
    int64_t inner = dims[n - 1], outer = total / inner;
    int nt = (nthreads > 1 && total >= 32768) ? nthreads : 1;
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t r = 0; r < outer; r++) {
        int64_t so = src->offset, dof = dst->offset, rem = r;
        for (int d = n - 2; d >= 0; d--) {
            int64_t c = rem % dims[d];
            rem /= dims[d];
            so += c * ss[d];
            dof += c * ds[d];
        }
        copy_run(src->data, src->dtype, so, ss[n - 1], dst->data, dst->dtype, dof, ds[n - 1], inner);
    }
}

void *lt_kutil_pack(const lt_view *v, lt_dtype dt, int nthreads, void **owned)
{
    *owned = NULL;
    if (v->dtype == dt && kt_is_contig(v)) return kt_ptr(v);
    int64_t n = kt_numel(&v->shape);
    void *buf = lt_kutil_alloc((size_t)(n > 0 ? n : 0) * kt_dtsize(dt), "kernel pack");
    if (!buf) return NULL;
    lt_view d = kt_contig_view(buf, dt, &v->shape);
    lt_kutil_copy(v, &d, nthreads);
    *owned = buf;
    return buf;
}

void lt_kutil_unpack(const void *src, lt_dtype sdt, const lt_view *out, int nthreads)
{
    if (src == kt_ptr(out) && sdt == out->dtype) return;
    lt_view s = kt_contig_view((void *)src, sdt, &out->shape);
    lt_view d = kt_contig_view(kt_ptr(out), out->dtype, &out->shape);
    lt_kutil_copy(&s, &d, nthreads);
}

void lt_kutil_blas_serial(void)
{
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

void lt_kutil_gemm(lt_dtype cdt, int ta, int tb, int64_t M, int64_t N, int64_t K,
                   const void *A, int64_t lda, const void *B, int64_t ldb,
                   double beta, void *C, int64_t ldc)
{
    enum CBLAS_TRANSPOSE a = ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE b = tb ? CblasTrans : CblasNoTrans;
    if (M <= 0 || N <= 0) return;
    if (cdt == LT_F32 && lt_sgemm_small_ok(ta, M, N, K)) {
        lt_sgemm_small(ta, tb, M, N, K, A, lda, B, ldb, (float)beta, C, ldc);
        return;
    }
    lt_kutil_blas_serial();
    if (cdt == LT_F64)
        cblas_dgemm(CblasRowMajor, a, b, (int)M, (int)N, (int)K, 1.0, A, (int)lda, B, (int)ldb,
                    beta, C, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, a, b, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb,
                    (float)beta, C, (int)ldc);
}

typedef struct gemm_job {
    lt_dtype cdt;
    int ta, tb, split_m;
    int64_t M, N, K, chunk, lda, ldb, ldc;
    const char *A, *B;
    double beta;
    char *C;
    const char *bias;   /* NULL, or N values: C's block starts as the bias rows */
} gemm_job;

/* Rows [r0,r1) x columns [c0,c1) of C (leading dimension ldc) set to the
 * bias's columns [c0,c1). */
static void fill_bias_rows(size_t es, const char *bias, char *C, int64_t ldc, int64_t r0,
                           int64_t r1, int64_t c0, int64_t c1)
{
    size_t nb = (size_t)(c1 - c0) * es;
    for (int64_t i = r0; i < r1; i++)
        memcpy(C + (i * ldc + c0) * (int64_t)es, bias + c0 * (int64_t)es, nb);
}

/* Block ci: rows [lo,hi) of C (A's rows: at i*lda, or column i when A is
 * transposed) or columns [lo,hi) (B's columns: at j, or row j*ldb when B is
 * transposed). */
static void gemm_block(void *arg, int64_t ci, int w)
{
    const gemm_job *j = arg;
    (void)w;
    size_t es = kt_dtsize(j->cdt);
    int64_t lo = ci * j->chunk, hi = lo + j->chunk, dim = j->split_m ? j->M : j->N;
    if (hi > dim) hi = dim;
    if (hi <= lo) return;
    const char *a = j->A, *b = j->B;
    char *c = j->C;
    int64_t m = j->M, n = j->N;
    if (j->bias) {
        if (j->split_m) fill_bias_rows(es, j->bias, c, j->ldc, lo, hi, 0, n);
        else fill_bias_rows(es, j->bias, c, j->ldc, 0, m, lo, hi);
    }
    if (j->split_m) {
        a += (j->ta ? lo : lo * j->lda) * (int64_t)es;
        c += lo * j->ldc * (int64_t)es;
        m = hi - lo;
    } else {
        b += (j->tb ? lo * j->ldb : lo) * (int64_t)es;
        c += lo * (int64_t)es;
        n = hi - lo;
    }
    lt_kutil_gemm(j->cdt, j->ta, j->tb, m, n, j->K, a, j->lda, b, j->ldb, j->beta, c, j->ldc);
}

/* A product with a long inner dimension (weight gradients: [out, tokens] x
 * [tokens, in]) split along K: worker 0 accumulates its K blocks into C,
 * every other worker into its own partial M x N result, added to C at the
 * end. Split along M or N instead, every block would pack the whole
 * other operand (tokens x in) again: 4 blocks of 192 x 256 x 4096 took
 * 1.07-1.09x the time of one call, two K halves plus the sum 1.00-1.02x
 * (OpenBLAS, one thread, same loop). */
typedef struct gemm_kjob {
    lt_dtype cdt;
    int ta, tb;
    int64_t M, N, K, chunk, lda, ldb, ldc;
    const char *A, *B;
    double beta;
    char *C;
    char *part;           /* workers-1 partial M x N results (ld N) */
    int *started;         /* per worker: has written its first block */
} gemm_kjob;

static void gemm_kblock(void *arg, int64_t ci, int w)
{
    const gemm_kjob *j = arg;
    size_t es = kt_dtsize(j->cdt);
    int64_t lo = ci * j->chunk, hi = lo + j->chunk < j->K ? lo + j->chunk : j->K;
    if (hi <= lo) return;
    /* op(A)(i, k) is A[k*lda + i] when transposed, A[i*lda + k] otherwise;
     * op(B)(k, n) is B[n*ldb + k] when transposed, B[k*ldb + n] otherwise */
    const char *a = j->A + (j->ta ? lo * j->lda : lo) * (int64_t)es;
    const char *b = j->B + (j->tb ? lo : lo * j->ldb) * (int64_t)es;
    double beta = j->started[w] ? 1.0 : (w == 0 ? j->beta : 0.0);
    char *c = w == 0 ? j->C : j->part + (size_t)(w - 1) * (size_t)(j->M * j->N) * es;
    j->started[w] = 1;
    lt_kutil_gemm(j->cdt, j->ta, j->tb, j->M, j->N, hi - lo, a, j->lda, b, j->ldb, beta, c,
                  w == 0 ? j->ldc : j->N);
}

/* 1 when the K split ran (C = beta*C + op(A) op(B)), 0 when it does not
 * apply (short K, large C, no memory): the caller splits M or N. */
static int gemm_par_k(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, int ta, int tb,
                      int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                      const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
    int64_t mn = M > N ? M : N;
    int64_t nch = (int64_t)nt * 2;                /* a late helper costs a quarter */
    if (nt < 2 || K < 2 * mn || K / nch < 256 || (double)M * N > 1048576.0) return 0;
    size_t es = kt_dtsize(cdt), msz = (size_t)(M * N) * es;
    char *part = malloc(msz * (size_t)(nt - 1) + 1);
    int *started = calloc((size_t)nt, sizeof *started);
    if (!part || !started) {
        free(part);
        free(started);
        return 0;
    }
    int64_t chunk = (K + nch - 1) / nch;
    nch = (K + chunk - 1) / chunk;
    gemm_kjob j = {cdt, ta, tb, M, N, K, chunk, lda, ldb, ldc, A, B, beta, C, part, started};
    lt_par_for(ctx, nt, nch, gemm_kblock, &j);
    char *c = C;
    for (int64_t i = 0; i < M; i++) {
        char *row = c + i * ldc * (int64_t)es;
        if (!started[0]) {            /* worker 0 ran no block: C = beta*C */
            if (cdt == LT_F64)
                for (int64_t n = 0; n < N; n++) ((double *)row)[n] *= beta;
            else
                for (int64_t n = 0; n < N; n++) ((float *)row)[n] *= (float)beta;
            if (beta == 0.0) memset(row, 0, (size_t)N * es);   /* NaN * 0 */
        }
        for (int w = 1; w < nt; w++) {
            if (!started[w]) continue;
            const char *pr = part + (size_t)(w - 1) * msz + (size_t)(i * N) * es;
            if (cdt == LT_F64)
                for (int64_t n = 0; n < N; n++) ((double *)row)[n] += ((const double *)pr)[n];
            else
                for (int64_t n = 0; n < N; n++) ((float *)row)[n] += ((const float *)pr)[n];
        }
    }
    free(part);
    free(started);
    return 1;
}

static void gemm_par(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, int ta, int tb,
                     int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                     const void *B, int64_t ldb, double beta, const void *bias, void *C,
                     int64_t ldc)
{
    double flops = 2.0 * (double)M * N * K;
    if (!bias && flops >= 2e6 &&
        gemm_par_k(ctx, nt, cdt, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc))
        return;
    int split_m = M >= N;
    int64_t dim = split_m ? M : N;
    /* twice the workers' chunks: a late helper costs one chunk, not half */
    int64_t nch = (int64_t)nt * 2, chunk = 0;
    if (nt >= 2 && flops >= 2e6) {
        chunk = (dim + nch - 1) / nch;
        if (chunk < 16) chunk = 16;
        nch = (dim + chunk - 1) / chunk;
    }
    if (nt < 2 || flops < 2e6 || nch < 2) {
        if (bias && M > 0) fill_bias_rows(kt_dtsize(cdt), bias, C, ldc, 0, M, 0, N);
        lt_kutil_gemm(cdt, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    gemm_job j = {cdt, ta, tb, split_m, M, N, K, chunk, lda, ldb, ldc, A, B, beta, C, bias};
    lt_par_for(ctx, nt, nch, gemm_block, &j);
}

void lt_kutil_gemm_par(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, int ta, int tb,
                       int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                       const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
    gemm_par(ctx, nt, cdt, ta, tb, M, N, K, A, lda, B, ldb, beta, NULL, C, ldc);
}

void lt_kutil_gemm_par_bias(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, int ta, int tb,
                            int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                            const void *B, int64_t ldb, const void *bias, void *C,
                            int64_t ldc)
{
    gemm_par(ctx, nt, cdt, ta, tb, M, N, K, A, lda, B, ldb, bias ? 1.0 : 0.0, bias, C, ldc);
}

int lt_kutil_reshape_strides(const lt_view *src, const lt_shape *to, int64_t *strides)
{
    /* drop size-1 source dims */
    int64_t sd[LT_MAX_DIMS], ss[LT_MAX_DIMS];
    int n = 0;
    for (int k = 0; k < src->shape.ndim; k++)
        if (src->shape.dims[k] != 1) {
            sd[n] = src->shape.dims[k];
            ss[n] = src->strides[k];
            n++;
        }
    int i = 0;   /* source dim cursor */
    int j = 0;   /* target dim cursor */
    while (j < to->ndim) {
        if (to->dims[j] == 1) {
            strides[j] = 1;
            j++;
            continue;
        }
        if (i >= n)
            return 0;
        /* take source dims [i, i2) and target dims [j, j2) with equal product */
        int64_t ps = sd[i], pt = to->dims[j];
        int i2 = i + 1, j2 = j + 1;
        while (ps != pt) {
            if (ps < pt) {
                if (i2 >= n)
                    return 0;
                ps *= sd[i2++];
            } else {
                if (j2 >= to->ndim)
                    return 0;
                pt *= to->dims[j2++];
            }
        }
        /* the source group must be contiguous within itself */
        for (int k = i; k + 1 < i2; k++)
            if (ss[k] != ss[k + 1] * sd[k + 1])
                return 0;
        int64_t st = ss[i2 - 1];
        for (int k = j2 - 1; k >= j; k--) {
            strides[k] = st;
            st *= to->dims[k];
        }
        i = i2;
        j = j2;
    }
    return i == n;
}
