/*
 * lazy/kernels/sgemm_small.c — lazytpu's own f32 GEMM (small products and
 * the linear layers' row blocks).
 *
 * OpenBLAS runs the attention heads' products ([128,64] x [64,128] and the
 * like, one per batch and head) at 63-71 GFLOP/s on one Zen 3 core, against
 * ~90 GFLOP/s for large ones: per call it sets up threading, allocates and
 * packs. This is a plain blocked GEMM: a 6x16 register tile of FMAs over a
 * K block of 256, every tile of C written once per K block. op(A) is read
 * in place (six broadcast streams); a transposed op(A) over several K
 * blocks is packed into 6-row panels; op(B) is packed into 16-column panels
 * once per K block (a transposed B, q @ k^T, with 8x8 register
 * transposes). It also beats OpenBLAS slightly on the linear layers' row
 * blocks (lt_sgemm_small_ok has the measured rules), and a few rows times
 * a wide transposed B as C^T (sgemm_swapped). Built for AVX2 + FMA
 * only (the library is built with -march=native); elsewhere
 * lt_sgemm_small_ok() says no and callers keep BLAS.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "kutil.h"
#include "options.h"

/* The product through OpenBLAS (serial): no scratch of ours needed. */
static void blas_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                       int64_t ldc)
{
    lt_kutil_blas_serial();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR 6
#define NR 16
#define KC 256          /* a B panel of KC x NR floats = 16 KiB: stays in L1 */
#define MC 120          /* rows of A per block: MC x KC floats = 120 KiB, in L2 */

/* 8 rows of 8 floats (src, row stride ld) transposed into dst (row stride
 * dld): dst[k * dld + r] = src[r * ld + k]. */
static inline void transpose8(const float *src, int64_t ld, float *dst, int64_t dld)
{
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ld);
    __m256 r2 = _mm256_loadu_ps(src + 2 * ld), r3 = _mm256_loadu_ps(src + 3 * ld);
    __m256 r4 = _mm256_loadu_ps(src + 4 * ld), r5 = _mm256_loadu_ps(src + 5 * ld);
    __m256 r6 = _mm256_loadu_ps(src + 6 * ld), r7 = _mm256_loadu_ps(src + 7 * ld);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + dld, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * dld, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * dld, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * dld, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * dld, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * dld, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * dld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* Rows [i0, i0+mc) x K-columns [k0, k0+kc) of a transposed op(A)
 * (op(A)(i, k) = A[k * lda + i]) into panels of MR rows: panel p holds, for
 * each k, the MR values of rows i0+p*MR.. (past mc: not written, never
 * read: the micro-kernel repeats the last valid row). */
static void pack_at(const float *A, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
                    float *dst)
{
    for (int64_t p = 0; p < mc; p += MR, dst += kc * MR) {
        int64_t mr = mc - p < MR ? mc - p : MR;
        const float *src = A + k0 * lda + i0 + p;
        if (mr == MR)
            for (int64_t k = 0; k < kc; k++) memcpy(dst + k * MR, src + k * lda, MR * sizeof *dst);
        else
            for (int64_t k = 0; k < kc; k++)
                for (int64_t r = 0; r < mr; r++) dst[k * MR + r] = src[k * lda + r];
    }
}

/* K-rows [k0, k0+kc) x columns [j0, j0+nr) (nr <= NR) of op(B) into a panel
 * of kc x NR floats, zero past nr: dst[k * NR + c] = op(B)(k0+k, j0+c). */
static void pack_b(int tb, const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0,
                   int64_t nr, float *dst)
{
    if (!tb) {
        if (nr == NR) {     /* two vector copies per row (scalar: ~20% of a
                               K = 64 product's time went to packing) */
            const float *src = B + k0 * ldb + j0;
            for (int64_t k = 0; k < kc; k++, src += ldb) {
                _mm256_store_ps(dst + k * NR, _mm256_loadu_ps(src));
                _mm256_store_ps(dst + k * NR + 8, _mm256_loadu_ps(src + 8));
            }
            return;
        }
        for (int64_t k = 0; k < kc; k++) {
            const float *src = B + (k0 + k) * ldb + j0;
            int64_t c = 0;
            for (; c < nr; c++) dst[k * NR + c] = src[c];
            for (; c < NR; c++) dst[k * NR + c] = 0.0f;
        }
        return;
    }
    /* op(B)(k, j) = B[j * ldb + k]: rows of B become columns of the panel */
    int64_t c = 0;
    for (; c + 8 <= nr; c += 8) {
        const float *src = B + (j0 + c) * ldb + k0;
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) transpose8(src + k, ldb, dst + k * NR + c, NR);
        for (; k < kc; k++)
            for (int64_t r = 0; r < 8; r++) dst[k * NR + c + r] = src[r * ldb + k];
    }
    for (; c < nr; c++) {
        const float *src = B + (j0 + c) * ldb + k0;
        for (int64_t k = 0; k < kc; k++) dst[k * NR + c] = src[k];
    }
    for (; c < NR; c++)
        for (int64_t k = 0; k < kc; k++) dst[k * NR + c] = 0.0f;
}

