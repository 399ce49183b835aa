/*
 * lazy/kernels/kutil.h — small helpers shared by the library kernels
 * (matmul, conv, pool, norm, scatter, cat, index, loss, random).
 *
 * Inline element access for every dtype (bf16 and f16 through base/f16.h),
 * and strided copy/pack helpers (kutil.c). Self-contained on purpose: the
 * kernels only depend on lazytpu.h types, base/ (lt_set_error, f16.h) and
 * kernel.h's lt_view.
 */
#ifndef LT_KUTIL_H
#define LT_KUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernel.h"
#include "vmath.h"   /* lt_vexpf & co: vectorisable f32 math */
#include "f16.h"      /* base/: bf16 and f16 bit conversions */

/* Names and sizes come from the one dtype table (base/dtype.c). */
static inline const char *kt_dtname(lt_dtype dt) { return lt_dtype_name(dt); }
static inline size_t kt_dtsize(lt_dtype dt) { return lt_dtype_size(dt); }

static inline int kt_is_float(lt_dtype dt)
{
    return dt == LT_F32 || dt == LT_BF16 || dt == LT_F64 || dt == LT_F16;
}

static inline int kt_is_index(lt_dtype dt) { return dt == LT_I64 || dt == LT_I32; }

/* Compute dtype of a float kernel storing into `dt`: f64 -> f64, else f32. */
static inline lt_dtype kt_compute_dt(lt_dtype dt) { return dt == LT_F64 ? LT_F64 : LT_F32; }

/* Element i (in elements from base) as double / int64. */
static inline double kt_load(const void *base, lt_dtype dt, int64_t i)
{
    switch (dt) {
    case LT_F32: return ((const float *)base)[i];
    case LT_BF16: return lt_bf16_to_f32_inline(((const uint16_t *)base)[i]);
    case LT_F64: return ((const double *)base)[i];
    case LT_I64: return (double)((const int64_t *)base)[i];
    case LT_I32: return ((const int32_t *)base)[i];
    case LT_BOOL: return ((const uint8_t *)base)[i] != 0;
    case LT_F16: return lt_f16_to_f32_inline(((const uint16_t *)base)[i]);
    case LT_U8: return ((const uint8_t *)base)[i];
    case LT_I8: return ((const int8_t *)base)[i];
    case LT_I16: return ((const int16_t *)base)[i];
    default: return 0;
    }
}

static inline int64_t kt_load_i(const void *base, lt_dtype dt, int64_t i)
{
    switch (dt) {
    case LT_I64: return ((const int64_t *)base)[i];
    case LT_I32: return ((const int32_t *)base)[i];
    case LT_BOOL: return ((const uint8_t *)base)[i] != 0;
    case LT_U8: return ((const uint8_t *)base)[i];
    case LT_I8: return ((const int8_t *)base)[i];
    case LT_I16: return ((const int16_t *)base)[i];
    default: return (int64_t)kt_load(base, dt, i);
    }
}

static inline void kt_store(void *base, lt_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case LT_F32: ((float *)base)[i] = (float)v; break;
    case LT_BF16: ((uint16_t *)base)[i] = lt_bf16_from_f32((float)v); break;
    case LT_F64: ((double *)base)[i] = v; break;
    case LT_I64: ((int64_t *)base)[i] = (int64_t)v; break;
    case LT_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case LT_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    case LT_F16: ((uint16_t *)base)[i] = lt_f16_from_f32((float)v); break;
    case LT_U8: ((uint8_t *)base)[i] = (uint8_t)(int64_t)v; break;
    case LT_I8: ((int8_t *)base)[i] = (int8_t)(int64_t)v; break;
    case LT_I16: ((int16_t *)base)[i] = (int16_t)(int64_t)v; break;
    default: break;
    }
}

