/*
 * lazy/kernels/matmul.c — mm and bmm through OpenBLAS CBLAS.
 *
 * Float: sgemm/dgemm directly on the input memory when an operand is a
 * row-major or transposed 2-D (per batch) view with a valid leading dimension
 * (CblasTrans for the transposed case, no copy); otherwise the operand is
 * packed to a contiguous array first. bf16 (storage) operands are converted
 * to f32, multiplied with f32 accumulation and rounded to nearest even on
 * store (TPU MXU numerics). Integer dtypes use a plain int64-accumulating loop.
 * At a TPU precision level (the program's, lt_kernel_ctx.mm_precision) an
 * f32 product runs this f32 path once per bf16 pass on split operands
 * (mxu.h), and addmm's bias is added after the passes.
 *
 * GEMM epilogue (lt_kernel_matmul_epi): a 2-D product is split into blocks
 * of rows (or columns) claimed by the core's workers; each worker fills its block with
 * the bias, runs its BLAS call, rounds the block to bf16 if the result is
 * stored so, and evaluates the fused elementwise program that reads the
 * result (relu, gelu, bias + activation, ...) on those rows while they are
 * still in its cache (compile_pattern.c decides when).
 */
#include <cblas.h>
#include <stdlib.h>
#include "kutil.h"
#include "fused.h"
#include "par.h"
#include "mxu.h"

/* BLAS operand: rows x cols view with strides s0, s1 (elements). Returns 1 and
 * sets trans/ld when BLAS can read it in place. */
static int blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1,
                       int *trans, int64_t *ld)
{
    int64_t mc = cols > 1 ? cols : 1, mr = rows > 1 ? rows : 1;
    if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= mc)) {
        *trans = 0;
        *ld = rows == 1 ? mc : s0;
        return 1;
    }
    if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= mr)) {
        *trans = 1;
        *ld = cols == 1 ? mr : s1;
        return 1;
    }
    return 0;
}

typedef struct mm_operand {
    const char *base;   /* element 0 of batch 0 */
    int64_t bstride;    /* batch stride in elements (0 = broadcast) */
    int64_t bdim2, bstride2;  /* a 4-D operand [B1, B2, r, c]: batch bi is at
                                 (bi / bdim2) * bstride + (bi % bdim2) * bstride2 */
    int trans;
    int64_t ld;
    void *owned;
} mm_operand;

/* Prepares operand v ([B,]rows,cols) for BLAS in dtype cdt: in place when
 * possible, else packed contiguous. */
static lt_status mm_operand_init(const lt_view *v, int batched, lt_dtype cdt, int nt,
                                 mm_operand *o)
{
    int nd = v->shape.ndim;
    int64_t rows = v->shape.dims[nd - 2], cols = v->shape.dims[nd - 1];
    int64_t bs = batched ? v->strides[0] : 0;
    if (batched && nd == 3 && v->shape.dims[0] == 1) bs = 0;
    o->owned = NULL;
    o->bdim2 = batched && nd == 4 ? v->shape.dims[1] : 1;
    o->bstride2 = batched && nd == 4 ? v->strides[1] : 0;
    if (o->bdim2 < 1) o->bdim2 = 1;
    if (v->dtype == cdt &&
        blas_layout(rows, cols, v->strides[nd - 2], v->strides[nd - 1], &o->trans, &o->ld)) {
        o->base = kt_ptr(v);
        o->bstride = bs;
        return LT_OK;
    }
    o->bdim2 = 1;   /* packed: [B, rows, cols] */
    o->bstride2 = 0;
    lt_view pv = *v;
    if (batched && nd == 3 && bs == 0) {   /* broadcast batch: pack one matrix only */
        pv.shape.ndim = 2;
        pv.shape.dims[0] = rows; pv.shape.dims[1] = cols;
        pv.strides[0] = v->strides[1]; pv.strides[1] = v->strides[2];
    }
    void *p = lt_kutil_pack(&pv, cdt, nt, &o->owned);
    if (!p) return LT_ERR_OOM;
    o->base = p;
    o->trans = 0;
    o->ld = cols > 1 ? cols : 1;
    o->bstride = (batched && (bs != 0 || nd == 4)) ? rows * cols : 0;
    return LT_OK;
}

