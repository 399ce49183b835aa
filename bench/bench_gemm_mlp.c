/*
 * bench/bench_gemm_mlp.c — the MLP step's f32 products (784-256-10, batch
 * 64), lazytpu's own kernel (lt_sgemm_small) vs OpenBLAS, one thread, and
 * the 2-way split on a helper pool (lt_par_run) the way matmul.c splits
 * them, vs OpenBLAS on 2 threads.
 *
 *   build/bench_gemm_mlp [reps]
 *
 * Rows: GFLOP/s of the best of 15 rounds (one thread: thread CPU time; two: wall) (alternating own / OpenBLAS, so
 * that load hits both alike). Shapes (ta, tb, M, N, K):
 *   fwd      x[64,784] @ W1^T   (0, 1, 64, 256, 784)   addmm + relu
 *   wgrad    g^T[256,64] @ x    (1, 0, 256, 784, 64)   mm + momentum
 *   fwd/4    a column block of fwd (0, 1, 64, 64, 784)
 *   wgrad/4  a row block of wgrad  (1, 0, 64, 784, 64)
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "kutil.h"
#include "par.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* this thread's CPU time: the one-thread rows are less disturbed by load */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct job {
    int ta, tb, split_m;
    int64_t M, N, K, lda, ldb, chunk;
    const float *a, *b;
    float *c;
} job;

static void block(void *arg, int64_t ci, int w)
{
    const job *j = arg;
    (void)w;
    int64_t dim = j->split_m ? j->M : j->N, lo = ci * j->chunk;
    int64_t hi = lo + j->chunk < dim ? lo + j->chunk : dim;
    if (j->split_m)
        lt_kutil_gemm(LT_F32, j->ta, j->tb, hi - lo, j->N, j->K,
                      j->a + (j->ta ? lo : lo * j->lda), j->lda, j->b, j->ldb, 0.0,
                      j->c + lo * j->N, j->N);
    else
        lt_kutil_gemm(LT_F32, j->ta, j->tb, j->M, hi - lo, j->K, j->a, j->lda,
                      j->b + (j->tb ? lo * j->ldb : lo), j->ldb, 0.0, j->c + lo, j->N);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    static const struct { int ta, tb; int64_t M, N, K; int split_m; const char *name; } sh[] = {
        {0, 1, 64, 256, 784, 0, "fwd     64x256x784 NT"},
        {1, 0, 256, 784, 64, 1, "wgrad  256x784x64  TN"},
        {0, 1, 64, 64, 784, 0, "fwd/4   64x64x784  NT"},
        {1, 0, 64, 784, 64, 1, "wgrad/4 64x784x64  TN"},
    };
    size_t cap = 256 * 784 + 64;
    float *a = aligned_alloc(64, cap * 4), *b = aligned_alloc(64, cap * 4),
          *c = aligned_alloc(64, cap * 4), *c2 = aligned_alloc(64, cap * 4);
    for (size_t i = 0; i < cap; i++) {
        a[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
        b[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
    }
    lt_par_pool *pool = lt_par_pool_new();
    printf("%-24s %9s %9s %9s %9s %9s\n", "shape", "own 1t", "blas 1t", "own 2t", "blas 2t",
           "maxdiff");
    for (size_t q = 0; q < sizeof sh / sizeof *sh; q++) {
        int64_t M = sh[q].M, N = sh[q].N, K = sh[q].K;
        int64_t lda = sh[q].ta ? M : K, ldb = sh[q].tb ? K : N;
        double fl = 2.0 * M * N * K, best[4] = {1e9, 1e9, 1e9, 1e9};
        int64_t dim = sh[q].split_m ? M : N, chunk = (dim + 3) / 4;
        job j = {sh[q].ta, sh[q].tb, sh[q].split_m, M, N, K, lda, ldb, chunk, a, b, c};
        for (int round = 0; round < 15; round++) {
            double d[4], t0 = cpu_s();
            for (int r = 0; r < reps; r++)
                lt_sgemm_small(sh[q].ta, sh[q].tb, M, N, K, a, lda, b, ldb, 0.0f, c, N);
            double t1 = cpu_s();
            openblas_set_num_threads(1);
            for (int r = 0; r < reps; r++)
                cblas_sgemm(CblasRowMajor, sh[q].ta ? CblasTrans : CblasNoTrans,
                            sh[q].tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, 1.0f,
                            a, (int)lda, b, (int)ldb, 0.0f, c2, (int)N);
            double t2 = cpu_s(), w0 = now_s();
            for (int r = 0; r < reps; r++) lt_par_run(pool, 2, 4, block, &j);
            double w1 = now_s();
            openblas_set_num_threads(2);
            for (int r = 0; r < reps; r++)
                cblas_sgemm(CblasRowMajor, sh[q].ta ? CblasTrans : CblasNoTrans,
                            sh[q].tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, 1.0f,
                            a, (int)lda, b, (int)ldb, 0.0f, c2, (int)N);
            double w2 = now_s();
            d[0] = t1 - t0; d[1] = t2 - t1; d[2] = w1 - w0; d[3] = w2 - w1;
            for (int k = 0; k < 4; k++)
                if (d[k] / reps < best[k]) best[k] = d[k] / reps;
        }
        float md = 0;
        for (int64_t i = 0; i < M * N; i++) {
            float d = c[i] - c2[i];
            if (d < 0) d = -d;
            if (d > md) md = d;
        }
        printf("%-24s %9.1f %9.1f %9.1f %9.1f %9.2g   GFLOP/s\n", sh[q].name, fl / best[0] * 1e-9,
               fl / best[1] * 1e-9, fl / best[2] * 1e-9, fl / best[3] * 1e-9, md);
    }
    lt_par_pool_free(pool);
    free(a); free(b); free(c); free(c2);
    return 0;
}
