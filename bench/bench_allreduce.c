/*
 * bench/bench_allreduce.c — 64 MB f32 all-reduce over 8 processes (one per
 * simulated core) on the shared-memory world, against memcpy of 64 MB.
 *
 * Reports, per all-reduce: time; algorithm bandwidth (bytes / time, what
 * one rank sees); aggregate bandwidth (N * bytes / time: the data all
 * simulated cores reduce per second), each as a fraction of single-process
 * memcpy bandwidth. The design target (>= 0.5x) is about the aggregate:
 * all N processes share this machine's few physical cores, and each must
 * at least copy its input in and the result out, so per-rank algbw cannot
 * exceed ~cores/(2.6*N) of memcpy here.
 *   env BENCH_MB (64), BENCH_NPROCS (8), BENCH_ITERS (5)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../spawn/world.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int env_int(const char *n, int d)
{
    const char *s = getenv(n);
    return s && *s ? atoi(s) : d;
}

int main(void)
{
    int mb = env_int("BENCH_MB", 64), N = env_int("BENCH_NPROCS", 8);
    int iters = env_int("BENCH_ITERS", 5);
    size_t bytes = (size_t)mb << 20;
    int64_t n = (int64_t)(bytes / 4);

    /* memcpy baseline: best of 5 */
    float *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best_cp = 1e9;
    for (int i = 0; i < 5; i++) {
        double t = now_s();
        memcpy(b, a, bytes);
        t = now_s() - t;
        if (t < best_cp) best_cp = t;
    }
    free(a);
    free(b);

    lt_world *w = NULL;
    if (lt_world_create(N, 0, &w) != LT_OK) {
        fprintf(stderr, "%s\n", lt_last_error());
        return 1;
    }
    double *times = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    for (int r = 0; r < N; r++) {
        if (fork() == 0) {
            lt_world *cw = NULL;
            if (lt_world_attach(lt_world_name(w), r, N, &cw) != LT_OK) _exit(1);
            float *x = malloc(bytes);
            for (int64_t i = 0; i < n; i++) x[i] = (float)((i + r) % 7);
            /* warm up (touches the shm pages) */
            if (lt_world_all_reduce(cw, x, x, n, LT_F32, LT_REDUCE_SUM, 1.0, NULL)) _exit(2);
            double best = 1e9;
            for (int it = 0; it < iters; it++) {
                lt_world_barrier(cw);
                double t = now_s();
                if (lt_world_all_reduce(cw, x, x, n, LT_F32, LT_REDUCE_SUM,
                                        1.0 / N, NULL)) _exit(3);
                lt_world_barrier(cw);
                t = now_s() - t;
                if (t < best) best = t;
            }
            times[r] = best;
            _exit(0);
        }
    }
    int ok = 1;
    for (int r = 0; r < N; r++) {
        int st;
        wait(&st);
        ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    lt_world_unlink(w);
    lt_world_close(w);
    if (!ok) {
        fprintf(stderr, "bench_allreduce: a rank failed\n");
        return 1;
    }
    double t = times[0];
    double cp_bw = bytes / best_cp / 1e9, ar_bw = bytes / t / 1e9;
    printf("bench_allreduce: %d MB f32 over %d processes: %.2f ms; memcpy "
           "%.2f ms (%.2f GB/s)\n  algbw %.2f GB/s = %.3fx memcpy; aggregate "
           "%.2f GB/s = %.2fx memcpy (target >= 0.5x)\n",
           mb, N, t * 1e3, best_cp * 1e3, cp_bw, ar_bw, ar_bw / cp_bw,
           ar_bw * N, ar_bw * N / cp_bw);
    return 0;
}