/* Element offset of batch bi's matrix in operand o. */
static inline int64_t mm_batch_off(const mm_operand *o, int64_t bi)
{
    return (bi / o->bdim2) * o->bstride + (bi % o->bdim2) * o->bstride2;
}

/* Product bi of the batch into C's matrix bi (c: base, batch strides and
 * ld of the result, see mm_out_init): split over up to nt workers when
 * worth it (lt_kutil_gemm_par; nt = 1: one serial BLAS call). */
static void gemm_one(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, const mm_operand *a,
                     const mm_operand *b, int64_t bi, int64_t M, int64_t N, int64_t K,
                     double beta, const mm_operand *c)
{
    size_t es = kt_dtsize(cdt);
    const char *pa = a->base + mm_batch_off(a, bi) * (int64_t)es;
    const char *pb = b->base + mm_batch_off(b, bi) * (int64_t)es;
    lt_kutil_gemm_par(ctx, nt, cdt, a->trans, b->trans, M, N, K, pa, a->ld, pb, b->ld, beta,
                      (char *)c->base + mm_batch_off(c, bi) * (int64_t)es, c->ld);
}

/* The result operand: contiguous [B, M, N] at p, or (bmm) the 4-D strided
 * view out [B1, B2, M, N] with unit column stride (compile_pattern.c: the
 * bmm writes straight into the layout its transposed reshape wants). */
static void mm_out_init(const lt_view *out, void *p, int64_t M, int64_t N, mm_operand *c)
{
    memset(c, 0, sizeof *c);
    c->base = p;
    if (out->shape.ndim == 4) {
        c->bstride = out->strides[0];
        c->bdim2 = out->shape.dims[1] > 0 ? out->shape.dims[1] : 1;
        c->bstride2 = out->strides[1];
        c->ld = out->strides[2];
    } else {
        c->bstride = M * N;
        c->bdim2 = 1;
        c->ld = N;
    }
}

/* A batch of products claimed in chunks of whole matrices on the core's
 * helpers (lt_par_for), one serial BLAS call per matrix: the attention
 * shapes ([B*heads, 128, 64] x [.., 64, 128]) are too small to split each
 * product (a helper job per product costs more than it gains), and
 * dynamic claiming keeps a preempted helper from stalling the batch. */
typedef struct mm_batch {
    lt_dtype cdt;
    const mm_operand *a, *b;
    int64_t B, M, N, K, per;
    const mm_operand *c;
} mm_batch;

static void mm_batch_chunk(void *arg, int64_t ci, int w)
{
    const mm_batch *j = arg;
    (void)w;
    int64_t lo = ci * j->per, hi = lo + j->per < j->B ? lo + j->per : j->B;
    for (int64_t bi = lo; bi < hi; bi++)
        gemm_one(NULL, 1, j->cdt, j->a, j->b, bi, j->M, j->N, j->K, 0.0, j->c);
}

/* 1 when the batch ran as whole matrices on the helpers, 0 when each
 * product should be split instead (few large matrices). */
static int gemm_batched(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, const mm_operand *a,
                        const mm_operand *b, int64_t B, int64_t M, int64_t N, int64_t K,
                        const mm_operand *c)
{
    double flops = 2.0 * (double)M * N * K;
    /* fewer than two matrices per worker: only when each is too small to
     * split (lt_kutil_gemm_par runs a product under 2 MFLOP serially) */
    if (nt < 2 || B < nt || (B < 2 * (int64_t)nt && flops >= 2e6) || flops > 5e7) return 0;
    int64_t nch = (int64_t)nt * 4;          /* a late helper costs a quarter */
    int64_t per = (B + nch - 1) / nch;
    nch = (B + per - 1) / per;
    mm_batch j = {cdt, a, b, B, M, N, K, per, c};
    lt_par_for(ctx, nt, nch, mm_batch_chunk, &j);
    return 1;
}

