/*
 * lazy/kernels/conv3d.c — conv3d forward and backward (input, weight) by
 * 3-D im2col / col2im + GEMM (OpenBLAS through lt_kutil_gemm_par), PyTorch
 * semantics (no bias: the caller adds it). Transposed 3-D convolutions run
 * on the same three ops (see backend/ops_nn.cpp).
 *
 * One GEMM per (sample, group): col is [C/g*kd*kh*kw, od*oh*ow]. The layout
 * loops (im2col, col2im) run on OpenMP threads over channels, the GEMM split
 * over the core's helper threads (lt_kutil_gemm_par). Compute type f32 for
 * f32/bf16/f16 storage (converted in, rounded to nearest even on store),
 * f64 for f64.
 */
#include "kutil.h"
#include "mxu.h"

typedef struct geom3 {
    int64_t N, C, sp[3];        /* input [N, C, D, H, W] */
    int64_t O, k[3];            /* weight [O, C/g, kd, kh, kw] */
    int64_t o[3];               /* output spatial */
    int64_t s[3], p[3], d[3], g;
    int64_t Cg, Og, kk, ckk, L, vol;   /* kk = kd*kh*kw, L = od*oh*ow, vol = D*H*W */
} geom3;


/* im2col of one channel x ([D,H,W] contiguous) into its kk rows of col (row
 * r at col + r*L); col2im accumulates the rows back into dx. */
#define CONV3_IM2COL(T, SUF)                                                              \
static void im2col_##SUF(const geom3 *q, const T *x, T *col)                              \
{                                                                                         \
    int64_t H = q->sp[1], W = q->sp[2], oh = q->o[1], ow = q->o[2];                       \
    for (int64_t a = 0; a < q->k[0]; a++)                                                 \
    for (int64_t b = 0; b < q->k[1]; b++)                                                 \
    for (int64_t c = 0; c < q->k[2]; c++) {                                               \
        T *row = col + ((a * q->k[1] + b) * q->k[2] + c) * q->L;                          \
        int64_t x0, x1;                                                                   \
        kt_conv_valid_range(W, ow, q->s[2], q->p[2], c * q->d[2], &x0, &x1);                      \
        for (int64_t oz = 0; oz < q->o[0]; oz++) {                                        \
            int64_t iz = oz * q->s[0] - q->p[0] + a * q->d[0];                            \
            for (int64_t oy = 0; oy < oh; oy++) {                                         \
                T *r = row + (oz * oh + oy) * ow;                                         \
                int64_t iy = oy * q->s[1] - q->p[1] + b * q->d[1];                        \
                if (iz < 0 || iz >= q->sp[0] || iy < 0 || iy >= H) {                      \
                    memset(r, 0, (size_t)ow * sizeof(T));                                 \
                    continue;                                                             \
                }                                                                         \
                const T *xr = x + (iz * H + iy) * W - q->p[2] + c * q->d[2];              \
                for (int64_t ox = 0; ox < x0; ox++) r[ox] = 0;                            \
                for (int64_t ox = x0; ox < x1; ox++) r[ox] = xr[ox * q->s[2]];            \
                for (int64_t ox = x1; ox < ow; ox++) r[ox] = 0;                           \
            }                                                                             \
        }                                                                                 \
    }                                                                                     \
}                                                                                         \
static void col2im_##SUF(const geom3 *q, const T *col, T *dx)                             \
{                                                                                         \
    int64_t H = q->sp[1], W = q->sp[2], oh = q->o[1], ow = q->o[2];                       \
    for (int64_t a = 0; a < q->k[0]; a++)                                                 \
    for (int64_t b = 0; b < q->k[1]; b++)                                                 \
    for (int64_t c = 0; c < q->k[2]; c++) {                                               \
        const T *row = col + ((a * q->k[1] + b) * q->k[2] + c) * q->L;                    \
        int64_t x0, x1;                                                                   \
        kt_conv_valid_range(W, ow, q->s[2], q->p[2], c * q->d[2], &x0, &x1);                      \
        for (int64_t oz = 0; oz < q->o[0]; oz++) {                                        \
            int64_t iz = oz * q->s[0] - q->p[0] + a * q->d[0];                            \
            if (iz < 0 || iz >= q->sp[0]) continue;                                       \
            for (int64_t oy = 0; oy < oh; oy++) {                                         \
                int64_t iy = oy * q->s[1] - q->p[1] + b * q->d[1];                        \
                if (iy < 0 || iy >= H) continue;                                          \
                const T *r = row + (oz * oh + oy) * ow;                                   \
                T *xr = dx + (iz * H + iy) * W - q->p[2] + c * q->d[2];                   \
                for (int64_t ox = x0; ox < x1; ox++) xr[ox * q->s[2]] += r[ox];           \
            }                                                                             \
        }                                                                                 \
    }                                                                                     \
}
CONV3_IM2COL(float, f)
CONV3_IM2COL(double, d)

