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
    if (batched && v->shape.dims[0] == 1) bs = 0;
    o->owned = NULL;
    if (v->dtype == cdt &&
        blas_layout(rows, cols, v->strides[nd - 2], v->strides[nd - 1], &o->trans, &o->ld)) {
        o->base = kt_ptr(v);
        o->bstride = bs;
        return LT_OK;
    }
    lt_view pv = *v;
    if (batched && bs == 0) {   /* broadcast batch: pack one matrix only */
        pv.shape.ndim = 2;
        pv.shape.dims[0] = rows; pv.shape.dims[1] = cols;
        pv.strides[0] = v->strides[1]; pv.strides[1] = v->strides[2];
    }
    void *p = lt_kutil_pack(&pv, cdt, nt, &o->owned);
    if (!p) return LT_ERR_OOM;
    o->base = p;
    o->trans = 0;
    o->ld = cols > 1 ? cols : 1;
    o->bstride = (batched && bs != 0) ? rows * cols : 0;
    return LT_OK;
}

/* Product bi of the batch into C's matrix bi: split over up to nt workers
 * when worth it (lt_kutil_gemm_par; nt = 1: one serial BLAS call). */
static void gemm_one(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, const mm_operand *a,
                     const mm_operand *b, int64_t bi, int64_t M, int64_t N, int64_t K, void *c)
{
    size_t es = kt_dtsize(cdt);
    const char *pa = a->base + bi * a->bstride * (int64_t)es;
    const char *pb = b->base + bi * b->bstride * (int64_t)es;
    lt_kutil_gemm_par(ctx, nt, cdt, a->trans, b->trans, M, N, K, pa, a->ld, pb, b->ld, 0.0,
                      (char *)c + bi * M * N * (int64_t)es, N);
}

static lt_status matmul_float(const lt_view *a, const lt_view *b, const lt_view *out,
                              int batched, int nt, const lt_kernel_ctx *ctx)
{
    int nd = a->shape.ndim;
    int64_t B = batched ? a->shape.dims[0] : 1;
    int64_t M = a->shape.dims[nd - 2], K = a->shape.dims[nd - 1], N = b->shape.dims[nd - 1];
    lt_dtype cdt = kt_compute_dt(out->dtype);
    size_t es = kt_dtsize(cdt);
    if (B * M * N == 0) return LT_OK;
    void *cptr = kt_ptr(out), *cown = NULL;
    if (out->dtype != cdt) {
        cown = lt_kutil_alloc((size_t)(B * M * N) * es, "matmul");
        if (!cown) return LT_ERR_OOM;
        cptr = cown;
    }
    if (K == 0) {
        memset(cptr, 0, (size_t)(B * M * N) * es);
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
            for (int64_t bi = 0; bi < B; bi++) gemm_one(ctx, 1, cdt, &oa, &ob, bi, M, N, K, cptr);
        } else {
            for (int64_t bi = 0; bi < B; bi++) gemm_one(ctx, nt, cdt, &oa, &ob, bi, M, N, K, cptr);
        }
        free(oa.owned);
        free(ob.owned);
    }
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

/* mm ([M,K] x [K,N]) and bmm ([B,M,K] x [B,K,N]) into contiguous out.
 * Float outputs (f32, f64, bf16 storage) use BLAS; i64/i32 outputs an integer
 * loop. Returns LT_ERR_DTYPE for bool or mixed int/float, LT_ERR_OOM if
 * scratch cannot be allocated. */
lt_status lt_kernel_matmul(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                           const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    int batched = op == LT_OP_bmm;
    if ((op != LT_OP_mm && op != LT_OP_bmm) || n_in != 2)
        return lt_set_error(LT_ERR_INTERNAL, "matmul kernel: bad op %d / %d inputs", (int)op, n_in);
    int want = batched ? 3 : 2;
    if (in[0].shape.ndim != want || in[1].shape.ndim != want)
        return lt_set_error(LT_ERR_SHAPE, "%s: expected %d-D operands", batched ? "bmm" : "mm", want);
    if (kt_is_float(out->dtype) && kt_is_float(in[0].dtype) && kt_is_float(in[1].dtype))
        return matmul_float(&in[0], &in[1], out, batched, nt, ctx);
    if (kt_is_index(out->dtype) && kt_is_index(in[0].dtype) && kt_is_index(in[1].dtype))
        return matmul_int(&in[0], &in[1], out, batched, nt);
    return lt_kutil_dtype_error(op, in, n_in, out);
}