/* addmm's bias [N] (any stride and float dtype) as a contiguous row in the
 * compute type; NULL (error set) on OOM. The caller frees it. */
static void *bias_row(const lt_view *bias, lt_dtype cdt, int64_t N)
{
    int nd = bias->shape.ndim;
    int64_t bs = bias->strides[nd - 1];
    size_t es = kt_dtsize(cdt);
    char *row = lt_kutil_alloc((size_t)(N > 0 ? N : 1) * es, "addmm");
    if (!row) return NULL;
    for (int64_t j = 0; j < N; j++) {
        double v = kt_load(bias->data, bias->dtype, bias->offset + j * bs);
        if (cdt == LT_F64) ((double *)row)[j] = v;
        else ((float *)row)[j] = (float)v;
    }
    return row;
}

static lt_status matmul_float(const lt_view *a, const lt_view *b, const lt_view *bias,
                              const lt_view *out, int batched, int nt, const lt_kernel_ctx *ctx)
{
    int na = a->shape.ndim, nb = b->shape.ndim;
    int out4 = batched && out->shape.ndim == 4;
    int64_t B = !batched ? 1 : out4 ? out->shape.dims[0] * out->shape.dims[1] : out->shape.dims[0];
    int64_t M = a->shape.dims[na - 2], K = a->shape.dims[na - 1], N = b->shape.dims[nb - 1];
    lt_dtype cdt = kt_compute_dt(out->dtype);
    size_t es = kt_dtsize(cdt);
    if (B * M * N == 0) return LT_OK;
    void *cptr = kt_ptr(out), *cown = NULL;
    if (out4 && (out->dtype != cdt || K == 0 || out->strides[3] != 1 ||
                 out->strides[2] < (N > 1 ? N : 1)))
        return lt_set_error(LT_ERR_INTERNAL, "bmm: unsupported 4-D result layout");
    if (out->dtype != cdt) {
        cown = lt_kutil_alloc((size_t)(B * M * N) * es, "matmul");
        if (!cown) return LT_ERR_OOM;
        cptr = cown;
    }
    /* addmm (never batched): the bias is the GEMM's prologue, each block
     * of C filled with it right before its BLAS call (lt_kutil_gemm_par_bias) */
    void *brow = NULL;
    if (bias && !(brow = bias_row(bias, cdt, N))) { free(cown); return LT_ERR_OOM; }
    if (K == 0) {
        if (!bias) memset(cptr, 0, (size_t)(B * M * N) * es);
        else for (int64_t i = 0; i < M; i++) memcpy((char *)cptr + i * N * (int64_t)es, brow, (size_t)N * es);
    } else if (bias) {
        mm_operand oa, ob;
        lt_status st = mm_operand_init(a, 0, cdt, nt, &oa);
        if (st == LT_OK) {
            st = mm_operand_init(b, 0, cdt, nt, &ob);
            if (st != LT_OK) free(oa.owned);
        }
        if (st != LT_OK) { free(brow); free(cown); return st; }
        lt_kutil_gemm_par_bias(ctx, nt, cdt, oa.trans, ob.trans, M, N, K, oa.base, oa.ld,
                               ob.base, ob.ld, brow, cptr, N);
        free(oa.owned);
        free(ob.owned);
    } else {
        mm_operand oa, ob;
        lt_status st = mm_operand_init(a, batched, cdt, nt, &oa);
        if (st == LT_OK) {
            st = mm_operand_init(b, batched, cdt, nt, &ob);
            if (st != LT_OK) free(oa.owned);
        }
        if (st != LT_OK) { free(cown); return st; }
        mm_operand oc;
        mm_out_init(out, cptr, M, N, &oc);
        /* Many small matrices: whole matrices claimed on the core's
         * helpers (an OpenMP team here kept spinning beside the helpers
         * after every attention product). Otherwise each product split. */
        if (!(B > 1 && gemm_batched(ctx, nt, cdt, &oa, &ob, B, M, N, K, &oc))) {
            for (int64_t bi = 0; bi < B; bi++) gemm_one(ctx, nt, cdt, &oa, &ob, bi, M, N, K, 0.0, &oc);
        }
        free(oa.owned);
        free(ob.owned);
    }
    free(brow);
    if (cown) {
        lt_kutil_unpack(cown, cdt, out, nt);
        free(cown);
    }
    return LT_OK;
}

