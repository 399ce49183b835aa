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
#include "par.h"

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

static inline float round_bf16(float x) { return lt_bf16_to_f32_inline(lt_bf16_from_f32(x)); }

/* elements [lo, hi) of lt_mxu_split */
static void split_range(int p, const float *x, int64_t n, float *parts, int64_t lo, int64_t hi)
{
    float *p0 = parts, *p1 = parts + n, *p2 = parts + 2 * n;
    if (p == LT_MATMUL_DEFAULT) {
        for (int64_t i = lo; i < hi; i++) p0[i] = round_bf16(x[i]);
    } else if (p == LT_MATMUL_HIGH) {
        for (int64_t i = lo; i < hi; i++) {
            float h = trunc_bf16(x[i]);
            p0[i] = h;
            p1[i] = round_bf16(x[i] - h);
        }
    } else if (p == LT_MATMUL_HIGHEST) {
        for (int64_t i = lo; i < hi; i++) {
            float h = trunc_bf16(x[i]);
            float r = x[i] - h;
            float mid = trunc_bf16(r);
            p0[i] = h;
            p1[i] = mid;
            p2[i] = round_bf16(r - mid);
        }
    }
}

/* Elementwise jobs over n values in chunks on the core's helpers (par.h;
 * an OpenMP region's join stalls on an oversubscribed machine). */
#define MXU_CHUNK 32768

typedef struct ew_job {
    int p, last;
    const float *x;
    float *dst;
    int64_t n;
} ew_job;

static void split_chunk(void *arg, int64_t c, int w)
{
    const ew_job *j = arg;
    (void)w;
    int64_t lo = c * MXU_CHUNK, hi = lo + MXU_CHUNK < j->n ? lo + MXU_CHUNK : j->n;
    split_range(j->p, j->x, j->n, j->dst, lo, hi);
}

static int64_t chunks(int64_t n, int *nt)
{
    int64_t nch = (n + MXU_CHUNK - 1) / MXU_CHUNK;
    if (*nt < 1 || nch < 2) *nt = 1;
    return nch;
}

void lt_mxu_split(int p, const float *x, int64_t n, float *parts, int nt,
                  const lt_kernel_ctx *ctx)
{
    int64_t nch = chunks(n, &nt);
    if (nt == 1) {
        split_range(p, x, n, parts, 0, n);
        return;
    }
    ew_job j = {p, 0, x, parts, n};
    lt_par_for(ctx, nt, nch, split_chunk, &j);
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

/* acc += pk (last: acc = nan0(acc) + pk) over [lo, hi) */
static void acc_range(float *acc, const float *pk, int last, int64_t lo, int64_t hi)
{
    if (last)
        for (int64_t i = lo; i < hi; i++) acc[i] = (isnan(acc[i]) ? 0.0f : acc[i]) + pk[i];
    else
        for (int64_t i = lo; i < hi; i++) acc[i] += pk[i];
}

static void acc_chunk(void *arg, int64_t c, int w)
{
    const ew_job *j = arg;
    (void)w;
    int64_t lo = c * MXU_CHUNK, hi = lo + MXU_CHUNK < j->n ? lo + MXU_CHUNK : j->n;
    acc_range(j->dst, j->x, j->last, lo, hi);
}

static void accumulate(float *acc, const float *pk, int64_t n, int last, int nt,
                       const lt_kernel_ctx *ctx)
{
    int64_t nch = chunks(n, &nt);
    if (nt == 1) {
        acc_range(acc, pk, last, 0, n);
        return;
    }
    ew_job j = {0, last, pk, acc, n};
    lt_par_for(ctx, nt, nch, acc_chunk, &j);
}

/* 1 when v's elements fill one dense block of memory from its first
 * element on, in some order of its dims (contiguous, or a transpose or
 * permutation of a contiguous tensor: a weight read as W^T). */
static int dense_block(const lt_view *v)
{
    int64_t st[LT_MAX_DIMS], sz[LT_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < v->shape.ndim; d++) {
        if (v->shape.dims[d] == 1) continue;
        if (v->strides[d] <= 0) return 0;
        st[n] = v->strides[d];
        sz[n++] = v->shape.dims[d];
    }
    for (int i = 1; i < n; i++)          /* insertion sort by stride */
        for (int k = i; k > 0 && st[k] < st[k - 1]; k--) {
            int64_t t = st[k]; st[k] = st[k - 1]; st[k - 1] = t;
            t = sz[k]; sz[k] = sz[k - 1]; sz[k - 1] = t;
        }
    int64_t want = 1;
    for (int i = 0; i < n; i++) {
        if (st[i] != want) return 0;
        want *= sz[i];
    }
    return 1;
}

float *lt_mxu_split_view(int p, const lt_view *v, int nt, const lt_kernel_ctx *ctx,
                         lt_view *part0)
{
    int64_t n = kt_numel(&v->shape);
    float *parts = lt_kutil_alloc((size_t)(n * lt_mxu_parts(p)) * sizeof(float), "matmul precision");
    if (!parts) return NULL;
    if (v->dtype == LT_F32 && dense_block(v)) {
        /* split the block in memory order: the parts keep v's layout */
        lt_mxu_split(p, (const float *)v->data + v->offset, n, parts, nt, ctx);
        *part0 = *v;
        part0->data = parts;
        part0->offset = 0;
        return parts;
    }
    void *owned = NULL;      /* packed on this thread: an OpenMP copy stalls when oversubscribed */
    const float *x = lt_kutil_pack(v, LT_F32, 1, &owned);
    if (!x) {
        free(parts);
        return NULL;
    }
    lt_mxu_split(p, x, n, parts, nt, ctx);
    free(owned);
    *part0 = kt_contig_view(parts, LT_F32, &v->shape);
    return parts;
}

lt_status lt_mxu_product(int p, const lt_view *a, const lt_view *b, const lt_shape *out_shape,
                         float *res, lt_mxu_pass_fn pass, void *arg, int nt,
                         const lt_kernel_ctx *ctx)
{
    const unsigned char (*pairs)[2];
    int np = lt_mxu_passes(p, &pairs);
    if (np == 0)
        return lt_set_error(LT_ERR_INTERNAL, "matmul precision: level %d has no passes", p);
    if (nt < 1) nt = 1;
    int64_t na = kt_numel(&a->shape), nb = kt_numel(&b->shape), no = kt_numel(out_shape);
    lt_view a0, b0;
    float *pa = lt_mxu_split_view(p, a, nt, ctx, &a0);
    float *pb = pa ? lt_mxu_split_view(p, b, nt, ctx, &b0) : NULL;
    float *tmp = pb && np > 1 ? lt_kutil_alloc((size_t)no * sizeof(float), "matmul precision")
                              : NULL;
    lt_status st = pb && (np == 1 || tmp) ? LT_OK : LT_ERR_OOM;
    for (int k = 0; k < np && st == LT_OK; k++) {
        lt_view va = a0, vb = b0;
        va.data = pa + pairs[k][0] * na;
        vb.data = pb + pairs[k][1] * nb;
        lt_view vo = kt_contig_view(k == 0 ? res : tmp, LT_F32, out_shape);
        st = pass(arg, &va, &vb, &vo);
        if (st == LT_OK && k > 0) accumulate(res, tmp, no, k == np - 1, nt, ctx);
    }
    free(pa);
    free(pb);
    free(tmp);
    return st;
}
