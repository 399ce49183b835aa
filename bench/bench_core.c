/* bench/bench_core.c — core costs of lazytpu against the targets of
 * DESIGN.md §7:
 *   trace       ns per traced op (a 100k-op chain on a [4] tensor)
 *   cache hit   trace + sync of an already-compiled 1000-node graph on [4]
 *               tensors (sync with wait=0: capture + hash + lookup + queue)
 *   compile     uncached compile of a 1000-node graph (CompileTime metric)
 *   fused       8 elementwise ops on 4M floats in one graph vs the same 8 ops
 *               synced one by one (eager-like: one pass per op)
 *   matmul      1024^3 f32 via lt_trace(mm) + sync vs direct cblas_sgemm
 *   small gemm  the attention heads' products (one thread): lazytpu's own
 *               kernel (lazy/kernels/sgemm_small.c) vs cblas_sgemm
 * Usage: bench_core [reps-scale]   (prints one table) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"
#include "kutil.h"   /* lt_sgemm_small */

static double now_s(void) { return (double)lt_now_ns() * 1e-9; }

#define CHECK(x) do { lt_status st_ = (x); if (st_ != LT_OK) { \
    fprintf(stderr, "bench_core: %s failed: %s\n", #x, lt_last_error()); exit(1); } } while (0)

static lt_tensor *make(int64_t n, float val)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = val + (float)(i % 7) * 0.01f;
    lt_shape s = lt_shape_make(1, &n);
    lt_tensor *t;
    CHECK(lt_tensor_from_host(0, h, LT_F32, &s, &t));
    free(h);
    return t;
}

/* Traces a chain of n binary/unary elementwise ops starting at x (all
 * intermediates released); returns the last tensor. `salt` varies the op
 * pattern so different salts give different graphs. */
static lt_tensor *trace_chain(lt_tensor *x, lt_tensor *y, int n, int salt)
{
    lt_tensor *cur = lt_tensor_retain(x);
    for (int i = 0; i < n; i++) {
        lt_tensor *nx;
        switch ((i + salt) % 4) {
        case 0: CHECK(lt_trace2(LT_OP_add, cur, y, NULL, &nx)); break;
        case 1: CHECK(lt_trace2(LT_OP_mul, cur, y, NULL, &nx)); break;
        case 2: CHECK(lt_trace1(LT_OP_tanh, cur, NULL, &nx)); break;
        default: CHECK(lt_trace2(LT_OP_sub, cur, x, NULL, &nx)); break;
        }
        lt_tensor_release(cur);
        cur = nx;
    }
    return cur;
}

typedef struct row {
    const char *name;
    double value;
    const char *unit;
    const char *target;
    double ratio;        /* NAN: n/a */
    int ok;              /* -1: n/a */
} row;

