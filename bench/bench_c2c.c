/*
 * bench/bench_c2c.c — core-to-core latency: two threads pinned to CPUs a
 * and b hand one cache line back and forth; prints the nanoseconds of a
 * round trip (the median of 5 trials of `trips` round trips each).
 *
 *   build/bench_c2c [a b [trips]]      (default: CPUs 0 and 1, 20000 trips)
 *
 * Why: this VM's two vCPUs sometimes sit far apart on the host for minutes
 * (a round trip of ~320 ns instead of ~55 ns). Every kernel that two
 * threads share then runs 2-2.5x slower, lazytpu's and eager's alike, and
 * a benchmark run falls on the slow "level" (issue 25).
 * bench/step_latency.py runs this after every run and prints the figure
 * beside the run's step time, so a slow run can be told from a slow change.
 * Output: one line, the round trip in ns (0 if the threads could not be
 * pinned: fewer than two CPUs allowed).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) atomic_int ball;   /* 1: at the far thread, 0: back home */
static long trips = 20000;
static int cpu_a = 0, cpu_b = 1;

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *far_side(void *unused)
{
    (void)unused;
    (void)pin(cpu_b);                     /* unpinned, it still plays */
    for (;;) {
        int v;
        while ((v = atomic_load_explicit(&ball, memory_order_acquire)) == 0)
            ;
        if (v < 0)
            return NULL;                  /* done */
        atomic_store_explicit(&ball, 0, memory_order_release);
    }
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    if (argc >= 3) {
        cpu_a = atoi(argv[1]);
        cpu_b = atoi(argv[2]);
    }
    if (argc >= 4)
        trips = atol(argv[3]);
    if (trips < 1)
        trips = 1;
    if (pin(cpu_a) != 0) {
        puts("0");
        return 0;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, far_side, NULL) != 0) {
        puts("0");
        return 0;
    }
    double trial[5];
    for (int r = -1; r < 5; r++) {           /* r = -1: warm-up */
        double t0 = now_ns();
        for (long i = 0; i < trips; i++) {
            atomic_store_explicit(&ball, 1, memory_order_release);
            while (atomic_load_explicit(&ball, memory_order_acquire) != 0)
                ;
        }
        if (r >= 0)
            trial[r] = (now_ns() - t0) / (double)trips;
    }
    atomic_store_explicit(&ball, -1, memory_order_release);
    pthread_join(t, NULL);
    qsort(trial, 5, sizeof trial[0], cmp);
    printf("%.0f\n", trial[2]);
    return 0;
}
