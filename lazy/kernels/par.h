/*
 * lazy/kernels/par.h — a core's helper threads for data-parallel kernels
 * (fused elementwise programs, reductions).
 *
 * Why not an OpenMP parallel region: its join waits for every team thread
 * to arrive, including one the OS has not scheduled yet. On a shared,
 * oversubscribed machine that wake-up latency (milliseconds) dominated
 * 2-thread kernels of a few milliseconds, making them slower than one
 * thread. Here chunks are claimed dynamically from a counter stamped with
 * the job's generation: the caller works too, a helper that wakes late
 * finds nothing left and does nothing, and the caller only waits for
 * chunks that a running helper has already claimed.
 *
 * One pool per core (owned by the core record in device.c, created on
 * first use); jobs are issued by the thread running the core's program (its
 * worker, or a waiter running it inline; one at a time), helpers sleep on a
 * condition variable after a short spin.
 */
#ifndef LT_PAR_H
#define LT_PAR_H

#include <stdint.h>
#include "kernel.h"

typedef struct lt_par_pool lt_par_pool;

/* Work item: chunk c in [0, n_chunks), run by worker w in [0, workers)
 * (the caller is worker 0). Each w runs its chunks sequentially, so
 * per-worker scratch indexed by w needs no locking. */
typedef void (*lt_par_fn)(void *arg, int64_t c, int w);

/* New pool with no threads yet (they start on demand). NULL on malloc
 * failure. */
lt_par_pool *lt_par_pool_new(void);
/* Stops and joins the helpers and frees the pool. NULL-safe. Must not run
 * concurrently with lt_par_for on the same pool. */
void lt_par_pool_free(lt_par_pool *p);

/* Names the calling thread (prctl, at most 15 characters: top -H, gdb,
 * py-spy) and lowers its priority to LAZYTPU_WORKER_NICE nice levels below
 * the process's main thread (the host), never raising it: for the cores'
 * worker and helper threads, so that a host tracing beside a running
 * program keeps a CPU. Not in a world of several processes
 * (LAZYTPU_WORLD_SIZE > 1). A refused setpriority is ignored (the thread
 * keeps its priority). */
void lt_par_thread_start(const char *name);

/* Runs fn over n_chunks chunks on up to `workers` workers: the calling
 * thread plus helpers of core ctx->core's pool, when the caller is the
 * thread running that core's job (its worker, or a waiter running the
 * program inline: lt_core_par_pool). From any other thread (kernels called
 * directly by tests, programs run after shutdown) an OpenMP parallel loop
 * with static scheduling is used instead. Returns when every chunk has
 * run. If helper threads cannot be started, the caller runs everything
 * itself. */
void lt_par_for(const lt_kernel_ctx *ctx, int workers, int64_t n_chunks,
                lt_par_fn fn, void *arg);
/* on = 1 when a program starts running on core ctx->core (the calling
 * thread is its executor), 0 when it ends: in between, the core's helpers
 * poll for jobs instead of sleeping after their short spin (bounded), and
 * sleeping ones are woken at once, so that the program's parallel kernels
 * do not each wait for a helper's wake-up. No-op with one thread, off the
 * executor thread, or before the pool has started a helper. */
void lt_par_hold(const lt_kernel_ctx *ctx, int on);
/* The same on an explicit pool (the issuing thread only; NULL-safe). */
void lt_par_pool_hold(lt_par_pool *p, int on);
/* Polls ready(arg) for up to ns nanoseconds, yielding the CPU between polls
 * (sched_yield: any runnable thread goes first, so only an otherwise idle
 * CPU spins), the way a helper lingers after a job: for a thread about to
 * sleep on a condition variable whose next wake-up would cost its waker a
 * futex call. Returns 1 as soon as ready(arg) is nonzero, 0 after ns
 * (ns <= 0: one poll). */
int lt_par_linger(int (*ready)(void *), void *arg, int64_t ns);
/* The same on an explicit pool (NULL = OpenMP). One issuing thread per
 * pool at a time. */
void lt_par_run(lt_par_pool *p, int workers, int64_t n_chunks, lt_par_fn fn,
                void *arg);

#endif