/* The MR x NR tile at c (leading dimension ldc; mr x nr of it valid) gets
 * op(A)'s rows at a (row r, step k at a[r * ars + k * aks]; rows past mr
 * repeat row mr-1 and are dropped) times the packed kc x NR panel at b
 * (32-byte aligned): stored over C when acc is 0,
 * added to C when 1. */
static inline __attribute__((always_inline)) void ukernel(int64_t kc, const float *a, int64_t ars, int64_t aks, int64_t mr,
                    const float *restrict b, float *c, int64_t ldc, int acc, int64_t nr, int tr)
{
    const float *a0 = a, *a1 = a + (mr > 1 ? 1 : 0) * ars, *a2 = a + (mr > 2 ? 2 : mr - 1) * ars;
    const float *a3 = a + (mr > 3 ? 3 : mr - 1) * ars, *a4 = a + (mr > 4 ? 4 : mr - 1) * ars;
    const float *a5 = a + (mr > 5 ? 5 : mr - 1) * ars;
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        __m256 av = _mm256_broadcast_ss(a0);
        c00 = _mm256_fmadd_ps(av, b0, c00);
        c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(a1);
        c10 = _mm256_fmadd_ps(av, b0, c10);
        c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(a2);
        c20 = _mm256_fmadd_ps(av, b0, c20);
        c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(a3);
        c30 = _mm256_fmadd_ps(av, b0, c30);
        c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(a4);
        c40 = _mm256_fmadd_ps(av, b0, c40);
        c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(a5);
        c50 = _mm256_fmadd_ps(av, b0, c50);
        c51 = _mm256_fmadd_ps(av, b1, c51);
        a0 += aks; a1 += aks; a2 += aks; a3 += aks; a4 += aks; a5 += aks;
        b += NR;
    }
    if (tr) {     /* the tile is of C^T: column r of C gets row r (lt_sgemm_small's swap) */
        float tile[8][NR] __attribute__((aligned(32))), tt[NR][8];
        __m256 z = _mm256_setzero_ps();
        _mm256_store_ps(tile[0], c00); _mm256_store_ps(tile[0] + 8, c01);
        _mm256_store_ps(tile[1], c10); _mm256_store_ps(tile[1] + 8, c11);
        _mm256_store_ps(tile[2], c20); _mm256_store_ps(tile[2] + 8, c21);
        _mm256_store_ps(tile[3], c30); _mm256_store_ps(tile[3] + 8, c31);
        _mm256_store_ps(tile[4], c40); _mm256_store_ps(tile[4] + 8, c41);
        _mm256_store_ps(tile[5], c50); _mm256_store_ps(tile[5] + 8, c51);
        _mm256_store_ps(tile[6], z); _mm256_store_ps(tile[6] + 8, z);
        _mm256_store_ps(tile[7], z); _mm256_store_ps(tile[7] + 8, z);
        transpose8(tile[0], NR, tt[0], 8);
        transpose8(tile[0] + 8, NR, tt[8], 8);
        static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
        __m256i m = _mm256_loadu_si256((const __m256i *)(ones + 8 - mr));
        for (int64_t q = 0; q < nr; q++) {
            float *dst = c + q * ldc;
            __m256 v = _mm256_loadu_ps(tt[q]);
            if (acc) v = _mm256_add_ps(v, _mm256_maskload_ps(dst, m));
            _mm256_maskstore_ps(dst, m, v);
        }
        return;
    }
    if (nr == NR && mr == MR) {     /* a whole tile: straight from registers */
#define LT_SG_ROW(r, x0, x1)                                                   \
        do {                                                                   \
            float *row = c + (r) * ldc;                                        \
            if (acc) {                                                         \
                x0 = _mm256_add_ps(x0, _mm256_loadu_ps(row));                  \
                x1 = _mm256_add_ps(x1, _mm256_loadu_ps(row + 8));              \
            }                                                                  \
            _mm256_storeu_ps(row, x0);                                         \
            _mm256_storeu_ps(row + 8, x1);                                     \
        } while (0)
        LT_SG_ROW(0, c00, c01);
        LT_SG_ROW(1, c10, c11);
        LT_SG_ROW(2, c20, c21);
        LT_SG_ROW(3, c30, c31);
        LT_SG_ROW(4, c40, c41);
        LT_SG_ROW(5, c50, c51);
#undef LT_SG_ROW
        return;
    }
    __m256 t[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    if (nr == NR) {
        for (int64_t r = 0; r < mr; r++) {
            float *row = c + r * ldc;
            if (acc) {
                t[r][0] = _mm256_add_ps(t[r][0], _mm256_loadu_ps(row));
                t[r][1] = _mm256_add_ps(t[r][1], _mm256_loadu_ps(row + 8));
            }
            _mm256_storeu_ps(row, t[r][0]);
            _mm256_storeu_ps(row + 8, t[r][1]);
        }
        return;
    }
    float tile[MR][NR];
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(tile[r], t[r][0]);
        _mm256_storeu_ps(tile[r] + 8, t[r][1]);
    }
    for (int64_t r = 0; r < mr; r++) {
        float *row = c + r * ldc;
        if (acc) for (int64_t j = 0; j < nr; j++) row[j] += tile[r][j];
        else for (int64_t j = 0; j < nr; j++) row[j] = tile[r][j];
    }
}