/* col [ckk, L] of sample n, group g of x ([N,C,D,H,W] contiguous). */
static void im2col_group(lt_dtype cdt, const geom3 *q, const void *x, int64_t n, int64_t g,
                         void *col, int nt)
{
    size_t es = kt_dtsize(cdt);
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && q->Cg > 1)
    for (int64_t c = 0; c < q->Cg; c++) {
        const char *xc = (const char *)x + ((n * q->C + g * q->Cg + c) * q->vol) * es;
        char *cc = (char *)col + (c * q->kk * q->L) * es;
        if (cdt == LT_F64) im2col_d(q, (const double *)xc, (double *)cc);
        else im2col_f(q, (const float *)xc, (float *)cc);
    }
}

/* dx of sample n, group g = col2im(col), overwriting. */
static void col2im_group(lt_dtype cdt, const geom3 *q, const void *col, int64_t n, int64_t g,
                         void *dx, int nt)
{
    size_t es = kt_dtsize(cdt);
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && q->Cg > 1)
    for (int64_t c = 0; c < q->Cg; c++) {
        char *xc = (char *)dx + ((n * q->C + g * q->Cg + c) * q->vol) * es;
        const char *cc = (const char *)col + (c * q->kk * q->L) * es;
        memset(xc, 0, (size_t)q->vol * es);
        if (cdt == LT_F64) col2im_d(q, (const double *)cc, (double *)xc);
        else col2im_f(q, (const float *)cc, (float *)xc);
    }
}

/* Reads attributes and operand shapes into q (the shape rule has checked
 * them; this re-checks what the kernel's memory accesses rely on). */
static lt_status geom3_init(lt_op op, const lt_attrs *at, const lt_view *in,
                            const lt_view *out, geom3 *q)
{
    if (at->n < 10 + (op != LT_OP_conv3d ? 3 : 0))
        return lt_set_error(LT_ERR_ARG, "%s: too few attributes (%d)", lt_op_name(op), at->n);
    for (int j = 0; j < 3; j++) {
        q->s[j] = at->i[j];
        q->p[j] = at->i[3 + j];
        q->d[j] = at->i[6 + j];
        if (q->s[j] <= 0 || q->d[j] <= 0 || q->p[j] < 0)
            return lt_set_error(LT_ERR_ARG, "%s: bad stride / padding / dilation", lt_op_name(op));
    }
    q->g = at->i[9] > 0 ? at->i[9] : 1;
    for (int k = 0; k < 2; k++)
        if (in[k].shape.ndim != 5)
            return lt_set_error(LT_ERR_SHAPE, "%s: expected 5-D operands, got %d-D",
                                lt_op_name(op), in[k].shape.ndim);
    const lt_shape *x = op == LT_OP_conv3d ? &in[0].shape
                      : op == LT_OP_conv3d_backward_weight ? &in[1].shape : NULL;
    const lt_shape *w = op == LT_OP_conv3d_backward_weight ? NULL : &in[1].shape;
    const lt_shape *y = op == LT_OP_conv3d ? &out->shape : &in[0].shape;
    q->N = y->dims[0];
    q->O = y->dims[1];
    for (int j = 0; j < 3; j++) q->o[j] = y->dims[2 + j];
    if (x) {
        q->C = x->dims[1];
        for (int j = 0; j < 3; j++) q->sp[j] = x->dims[2 + j];
    } else {
        for (int j = 0; j < 3; j++) q->sp[j] = at->i[10 + j];
    }
    if (w) {
        if (!x) q->C = w->dims[1] * q->g;
        for (int j = 0; j < 3; j++) q->k[j] = w->dims[2 + j];
    } else {
        for (int j = 0; j < 3; j++) q->k[j] = at->i[10 + j];
    }
    if (q->C % q->g || q->O % q->g)
        return lt_set_error(LT_ERR_SHAPE, "%s: channels %lld/%lld not divisible by groups %lld",
                            lt_op_name(op), (long long)q->C, (long long)q->O, (long long)q->g);
    q->Cg = q->C / q->g;
    q->Og = q->O / q->g;
    q->kk = q->k[0] * q->k[1] * q->k[2];
    q->ckk = q->Cg * q->kk;
    q->L = q->o[0] * q->o[1] * q->o[2];
    q->vol = q->sp[0] * q->sp[1] * q->sp[2];
    return LT_OK;
}

/* Runs op over the batch: a, b are its two packed inputs, out the packed
 * output (compute dtype cdt). */