/* ---- TPU precision levels (mxu.h) ---- */

typedef struct mm_pass_arg {
    int batched, nt;
    const lt_kernel_ctx *ctx;
} mm_pass_arg;

static lt_status mm_pass(void *arg, const lt_view *a, const lt_view *b, const lt_view *out)
{
    const mm_pass_arg *j = arg;
    return matmul_float(a, b, NULL, out, j->batched, j->nt, j->ctx);
}

/* matmul_float at the program's precision level (lt_mxu_applies): the
 * product in bf16 passes into an f32 result, then addmm's bias added to
 * every row (XLA adds it to the dot's result), then stored as out (its
 * dtype and, for a 4-D bmm result, its strides). */
static lt_status matmul_mxu(const lt_view *a, const lt_view *b, const lt_view *bias,
                            const lt_view *out, int batched, int nt, const lt_kernel_ctx *ctx)
{
    int64_t n = kt_numel(&out->shape);
    if (n == 0) return LT_OK;
    int direct = out->dtype == LT_F32 && lt_view_is_contiguous(out);
    float *res = direct ? kt_ptr(out) : lt_kutil_alloc((size_t)n * sizeof(float), "matmul");
    if (!res) return LT_ERR_OOM;
    mm_pass_arg j = {batched, nt, ctx};
    lt_shape osh = out->shape;          /* a 4-D bmm result: passes into [B, M, N] */
    if (osh.ndim == 4) {
        osh.ndim = 3;
        osh.dims[0] *= osh.dims[1];
        osh.dims[1] = out->shape.dims[2];
        osh.dims[2] = out->shape.dims[3];
    }
    lt_status st = lt_mxu_product(ctx->mm_precision, a, b, &osh, res, mm_pass, &j, nt, ctx);
    if (st == LT_OK && bias) {
        int64_t N = out->shape.dims[out->shape.ndim - 1], M = n / N;
        float *row = bias_row(bias, LT_F32, N);
        if (!row) st = LT_ERR_OOM;
        for (int64_t i = 0; row && i < M; i++)
            for (int64_t c = 0; c < N; c++) res[i * N + c] += row[c];
        free(row);
    }
    if (st == LT_OK && !direct) {
        lt_view src = kt_contig_view(res, LT_F32, &out->shape);
        lt_kutil_copy(&src, out, nt);
    }
    if (!direct) free(res);
    return st;
}

static lt_status matmul_int(const lt_view *a, const lt_view *b, const lt_view *out,
                            int batched, int nt)
{
    int nd = a->shape.ndim;
    int64_t B = batched ? a->shape.dims[0] : 1;
    int64_t M = a->shape.dims[nd - 2], K = a->shape.dims[nd - 1], N = b->shape.dims[nd - 1];
    int64_t asb = batched ? a->strides[0] : 0, bsb = batched ? b->strides[0] : 0;
    int64_t as0 = a->strides[nd - 2], as1 = a->strides[nd - 1];
    int64_t bs0 = b->strides[nd - 2], bs1 = b->strides[nd - 1];
    void *o = kt_ptr(out);
    int ok = 1;
    #pragma omp parallel num_threads(nt) if (B * M * N * K > 65536)
    {
        int64_t *acc = malloc((size_t)(N > 0 ? N : 1) * sizeof *acc);
        if (!acc) {
            #pragma omp atomic write
            ok = 0;
        } else {
            #pragma omp for schedule(static)
            for (int64_t r = 0; r < B * M; r++) {
                int64_t bi = r / M, i = r % M;
                memset(acc, 0, (size_t)N * sizeof *acc);
                for (int64_t k = 0; k < K; k++) {
                    int64_t av = kt_load_i(a->data, a->dtype, a->offset + bi * asb + i * as0 + k * as1);
                    if (!av) continue;
                    int64_t boff = b->offset + bi * bsb + k * bs0;
                    for (int64_t j = 0; j < N; j++)
                        acc[j] += av * kt_load_i(b->data, b->dtype, boff + j * bs1);
                }
                for (int64_t j = 0; j < N; j++) kt_store_i(o, out->dtype, r * N + j, acc[j]);
            }
            free(acc);
        }
    }
    return ok ? LT_OK : lt_set_error(LT_ERR_OOM, "matmul: cannot allocate host scratch");
}

