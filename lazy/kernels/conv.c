/*
 * lazy/kernels/conv.c — conv2d forward and backward (input, weight) by
 * im2col / col2im + GEMM (OpenBLAS), PyTorch semantics (no bias: the caller
 * adds it).
 *
 * The batch is cut into chunks of samples whose im2col matrix
 * [C/g*kh*kw, chunk*oh*ow] is ~2 MB, so each chunk is one large GEMM per
 * group (1.3-2x faster than per-sample GEMMs for batch-64 MNIST-size convs).
 * Threading (BLAS single-threaded, work on the core's helper threads via
 * lt_par_for): when each thread's share of the batch still makes a GEMM
 * with >= CONV_SPLIT_MIN_COLS im2col columns, chunks of samples run in
 * parallel ("batch split"); otherwise (small batch or small feature maps)
 * chunks run in order and each GEMM is split into blocks of its output,
 * the layout loops into items ("GEMM split").
 * Compute type is f32 for f32/bf16 storage (bf16 inputs converted, f32
 * accumulation, rounded to nearest even on store) and f64 for f64.
 */
#include <stdatomic.h>
#include "kutil.h"
#include "par.h"
#include "conv_wino.h"
#include "mxu.h"

typedef struct conv_geom {
    int64_t N, C, H, W;        /* input */
    int64_t O, kh, kw;         /* weight [O, C/g, kh, kw] */
    int64_t oh, ow;            /* output spatial */
    int64_t sh, sw, ph, pw, dh, dw, g;
    int64_t Cg, Og, ckk, ohw, hw;
} conv_geom;


/* im2col of one input channel x ([H,W] contiguous) into its kh*kw rows of
 * col (row r at col + r*ld, oh*ow columns); col2im accumulates them back
 * (and may clear col's entries of padding positions: col is scratch).
 * When the output rows are as wide as the input's and the column stride is
 * 1 (stride-1 "same" convolutions), the valid part of a kernel tap's row
 * is one shifted contiguous span of x: one copy / one add loop over it, the
 * few columns that wrap around to the neighbouring input row cleared. */
