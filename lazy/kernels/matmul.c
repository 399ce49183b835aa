/*
 * lazy/kernels/matmul.c — mm and bmm through OpenBLAS CBLAS.
 *
 * Float: sgemm/dgemm directly on the input memory when an operand is a
 * row-major or transposed 2-D (per batch) view with a valid leading dimension
 * (CblasTrans for the transposed case, no copy); otherwise the operand is
 * packed to a contiguous array first. bf16 (storage) operands are converted
 * to f32, multiplied with f32 accumulation and rounded to nearest even on
 * store (TPU MXU numerics). Integer dtypes use a plain int64-accumulating loop.
 */
#include <cblas.h>
#include "kutil.h"
#include "par.h"

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

/* Product bi of the batch into C's matrix bi: split over up to nt workers
 * when worth it (lt_kutil_gemm_par; nt = 1: one serial BLAS call). */
static void gemm_one(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, const mm_operand *a,
                     const mm_operand *b, int64_t bi, int64_t M, int64_t N, int64_t K,
                     double beta, void *c)
{
    size_t es = kt_dtsize(cdt);
    const char *pa = a->base + ((bi / a->bdim2) * a->bstride + (bi % a->bdim2) * a->bstride2) * (int64_t)es;
    const char *pb = b->base + ((bi / b->bdim2) * b->bstride + (bi % b->bdim2) * b->bstride2) * (int64_t)es;
    lt_kutil_gemm_par(ctx, nt, cdt, a->trans, b->trans, M, N, K, pa, a->ld, pb, b->ld, beta,
                      (char *)c + bi * M * N * (int64_t)es, N);
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
    void *c;
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
                        void *c)
{
    if (nt < 2 || B < 2 * (int64_t)nt || 2.0 * (double)M * N * K > 5e7) return 0;
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
    int64_t B = batched ? out->shape.dims[0] : 1;
    int64_t M = a->shape.dims[na - 2], K = a->shape.dims[na - 1], N = b->shape.dims[nb - 1];
    lt_dtype cdt = kt_compute_dt(out->dtype);
    size_t es = kt_dtsize(cdt);
    if (B * M * N == 0) return LT_OK;
    void *cptr = kt_ptr(out), *cown = NULL;
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
        /* Many small matrices: OpenMP over the batch, one serial BLAS call
         * each. Otherwise each product split over the core's helpers. */
        if (B > 1 && nt > 1 && (double)M * N * K < 64.0 * 64 * 64 && B >= nt) {
            #pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t bi = 0; bi < B; bi++) gemm_one(ctx, 1, cdt, &oa, &ob, bi, M, N, K, 0.0, cptr);
        } else if (!(B > 1 && gemm_batched(ctx, nt, cdt, &oa, &ob, B, M, N, K, cptr))) {
            for (int64_t bi = 0; bi < B; bi++) gemm_one(ctx, nt, cdt, &oa, &ob, bi, M, N, K, 0.0, cptr);
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
 * a [M,K], b [K,N]: a @ b + bias on every row) into contiguous out.
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
    for (int k = 0; batched && k < 2; k++)
        if (m[k].shape.ndim == 4 && out->shape.ndim == 3 &&
            m[k].shape.dims[0] * m[k].shape.dims[1] == out->shape.dims[0]) four = 1;
    if ((m[0].shape.ndim != want && !(four && m[0].shape.ndim == 4)) ||
        (m[1].shape.ndim != want && !(four && m[1].shape.ndim == 4)) ||
        (bias && (bias->shape.ndim < 1 || bias->shape.dims[bias->shape.ndim - 1] !=
                                               m[1].shape.dims[1])))
        return lt_set_error(LT_ERR_SHAPE, "%s: expected %d-D operands", lt_op_name(op), want);
    if (kt_is_float(out->dtype) && kt_is_float(m[0].dtype) && kt_is_float(m[1].dtype) &&
        (!bias || kt_is_float(bias->dtype)))
        return matmul_float(&m[0], &m[1], bias, out, batched, nt, ctx);
    if (!addmm && !four && kt_is_index(out->dtype) && kt_is_index(in[0].dtype) && kt_is_index(in[1].dtype))
        return matmul_int(&in[0], &in[1], out, batched, nt);
    return lt_kutil_dtype_error(op, in, n_in, out);
}