/* mm ([M,K] x [K,N]), bmm ([B,M,K] x [B,K,N]) and addmm (bias [N] or [1,N],
 * a [M,K], b [K,N]: a @ b + bias on every row) into contiguous out; a bmm
 * of f32/f64 may also write a 4-D strided out [B1, B2, M, N] (B1*B2 = B,
 * unit column stride, row stride >= N: compile_pattern.c).
 * Float outputs (f32, f64, bf16 storage) use BLAS; i64/i32 outputs an integer
 * loop (not addmm). Returns LT_ERR_DTYPE for bool or mixed int/float, LT_ERR_OOM if
 * scratch cannot be allocated. */
lt_status lt_kernel_matmul(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                           const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    int batched = op == LT_OP_bmm, addmm = op == LT_OP_addmm;
    if ((op != LT_OP_mm && op != LT_OP_bmm && !addmm) || n_in != (addmm ? 3 : 2))
        return lt_set_error(LT_ERR_INTERNAL, "matmul kernel: bad op %d / %d inputs", (int)op, n_in);
    const lt_view *bias = addmm ? &in[0] : NULL;
    const lt_view *m = addmm ? in + 1 : in;
    int want = batched ? 3 : 2;
    /* bmm: an operand may also be 4-D [B1, B2, r, c] with B1*B2 = B (a
     * reshape's strided source, read in place: compile_pattern.c) */
    int four = 0;
    int64_t ob = out->shape.ndim == 4 ? out->shape.dims[0] * out->shape.dims[1]
                                      : out->shape.dims[0];
    if (batched && out->shape.ndim == 4) four = 1;   /* result [B1, B2, M, N] */
    for (int k = 0; batched && k < 2; k++)
        if (m[k].shape.ndim == 4 && m[k].shape.dims[0] * m[k].shape.dims[1] == ob) four = 1;
    if ((m[0].shape.ndim != want && !(four && m[0].shape.ndim == 4)) ||
        (m[1].shape.ndim != want && !(four && m[1].shape.ndim == 4)) ||
        (bias && (bias->shape.ndim < 1 || bias->shape.dims[bias->shape.ndim - 1] !=
                                               m[1].shape.dims[1])))
        return lt_set_error(LT_ERR_SHAPE, "%s: expected %d-D operands", lt_op_name(op), want);
    if (kt_is_float(out->dtype) && kt_is_float(m[0].dtype) && kt_is_float(m[1].dtype) &&
        (!bias || kt_is_float(bias->dtype)))
        return lt_mxu_applies(ctx, kt_compute_dt(out->dtype), m[0].dtype, m[1].dtype)
                   ? matmul_mxu(&m[0], &m[1], bias, out, batched, nt, ctx)
                   : matmul_float(&m[0], &m[1], bias, out, batched, nt, ctx);
    if (!addmm && !four && kt_is_index(out->dtype) && kt_is_index(in[0].dtype) && kt_is_index(in[1].dtype))
        return matmul_int(&in[0], &in[1], out, batched, nt);
    return lt_kutil_dtype_error(op, in, n_in, out);
}

/* ---- GEMM with a fused elementwise epilogue ---- */