int main(int argc, char **argv)
{
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    if (scale <= 0) scale = 1.0;
    CHECK(lt_init());
    row rows[32];
    int nr = 0;

    /* ---- 1. per-op trace cost ---- */
    {
        lt_tensor *x = make(4, 0.5f), *y = make(4, 0.25f);
        int n = (int)(100000 * scale);
        lt_tensor *warm = trace_chain(x, y, 1000, 0);
        lt_tensor_release(warm);
        double t0 = now_s();
        lt_tensor *r = trace_chain(x, y, n, 0);
        double t1 = now_s();
        lt_tensor_release(r);       /* never synced: dropped */
        double ns = (t1 - t0) * 1e9 / n;
        /* eager torch 1.13 torch.add on a [4] CPU tensor, called from Python, measured
         * 1.4 us on this box; the C trace excludes the shim, so this is a lower bound */
        rows[nr++] = (row){"trace, per op (C API)", ns, "ns", "<= 1x eager op (~1400 ns)", ns / 1400.0, ns <= 1400};
        lt_tensor_release(x);
        lt_tensor_release(y);
    }

    /* ---- 2. cache hit for a 1000-node graph ---- */
    {
        lt_tensor *x = make(4, 0.5f), *y = make(4, 0.25f);
        int reps = (int)(200 * scale) + 5;
        double best_sync = 1e9, best_total = 1e9, sum_sync = 0;
        int64_t cached0 = lt_counter_value("CachedCompile");
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            lt_tensor *out = trace_chain(x, y, 999, 0);
            double t1 = now_s();
            CHECK(lt_sync(&out, 1, LT_SYNC_EXPLICIT, 0));
            double t2 = now_s();
            CHECK(lt_wait(0));
            lt_tensor_release(out);
            if (r < 2) continue;            /* first compiles */
            if (t2 - t1 < best_sync) best_sync = t2 - t1;
            if (t2 - t0 < best_total) best_total = t2 - t0;
            sum_sync += t2 - t1;
        }
        int64_t hits = lt_counter_value("CachedCompile") - cached0;
        double us = best_sync * 1e6;
        rows[nr++] = (row){"cache hit 1000 nodes (sync)", us, "us", "<= 30 us", us / 30.0, us <= 30};
        rows[nr++] = (row){"  mean sync", sum_sync / (reps - 2) * 1e6, "us", "", NAN, -1};
        rows[nr++] = (row){"  trace+sync 1000 nodes", best_total * 1e6, "us", "", NAN, -1};
        if (hits < reps - 2)
            printf("note: CachedCompile grew by %lld over %d repeats\n", (long long)hits, reps);
        lt_tensor_release(x);
        lt_tensor_release(y);
    }

    /* ---- 3. uncached compile of a 1000-node graph ---- */
    {
        int reps = (int)(10 * scale) + 2;
        int64_t s0;
        double a0;
        lt_metric_data("CompileTime", &s0, &a0);
        double wall = 0;
        for (int r = 0; r < reps; r++) {
            /* a new shape each time: a new graph key */
            lt_tensor *x = make(8 + r, 0.5f), *y = make(8 + r, 0.25f);
            lt_tensor *out = trace_chain(x, y, 998, r);
            double t0 = now_s();
            CHECK(lt_sync(&out, 1, LT_SYNC_EXPLICIT, 1));
            wall += now_s() - t0;
            lt_tensor_release(out);
            lt_tensor_release(x);
            lt_tensor_release(y);
        }
        int64_t s1;
        double a1;
        int have = lt_metric_data("CompileTime", &s1, &a1) == 0 && s1 > s0;
        double ms = have ? (a1 - a0) / (double)(s1 - s0) * 1e-6 : wall / reps * 1e3;
        rows[nr++] = (row){have ? "compile 1000 nodes" : "compile 1000 nodes (wall)", ms, "ms",
                           "<= 20 ms", ms / 20.0, ms <= 20};
    }

    /* ---- 4. fused 8-op chain on 4M floats vs 8 single-op syncs; variant 1
     *         replaces tanh by neg (memory-bound only) ---- */
    for (int variant = 0; variant < 2; variant++) {
        int64_t n = 4 << 20;
        lt_tensor *x = make(n, 0.5f);
        lt_tensor *s15, *s05;
        CHECK(lt_scalar(0, 1.5, LT_F64, 1, &s15));
        CHECK(lt_scalar(0, 0.5, LT_F64, 1, &s05));
        int reps = (int)(5 * scale) + 2;
        double best_f = 1e9, best_u = 1e9;
        for (int r = 0; r < reps; r++) {
            for (int fused = 1; fused >= 0; fused--) {
                lt_tensor *cur = lt_tensor_retain(x), *nx;
                double t0 = now_s();
                for (int k = 0; k < 8; k++) {
                    switch (k) {
                    case 0: CHECK(lt_trace2(LT_OP_mul, cur, s15, NULL, &nx)); break;
                    case 1: CHECK(lt_trace2(LT_OP_add, cur, x, NULL, &nx)); break;
                    case 2: CHECK(lt_trace1(variant ? LT_OP_neg : LT_OP_tanh, cur, NULL, &nx)); break;
                    case 3: CHECK(lt_trace2(LT_OP_mul, cur, cur, NULL, &nx)); break;
                    case 4: CHECK(lt_trace2(LT_OP_sub, cur, s05, NULL, &nx)); break;
                    case 5: CHECK(lt_trace1(LT_OP_relu, cur, NULL, &nx)); break;
                    case 6: CHECK(lt_trace2(LT_OP_maximum, cur, x, NULL, &nx)); break;
                    default: CHECK(lt_trace2(LT_OP_add, cur, s15, NULL, &nx)); break;
                    }
                    lt_tensor_release(cur);
                    cur = nx;
                    if (!fused) CHECK(lt_sync(&cur, 1, LT_SYNC_EXPLICIT, 1));
                }
                if (fused) CHECK(lt_sync(&cur, 1, LT_SYNC_EXPLICIT, 1));
                double dt = now_s() - t0;
                lt_tensor_release(cur);
                if (r == 0) continue;       /* compile */
                if (fused && dt < best_f) best_f = dt;
                if (!fused && dt < best_u) best_u = dt;
            }
        }
        rows[nr++] = (row){variant ? "8-op chain (no tanh), fused" : "8-op chain 4M f32, fused",
                           best_f * 1e3, "ms", "", NAN, -1};
        rows[nr++] = (row){variant ? "8-op chain (no tanh), 8 syncs" : "8-op chain 4M f32, 8 syncs",
                           best_u * 1e3, "ms", "", NAN, -1};
        double ratio = best_f / best_u;
        rows[nr++] = (row){"  fused / unfused", ratio, "x", "<= 0.25x", ratio / 0.25, ratio <= 0.25};
        lt_tensor_release(x);
        lt_tensor_release(s15);
        lt_tensor_release(s05);
    }

    /* ---- 5. matmul 1024^3 ---- */
    {
        int64_t N = 1024;
        int64_t d2[2] = {N, N};
        lt_shape s = lt_shape_make(2, d2);
        float *a = malloc(sizeof(float) * N * N), *b = malloc(sizeof(float) * N * N),
              *c = malloc(sizeof(float) * N * N);
        for (int64_t i = 0; i < N * N; i++) {
            a[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
            b[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
        }
        lt_tensor *ta, *tb;
        CHECK(lt_tensor_from_host(0, a, LT_F32, &s, &ta));
        CHECK(lt_tensor_from_host(0, b, LT_F32, &s, &tb));
        int reps = (int)(5 * scale) + 2;
        double best_l = 1e9, best_b = 1e9;
        for (int r = 0; r < reps; r++) {
            lt_tensor *tc;
            double t0 = now_s();
            CHECK(lt_trace2(LT_OP_mm, ta, tb, NULL, &tc));
            CHECK(lt_sync(&tc, 1, LT_SYNC_EXPLICIT, 1));
            double t1 = now_s();
            lt_tensor_release(tc);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)N, (int)N, 1.0f,
                        a, (int)N, b, (int)N, 0.0f, c, (int)N);
            double t2 = now_s();
            if (r == 0) continue;
            if (t1 - t0 < best_l) best_l = t1 - t0;
            if (t2 - t1 < best_b) best_b = t2 - t1;
        }
        double fl = 2.0 * N * N * N;
        rows[nr++] = (row){"matmul 1024^3 lazytpu", fl / best_l * 1e-9, "GFLOP/s", "", NAN, -1};
        rows[nr++] = (row){"matmul 1024^3 cblas_sgemm", fl / best_b * 1e-9, "GFLOP/s", "", NAN, -1};
        double ratio = best_b / best_l;
        rows[nr++] = (row){"  lazytpu / sgemm speed", ratio, "x", ">= 0.85x", ratio / 0.85, ratio >= 0.85};
        lt_tensor_release(ta);
        lt_tensor_release(tb);
        free(a);
        free(b);
        free(c);
    }

    /* ---- 6. the attention heads' products: own kernel vs OpenBLAS ---- */
    {
        /* q @ k^T, att @ v, and the backward's att^T @ g, g @ v^T */
        static const struct { int ta, tb; int64_t M, N, K; const char *name; } sh[] = {
            {0, 1, 128, 128, 64, "small gemm 128x128x64 NT"},
            {0, 0, 128, 64, 128, "small gemm 128x64x128 NN"},
            {1, 0, 128, 64, 128, "small gemm 128x64x128 TN"},
        };
        float *a = malloc(sizeof(float) * 128 * 128), *b = malloc(sizeof(float) * 128 * 128),
              *c = malloc(sizeof(float) * 128 * 128);
        for (int64_t i = 0; i < 128 * 128; i++) {
            a[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
            b[i] = (float)((i * 5) % 11) * 0.1f - 0.5f;
        }
        openblas_set_num_threads(1);   /* one thread each, as the core runs them */
        for (size_t q = 0; q < sizeof sh / sizeof *sh; q++) {
            int64_t M = sh[q].M, N = sh[q].N, K = sh[q].K;
            int64_t lda = sh[q].ta ? M : K, ldb = sh[q].tb ? K : N;
            int reps = (int)(100 * scale) + 10;
            double best_o = 1e9, best_b = 1e9;
            for (int round = 0; round < 15; round++) {  /* alternate: same load on both */
                double t0 = now_s();
                for (int r = 0; r < reps; r++)
                    lt_sgemm_small(sh[q].ta, sh[q].tb, M, N, K, a, lda, b, ldb, 0.0f, c, N);
                double t1 = now_s();
                for (int r = 0; r < reps; r++)
                    cblas_sgemm(CblasRowMajor, sh[q].ta ? CblasTrans : CblasNoTrans,
                                sh[q].tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
                                1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)N);
                double t2 = now_s();
                if ((t1 - t0) / reps < best_o) best_o = (t1 - t0) / reps;
                if ((t2 - t1) / reps < best_b) best_b = (t2 - t1) / reps;
            }
            double ratio = best_o / best_b;
            rows[nr++] = (row){sh[q].name, 2.0 * M * N * K / best_o * 1e-9, "GFLOP/s", "", NAN, -1};
            rows[nr++] = (row){"  own / OpenBLAS time", ratio, "x", "<= 1.0x", ratio, ratio <= 1.0};
        }
        free(a);
        free(b);
        free(c);
    }

    printf("\n%-30s %12s %-8s %-26s %8s %s\n", "benchmark", "value", "unit", "target (DESIGN 7)",
           "vs tgt", "ok");
    printf("%.*s\n", 96, "------------------------------------------------------------------------"
                         "------------------------------------------");
    for (int i = 0; i < nr; i++) {
        char ratio[32] = "";
        if (!isnan(rows[i].ratio)) snprintf(ratio, sizeof ratio, "%.2f", rows[i].ratio);
        printf("%-30s %12.3f %-8s %-26s %8s %s\n", rows[i].name, rows[i].value, rows[i].unit,
               rows[i].target, ratio, rows[i].ok < 0 ? "" : rows[i].ok ? "yes" : "NO");
    }
    printf("vs tgt = value / target: a cost meets its target at <= 1.00, a speed ratio at >= 1.00\n");
    lt_shutdown();
    return 0;
}
