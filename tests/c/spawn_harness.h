/*
 * tests/c/spawn_harness.h — runs a function on N forked ranks of a fresh
 * world (test_world.c, test_collectives.c). Children never call cmocka: they
 * return 0 (ok) or non-zero with a message in shared memory, and the parent
 * asserts on the collected results.
 */
#ifndef LT_SPAWN_HARNESS_H
#define LT_SPAWN_HARNESS_H

#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "world.h"

typedef struct hr_result {
    int exit_code[LT_WORLD_MAX_RANKS];   /* -signal when killed */
    lt_status status[LT_WORLD_MAX_RANKS]; /* set by the rank function */
    char msg[LT_WORLD_MAX_RANKS][512];
    double elapsed[LT_WORLD_MAX_RANKS];  /* seconds from start to exit */
    double total;                         /* seconds until all exited */
    int killed_by_harness;
} hr_result;

/* Returns 0 = ok; may fill res->status[rank] / res->msg[rank]. */
typedef int (*hr_rank_fn)(lt_world *w, int rank, void *ctx, hr_result *res);
/* Runs in the parent after forking (may abort the world). */
typedef void (*hr_parent_fn)(lt_world *w, void *ctx);

static double hr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Forks n ranks over a new world of `bytes` (0 = default) with barrier
 * timeout `timeout_s`; kills everything after `deadline_s`. Returns a
 * shared-memory result (free with hr_free) or NULL. */
static hr_result *hr_run(int n, size_t bytes, double timeout_s,
                         double deadline_s, hr_rank_fn fn,
                         hr_parent_fn parent, void *ctx)
{
    hr_result *res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED) return NULL;
    memset(res, 0, sizeof *res);
    lt_world *w = NULL;
    if (lt_world_create(n, bytes, &w) != LT_OK) {
        fprintf(stderr, "hr_run: %s\n", lt_last_error());
        munmap(res, sizeof *res);
        return NULL;
    }
    double t0 = hr_now();
    pid_t pids[LT_WORLD_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            lt_world *cw = NULL;
            if (lt_world_attach(lt_world_name(w), r, n, &cw) != LT_OK) {
                snprintf(res->msg[r], sizeof res->msg[r], "attach: %s",
                         lt_last_error());
                _exit(90);
            }
            lt_world_set_timeout(cw, timeout_s);
            int rc = fn(cw, r, ctx, res);
            lt_world_close(cw);
            _exit(rc & 0xff);
        }
    }
    if (parent) parent(w, ctx);
    int left = n;
    while (left > 0) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < n; r++) {
                if (pids[r] != p) continue;
                res->exit_code[r] = WIFEXITED(status) ? WEXITSTATUS(status)
                                                      : -WTERMSIG(status);
                res->elapsed[r] = hr_now() - t0;
                pids[r] = 0;
                left--;
            }
            continue;
        }
        if (hr_now() - t0 > deadline_s) {
            res->killed_by_harness = 1;
            for (int r = 0; r < n; r++)
                if (pids[r] > 0) kill(pids[r], SIGKILL);
        }
        usleep(2000);
    }
    res->total = hr_now() - t0;
    lt_world_unlink(w);
    lt_world_close(w);
    return res;
}

static void hr_free(hr_result *res)
{
    if (res) munmap(res, sizeof *res);
}

/* Prints the per-rank outcome (for failing tests). */
static void hr_dump(const hr_result *res, int n)
{
    for (int r = 0; r < n; r++)
        if (res->exit_code[r] || res->msg[r][0])
            fprintf(stderr, "  rank %d: exit %d after %.2fs: %s\n", r,
                    res->exit_code[r], res->elapsed[r], res->msg[r]);
}

/* Child-side check: records a message and returns from the rank function. */
#define HR_CHECK(res, rank, cond, ...)                                       \
    do {                                                                     \
        if (!(cond)) {                                                       \
            snprintf((res)->msg[rank], sizeof (res)->msg[rank], __VA_ARGS__); \
            return 1;                                                        \
        }                                                                    \
    } while (0)

#endif