/* LAZYTPU_SMALL_GEMM=0: every product through OpenBLAS (A/B runs, and a
 * way around this kernel should it ever be wrong); read once. */
static int small_enabled(void)
{
    return (int)lt_opt_int(LT_OPT_SMALL_GEMM);     /* PROCESS: read once */
}

int lt_sgemm_small_ok(int ta, int64_t M, int64_t N, int64_t K)
{
    /* Measured against single-threaded OpenBLAS 0.3.21 on Zen 3, same
     * loop (bench_core's "small gemm" rows; time per product 0.78-0.90x
     * for the attention products [128,64] x [64,128], [128,128] x
     * [128,64] in their transposes; the seq-64 / 32-wide heads'
     * [64,32] x [32,64], [64,64] x [64,32] in their transposes ran at
     * 0.92-1.06x MKL's time, OpenBLAS at 1.18-1.40x; 32^3 at 1.03-1.10x
     * against OpenBLAS's 1.36-1.46x, thread CPU time, 2026-11-27):
     * behind below 32^3 (our scratch allocation and edge tiles cost
     * more than its call overhead), for N not a multiple of 16 (partial panels: 128 x 24 x 64 ran at 1.18x)
     * and for M < 32. With a row-major A it stays ahead at the
     * transformer's linear-layer blocks (1024 rows x 256-1024 x 256-1024,
     * either B layout: 0.93-0.99x, quiet machine); with a transposed A
     * and a long K (weight gradients, 192 x 256 x 4096) it is behind
     * (1.03-1.12x), so those stay on OpenBLAS above 256^3. */
    double mnk = (double)M * N * K;
    if (!small_enabled() || N % 16 != 0 || M < 32 || K < 16 || mnk < 32.0 * 32 * 32)
        return 0;
    if (!ta && K <= 1024 && N <= 1024) return 1;
    /* a transposed A over a short K (the MLP's weight gradient, K = batch
     * 64: [64..512, 64]^T x [64, 784] at 0.96-1.04x MKL's thread time,
     * OpenBLAS 1.10-1.18x; 64 x 2048 x 64 0.88x vs 0.95x) */
    if (ta && K <= 128 && N <= 2048) return 1;
    return M <= 512 && N <= 512 && K <= 1024 && mnk <= 256.0 * 256 * 256;
}

/* A few rows times a wide transposed B (x[32, 784] @ W[256, 784]^T: a
 * linear layer's forward on one core's share of a batch split eight ways)
 * computed as C^T = B op(A)^T: B's rows are read in place as the six
 * broadcast streams and only op(A)'s few rows are packed (25K floats, not
 * W's 200K: packing W took ~17% of the product's time at 32 rows, the last
 * 6-row tile of 32 rows another ~11%); every tile runs the whole K (a
 * panel of K x 16 floats, from L2) and is stored transposed once. Measured
 * (thread CPU time, quiet machine) in lt_sgemm_small's comment. */
static int swap_ok(int ta, int tb, int64_t M, int64_t N, int64_t K)
{
    /* time per product against the plain path (thread CPU, best of 40x10,
     * 2026-11-28): 32 x 256 x 784 0.74-0.80x, 16 x 256 x 784 0.68x,
     * 8 x 256 x 784 0.90x, 32 x 512 x 784 0.74x, 32 x 128 x 784 0.85x,
     * 32 x 256 x 256 0.88x, 32 x 256 x 128 0.98x; behind at 24 rows (a
     * panel of 8 of 16 columns: 1.08x), 33 rows (1.26x), K = 64 (1.45x);
     * even at 64 rows (0.93-1.03x) */
    return !ta && tb && (M <= 16 || M == 32) && N >= 4 * M && K >= 128 && K <= 1024;
}

