/*
 * lazy/kernels/mxu.c — f32 products in bf16 passes (contract in mxu.h).
 *
 * The decomposition is XLA's for its BF16_BF16_F32, BF16_BF16_F32_X3 and
 * BF16_BF16_F32_X6 dot algorithms (the TPU's DEFAULT, HIGH and HIGHEST
 * for f32 operands; openxla/xla's dot algorithm rewriter states them as
 * HLO):
 *   DEFAULT  a, b rounded to bf16; one product.
 *   HIGH     hi = trunc(x) (the f32 with its low 16 bits cleared),
 *            lo = bf16(x - hi) (x - hi is exact);
 *            ( lo_a*hi_b + hi_a*lo_b ) -> NaN to 0, + hi_a*hi_b.
 *   HIGHEST  hi = trunc(x), mid = trunc(x - hi), lo = bf16(x - hi - mid);
 *            ((((mid*mid + hi*lo) + lo*hi) + hi*mid) + mid*hi) -> NaN to 0,
 *            + hi*hi; the mid*lo, lo*mid and lo*lo products are dropped.
 * Each named product is a whole f32 product (GEMM or convolution) of bf16
 * parts: exact products, f32 accumulation; the sums between passes are f32
 * elementwise adds in the order above, smallest terms first.
 *
 * Truncating (not rounding) hi and mid is what the measured bits need:
 * pytorch/xla's test/test_mat_mul_precision.py bounds a TPU's error on
 * products of diagonal matrices near 1 from both sides; with rounded parts
 * HIGH's largest error would be 2.1e-5, under its lower bound 3.05e-5 (the
 * truncated split gives 6.6-7.3e-5, inside [3.05e-5, 1.22e-4]).
 */
#include "kutil.h"
#include "mxu.h"

int lt_mxu_applies(const lt_kernel_ctx *ctx, lt_dtype cdt, lt_dtype da, lt_dtype db)
{
    return ctx && lt_mxu_parts(ctx->mm_precision) > 0 && cdt == LT_F32 &&
           !(da == LT_BF16 && db == LT_BF16);
}

int lt_mxu_parts(int p)
{
    return p == LT_MATMUL_DEFAULT ? 1 : p == LT_MATMUL_HIGH ? 2 : p == LT_MATMUL_HIGHEST ? 3 : 0;
}

static inline float trunc_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

static inline float round_bf16(float x) { return kt_bf16_to_f32(kt_f32_to_bf16(x)); }

void lt_mxu_split(int p, const float *x, int64_t n, float *parts, int nt)
{
    float *p0 = parts, *p1 = parts + n, *p2 = parts + 2 * n;
    if (nt < 1) nt = 1;
    if (p == LT_MATMUL_DEFAULT) {
        #pragma omp parallel for num_threads(nt) if (n >= 65536) schedule(static)
        for (int64_t i = 0; i < n; i++) p0[i] = round_bf16(x[i]);
    } else if (p == LT_MATMUL_HIGH) {
        #pragma omp parallel for num_threads(nt) if (n >= 65536) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float hi = trunc_bf16(x[i]);
            p0[i] = hi;
            p1[i] = round_bf16(x[i] - hi);
        }
    } else if (p == LT_MATMUL_HIGHEST) {
        #pragma omp parallel for num_threads(nt) if (n >= 65536) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float hi = trunc_bf16(x[i]);
            float r = x[i] - hi;
            float mid = trunc_bf16(r);
            p0[i] = hi;
            p1[i] = mid;
            p2[i] = round_bf16(r - mid);
        }
    }
}

/* part 0 = hi; HIGH: 1 = lo; HIGHEST: 1 = mid, 2 = lo */
static const unsigned char passes1[1][2] = {{0, 0}};
static const unsigned char passes3[3][2] = {{1, 0}, {0, 1}, {0, 0}};
static const unsigned char passes6[6][2] = {{1, 1}, {0, 2}, {2, 0}, {0, 1}, {1, 0}, {0, 0}};

int lt_mxu_passes(int p, const unsigned char (**pairs)[2])
{
    switch (p) {
    case LT_MATMUL_DEFAULT: *pairs = passes1; return 1;
    case LT_MATMUL_HIGH: *pairs = passes3; return 3;
    case LT_MATMUL_HIGHEST: *pairs = passes6; return 6;
    default: *pairs = NULL; return 0;
    }
}

/* acc += pk (last: acc = nan0(acc) + pk), n values */
static void accumulate(float *acc, const float *pk, int64_t n, int last, int nt)
{
    if (last) {
        #pragma omp parallel for num_threads(nt) if (n >= 65536) schedule(static)
        for (int64_t i = 0; i < n; i++) acc[i] = (isnan(acc[i]) ? 0.0f : acc[i]) + pk[i];
    } else {
        #pragma omp parallel for num_threads(nt) if (n >= 65536) schedule(static)
        for (int64_t i = 0; i < n; i++) acc[i] += pk[i];
    }
}

float *lt_mxu_split_view(int p, const lt_view *v, int nt)
{
    int64_t n = kt_numel(&v->shape);
    void *owned = NULL;
    const float *x = lt_kutil_pack(v, LT_F32, nt, &owned);
    if (!x) return NULL;
    float *parts = lt_kutil_alloc((size_t)(n * lt_mxu_parts(p)) * sizeof(float), "matmul precision");
    if (parts) lt_mxu_split(p, x, n, parts, nt);
    free(owned);
    return parts;
}

lt_status lt_mxu_product(int p, const lt_view *a, const lt_view *b, const lt_shape *out_shape,
                         float *res, lt_mxu_pass_fn pass, void *arg, int nt)
{
    const unsigned char (*pairs)[2];
    int np = lt_mxu_passes(p, &pairs);
    if (np == 0)
        return lt_set_error(LT_ERR_INTERNAL, "matmul precision: level %d has no passes", p);
    if (nt < 1) nt = 1;
    int64_t na = kt_numel(&a->shape), nb = kt_numel(&b->shape), no = kt_numel(out_shape);
    float *pa = lt_mxu_split_view(p, a, nt);
    float *pb = pa ? lt_mxu_split_view(p, b, nt) : NULL;
    float *tmp = pb && np > 1 ? lt_kutil_alloc((size_t)no * sizeof(float), "matmul precision")
                              : NULL;
    lt_status st = pb && (np == 1 || tmp) ? LT_OK : LT_ERR_OOM;
    for (int k = 0; k < np && st == LT_OK; k++) {
        lt_view va = kt_contig_view(pa + pairs[k][0] * na, LT_F32, &a->shape);
        lt_view vb = kt_contig_view(pb + pairs[k][1] * nb, LT_F32, &b->shape);
        lt_view vo = kt_contig_view(k == 0 ? res : tmp, LT_F32, out_shape);
        st = pass(arg, &va, &vb, &vo);
        if (st == LT_OK && k > 0) accumulate(res, tmp, no, k == np - 1, nt);
    }
    free(pa);
    free(pb);
    free(tmp);
    return st;
}
