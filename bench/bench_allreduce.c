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
 *
 * Then, in the same run, the same all-reduce through the launcher: one host
 * x 8 cores (`lazytpu-run -n 8`) against two simulated hosts x 4 cores
 * (`lazytpu-run --hosts 2 -n 4`: mpirun on loopback, hierarchical
 * all-reduce through the host proxies), each worker being this program with
 * --worker. Skipped when lazytpu-run was built without MPI.
 *   env BENCH_MB (64), BENCH_NPROCS (8), BENCH_ITERS (5), BENCH_HOSTS (2),
 *   LAZYTPU_BIN_DIR (where lazytpu-run is; default: next to this program)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <limits.h>
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

/* --worker: one rank of a launcher-started world; rank 0 prints the best
 * time as "RESULT <seconds> <inter-host seconds of rank 0>". */
static int worker(int mb, int iters)
{
    lt_world *w = NULL;
    if (lt_world_default(&w) != LT_OK || !w) {
        fprintf(stderr, "bench_allreduce --worker: not under lazytpu-run: %s\n",
                lt_last_error());
        return 1;
    }
    int N = lt_world_size(w), r = lt_world_rank(w);
    int64_t n = ((int64_t)mb << 20) / 4;
    float *x = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i + r) % 7);
    if (lt_world_all_reduce(w, x, x, n, LT_F32, LT_REDUCE_SUM, 1.0, NULL)) return 2;
    double best = 1e9, inter = 0;
    for (int it = 0; it < iters; it++) {
        lt_world_barrier(w);
        int64_t i0 = lt_world_inter_ns(w);
        double t = now_s();
        if (lt_world_all_reduce(w, x, x, n, LT_F32, LT_REDUCE_SUM, 1.0 / N, NULL))
            return 3;
        lt_world_barrier(w);
        t = now_s() - t;
        if (t < best) {
            best = t;
            inter = (lt_world_inter_ns(w) - i0) * 1e-9;
        }
    }
    if (r == 0) printf("RESULT %.6f %.6f\n", best, inter);
    free(x);
    return 0;
}

/* Runs `lazytpu-run <opts> -- <self> --worker` and returns rank 0's best
 * time (inter-host part in *inter), or -1. */
static double launch(const char *opts, double *inter)
{
    char self[PATH_MAX], cmd[3 * PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return -1;
    self[len] = 0;
    const char *bin = getenv("LAZYTPU_BIN_DIR");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", bin && *bin ? bin : self);
    if (!(bin && *bin)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
    }
    snprintf(cmd, sizeof cmd, "'%s/lazytpu-run' %s -- '%s' --worker", dir, opts,
             self);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[256];
    double t = -1;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "RESULT %lf %lf", &t, inter) == 2) {}
    int st = pclose(p);
    return st == 0 ? t : -1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--worker") == 0)
        return worker(env_int("BENCH_MB", 64), env_int("BENCH_ITERS", 5));
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

    /* through the launcher: 1 host x N against H hosts x N/H */
    int H = env_int("BENCH_HOSTS", 2);
    char o1[64], o2[64];
    snprintf(o1, sizeof o1, "-n %d", N);
    snprintf(o2, sizeof o2, "--hosts %d -n %d", H, N / H);
    double i1 = 0, i2 = 0;
    double t1 = launch(o1, &i1);
    double t2 = (H > 1 && N % H == 0) ? launch(o2, &i2) : -1;
    if (t1 > 0)
        printf("  launcher 1 host x %d: %.2f ms, algbw %.2f GB/s, aggregate "
               "%.2fx memcpy\n", N, t1 * 1e3, bytes / t1 / 1e9,
               bytes / t1 * N / 1e9 / cp_bw);
    if (t2 > 0)
        printf("  launcher %d hosts x %d (MPI between host proxies): %.2f ms "
               "(inter-host part %.2f ms), algbw %.2f GB/s, aggregate %.2fx "
               "memcpy; %.2fx the time of 1 x %d\n", H, N / H, t2 * 1e3,
               i2 * 1e3, bytes / t2 / 1e9, bytes / t2 * N / 1e9 / cp_bw,
               t1 > 0 ? t2 / t1 : 0, N);
    else if (H > 1)
        printf("  %d hosts x %d: not measured (lazytpu-run --hosts failed: "
               "built without MPI?)\n", H, N / H);
    return 0;
}