static lt_status conv3_run(const lt_kernel_ctx *ctx, lt_op op, const geom3 *q, lt_dtype cdt,
                           const void *a, const void *b, void *out, int nt)
{
    size_t es = kt_dtsize(cdt);
    void *col = lt_kutil_alloc((size_t)(q->ckk * q->L) * es, lt_op_name(op));
    if (!col) return LT_ERR_OOM;
    if (op == LT_OP_conv3d_backward_weight) memset(out, 0, (size_t)(q->O * q->ckk) * es);
    for (int64_t n = 0; n < q->N; n++)
        for (int64_t g = 0; g < q->g; g++) {
            size_t yoff = (size_t)((n * q->O + g * q->Og) * q->L) * es;    /* y / grad group */
            size_t woff = (size_t)(g * q->Og * q->ckk) * es;
            if (op == LT_OP_conv3d) {
                im2col_group(cdt, q, a, n, g, col, nt);
                lt_kutil_gemm_par(ctx, nt, cdt, 0, 0, q->Og, q->L, q->ckk, (const char *)b + woff, q->ckk,
                              col, q->L, 0.0, (char *)out + yoff, q->L);
            } else if (op == LT_OP_conv3d_backward_input) {
                lt_kutil_gemm_par(ctx, nt, cdt, 1, 0, q->ckk, q->L, q->Og, (const char *)b + woff, q->ckk,
                              (const char *)a + yoff, q->L, 0.0, col, q->L);
                col2im_group(cdt, q, col, n, g, out, nt);
            } else {
                im2col_group(cdt, q, b, n, g, col, nt);
                lt_kutil_gemm_par(ctx, nt, cdt, 0, 1, q->Og, q->ckk, q->L, (const char *)a + yoff, q->L,
                              col, q->L, 1.0, (char *)out + woff, q->ckk);
            }
        }
    free(col);
    return LT_OK;
}

/* One pass of a TPU precision level (mxu.h): the convolution of two parts. */
typedef struct conv3_pass_arg {
    lt_op op;
    const geom3 *q;
    int nt;
    const lt_kernel_ctx *ctx;
} conv3_pass_arg;

static lt_status conv3_pass(void *arg, const lt_view *a, const lt_view *b, const lt_view *out)
{
    const conv3_pass_arg *j = arg;
    void *o0 = NULL, *o1 = NULL;      /* parts keep a permuted input's layout */
    const void *p0 = lt_kutil_pack(a, LT_F32, j->nt, &o0);
    const void *p1 = p0 ? lt_kutil_pack(b, LT_F32, j->nt, &o1) : NULL;
    lt_status st = p1 ? conv3_run(j->ctx, j->op, j->q, LT_F32, p0, p1, out->data, j->nt)
                      : LT_ERR_OOM;
    free(o0);
    free(o1);
    return st;
}

/* conv3d / conv3d_backward_input / conv3d_backward_weight (see ops.def) into
 * contiguous out. Float dtypes only (LT_ERR_DTYPE otherwise); LT_ERR_OOM when
 * scratch cannot be allocated. */
lt_status lt_kernel_conv3d(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                           const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    if (n_in != 2 || (op != LT_OP_conv3d && op != LT_OP_conv3d_backward_input &&
                      op != LT_OP_conv3d_backward_weight))
        return lt_set_error(LT_ERR_INTERNAL, "conv3d kernel: bad op %d / %d inputs", (int)op, n_in);
    if (!kt_is_float(out->dtype) || !kt_is_float(in[0].dtype) || !kt_is_float(in[1].dtype))
        return lt_kutil_dtype_error(op, in, n_in, out);
    if (out->shape.ndim != 5)
        return lt_set_error(LT_ERR_SHAPE, "%s: expected a 5-D output", lt_op_name(op));
    geom3 q = {0};
    lt_status st = geom3_init(op, attrs, in, out, &q);
    if (st != LT_OK) return st;
    lt_dtype cdt = kt_compute_dt(out->dtype);
    size_t es = kt_dtsize(cdt);
    int64_t on = kt_numel(&out->shape);
    if (on == 0) return LT_OK;
    void *y = kt_ptr(out), *yown = NULL;
    if (out->dtype != cdt) y = yown = lt_kutil_alloc((size_t)on * es, lt_op_name(op));
    if (!y) return LT_ERR_OOM;
    if (q.N == 0 || q.L == 0 || q.ckk == 0 || q.Og == 0) {   /* nothing reaches the output */
        memset(y, 0, (size_t)on * es);
    } else if (lt_mxu_applies(ctx, cdt, in[0].dtype, in[1].dtype)) {
        conv3_pass_arg j = {op, &q, nt, ctx};      /* in bf16 passes (mxu.h) */
        st = lt_mxu_product(ctx->mm_precision, &in[0], &in[1], &out->shape, y, conv3_pass, &j, nt, ctx);
    } else {
        void *o0 = NULL, *o1 = NULL;
        const void *p0 = lt_kutil_pack(&in[0], cdt, nt, &o0);
        const void *p1 = p0 ? lt_kutil_pack(&in[1], cdt, nt, &o1) : NULL;
        st = p0 && p1 ? conv3_run(ctx, op, &q, cdt, p0, p1, y, nt) : LT_ERR_OOM;
        free(o0);
        free(o1);
    }
    if (st == LT_OK && yown) lt_kutil_unpack(yown, cdt, out, nt);
    free(yown);
    return st;
}