/* A product is split like lt_kutil_gemm_par does (rows when M >= N, else
 * columns, except rows whenever op(B) is small: see split_m; two blocks
 * per worker; one worker: one block), so the GEMM costs what it costs
 * without the epilogue. Smaller blocks, to
 * keep a block in L2 (1 MiB here) until the epilogue reads it, did not
 * pay on this machine: on one core, [2048, 256] x [256, 1024] in 512-row
 * blocks cost the GEMM 0.7% more (B is packed again per call), 256-row
 * 2.3%, 128-row 6%, 16-row blocks of the MLP's 64 x 784 -> 256 25%, and
 * GELU / ReLU read back from L2/L3 per 512-row block cost as much as the
 * separate pass from memory (GELU's math dominates; ReLU's stores do). */

typedef struct epi_job {
    lt_dtype cdt;
    const mm_operand *a, *b;
    const char *brow;         /* addmm's bias row (compute type) or NULL */
    char *C;                  /* [M, N] result in the compute type */
    const lt_view *out;       /* the result as stored */
    int round;                /* out->dtype != cdt: rounded per block */
    int split_m;              /* blocks of rows (else of columns) */
    int gemm_done;            /* the product is complete: epilogue only */
    int bias_after;           /* brow added after the GEMM (a TPU precision
                                 level: XLA adds it to the dot's result) */
    int64_t M, N, K, chunk;
    const lt_fused_bound *fb;
    void **regs;              /* per worker */
} epi_job;

static void epi_block(void *arg, int64_t ci, int w)
{
    const epi_job *j = arg;
    size_t es = kt_dtsize(j->cdt);
    int64_t M = j->M, N = j->N, dim = j->split_m ? M : N;
    int64_t lo = ci * j->chunk, hi = lo + j->chunk < dim ? lo + j->chunk : dim;
    if (hi <= lo) return;
    int64_t r0 = j->split_m ? lo : 0, r1 = j->split_m ? hi : M;
    int64_t c0 = j->split_m ? 0 : lo, c1 = j->split_m ? N : hi, nc = c1 - c0;
    char *c = j->C + (r0 * N + c0) * (int64_t)es;
    int pre = j->brow && !j->bias_after;      /* the bias as the GEMM's prologue */
    for (int64_t i = 0; i < r1 - r0 && !j->gemm_done && (pre || j->K == 0); i++) {
        char *row = c + i * N * (int64_t)es;
        if (pre) memcpy(row, j->brow + c0 * (int64_t)es, (size_t)nc * es);
        else memset(row, 0, (size_t)nc * es);
    }
    if (j->K > 0 && !j->gemm_done)
        lt_kutil_gemm(j->cdt, j->a->trans, j->b->trans, r1 - r0, nc, j->K,
                      j->a->base + (j->a->trans ? r0 : r0 * j->a->ld) * (int64_t)es, j->a->ld,
                      j->b->base + (j->b->trans ? c0 * j->b->ld : c0) * (int64_t)es, j->b->ld,
                      pre ? 1.0 : 0.0, c, N);
    if (j->brow && j->bias_after && !j->gemm_done)      /* f32 (cdt is f32 here) */
        for (int64_t i = 0; i < r1 - r0; i++) {
            float *row = (float *)c + i * N;
            const float *bv = (const float *)j->brow + c0;
            for (int64_t k = 0; k < nc; k++) row[k] += bv[k];
        }
    if (j->round && !j->gemm_done) {
        lt_shape sh = {2, {r1 - r0, nc}};
        lt_view src = kt_contig_view(c, j->cdt, &sh);
        lt_view dst = kt_contig_view(j->out->data, j->out->dtype, &sh);
        src.strides[0] = dst.strides[0] = N;
        dst.offset = j->out->offset + r0 * N + c0;
        lt_kutil_copy(&src, &dst, 1);
    }
    if (nc == N)
        lt_fused_eval_range(j->fb, r0 * N, (r1 - r0) * N, j->regs[w]);
    else
        for (int64_t r = r0; r < r1; r++)
            lt_fused_eval_range(j->fb, r * N + c0, nc, j->regs[w]);
}

