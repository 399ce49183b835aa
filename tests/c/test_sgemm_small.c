/* tests/c/test_sgemm_small.c — lazy/kernels/sgemm_small.c (the own f32
 * kernel for small products) against a double-precision reference: every
 * transpose pair, edge tiles in M and N (not multiples of 6 / 16), K across
 * the 256 block, leading dimensions larger than the matrix, beta 0 / 1 /
 * other, the few-rows NT products computed as C^T, C's untouched columns past N; and lt_kutil_gemm's dispatch (it
 * must give the same values as OpenBLAS where the kernel is chosen);
 * lt_kutil_gemm_par's split of a long-K product over workers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "kutil.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* op(X)(i, k) of a row-major matrix with leading dimension ld. */
static double at(const float *X, int t, int64_t ld, int64_t i, int64_t k)
{
    return t ? X[k * ld + i] : X[i * ld + k];
}

/* Runs one product through lt_sgemm_small and checks every element of C
 * (and C's padding columns, which must not change) against double. */
static void check_one(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t pad, float beta)
{
    unsigned seed = (unsigned)(M * 131 + N * 17 + K * 7 + ta * 3 + tb);
    int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    int64_t arows = ta ? K : M, brows = tb ? N : K;
    float *A = malloc(sizeof(float) * (size_t)(arows * lda + 1));
    float *B = malloc(sizeof(float) * (size_t)(brows * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    float *C0 = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    assert_non_null(A); assert_non_null(B); assert_non_null(C); assert_non_null(C0);
    for (int64_t i = 0; i < arows * lda; i++) A[i] = frand(&seed);
    for (int64_t i = 0; i < brows * ldb; i++) B[i] = frand(&seed);
    for (int64_t i = 0; i < M * ldc; i++) C0[i] = C[i] = frand(&seed);
    lt_sgemm_small(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < ldc; j++) {
            float got = C[i * ldc + j];
            if (j >= N) {   /* padding: untouched */
                assert_true(got == C0[i * ldc + j]);
                continue;
            }
            double ref = beta == 0.0f ? 0.0 : (double)beta * C0[i * ldc + j];
            double mag = fabs(ref);
            for (int64_t k = 0; k < K; k++) {
                double p = at(A, ta, lda, i, k) * at(B, tb, ldb, k, j);
                ref += p;
                mag += fabs(p);
            }
            /* f32 accumulation: K roundings of partial sums bounded by mag */
            double tol = 2e-7 * (double)(K + 2) * mag + 1e-30;
            if (fabs(got - ref) > tol) {
                print_error("ta=%d tb=%d M=%lld N=%lld K=%lld pad=%lld beta=%g: C[%lld,%lld] "
                            "= %.9g, want %.9g (tol %.3g)\n", ta, tb, (long long)M,
                            (long long)N, (long long)K, (long long)pad, beta, (long long)i,
                            (long long)j, got, ref, tol);
                fail();
            }
        }
    }
    free(A); free(B); free(C); free(C0);
}

static void test_shapes_and_transposes(void **state)
{
    (void)state;
    static const int64_t shapes[][3] = {
        {128, 128, 64}, {128, 64, 128}, {64, 128, 128}, /* attention heads */
        {64, 64, 32}, {64, 32, 64}, {32, 32, 32},       /* seq 64, 32-wide heads */
        {64, 784, 64}, {40, 1040, 128},                 /* wide, short K (MLP dW) */
        {6, 16, 1}, {1, 1, 1}, {7, 17, 9},              /* one tile, edges */
        {13, 33, 300}, {100, 37, 300},                  /* K over one 256 block */
        {121, 48, 513}, {5, 70, 8},                     /* M past the 120-row block */
        {32, 256, 784}, {16, 70, 130}, {5, 33, 129},    /* NT: computed as C^T */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                check_one(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 0, 0.0f);
}

static void test_leading_dims_and_beta(void **state)
{
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_one(ta, tb, 40, 35, 70, 5, 0.0f);
            check_one(ta, tb, 40, 35, 70, 3, 1.0f);        /* accumulate */
            check_one(ta, tb, 29, 64, 260, 0, 1.0f);       /* accumulate over K blocks */
            check_one(ta, tb, 29, 64, 20, 7, -0.5f);       /* general beta */
            check_one(ta, tb, 32, 130, 200, 3, 1.0f);      /* C^T (NT), accumulate */
            check_one(ta, tb, 12, 50, 140, 2, -0.5f);      /* C^T, a partial panel */
        }
}

static void test_k_zero(void **state)
{
    (void)state;
    float C[6] = {1, 2, 3, 4, 5, 6}, A[1] = {0}, B[1] = {0};
    lt_sgemm_small(0, 0, 2, 3, 0, A, 1, B, 3, 1.0f, C, 3);   /* C = 1*C */
    for (int i = 0; i < 6; i++) assert_true(C[i] == (float)(i + 1));
    lt_sgemm_small(0, 0, 2, 3, 0, A, 1, B, 3, 0.0f, C, 3);   /* C = 0 */
    for (int i = 0; i < 6; i++) assert_true(C[i] == 0.0f);
}

/* lt_kutil_gemm picks the kernel for the attention shapes (when it is
 * built): bit for bit lt_sgemm_small's result, and OpenBLAS's to f32
 * rounding. */
static void test_dispatch_matches_blas(void **state)
{
    (void)state;
    int64_t M = 128, N = 128, K = 64;
    if (!lt_sgemm_small_ok(0, M, N, K)) skip();   /* not built (no AVX2/FMA) or disabled */
    assert_false(lt_sgemm_small_ok(0, 128, 24, 64));     /* partial panels: BLAS */
    assert_false(lt_sgemm_small_ok(0, 2048, 2048, 2048));
    assert_false(lt_sgemm_small_ok(1, 192, 256, 4096));   /* weight gradient: BLAS */
    unsigned seed = 7;
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(N * K));
    float *C1 = malloc(sizeof(float) * (size_t)(M * N)), *C2 = malloc(sizeof(float) * (size_t)(M * N));
    float *C3 = malloc(sizeof(float) * (size_t)(M * N));
    assert_non_null(A); assert_non_null(B); assert_non_null(C1); assert_non_null(C2);
    assert_non_null(C3);
    for (int64_t i = 0; i < M * K; i++) A[i] = frand(&seed);
    for (int64_t i = 0; i < N * K; i++) B[i] = frand(&seed);
    lt_kutil_gemm(LT_F32, 0, 1, M, N, K, A, K, B, K, 0.0, C1, N);
    lt_kutil_blas_serial();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, A,
                (int)K, B, (int)K, 0.0f, C2, (int)N);
    lt_sgemm_small(0, 1, M, N, K, A, K, B, K, 0.0f, C3, N);
    assert_memory_equal(C1, C3, sizeof(float) * (size_t)(M * N));
    for (int64_t i = 0; i < M * N; i++) assert_true(fabsf(C1[i] - C2[i]) <= 1e-5f * (float)K);
    free(A); free(B); free(C1); free(C2); free(C3);
}