#define CONV_IM2COL(T, SUF)                                                              \
static void im2col_##SUF(const conv_geom *q, const T *x, T *col, int64_t ld)             \
{                                                                                        \
    int flat = q->sw == 1 && q->ow == q->W;                                              \
    for (int64_t i = 0; i < q->kh; i++) {                                                \
        int64_t y0, y1;                                                                  \
        kt_conv_valid_range(q->H, q->oh, q->sh, q->ph, i * q->dh, &y0, &y1);                     \
        for (int64_t j = 0; j < q->kw; j++) {                                            \
            T *row = col + (i * q->kw + j) * ld;                                         \
            int64_t x0, x1;                                                              \
            kt_conv_valid_range(q->W, q->ow, q->sw, q->pw, j * q->dw, &x0, &x1);                 \
            if (flat && q->sh == 1 && y0 < y1 && x0 < x1) {                              \
                int64_t a = y0 * q->ow + x0, b = (y1 - 1) * q->ow + x1;                  \
                const T *src = x + (y0 - q->ph + i * q->dh) * q->W - q->pw + j * q->dw   \
                               - y0 * q->ow;                                             \
                if (a) memset(row, 0, (size_t)a * sizeof(T));                            \
                memcpy(row + a, src + a, (size_t)(b - a) * sizeof(T));                   \
                if (b < q->ohw) memset(row + b, 0, (size_t)(q->ohw - b) * sizeof(T));    \
                for (int64_t oy = y0; oy < y1; oy++) {                                   \
                    T *r = row + oy * q->ow;                                             \
                    for (int64_t ox = 0; ox < x0; ox++) r[ox] = 0;                       \
                    for (int64_t ox = x1; ox < q->ow; ox++) r[ox] = 0;                   \
                }                                                                        \
                continue;                                                                \
            }                                                                            \
            for (int64_t oy = 0; oy < q->oh; oy++) {                                     \
                T *r = row + oy * q->ow;                                                 \
                int64_t iy = oy * q->sh - q->ph + i * q->dh;                             \
                if (iy < 0 || iy >= q->H) {                                              \
                    memset(r, 0, (size_t)q->ow * sizeof(T));                             \
                    continue;                                                            \
                }                                                                        \
                const T *xr = x + iy * q->W - q->pw + j * q->dw;                         \
                for (int64_t ox = 0; ox < x0; ox++) r[ox] = 0;                           \
                if (q->sw == 1) /* short rows: a plain loop beats memcpy calls */       \
                    for (int64_t ox = x0; ox < x1; ox++) r[ox] = xr[ox];                 \
                else                                                                     \
                    for (int64_t ox = x0; ox < x1; ox++) r[ox] = xr[ox * q->sw];         \
                for (int64_t ox = x1; ox < q->ow; ox++) r[ox] = 0;                       \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
}                                                                                        \
static void col2im_##SUF(const conv_geom *q, T *col, int64_t ld, T *dx)                  \
{                                                                                        \
    int flat = q->sw == 1 && q->ow == q->W;                                              \
    for (int64_t i = 0; i < q->kh; i++) {                                                \
        int64_t y0, y1;                                                                  \
        kt_conv_valid_range(q->H, q->oh, q->sh, q->ph, i * q->dh, &y0, &y1);                     \
        for (int64_t j = 0; j < q->kw; j++) {                                            \
            T *row = col + (i * q->kw + j) * ld;                                         \
            int64_t x0, x1;                                                              \
            kt_conv_valid_range(q->W, q->ow, q->sw, q->pw, j * q->dw, &x0, &x1);                 \
            if (flat && q->sh == 1 && y0 < y1 && x0 < x1) {                              \
                int64_t a = y0 * q->ow + x0, b = (y1 - 1) * q->ow + x1;                  \
                T *dst = dx + (y0 - q->ph + i * q->dh) * q->W - q->pw + j * q->dw        \
                         - y0 * q->ow;                                                   \
                for (int64_t oy = y0; oy < y1; oy++) {                                   \
                    T *r = row + oy * q->ow;                                             \
                    for (int64_t ox = 0; ox < x0; ox++) r[ox] = 0;                       \
                    for (int64_t ox = x1; ox < q->ow; ox++) r[ox] = 0;                   \
                }                                                                        \
                for (int64_t k = a; k < b; k++) dst[k] += row[k];                        \
                continue;                                                                \
            }                                                                            \
            for (int64_t oy = 0; oy < q->oh; oy++) {                                     \
                int64_t iy = oy * q->sh - q->ph + i * q->dh;                             \
                if (iy < 0 || iy >= q->H) continue;                                      \
                const T *r = row + oy * q->ow;                                           \
                T *xr = dx + iy * q->W - q->pw + j * q->dw;                              \
                for (int64_t ox = x0; ox < x1; ox++) xr[ox * q->sw] += r[ox];            \
            }                                                                            \
        }                                                                                \
    }                                                                                    \
}
CONV_IM2COL(float, f)
CONV_IM2COL(double, d)

/* The layout loops between tensors and GEMM matrices, for samples
 * n0..n0+nb of group g, split over items (sample, channel) claimed on the
 * core's helper threads (lt_par_for; nt = 1 runs inline):
 *   LAY_IM2COL   col[ckk, nb*ohw] (ld nb*ohw) from x [N,C,H,W]
 *   LAY_COL2IM   dx of those samples = col2im(col), overwriting
 *   LAY_GATHER   m[Og, nb*ohw] from the [Og, ohw] blocks of t [N,O,ohw]
 *   LAY_SCATTER  the reverse: t's blocks from m. */
enum { LAY_IM2COL, LAY_COL2IM, LAY_GATHER, LAY_SCATTER };

typedef struct lay_job {
    int kind;
    lt_dtype cdt;
    const conv_geom *q;
    void *t, *m;                /* tensor (x, dx, y or gy) and matrix */
    int64_t n0, nb, g, items, per;
} lay_job;

static void lay_item(const lay_job *j, int64_t t)
{
    const conv_geom *q = j->q;
    size_t es = kt_dtsize(j->cdt);
    int64_t ld = j->nb * q->ohw, kk = q->kh * q->kw;
    if (j->kind == LAY_IM2COL || j->kind == LAY_COL2IM) {
        int64_t s = t / q->Cg, c = t % q->Cg;
        char *xc = (char *)j->t + (((j->n0 + s) * q->C + j->g * q->Cg + c) * q->hw) * es;
        char *cc = (char *)j->m + ((c * kk) * ld + s * q->ohw) * es;
        if (j->kind == LAY_IM2COL) {
            if (j->cdt == LT_F64) im2col_d(q, (const double *)xc, (double *)cc, ld);
            else im2col_f(q, (const float *)xc, (float *)cc, ld);
        } else {
            memset(xc, 0, (size_t)q->hw * es);
            if (j->cdt == LT_F64) col2im_d(q, (double *)cc, ld, (double *)xc);
            else col2im_f(q, (float *)cc, ld, (float *)xc);
        }
        return;
    }
    int64_t s = t / q->Og, o = t % q->Og;
    char *tp = (char *)j->t + (((j->n0 + s) * q->O + j->g * q->Og + o) * q->ohw) * es;
    char *mp = (char *)j->m + (o * ld + s * q->ohw) * es;
    if (j->kind == LAY_GATHER) memcpy(mp, tp, (size_t)q->ohw * es);
    else memcpy(tp, mp, (size_t)q->ohw * es);
}

static void lay_chunk(void *arg, int64_t c, int w)
{
    (void)w;
    const lay_job *j = arg;
    int64_t t1 = (c + 1) * j->per < j->items ? (c + 1) * j->per : j->items;
    for (int64_t t = c * j->per; t < t1; t++) lay_item(j, t);
}

static void lay_run(int kind, lt_dtype cdt, const conv_geom *q, const void *t, void *m,
                    int64_t n0, int64_t nb, int64_t g, int nt, const lt_kernel_ctx *ctx)
{
    int rows = kind == LAY_GATHER || kind == LAY_SCATTER;
    int64_t items = nb * (rows ? q->Og : q->Cg);
    int64_t elems = rows ? items * q->ohw : items * q->kh * q->kw * q->ohw;
    lay_job j = {kind, cdt, q, (void *)t, m, n0, nb, g, items, 1};
    if (nt > 1 && elems >= 32768) {
        int64_t nch = (int64_t)nt * 4 < items ? (int64_t)nt * 4 : items;
        j.per = (items + nch - 1) / nch;
    } else {
        nt = 1;
        j.per = items;
    }
    lt_par_for(ctx, nt, (items + j.per - 1) / j.per, lay_chunk, &j);
}

static lt_status conv_geom_init(lt_op op, const lt_attrs *at, const lt_view *in,
                                const lt_view *out, conv_geom *q)
{
    const lt_view *x = NULL, *w = NULL, *gr = NULL;
    int64_t a[9] = {1, 1, 0, 0, 1, 1, 1, 0, 0};
    for (int k = 0; k < 9 && k < at->n; k++) a[k] = at->i[k];
    q->sh = a[0] > 0 ? a[0] : 1; q->sw = a[1] > 0 ? a[1] : 1;
    q->ph = a[2]; q->pw = a[3];
    q->dh = a[4] > 0 ? a[4] : 1; q->dw = a[5] > 0 ? a[5] : 1;
    q->g = a[6] > 0 ? a[6] : 1;
    if (op == LT_OP_conv2d) {
        x = &in[0]; w = &in[1];
    } else if (op == LT_OP_conv2d_backward_input) {
        gr = &in[0]; w = &in[1];
    } else {
        gr = &in[0]; x = &in[1];
    }
    for (int k = 0; k < 2; k++)
        if (in[k].shape.ndim != 4)
            return lt_set_error(LT_ERR_SHAPE, "conv2d: expected 4-D operands, got %d-D", in[k].shape.ndim);
    if (x) {
        q->N = x->shape.dims[0]; q->C = x->shape.dims[1];
        q->H = x->shape.dims[2]; q->W = x->shape.dims[3];
    }
    if (w) {
        q->O = w->shape.dims[0]; q->kh = w->shape.dims[2]; q->kw = w->shape.dims[3];
        if (!x) q->C = w->shape.dims[1] * q->g;
    }
    if (op == LT_OP_conv2d) {
        q->oh = out->shape.dims[2]; q->ow = out->shape.dims[3];
    } else {
        q->oh = gr->shape.dims[2]; q->ow = gr->shape.dims[3];
        q->N = gr->shape.dims[0]; q->O = gr->shape.dims[1];
        if (op == LT_OP_conv2d_backward_input) { q->H = a[7]; q->W = a[8]; }
        else { q->kh = a[7]; q->kw = a[8]; }
    }
    if (q->C % q->g || q->O % q->g)
        return lt_set_error(LT_ERR_SHAPE, "conv2d: channels %lld/%lld not divisible by groups %lld",
                            (long long)q->C, (long long)q->O, (long long)q->g);
    q->Cg = q->C / q->g; q->Og = q->O / q->g;
    q->ckk = q->Cg * q->kh * q->kw;
    q->ohw = q->oh * q->ow;
    q->hw = q->H * q->W;
    return LT_OK;
}

/* Samples per GEMM: chunks whose col matrix [ckk, nb*ohw] stays around
 * CONV_CHUNK_BYTES (one large GEMM per group instead of many small ones). */
#ifndef CONV_CHUNK_BYTES
#define CONV_CHUNK_BYTES (2u << 20)
#endif

static int64_t conv_chunk(const conv_geom *q, size_t es)
{
    int64_t per = (q->ckk + q->Og) * q->ohw * (int64_t)es;
    int64_t nb = per > 0 ? (int64_t)CONV_CHUNK_BYTES / per : q->N;
    if (nb < 1) nb = 1;
    if (nb > q->N) nb = q->N;
    return nb;
}

/* 1 when im2col is the identity (1x1 kernel, stride 1, no padding). */
static int conv_is_pointwise(const conv_geom *q)
{
    return q->kh == 1 && q->kw == 1 && q->sh == 1 && q->sw == 1 && q->ph == 0 && q->pw == 0;
}

typedef struct conv_scratch {
    void *col, *mat;
} conv_scratch;

/* Allocates a thread's scratch; 0 on failure (no error set: may run on an
 * OpenMP worker, the caller reports it). */
static int scratch_init(const conv_geom *q, size_t es, int64_t nb, conv_scratch *s)
{
    s->col = malloc((size_t)(q->ckk * nb * q->ohw) * es + 1);
    s->mat = malloc((size_t)(q->Og * nb * q->ohw) * es + 1);
    if (s->col && s->mat) return 1;
    free(s->col); free(s->mat);
    s->col = s->mat = NULL;
    return 0;
}

/* Samples [n0, n0+b) of op: a/bb are the op's two (packed) inputs, out its
 * output; conv2d_backward_weight accumulates into acc ([O, ckk]). nt is the
 * thread budget inside (layout loops and GEMM blocks on the core's helpers;
 * 1 when chunks already run in parallel). */
static void conv_chunk_run(lt_op op, const conv_geom *q, lt_dtype cdt, const void *a,
                           const void *bb, void *out, void *acc, int64_t n0, int64_t b,
                           const conv_scratch *sc, int nt, const lt_kernel_ctx *ctx)
{
    size_t es = kt_dtsize(cdt);
    int64_t L = b * q->ohw;
    int pw = conv_is_pointwise(q);
    for (int64_t g = 0; g < q->g; g++) {
        size_t xoff = (size_t)((n0 * q->C + g * q->Cg) * q->hw) * es;   /* x / dx group */
        size_t yoff = (size_t)((n0 * q->O + g * q->Og) * q->ohw) * es;  /* y / gy group */
        size_t woff = (size_t)(g * q->Og * q->ckk) * es;
        if (op == LT_OP_conv2d) {
            const void *bm = sc->col;
            if (b == 1 && pw) bm = (const char *)a + xoff;
            else lay_run(LAY_IM2COL, cdt, q, a, sc->col, n0, b, g, nt, ctx);
            void *dst = b == 1 ? (char *)out + yoff : sc->mat;
            lt_kutil_gemm_par(ctx, nt, cdt, 0, 0, q->Og, L, q->ckk, (const char *)bb + woff, q->ckk,
                              bm, L, 0.0, dst, L);
            if (b > 1) lay_run(LAY_SCATTER, cdt, q, out, sc->mat, n0, b, g, nt, ctx);
        } else if (op == LT_OP_conv2d_backward_input) {
            const void *gm = sc->mat;
            if (b == 1) gm = (const char *)a + yoff;
            else lay_run(LAY_GATHER, cdt, q, a, sc->mat, n0, b, g, nt, ctx);
            if (b == 1 && pw) {
                lt_kutil_gemm_par(ctx, nt, cdt, 1, 0, q->ckk, L, q->Og, (const char *)bb + woff,
                                  q->ckk, gm, L, 0.0, (char *)out + xoff, L);
            } else {
                lt_kutil_gemm_par(ctx, nt, cdt, 1, 0, q->ckk, L, q->Og, (const char *)bb + woff,
                                  q->ckk, gm, L, 0.0, sc->col, L);
                lay_run(LAY_COL2IM, cdt, q, out, sc->col, n0, b, g, nt, ctx);
            }
        } else {
            const void *gm = sc->mat, *bm = sc->col;
            if (b == 1) gm = (const char *)a + yoff;
            else lay_run(LAY_GATHER, cdt, q, a, sc->mat, n0, b, g, nt, ctx);
            if (b == 1 && pw) bm = (const char *)bb + xoff;
            else lay_run(LAY_IM2COL, cdt, q, bb, sc->col, n0, b, g, nt, ctx);
            lt_kutil_gemm_par(ctx, nt, cdt, 0, 1, q->Og, q->ckk, L, gm, L, bm, L, 1.0,
                              (char *)acc + woff, q->ckk);
        }
    }
}

/* One conv_run: chunks of nb samples claimed by lt_par_for workers. */
typedef struct conv_job {
    lt_op op;
    const conv_geom *q;
    lt_dtype cdt;
    const void *a, *bb;
    void *out;
    int64_t nb;
    char *partial;             /* backward weight, parallel chunks: chunk c >= 1's sums */
    conv_scratch *sc;          /* per worker, allocated on its first chunk */
    atomic_int failed;
    int inner_nt;              /* thread budget inside a chunk */
    const lt_kernel_ctx *ctx;
} conv_job;

static void conv_job_chunk(void *arg, int64_t c, int w)
{
    conv_job *j = arg;
    const conv_geom *q = j->q;
    size_t es = kt_dtsize(j->cdt);
    conv_scratch *sc = &j->sc[w];
    if (!sc->col && !scratch_init(q, es, j->nb, sc)) {
        atomic_store(&j->failed, 1);
        return;
    }
    int64_t n0 = c * j->nb, b = q->N - n0 < j->nb ? q->N - n0 : j->nb;
    void *acc = NULL;
    if (j->op == LT_OP_conv2d_backward_weight)
        acc = c == 0 || !j->partial ? j->out : j->partial + (size_t)((c - 1) * q->O * q->ckk) * es;
    conv_chunk_run(j->op, q, j->cdt, j->a, j->bb, j->out, acc, n0, b, sc, j->inner_nt, j->ctx);
}

/* Batch split vs GEMM split: chunks of samples run in parallel only when
 * each chunk's GEMM still has >= CONV_SPLIT_MIN_COLS columns of im2col
 * (b*oh*ow); below that (the 8x8..2x2 layers of a ResNet at small batch)
 * a chunk's GEMM is dominated by packing the whole weight matrix and, for
 * the weight gradient, by writing a full [O, C*kh*kw] partial each, so the
 * batch runs in large chunks in order and each GEMM is split into blocks
 * of its output over the threads instead. */
#ifndef CONV_SPLIT_MIN_COLS
#define CONV_SPLIT_MIN_COLS 512
#endif

/* Runs op over the batch. Batch split (see CONV_SPLIT_MIN_COLS): chunks
 * (about two per thread) are claimed by the core's helper threads
 * (lt_par_for: a helper that wakes late leaves its chunks to the others
 * instead of holding up a join), each chunk single-threaded; the weight
 * gradient's per-chunk partials are summed in chunk order (the same result
 * whoever ran them). GEMM split: chunks in order, the layout loops and
 * GEMM blocks on the helpers (the weight gradient accumulates in place).
 * BLAS is single-threaded throughout. */
static lt_status conv_run(lt_op op, const conv_geom *q, lt_dtype cdt, const void *a,
                          const void *bb, void *out, int nt, const lt_kernel_ctx *ctx)
{
    size_t es = kt_dtsize(cdt);
    int64_t nb = conv_chunk(q, es);
    double flops = 2.0 * (double)q->N * (double)q->O * (double)q->ohw * (double)q->ckk;
    int64_t parts = (int64_t)nt * 2 < q->N ? (int64_t)nt * 2 : q->N;
    int64_t per = parts > 0 ? (q->N + parts - 1) / parts : 1;
    int par = nt > 1 && q->N >= nt && flops >= 1e6 &&   /* tiny convs: fork/join costs more */
              per * q->ohw >= CONV_SPLIT_MIN_COLS;
    if (par && nb > per) nb = per;
    int64_t nchunks = nb > 0 ? (q->N + nb - 1) / nb : 0;
    int nth = par ? nt : 1;
    int bw = op == LT_OP_conv2d_backward_weight;
    int64_t wn = q->O * q->ckk;
    conv_job j = {op, q, cdt, a, bb, out, nb, NULL, NULL, 0, par ? 1 : nt, ctx};
    if (bw) {
        memset(out, 0, (size_t)wn * es);
        if (par && nchunks > 1) {
            j.partial = lt_kutil_alloc((size_t)((nchunks - 1) * wn) * es, "conv2d_backward_weight");
            if (!j.partial) return LT_ERR_OOM;
            memset(j.partial, 0, (size_t)((nchunks - 1) * wn) * es);
        }
    }
    j.sc = calloc((size_t)nth, sizeof *j.sc);
    if (!j.sc) {
        free(j.partial);
        return lt_set_error(LT_ERR_OOM, "conv2d: out of host memory");
    }
    lt_par_for(ctx, nth, nchunks, conv_job_chunk, &j);
    for (int64_t c = 1; j.partial && c < nchunks; c++) {
        const char *p = j.partial + (size_t)((c - 1) * wn) * es;
        if (cdt == LT_F64)
            for (int64_t i = 0; i < wn; i++) ((double *)out)[i] += ((const double *)p)[i];
        else
            for (int64_t i = 0; i < wn; i++) ((float *)out)[i] += ((const float *)p)[i];
    }
    for (int w = 0; w < nth; w++) {
        free(j.sc[w].col);
        free(j.sc[w].mat);
    }
    free(j.sc);
    free(j.partial);
    if (atomic_load(&j.failed))
        return lt_set_error(LT_ERR_OOM, "conv2d: cannot allocate %lld bytes of im2col scratch",
                            (long long)((q->ckk + q->Og) * nb * q->ohw * (int64_t)es));
    return LT_OK;
}

/* conv2d_backward_input of a stride-1 convolution as the forward
 * convolution of gy with the transposed, flipped weight:
 *   dx = conv2d(gy, wt, stride 1, padding d*(k-1) - p, dilation d, groups g),
 *   wt[g*Cg + c, o, i, j] = w[g*Og + o, c, kh-1-i, kw-1-j].
 * Same products, but one im2col + a GEMM with K = Og*kh*kw instead of a
 * GEMM with K = Og (C-write bound) and a col2im scatter: measured ~1.4x
 * faster on 3x3 convs with 64 channels. Returns 0 (nothing done) when it
 * does not apply (stride > 1, padding beyond the dilated kernel) or would
 * be slower (fewer than 16 input channels per group: the GEMM's M is Cg,
 * and C = 1 measured 4x slower; fewer than CONV_BIN_FWD_MIN_PIXELS input
 * pixels N*H*W: flipping the weight costs O(weights) against O(weights *
 * N*H*W) of GEMM, and ResNet-18's 4x4 and 2x2 layers (256/512 channels)
 * measured 1.1-1.4x slower than the col2im route); -1 with an error set
 * on OOM; 1 when dx is computed. */
#ifndef CONV_BIN_FWD_MIN_PIXELS
#define CONV_BIN_FWD_MIN_PIXELS 1024
#endif

static int conv_bwd_input_as_fwd(const conv_geom *q, lt_dtype cdt, const void *gy, const void *w,
                                 void *dx, int nt, const lt_kernel_ctx *ctx, lt_status *st)
{
    if (q->sh != 1 || q->sw != 1 || q->ph > q->dh * (q->kh - 1) || q->pw > q->dw * (q->kw - 1) ||
        q->Cg < 16)
        return 0;
    if (q->N * q->hw < CONV_BIN_FWD_MIN_PIXELS) return 0;
    size_t es = kt_dtsize(cdt);
    int64_t kk = q->kh * q->kw, wn = q->O * q->Cg * kk;
    char *wt = lt_kutil_alloc((size_t)wn * es, "conv2d_backward_input");
    if (!wt) { *st = LT_ERR_OOM; return -1; }
    /* blocks of 8 input channels: reads 8*kk contiguous elements of a
     * filter, writes 8 rows of wt sequentially */
    for (int64_t g = 0; g < q->g; g++)
        for (int64_t c0 = 0; c0 < q->Cg; c0 += 8) {
            int64_t c1 = c0 + 8 < q->Cg ? c0 + 8 : q->Cg;
            for (int64_t o = 0; o < q->Og; o++)
                for (int64_t c = c0; c < c1; c++) {
                    int64_t src = ((g * q->Og + o) * q->Cg + c) * kk;
                    int64_t dst = ((g * q->Cg + c) * q->Og + o) * kk + kk - 1;
                    if (cdt == LT_F64)
                        for (int64_t t = 0; t < kk; t++)
                            ((double *)wt)[dst - t] = ((const double *)w)[src + t];
                    else
                        for (int64_t t = 0; t < kk; t++)
                            ((float *)wt)[dst - t] = ((const float *)w)[src + t];
                }
        }
    conv_geom t = *q;
    t.C = q->O; t.H = q->oh; t.W = q->ow;
    t.O = q->C; t.oh = q->H; t.ow = q->W;
    t.ph = q->dh * (q->kh - 1) - q->ph; t.pw = q->dw * (q->kw - 1) - q->pw;
    t.Cg = q->Og; t.Og = q->Cg;
    t.ckk = t.Cg * kk;
    t.ohw = t.oh * t.ow;
    t.hw = t.H * t.W;
    *st = conv_run(LT_OP_conv2d, &t, cdt, gy, wt, dx, nt, ctx);
    free(wt);
    return *st == LT_OK ? 1 : -1;
}

/* conv2d, conv2d_backward_input and conv2d_backward_weight of 3x3,
 * stride-1, dilation-1, one-group convolutions in f32 by Winograd
 * F(2x2,3x3) (conv_wino.c) when lt_wino_choose takes them (the input
 * gradient as the forward conv of gy with the flipped, transposed weight
 * and padding 2 - p); a forward conv of one input channel by the direct
 * kernel (conv_direct.c). a, b: the op's packed inputs. Returns 1 when
 * done (*st set), 0 when not applicable or not chosen; no_wino: the direct
 * kernel only (a pass of a TPU precision level: Winograd's transforms
 * would multiply other values than the bf16 parts). */
static int conv_try_wino(lt_op op, const conv_geom *q, lt_dtype cdt, const void *a,
                         const void *b, void *y, int nt, const lt_kernel_ctx *ctx, lt_status *st,
                         int no_wino)
{
    if (cdt != LT_F32 || q->kh != 3 || q->kw != 3 || q->sh != 1 || q->sw != 1 || q->dh != 1 ||
        q->dw != 1 || q->g != 1)
        return 0;
    lt_wino_conv wq;
    if (op == LT_OP_conv2d_backward_input)
        wq = (lt_wino_conv){q->N, q->O, q->oh, q->ow, q->C, q->H, q->W, 2 - q->ph, 2 - q->pw, 1};
    else
        wq = (lt_wino_conv){q->N, q->C, q->H, q->W, q->O, q->oh, q->ow, q->ph, q->pw, 0};
    if (wq.OH != wq.H + 2 * wq.ph - 2 || wq.OW != wq.W + 2 * wq.pw - 2) return 0;
    if (op == LT_OP_conv2d && lt_conv_direct_c1_choose(&wq)) {
        *st = lt_conv_direct_c1(&wq, a, b, y, nt, ctx);
        return 1;
    }
    if (no_wino || !lt_wino_choose(&wq)) return 0;
    if (op == LT_OP_conv2d_backward_weight)
        *st = lt_wino_run_bw(&wq, b, a, y, nt, ctx);
    else
        *st = lt_wino_run(&wq, a, b, y, nt, ctx);
    return 1;
}

/* The f32 convolution op of packed inputs a, b into y, by the kernel that
 * takes it (Winograd unless no_wino, direct, the input gradient as a
 * forward convolution, im2col + GEMM). */
static lt_status conv_compute(lt_op op, const conv_geom *q, lt_dtype cdt, const void *a,
                              const void *b, void *y, int nt, const lt_kernel_ctx *ctx,
                              int no_wino)
{
    lt_status st = LT_OK;
    if (conv_try_wino(op, q, cdt, a, b, y, nt, ctx, &st, no_wino))
        return st;
    if (op != LT_OP_conv2d_backward_input || !conv_bwd_input_as_fwd(q, cdt, a, b, y, nt, ctx, &st))
        st = conv_run(op, q, cdt, a, b, y, nt, ctx);
    return st;
}

/* One pass of a TPU precision level (mxu.h): the convolution of two parts. */
typedef struct conv_pass_arg {
    lt_op op;
    const conv_geom *q;
    int nt;
    const lt_kernel_ctx *ctx;
} conv_pass_arg;

static lt_status conv_pass(void *arg, const lt_view *a, const lt_view *b, const lt_view *out)
{
    const conv_pass_arg *j = arg;
    void *o0 = NULL, *o1 = NULL;      /* parts keep a permuted input's layout */
    const void *p0 = lt_kutil_pack(a, LT_F32, j->nt, &o0);
    const void *p1 = p0 ? lt_kutil_pack(b, LT_F32, j->nt, &o1) : NULL;
    lt_status st = p1 ? conv_compute(j->op, j->q, LT_F32, p0, p1, out->data, j->nt, j->ctx, 1)
                      : LT_ERR_OOM;
    free(o0);
    free(o1);
    return st;
}

/* conv2d / conv2d_backward_input / conv2d_backward_weight (see ops.def) into
 * contiguous out. Float dtypes only (LT_ERR_DTYPE otherwise); LT_ERR_OOM when
 * scratch cannot be allocated. At a TPU precision level (lt_mxu_applies) an
 * f32 convolution is computed in bf16 passes (the split commutes with
 * im2col: each pass is the convolution of two parts), without Winograd. */
lt_status lt_kernel_conv(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                         const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    if (n_in != 2 || (op != LT_OP_conv2d && op != LT_OP_conv2d_backward_input &&
                      op != LT_OP_conv2d_backward_weight))
        return lt_set_error(LT_ERR_INTERNAL, "conv kernel: bad op %d / %d inputs", (int)op, n_in);
    if (!kt_is_float(out->dtype) || !kt_is_float(in[0].dtype) || !kt_is_float(in[1].dtype))
        return lt_kutil_dtype_error(op, in, n_in, out);
    if (out->shape.ndim != 4)
        return lt_set_error(LT_ERR_SHAPE, "conv2d: expected a 4-D output");
    conv_geom q = {0};
    lt_status st = conv_geom_init(op, attrs, in, out, &q);
    if (st != LT_OK) return st;
    if (kt_numel(&out->shape) == 0) return LT_OK;
    lt_dtype cdt = kt_compute_dt(out->dtype);
    if (lt_mxu_applies(ctx, cdt, in[0].dtype, in[1].dtype)) {
        int64_t n = kt_numel(&out->shape);
        float *res = out->dtype == LT_F32 ? kt_ptr(out) : lt_kutil_alloc((size_t)n * sizeof(float), "conv2d");
        if (!res) return LT_ERR_OOM;
        conv_pass_arg j = {op, &q, nt, ctx};
        st = lt_mxu_product(ctx->mm_precision, &in[0], &in[1], &out->shape, res, conv_pass, &j, nt, ctx);
        if (res != kt_ptr(out)) {
            if (st == LT_OK) lt_kutil_unpack(res, LT_F32, out, nt);
            free(res);
        }
        return st;
    }
    void *o0 = NULL, *o1 = NULL, *yown = NULL;
    const void *p0 = lt_kutil_pack(&in[0], cdt, nt, &o0);
    const void *p1 = p0 ? lt_kutil_pack(&in[1], cdt, nt, &o1) : NULL;
    void *y = kt_ptr(out);
    if (out->dtype != cdt)
        y = yown = lt_kutil_alloc((size_t)kt_numel(&out->shape) * kt_dtsize(cdt), "conv2d");
    if (!p0 || !p1 || !y) {
        free(o0); free(o1); free(yown);
        return LT_ERR_OOM;
    }
    st = conv_compute(op, &q, cdt, p0, p1, y, nt, ctx, 0);
    if (st == LT_OK && yown) lt_kutil_unpack(yown, cdt, out, nt);
    free(o0); free(o1); free(yown);
    return st;
}