static void sgemm_swapped(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    float *panel = NULL;
    if (posix_memalign((void **)&panel, 64, (size_t)(K * NR) * sizeof(float)) != 0) {
        blas_sgemm(0, 1, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (beta != 0.0f && beta != 1.0f)     /* then accumulate onto beta*C */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] *= beta;
    int acc = beta != 0.0f;
    for (int64_t i0 = 0; i0 < M; i0 += NR) {
        int64_t nr = M - i0 < NR ? M - i0 : NR;
        pack_b(1, A, lda, 0, K, i0, nr, panel);     /* op(A)^T's columns i0.. */
        for (int64_t j0 = 0; j0 < N; j0 += MR) {
            int64_t mr = N - j0 < MR ? N - j0 : MR;
            ukernel(K, B + j0 * ldb, ldb, 1, mr, panel, C + i0 * ldc + j0, ldc, acc, nr, 1);
        }
    }
    free(panel);
}

void lt_sgemm_small(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++) {
            if (beta == 0.0f) memset(C + i * ldc, 0, (size_t)N * sizeof *C);
            else for (int64_t j = 0; j < N; j++) C[i * ldc + j] *= beta;
        }
        return;
    }
    if (swap_ok(ta, tb, M, N, K)) {
        sgemm_swapped(M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* op(A) is read in place (six broadcast streams, one per row, or one
     * stream of 6 when transposed), except a transposed op(A) over several
     * K blocks, packed per block into panels of MR rows (in place, each
     * step k touches a new cache line for 6 of its 16 floats: 256 x 256 x
     * 4096 ran at 1.10x OpenBLAS's time; packed at one K block, 128 x 64 x
     * 128 went from 0.90x to 1.0x).
     * op(B) is packed per K block into 16-column panels (read in place, a
     * row-major B with a leading dimension of a few KiB maps its panel
     * rows onto two L1 sets: 512 x 512 x 256 ran at 0.85x OpenBLAS's speed
     * that way, 1.0x packed). */
    /* K blocks of equal length (<= KC): 784 as 4 x 196, not 3 x 256 + a
     * block of 16 that loads and stores every C tile for 16 steps */
    int64_t nkb = (K + KC - 1) / KC, kcap = (K + nkb - 1) / nkb, mcap = M < MC ? M : MC;
    int64_t npan = (N + NR - 1) / NR;
    size_t bsz = (size_t)(npan * kcap * NR) * sizeof(float);
    int packa = ta && nkb > 1;
    size_t asz = packa ? (size_t)(((mcap + MR - 1) / MR * MR) * kcap) * sizeof(float) : 0;
    float *pb = NULL;
    if (posix_memalign((void **)&pb, 64, bsz + asz) != 0) {
        /* out of memory: BLAS does the product without scratch of ours */
        blas_sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (beta != 0.0f && beta != 1.0f)     /* then accumulate onto beta*C */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] *= beta;
    float *pa = (float *)((char *)pb + bsz);
    for (int64_t pc = 0; pc < K; pc += kcap) {
        int64_t kc = K - pc < kcap ? K - pc : kcap;
        int acc = pc > 0 || beta != 0.0f;
        for (int64_t q = 0; q < npan; q++)
            pack_b(tb, B, ldb, pc, kc, q * NR, N - q * NR < NR ? N - q * NR : NR,
                   pb + q * kc * NR);
        for (int64_t ic = 0; ic < M; ic += MC) {
            int64_t mc = M - ic < MC ? M - ic : MC;
            if (packa) pack_at(A, lda, ic, mc, pc, kc, pa);
            for (int64_t jr = 0; jr < N; jr += NR) {
                int64_t nr = N - jr < NR ? N - jr : NR;
                const float *bp = pb + jr / NR * kc * NR;
                for (int64_t ir = 0; ir < mc; ir += MR) {
                    int64_t mr = mc - ir < MR ? mc - ir : MR;
                    float *cp = C + (ic + ir) * ldc + jr;
                    /* three calls: each one specialised on its strides */
                    if (packa)
                        ukernel(kc, pa + ir * kc, 1, MR, mr, bp, cp, ldc, acc, nr, 0);
                    else if (ta)
                        ukernel(kc, A + pc * lda + ic + ir, 1, lda, mr, bp, cp, ldc, acc, nr, 0);
                    else
                        ukernel(kc, A + (ic + ir) * lda + pc, lda, 1, mr, bp, cp, ldc, acc, nr, 0);
                }
            }
        }
    }
    free(pb);
}

#else  /* no AVX2/FMA at build time: BLAS does every product */

int lt_sgemm_small_ok(int ta, int64_t M, int64_t N, int64_t K)
{
    (void)ta; (void)M; (void)N; (void)K;
    return 0;
}

void lt_sgemm_small(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    blas_sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

#endif