/* lt_kutil_gemm_par splits a long-K product (a weight gradient) along K:
 * worker 0 accumulates into C, the others into partials added at the end.
 * Values against double for beta 0, 1 and 0.5, f32 and f64, transposed A
 * (the weight-gradient layout) and not; a short K takes the M/N split. */
static void check_par(lt_dtype dt, int ta, int64_t M, int64_t N, int64_t K, double beta)
{
    static const lt_kernel_ctx ctx = {0, 2};
    unsigned seed = (unsigned)(M + 7 * N + 13 * K + ta);
    size_t es = dt == LT_F64 ? 8 : 4;
    int64_t lda = ta ? M : K;
    double *Ad = malloc(sizeof(double) * (size_t)(M * K)), *Bd = malloc(sizeof(double) * (size_t)(K * N));
    double *C0 = malloc(sizeof(double) * (size_t)(M * N));
    char *A = malloc(es * (size_t)(M * K)), *B = malloc(es * (size_t)(K * N)), *C = malloc(es * (size_t)(M * N));
    assert_non_null(Ad); assert_non_null(Bd); assert_non_null(C0);
    assert_non_null(A); assert_non_null(B); assert_non_null(C);
    for (int64_t i = 0; i < M * K; i++) Ad[i] = frand(&seed);
    for (int64_t i = 0; i < K * N; i++) Bd[i] = frand(&seed);
    for (int64_t i = 0; i < M * N; i++) C0[i] = frand(&seed);
    for (int64_t i = 0; i < M * K; i++) {
        if (dt == LT_F64) ((double *)A)[i] = Ad[i]; else ((float *)A)[i] = (float)Ad[i];
    }
    for (int64_t i = 0; i < K * N; i++) {
        if (dt == LT_F64) ((double *)B)[i] = Bd[i]; else ((float *)B)[i] = (float)Bd[i];
    }
    for (int64_t i = 0; i < M * N; i++) {
        if (dt == LT_F64) ((double *)C)[i] = C0[i]; else ((float *)C)[i] = (float)C0[i];
    }
    lt_kutil_gemm_par(&ctx, 2, dt, ta, 0, M, N, K, A, lda, B, N, beta, C, N);
    for (int64_t i = 0; i < M; i++)
        for (int64_t n = 0; n < N; n++) {
            double ref = beta == 0.0 ? 0.0 : beta * (dt == LT_F64 ? C0[i * N + n] : (double)(float)C0[i * N + n]);
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? Ad[k * lda + i] : Ad[i * lda + k], b = Bd[k * N + n];
                if (dt != LT_F64) { a = (float)a; b = (float)b; }
                ref += a * b;
            }
            double got = dt == LT_F64 ? ((double *)C)[i * N + n] : ((float *)C)[i * N + n];
            double tol = (dt == LT_F64 ? 1e-12 : 2e-5) * (double)K;
            if (fabs(got - ref) > tol) {
                print_error("dt=%d ta=%d %lldx%lldx%lld beta=%g: C[%lld,%lld] = %.9g, want %.9g\n",
                            (int)dt, ta, (long long)M, (long long)N, (long long)K, beta,
                            (long long)i, (long long)n, got, ref);
                fail();
            }
        }
    free(Ad); free(Bd); free(C0); free(A); free(B); free(C);
}

static void test_gemm_par_k_split(void **state)
{
    (void)state;
    for (int ta = 0; ta < 2; ta++) {
        check_par(LT_F32, ta, 48, 40, 2048, 0.0);
        check_par(LT_F32, ta, 48, 40, 2048, 1.0);    /* accumulate (conv weight gradient) */
        check_par(LT_F32, ta, 33, 17, 3001, 0.5);
        check_par(LT_F64, ta, 20, 36, 2100, 0.0);
        check_par(LT_F64, ta, 20, 36, 2100, 1.0);
        check_par(LT_F32, ta, 300, 200, 64, 1.0);    /* short K: M/N split */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes_and_transposes),
        cmocka_unit_test(test_leading_dims_and_beta),
        cmocka_unit_test(test_k_zero),
        cmocka_unit_test(test_dispatch_matches_blas),
        cmocka_unit_test(test_gemm_par_k_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