static inline void kt_store_i(void *base, lt_dtype dt, int64_t i, int64_t v)
{
    switch (dt) {
    case LT_I64: ((int64_t *)base)[i] = v; break;
    case LT_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case LT_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    case LT_U8: ((uint8_t *)base)[i] = (uint8_t)v; break;
    case LT_I8: ((int8_t *)base)[i] = (int8_t)v; break;
    case LT_I16: ((int16_t *)base)[i] = (int16_t)v; break;
    default: kt_store(base, dt, i, (double)v); break;
    }
}

/* dst[di] = convert(src[si]); exact for same dtype and for int -> int. */
static inline void kt_cvt(const void *src, lt_dtype sdt, int64_t si,
                          void *dst, lt_dtype ddt, int64_t di)
{
    if (sdt == ddt) {
        size_t es = kt_dtsize(sdt);
        memcpy((char *)dst + di * es, (const char *)src + si * es, es);
    } else if (!kt_is_float(sdt) && !kt_is_float(ddt)) {
        kt_store_i(dst, ddt, di, kt_load_i(src, sdt, si));
    } else {
        kt_store(dst, ddt, di, kt_load(src, sdt, si));
    }
}

/* Convolution along one dim: output positions o in [*lo, *hi) read input
 * o*s - p + kd inside [0, n) (kd = kernel tap * dilation); empty when none. */
static inline void kt_conv_valid_range(int64_t n, int64_t nout, int64_t s, int64_t p,
                                       int64_t kd, int64_t *lo, int64_t *hi)
{
    int64_t a = p - kd;                 /* need o*s >= a */
    int64_t l = a <= 0 ? 0 : (a + s - 1) / s;
    int64_t b = n + p - kd;             /* need o*s < b */
    int64_t h = b <= 0 ? 0 : (b + s - 1) / s;
    if (l > nout) l = nout;
    if (h > nout) h = nout;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

static inline int64_t kt_numel(const lt_shape *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->dims[d];
    return n;
}

/* Offset (in elements, incl. v->offset) of the element with row-major linear
 * index `linear` in the view's logical order. */
static inline int64_t kt_view_offset(const lt_view *v, int64_t linear)
{
    int64_t off = v->offset;
    for (int d = v->shape.ndim - 1; d >= 0; d--) {
        int64_t n = v->shape.dims[d];
        if (n <= 0) return v->offset;
        off += (linear % n) * v->strides[d];
        linear /= n;
    }
    return off;
}

/* A contiguous row-major view of `data`. */
static inline lt_view kt_contig_view(void *data, lt_dtype dt, const lt_shape *s)
{
    lt_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dt;
    v.shape = *s;
    int64_t st = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        v.strides[d] = st;
        st *= s->dims[d];
    }
    return v;
}

/* 1 if every dim of size > 1 has row-major contiguous strides. */
static inline int kt_is_contig(const lt_view *v)
{
    int64_t st = 1;
    for (int d = v->shape.ndim - 1; d >= 0; d--) {
        if (v->shape.dims[d] != 1 && v->strides[d] != st) return 0;
        st *= v->shape.dims[d];
    }
    return 1;
}

static inline int kt_nthreads(const lt_kernel_ctx *ctx)
{
    return (ctx && ctx->nthreads > 0) ? ctx->nthreads : 1;
}

/* Pointer to element 0 of a view (with offset). */
static inline void *kt_ptr(const lt_view *v)
{
    return (char *)v->data + v->offset * (int64_t)kt_dtsize(v->dtype);
}

/* ---- kutil.c ---- */

/* Copies src into dst (same shape; any strides and dtypes, converted as
 * kt_cvt does). dst must not overlap src. Uses up to nthreads OpenMP threads
 * (1 = serial, callable inside a parallel region). */
void lt_kutil_copy(const lt_view *src, const lt_view *dst, int nthreads);

/* Returns a pointer to the view's data as a contiguous array of dtype dt:
 * the view's own memory when it already is (no copy; *owned = NULL), else a
 * malloc'd copy stored in *owned (caller frees). NULL on malloc failure with
 * LT_ERR_OOM set. */
void *lt_kutil_pack(const lt_view *v, lt_dtype dt, int nthreads, void **owned);