/* mm / addmm (in[0..n_in), as lt_kernel_matmul) into out[0], then the
 * finished elementwise program epi over the result's shape (its inputs
 * epi_in[0..epi->n_in), one of which reads out[0] at the same linear
 * index; its stores out[1..1 + epi->n_out), contiguous) evaluated on each
 * block of rows or columns right after that block's GEMM, on the worker that
 * computed it. The result is 2-D f32 or bf16 (bf16: the program reads the
 * rounded values, as when it runs after the GEMM); any other case runs
 * lt_kernel_matmul then the program as a whole (lt_fused_run), with the
 * same values. At the TPU precision level DEFAULT (mxu.h) the blocks
 * multiply the operands rounded to bf16 and addmm's bias is added after
 * each block's GEMM; HIGH and HIGHEST take the lt_kernel_matmul route.
 * Returns LT_OK or the errors of lt_kernel_matmul (LT_ERR_OOM for
 * scratch). */
lt_status lt_kernel_matmul_epi(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                               const struct lt_fused *epi, const lt_view *epi_in,
                               const lt_view *out, const lt_kernel_ctx *ctx)
{
    int addmm = op == LT_OP_addmm;
    const lt_view *m = addmm ? in + 1 : in;
    lt_dtype cdt = kt_compute_dt(out->dtype);
    /* a TPU precision level (mxu.h): DEFAULT's one pass runs here on
     * rounded operands; HIGH and HIGHEST run their passes, then the program */
    int prec = n_in == (addmm ? 3 : 2) && lt_mxu_applies(ctx, cdt, m[0].dtype, m[1].dtype)
                   ? ctx->mm_precision : 0;
    if ((op != LT_OP_mm && !addmm) || n_in != (addmm ? 3 : 2) || out->shape.ndim != 2 ||
        m[0].shape.ndim != 2 || m[1].shape.ndim != 2 || cdt != LT_F32 ||
        (out->dtype != LT_F32 && out->dtype != LT_BF16) || !kt_is_float(m[0].dtype) ||
        !kt_is_float(m[1].dtype) || (addmm && !kt_is_float(in[0].dtype)) ||
        lt_shape_numel(&epi->shape) != lt_shape_numel(&out->shape) ||
        !lt_view_is_contiguous(out) || (prec && prec != LT_MATMUL_DEFAULT)) {
        lt_status st = lt_kernel_matmul(op, attrs, in, n_in, out, ctx);
        return st != LT_OK ? st : lt_fused_run(epi, epi_in, out + 1, ctx);
    }
    int64_t M = out->shape.dims[0], N = out->shape.dims[1], K = m[0].shape.dims[1];
    if (m[1].shape.dims[0] != K || m[1].shape.dims[1] != N || m[0].shape.dims[0] != M ||
        (addmm && (in[0].shape.ndim < 1 || in[0].shape.dims[in[0].shape.ndim - 1] != N)))
        return lt_set_error(LT_ERR_SHAPE, "%s: operand shapes do not match the result",
                            lt_op_name(op));
    if (M * N == 0) return LT_OK;
    int nt = kt_nthreads(ctx);
    size_t es = kt_dtsize(cdt);
    int round = out->dtype != cdt;
    void *C = kt_ptr(out), *cown = NULL, *brow = NULL;
    mm_operand oa = {0}, ob = {0};
    lt_fused_bound *fb = NULL;
    lt_status st = LT_OK;
    if (round && !(C = cown = lt_kutil_alloc((size_t)(M * N) * es, "matmul")))
        return LT_ERR_OOM;
    if (addmm && !(brow = bias_row(&in[0], cdt, N))) st = LT_ERR_OOM;
    /* DEFAULT precision: the one pass multiplies the operands rounded to bf16 */
    float *rnd[2] = {NULL, NULL};
    lt_view rv[2] = {m[0], m[1]};
    for (int k = 0; k < 2 && st == LT_OK && K > 0 && prec; k++)
        if (!(rnd[k] = lt_mxu_split_view(prec, &m[k], nt, ctx, &rv[k]))) st = LT_ERR_OOM;
    if (st == LT_OK && K > 0 && (st = mm_operand_init(&rv[0], 0, cdt, nt, &oa)) == LT_OK)
        st = mm_operand_init(&rv[1], 0, cdt, nt, &ob);
    if (st == LT_OK && !(fb = lt_fused_bind_range(epi, epi_in, out + 1)))
        st = lt_set_error(LT_ERR_OOM, "matmul: out of host memory");
    /* A long inner dimension (weight gradients: K = tokens) is split
     * along K by lt_kutil_gemm_par (no block of C is final before the
     * partial sums are added): the product runs whole, then the epilogue
     * over blocks of rows, still one step. */
    int gemm_done = st == LT_OK && K > 0 && K >= 2 * (M > N ? M : N);
    if (gemm_done) {
        if (brow && !prec)
            lt_kutil_gemm_par_bias(ctx, nt, cdt, oa.trans, ob.trans, M, N, K, oa.base, oa.ld,
                                   ob.base, ob.ld, brow, C, N);
        else
            lt_kutil_gemm_par(ctx, nt, cdt, oa.trans, ob.trans, M, N, K, oa.base, oa.ld,
                              ob.base, ob.ld, 0.0, C, N);
        for (int64_t i = 0; brow && prec && i < M; i++)
            for (int64_t k = 0; k < N; k++) ((float *)C)[i * N + k] += ((const float *)brow)[k];
        if (round)
            lt_kutil_unpack(C, cdt, out, nt);
    }
    /* in parallel: two blocks per worker, at least 16 rows or columns */
    double flops = 2.0 * (double)M * N * K;
    int par = nt >= 2 && (gemm_done ? M * N >= 32768 : flops >= 2e6);
    /* Rows also when M < N if every block can pack op(B) again from cache
     * (<= 512 KiB): an epilogue over column blocks evaluates one short,
     * strided run per row (the MLP's weight gradient [256, 64] x [64, 784]
     * with SGD momentum's update: 4 x 256 runs of 196 elements took 2x
     * the epilogue's CPU time of 4 blocks of 64 whole rows, the GEMM the
     * same, 2026-11-27). */
    int split_m = gemm_done || M >= N || !par ||
                  (M >= 32 * (int64_t)nt && (double)N * K * (double)es <= 512.0 * 1024);
    int64_t dim = split_m ? M : N;
    int64_t chunk = par ? (dim + 2 * (int64_t)nt - 1) / (2 * (int64_t)nt) : dim;
    if (chunk < 16) chunk = 16;
    int64_t nch = (dim + chunk - 1) / chunk;
    int workers = par && nch >= 2 ? nt : 1;
    if (workers > nch) workers = (int)nch;
    void *regs[workers];
    int nreg = 0;
    for (; st == LT_OK && nreg < workers; nreg++)
        if (!(regs[nreg] = lt_fused_regs_alloc(lt_fused_regs_bytes(epi))))
            st = lt_set_error(LT_ERR_OOM, "matmul: out of host memory");
    if (st == LT_OK) {
        epi_job j = {cdt, &oa, &ob, brow, C, out, round, split_m, gemm_done, prec != 0,
                     M, N, K, chunk, fb, regs};
        if (workers > 1)
            lt_par_for(ctx, workers, nch, epi_block, &j);
        else
            for (int64_t ci = 0; ci < nch; ci++) epi_block(&j, ci, 0);
        st = lt_fused_bound_status(fb);
    }
    for (int w = 0; w < nreg; w++) lt_fused_regs_free(regs[w]);
    lt_fused_unbind(fb);
    free(oa.owned);
    free(ob.owned);
    free(rnd[0]);
    free(rnd[1]);
    free(brow);
    free(cown);
    return st;
}