/* Writes n contiguous elements of dtype sdt into the contiguous output view
 * (converted to out->dtype). */
void lt_kutil_unpack(const void *src, lt_dtype sdt, const lt_view *out, int nthreads);

/* malloc that never returns NULL for n == 0; NULL on failure with LT_ERR_OOM
 * set naming `what`. */
void *lt_kutil_alloc(size_t n, const char *what);

/* Sets LT_ERR_DTYPE "op: unsupported dtypes a, b -> out" and returns it. */
lt_status lt_kutil_dtype_error(lt_op op, const lt_view *in, int n_in, const lt_view *out);

/* Row-major C[M,N] = op(A) op(B) + beta*C through CBLAS, in f32 (cdt
 * LT_F32) or f64, on the calling thread; small f32 products where it is
 * faster (lt_sgemm_small_ok) through lt_sgemm_small; leading dimensions in
 * elements; no-op when M or N is 0 (K must be >= 1 with valid leading
 * dimensions). */
void lt_kutil_gemm(lt_dtype cdt, int ta, int tb, int64_t M, int64_t N, int64_t K,
                   const void *A, int64_t lda, const void *B, int64_t ldb,
                   double beta, void *C, int64_t ldc);
/* lt_kutil_gemm split into row or column blocks of C claimed dynamically on
 * the core's helper threads (par.h), up to nt workers, each block one
 * serial BLAS call; a product too small to be worth splitting (or nt < 2)
 * is one call on the calling thread. Same contract as lt_kutil_gemm. */
void lt_kutil_gemm_par(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, int ta, int tb,
                       int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                       const void *B, int64_t ldb, double beta, void *C, int64_t ldc);
/* lt_kutil_gemm_par with an epilogue done as a prologue: every row of C
 * starts as bias (N values in the compute type cdt, caller-owned) and the
 * product accumulates onto it (C = bias + op(A) op(B)). Each block fills
 * its own rows (or columns) right before its BLAS call, on the worker that
 * runs it, so the bias costs no separate pass over C and C's block is
 * still in cache when the GEMM reads it back. bias NULL: beta 0. */
void lt_kutil_gemm_par_bias(const lt_kernel_ctx *ctx, int nt, lt_dtype cdt, int ta, int tb,
                            int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                            const void *B, int64_t ldb, const void *bias, void *C,
                            int64_t ldc);
/* ---- sgemm_small.c ---- */

/* 1 when lt_sgemm_small is built (AVX2 + FMA) and, by measurement, faster
 * than serial OpenBLAS for an M x N x K product (A transposed when ta);
 * 0 otherwise. */
int lt_sgemm_small_ok(int ta, int64_t M, int64_t N, int64_t K);
/* Row-major f32 C[M,N] = op(A) op(B) + beta*C on the calling thread (op:
 * transposed when ta/tb), leading dimensions in elements, any M, N, K >= 0
 * (K = 0: C = beta*C). The own blocked kernel at any size (callers ask
 * lt_sgemm_small_ok whether it pays); serial OpenBLAS when it is not built
 * or its scratch cannot be allocated. Results differ from BLAS's only by
 * summation order. */
void lt_sgemm_small(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* Makes OpenBLAS (process-global setting) single-threaded, once: the core's
 * kernels parallelise GEMMs themselves. OpenBLAS's own threads split a call
 * statically, so one preempted thread stalls the call, and after every call
 * they spin in sched_yield for a while: on 2 CPUs that took ~30% of the
 * machine from the tracing thread and the core (profile of the CNN step). */
void lt_kutil_blas_serial(void);

/* Reshape of a strided view without copying (row-major order kept): every
 * group of source dims that maps onto a group of target dims must be
 * internally contiguous. Returns 1 and fills strides[to->ndim], or 0.
 * Numels must match (not checked). */
int lt_kutil_reshape_strides(const lt_view *src, const lt_shape *to, int64_t *strides);

/* Writes "[2, 3]" for s into buf (cap >= 2). */
const char *lt_kutil_shape_str(const lt_shape *s, char *buf, size_t cap);

#endif
