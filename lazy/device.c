/*
 * lazy/device.c — simulated cores (worker threads with FIFO job queues) and
 * device buffers accounted against a per-core memory budget.
 *
 * The core table is a static array (the one piece of global state this
 * module owns). Cores survive lt_devices_shutdown as plain records so that
 * buffers released after shutdown can still be un-accounted; a later
 * lt_devices_init starts the workers again.
 *
 * fork(): a child has only the thread that forked, so the parent's workers
 * and helper pools do not exist there. pthread_atfork handlers make the
 * child a working runtime: before the fork every core is drained (its
 * queued programs finish, so every buffer the parent holds is ready and no
 * worker holds a lock or is inside a kernel) and its locks are held; in the
 * child the locks and condition variables are made fresh, the parent's
 * helper pools are forgotten (their threads are not there) and each core's
 * worker is started again at its first job there. OpenMP teams and
 * OpenBLAS's threads belong to the worker threads (created afresh) and to
 * OpenBLAS's own fork handlers.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "device.h"
#include "kernels/par.h"
#include "tensor.h"
#include "options.h"
#include "profile.h"
#include "step_time.h"

/* GCC defines __SANITIZE_ADDRESS__, clang has __has_feature */
#if defined(__SANITIZE_ADDRESS__)
#define LT_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LT_UNDER_ASAN 1
#endif
#endif
#ifndef LT_UNDER_ASAN
#define LT_UNDER_ASAN 0
#endif

#define LT_DEFAULT_CORES 8
/* base/options.def: LAZYTPU_NUM_CORES 1..64, default 8 */
_Static_assert(LT_MAX_CORES == 64 && LT_DEFAULT_CORES == 8, "options.def: LAZYTPU_NUM_CORES");
#define LT_DEFAULT_BUFFER_CACHE ((size_t)512 << 20)

/* Unclaimed faults kept per core for lt_core_wait(report=1); past this
 * bound the oldest are dropped (and counted in the next report). */
#define LT_MAX_PENDING_FAULTS 256
/* A wait that starts this soon after the step sync it waits for shows a
 * synchronous loop (mark_step(); wait_device_ops()): the next step sync's
 * job is left for the wait (LT_WAKE_HINT). A loop that traces or loads
 * data between its sync and its wait keeps the worker running its program
 * meanwhile. */
#define LT_QUICK_WAIT_NS 200000
/* Step ends remembered per core by lt_limit_inflight (its largest depth). */
#define LT_INFLIGHT_STEPS 64

typedef struct lt_core {
    pthread_t thread;
    int running;                 /* worker thread started */
    atomic_int respawn;          /* forked child: start the worker at the
                                    next job (it ran in the parent) */
    pthread_mutex_t submit_mu;   /* recursive: lt_core_lock + submit */
    pthread_mutex_t mu;          /* queue, seqs, errors */
    pthread_cond_t cv_work, cv_done;
    lt_job *head, *tail;
    uint64_t last_seq;           /* last assigned seq */
    uint64_t done_seq;           /* all jobs <= done_seq finished */
    int busy;                    /* a job is running (on the worker or
                                    inline on a waiter): one at a time */
    int64_t done_ns;             /* when the last job finished (profile) */
    int unwoken;                 /* a queued job was not signalled to the
                                    worker (LT_WAKE_*): the next waiter that
                                    cannot run it inline, the next submit
                                    or a fork wakes it */
    uint64_t hint_seq;           /* last LT_WAKE_HINT job, its submit time, */
    int64_t hint_ns;             /* and whether a wait for it started right */
    int quick;                   /* after (LT_QUICK_WAIT_NS), */
    int hint_waited;             /* or any wait for it came at all */
    int stop;
    atomic_int used;             /* has received work */
    lt_fault **pend;             /* faults not yet reported by a wait, in seq
                                    order (some may be claimed by reads) */
    int n_pend, cap_pend;
    int64_t n_dropped;           /* unclaimed faults dropped past the bound */
    uint64_t step_seq[LT_INFLIGHT_STEPS];   /* lt_limit_inflight: last seq at
                                    each recorded step end, oldest first */
    int n_steps;
    atomic_size_t bytes_in_use;
    atomic_size_t peak_bytes;    /* most bytes_in_use ever (lt_memory_info_get) */
    atomic_size_t mark_peak;     /* most bytes_in_use since lt_core_peak_mark */
    atomic_llong n_buffers;      /* live buffers (lt_memory_info_get) */
    size_t budget;
    lt_par_pool *pool;           /* helper threads (worker thread only) */
    /* freed device memory kept for reuse (see buffer cache below) */
    pthread_mutex_t cache_mu;
    struct { void *data; size_t alloc; } cache[256];
    int n_cached;
    size_t cached_bytes;
} lt_core;

static lt_core g_cores[LT_MAX_CORES];
static int g_n_cores;            /* cores created (records initialised) */
static atomic_int g_cores_in_use;
static int g_nproc = 1;
static int g_omp_override;       /* LAZYTPU_OMP_THREADS, 0 = none */
static int g_inline = 1;         /* LAZYTPU_INLINE_EXEC */
static int g_wait_spin;          /* polls of a waiter before it sleeps */
static int64_t g_worker_spin_ns; /* LAZYTPU_WORKER_SPIN_US: a worker's linger */
/* The core whose job the calling thread is running (its worker, or a
 * waiter running it inline), else -1: lt_core_par_pool hands the pool to
 * that thread only. */
static _Thread_local int tl_exec_core = -1;
static _Thread_local int tl_exec_inline;   /* ... and it is a waiter inline */
static size_t g_cache_limit;     /* LAZYTPU_BUFFER_CACHE_BYTES per core */
static int g_cache_auto;         /* limit not set: grows to 2x the core's peak use */
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_records_ready;      /* mutexes etc initialised once */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* "4.00 MiB" style, base 1024. */
static void fmt_bytes(char *buf, size_t cap, double b)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    for (; b >= 1024.0 && u < 4; u++) b /= 1024.0;
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", b, units[u]);
}

/* Keeps f (takes the reference) for lt_core_wait; c->mu held. Claimed
 * faults are pruned first; past the bound the oldest is dropped. */
static void pend_push(lt_core *c, lt_fault *f)
{
    if (c->n_pend == c->cap_pend) {
        int k = 0;
        for (int q = 0; q < c->n_pend; q++) {
            if (lt_fault_is_claimed(c->pend[q])) lt_fault_release(c->pend[q]);
            else c->pend[k++] = c->pend[q];
        }
        c->n_pend = k;
    }
    if (c->n_pend == c->cap_pend && c->cap_pend < LT_MAX_PENDING_FAULTS) {
        int nc = c->cap_pend ? 2 * c->cap_pend : 8;
        lt_fault **np = realloc(c->pend, (size_t)nc * sizeof *np);
        if (np) {
            c->pend = np;
            c->cap_pend = nc;
        }
    }
    if (c->n_pend == c->cap_pend) {
        if (c->n_pend == 0) {        /* no memory at all: forget it */
            c->n_dropped++;
            lt_fault_release(f);
            return;
        }
        lt_fault_release(c->pend[0]);
        memmove(&c->pend[0], &c->pend[1], (size_t)(c->n_pend - 1) * sizeof *c->pend);
        c->n_pend--;
        c->n_dropped++;
    }
    c->pend[c->n_pend++] = f;
}

/* Runs job on the calling thread; on failure makes its fault and lets the
 * job attach it to its outputs. Returns the fault (owned) or NULL. Calls
 * done() last. */
static lt_fault *job_execute(lt_job *job, int core)
{
    uint64_t seq = job->seq;
    if (job->queued_ns && lt_profile_on())
        lt_step_time_add(LT_PHASE_WAKE, lt_now_ns() - job->queued_ns);
    int prev_core = tl_exec_core;
    tl_exec_core = core;
    lt_set_error(LT_OK, "%s", "");
    lt_status st = job->run(job, core);
    lt_fault *f = NULL;
    if (st != LT_OK && job->same) {
        f = job->same;               /* the same failure: claimed with it */
        job->same = NULL;
        if (job->fail) job->fail(job, f);
    } else if (st != LT_OK) {
        const char *m = lt_last_error();
        f = lt_fault_new(st, m && *m ? m : "device job failed", core, seq,
                         job->cause);
        if (f && job->fail) job->fail(job, f);
    }
    lt_fault_release(job->same);
    job->same = NULL;
    lt_fault_release(job->cause);
    job->cause = NULL;
    if (job->done) job->done(job);
    tl_exec_core = prev_core;
    return f;
}

/* The job of seq ended with fault f (owned, may be NULL); c->mu held. Wakes
 * the waiters, and the worker when another executor ran it (the worker
 * waits for the core to be free). */
static void finish_locked(lt_core *c, uint64_t seq, lt_fault *f, int on_worker)
{
    if (f) pend_push(c, f);
    __atomic_store_n(&c->done_seq, seq, __ATOMIC_RELEASE);   /* spinning waiters */
    c->busy = 0;
    if (lt_profile_on()) c->done_ns = lt_now_ns();
    pthread_cond_broadcast(&c->cv_done);
    if (!on_worker && (c->head || c->stop))
        pthread_cond_signal(&c->cv_work);
}

/* Takes the oldest queued job of c for the calling executor: marks the core
 * busy and releases c->mu (held on entry, non-empty queue). */
static lt_job *take_job_locked(lt_core *c)
{
    lt_job *job = c->head;
    c->head = job->next;
    if (!c->head)
        c->tail = NULL;
    c->busy = 1;
    pthread_mutex_unlock(&c->mu);
    return job;
}

/* lt_par_linger's test: a job the worker may take (not one left for a
 * waiter) or stop; read without c->mu (a hint, checked under it after). */
static int worker_has_work(void *arg)
{
    lt_core *c = arg;
    return __atomic_load_n(&c->stop, __ATOMIC_RELAXED) || (__atomic_load_n(&c->head,
           __ATOMIC_ACQUIRE) && !__atomic_load_n(&c->unwoken, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&c->busy, __ATOMIC_RELAXED));
}

static void *core_main(void *arg)
{
    lt_core *c = arg;
    int idx = (int)(c - g_cores);
    char name[16];
    snprintf(name, sizeof name, "lt-core%d", idx);   /* top -H, gdb, py-spy */
    lt_par_thread_start(name);   /* name, priority below the host */
    for (;;) {
        pthread_mutex_lock(&c->mu);
        /* a waiter running a job inline has the core (busy) */
        while (c->busy || (!c->head && !c->stop))
            pthread_cond_wait(&c->cv_work, &c->mu);
        if (!c->head) {            /* stop requested and queue drained */
            pthread_mutex_unlock(&c->mu);
            break;
        }
        lt_job *job = take_job_locked(c);

        uint64_t seq = job->seq;
        lt_fault *f = job_execute(job, idx);   /* job is freed now */

        pthread_mutex_lock(&c->mu);
        finish_locked(c, seq, f, 1);
        pthread_mutex_unlock(&c->mu);
        /* awake for the next program a while (one core, one process: the
         * host's next submit then needs no futex wake-up) */
        if (g_worker_spin_ns > 0 && atomic_load(&g_cores_in_use) <= 1 &&
            lt_opt_int(LT_OPT_WORLD_SIZE) <= 1)
            lt_par_linger(worker_has_work, c, g_worker_spin_ns);
    }
    return NULL;
}

static void atfork_register(void);

lt_status lt_devices_init(void)
{
    pthread_mutex_lock(&g_init_mu);
    if (g_n_cores > 0 && g_cores[0].running) {
        pthread_mutex_unlock(&g_init_mu);
        return LT_OK;
    }
    /* the table refuses LAZYTPU_NUM_CORES outside 1..LT_MAX_CORES and a
     * malformed or zero LAZYTPU_HBM_BYTES, naming the variable */
    lt_status ost = lt_options_load();
    if (ost != LT_OK) {
        pthread_mutex_unlock(&g_init_mu);
        return ost;
    }
    int n = (int)lt_opt_int(LT_OPT_NUM_CORES);
    size_t budget = (size_t)lt_opt_int(LT_OPT_HBM_BYTES);
    long np = sysconf(_SC_NPROCESSORS_ONLN);
    g_nproc = np > 0 ? (int)np : 1;
    g_omp_override = (int)lt_opt_int(LT_OPT_OMP_THREADS);      /* 0: auto */
    g_inline = (int)lt_opt_int(LT_OPT_INLINE_EXEC);
    g_wait_spin = (int)lt_opt_int(LT_OPT_WAIT_SPIN);
    g_worker_spin_ns = lt_opt_int(LT_OPT_WORKER_SPIN_US) * 1000;
#if LT_UNDER_ASAN
    g_cache_limit = 0;    /* ASan must see every free (use-after-free) */
#else
    g_cache_limit = LT_DEFAULT_BUFFER_CACHE;
#endif
    int cache_set = lt_opt_state(LT_OPT_BUFFER_CACHE_BYTES) == 1;
    g_cache_auto = g_cache_limit > 0 && !cache_set;
    if (cache_set)
        g_cache_limit = (size_t)lt_opt_int(LT_OPT_BUFFER_CACHE_BYTES);

    pthread_once(&g_atfork_once, atfork_register);
    if (!g_records_ready) {
        for (int i = 0; i < LT_MAX_CORES; i++) {
            lt_core *c = &g_cores[i];
            pthread_mutexattr_t a;
            pthread_mutexattr_init(&a);
            pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
            pthread_mutex_init(&c->submit_mu, &a);
            pthread_mutexattr_destroy(&a);
            pthread_mutex_init(&c->mu, NULL);
            pthread_mutex_init(&c->cache_mu, NULL);
            pthread_cond_init(&c->cv_work, NULL);
            pthread_cond_init(&c->cv_done, NULL);
            atomic_init(&c->bytes_in_use, 0);
            atomic_init(&c->peak_bytes, 0);
            atomic_init(&c->mark_peak, 0);
            atomic_init(&c->n_buffers, 0);
            atomic_init(&c->used, 0);
        }
        g_records_ready = 1;
    }
    atomic_store(&g_cores_in_use, 0);
    for (int i = 0; i < n; i++) {
        lt_core *c = &g_cores[i];
        c->head = c->tail = NULL;
        c->stop = 0;
        c->busy = 0;
        c->unwoken = 0;
        c->hint_seq = 0;
        c->quick = 0;
        c->hint_waited = 0;
        c->budget = budget;
        atomic_store(&c->used, 0);
        atomic_store(&c->respawn, 0);
        if (pthread_create(&c->thread, NULL, core_main, c) != 0) {
            for (int j = 0; j < i; j++) {
                pthread_mutex_lock(&g_cores[j].mu);
                g_cores[j].stop = 1;
                pthread_cond_signal(&g_cores[j].cv_work);
                pthread_mutex_unlock(&g_cores[j].mu);
                pthread_join(g_cores[j].thread, NULL);
                g_cores[j].running = 0;
            }
            pthread_mutex_unlock(&g_init_mu);
            return lt_set_error(LT_ERR_DEVICE, "core %d: cannot start worker "
                                "thread", i);
        }
        c->running = 1;
    }
    g_n_cores = n;
    pthread_mutex_unlock(&g_init_mu);
    return LT_OK;
}

/* ------------------------------------------------------- buffer cache
 *
 * Each core keeps up to 256 freed blocks of >= 64 KiB (at most
 * LAZYTPU_BUFFER_CACHE_BYTES, default 512 MiB or twice the core's peak use, per
 * core) for reuse: a step
 * that allocates the same output sizes every time then never goes back to
 * the kernel (large malloc blocks are mmap'd, and every first touch of a
 * fresh page faults and is zeroed; for a 16 MiB output that costs more than
 * a fused 8-op kernel). Sizes are rounded up to one of 8 classes per power
 * of two (waste < 12.5%) so that similar sizes share blocks. Cached bytes
 * are not "in use" for the device budget. Disabled under ASan. */
#define LT_CACHE_MIN ((size_t)64 << 10)

static size_t cache_class(size_t bytes)
{
    if (bytes < LT_CACHE_MIN)
        return (bytes + 63) & ~(size_t)63;
    size_t p = (size_t)1 << (63 - __builtin_clzll((unsigned long long)bytes));
    size_t q = p / 8;
    return (bytes + q - 1) / q * q;
}

/* A cached block of exactly `alloc` bytes (most recently freed first), or
 * NULL. */
static void *cache_take(lt_core *c, size_t alloc)
{
    if (alloc < LT_CACHE_MIN || g_cache_limit == 0)
        return NULL;
    void *p = NULL;
    pthread_mutex_lock(&c->cache_mu);
    for (int k = c->n_cached - 1; k >= 0; k--)
        if (c->cache[k].alloc == alloc) {
            p = c->cache[k].data;
            c->cached_bytes -= alloc;
            memmove(&c->cache[k], &c->cache[k + 1],
                    (size_t)(c->n_cached - k - 1) * sizeof c->cache[0]);
            c->n_cached--;
            break;
        }
    pthread_mutex_unlock(&c->cache_mu);
    return p;
}

/* Keeps data (alloc bytes) for reuse, evicting the oldest blocks; frees it
 * instead when it is small, too big, or the core is not running. */
static void cache_put(lt_core *c, void *data, size_t alloc)
{
    /* Without an explicit limit the cache may hold twice what the core ever
     * had in use: a step that peaked at that size (a transformer's forward
     * and backward: ~1 GB) allocates it again next step, and a cache
     * smaller than that turned ~200 MB per step back into fresh pages
     * (54k page faults, 12% of the step's CPU time). Twice: two programs
     * with different buffer sizes run in turn on one core (a lazy step
     * beside torch.compile's graphs, a train and an eval model); with the
     * peak alone each evicted the other's blocks (81k faults per step). */
    size_t limit = g_cache_limit, peak = atomic_load(&c->peak_bytes);
    if (g_cache_auto && 2 * peak > limit) limit = 2 * peak;
    if (alloc < LT_CACHE_MIN || alloc > limit || !c->running) {
        free(data);
        return;
    }
    int cap = (int)(sizeof c->cache / sizeof c->cache[0]);
    pthread_mutex_lock(&c->cache_mu);
    while (c->n_cached > 0 && (c->n_cached == cap ||
                               c->cached_bytes + alloc > limit)) {
        free(c->cache[0].data);
        c->cached_bytes -= c->cache[0].alloc;
        memmove(&c->cache[0], &c->cache[1],
                (size_t)(c->n_cached - 1) * sizeof c->cache[0]);
        c->n_cached--;
    }
    c->cache[c->n_cached].data = data;
    c->cache[c->n_cached].alloc = alloc;
    c->n_cached++;
    c->cached_bytes += alloc;
    pthread_mutex_unlock(&c->cache_mu);
}

static void cache_flush(lt_core *c)
{
    pthread_mutex_lock(&c->cache_mu);
    for (int k = 0; k < c->n_cached; k++)
        free(c->cache[k].data);
    c->n_cached = 0;
    c->cached_bytes = 0;
    pthread_mutex_unlock(&c->cache_mu);
}

void lt_devices_shutdown(void)
{
    pthread_mutex_lock(&g_init_mu);
    for (int i = 0; i < g_n_cores; i++) {
        lt_core *c = &g_cores[i];
        if (!c->running)
            continue;
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_signal(&c->cv_work);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
        c->running = 0;
        pthread_mutex_lock(&c->mu);
        for (int k = 0; k < c->n_pend; k++)
            lt_fault_release(c->pend[k]);
        free(c->pend);
        c->pend = NULL;
        c->n_pend = c->cap_pend = 0;
        c->n_dropped = 0;
        c->done_seq = c->last_seq;
        c->n_steps = 0;
        pthread_mutex_unlock(&c->mu);
        cache_flush(c);
        lt_par_pool_free(c->pool);   /* the worker is joined: no user */
        c->pool = NULL;
    }
    pthread_mutex_unlock(&g_init_mu);
}

int lt_devices_count(void) { return g_n_cores; }
int lt_core_valid(int core) { return core >= 0 && core < g_n_cores; }
int lt_core_exec_inline(void) { return tl_exec_inline; }

void *lt_core_par_pool(int core)
{
    if (core < 0 || core >= LT_MAX_CORES || !g_records_ready)
        return NULL;
    lt_core *c = &g_cores[core];
    /* one issuing thread per pool: the thread running the core's job (its
     * worker or a waiter inline); other callers (programs run inline after
     * shutdown, tests calling the executor directly) get none */
    if (!c->running || tl_exec_core != core)
        return NULL;
    if (!c->pool)
        c->pool = lt_par_pool_new();
    return c->pool;
}

static _Thread_local int tl_job_threads;   /* lt_core_set_job_threads */

int lt_core_set_job_threads(int n)
{
    int was = tl_job_threads;
    tl_job_threads = n > 0 ? n : 0;
    return was;
}

int lt_core_nproc(void) { return g_nproc; }

int lt_core_omp_threads(int core)
{
    if (g_omp_override > 0)
        return g_omp_override;
    if (tl_job_threads > 0)
        return tl_job_threads;
    int used = atomic_load(&g_cores_in_use);
    if (used < 1)
        used = 1;
    int t = g_nproc / used;
    return t < 1 ? 1 : t;
}

/* ------------------------------------------------------------- buffers */

lt_status lt_buffer_alloc(int core, lt_dtype dt, int64_t numel,
                          lt_buffer **out)
{
    *out = NULL;
    if (core < 0 || core >= LT_MAX_CORES || !g_records_ready)
        return lt_set_error(LT_ERR_DEVICE, "buffer_alloc: invalid core %d",
                            core);
    size_t es = lt_dtype_size(dt);
    if (es == 0 || numel < 0)
        return lt_set_error(LT_ERR_ARG, "buffer_alloc: bad dtype %d or "
                            "numel %lld", (int)dt, (long long)numel);
    lt_core *c = &g_cores[core];
    size_t bytes = (size_t)numel * es;
    size_t in_use = atomic_load(&c->bytes_in_use);
    for (;;) {
        if (bytes > c->budget || in_use > c->budget - bytes) {
            char rq[32], iu[32], bg[32];
            fmt_bytes(rq, sizeof rq, (double)bytes);
            fmt_bytes(iu, sizeof iu, (double)in_use);
            fmt_bytes(bg, sizeof bg, (double)c->budget);
            return lt_set_error(LT_ERR_OOM, "core %d: device memory "
                                "exhausted: requested %s with %s of %s in use",
                                core, rq, iu, bg);
        }
        if (atomic_compare_exchange_weak(&c->bytes_in_use, &in_use,
                                         in_use + bytes))
            break;
    }
    size_t peak = atomic_load(&c->peak_bytes);
    while (in_use + bytes > peak &&
           !atomic_compare_exchange_weak(&c->peak_bytes, &peak, in_use + bytes))
        ;
    peak = atomic_load(&c->mark_peak);
    while (in_use + bytes > peak &&
           !atomic_compare_exchange_weak(&c->mark_peak, &peak, in_use + bytes))
        ;
    size_t alloc = cache_class(bytes);
    if (alloc == 0)
        alloc = 64;
    lt_buffer *b = malloc(sizeof *b);
    void *data = cache_take(c, alloc);
    if (!data)
        data = aligned_alloc(64, alloc);
    if (!data) {                     /* give cached memory back, retry */
        for (int k = 0; k < g_n_cores; k++)
            cache_flush(&g_cores[k]);
        data = aligned_alloc(64, alloc);
    }
    if (!b || !data) {
        free(b);
        free(data);
        atomic_fetch_sub(&c->bytes_in_use, bytes);
        char rq[32];
        fmt_bytes(rq, sizeof rq, (double)bytes);
        return lt_set_error(LT_ERR_OOM, "core %d: host allocation of %s "
                            "failed", core, rq);
    }
    atomic_init(&b->refs, 1);
    b->core = core;
    b->dtype = dt;
    b->numel = numel;
    b->bytes = bytes;
    b->data = data;
    b->parts = NULL;
    b->base = NULL;
    b->ready_seq = 0;
    b->fault = NULL;
    atomic_fetch_add(&c->n_buffers, 1);
    *out = b;
    return LT_OK;
}

lt_status lt_buffer_view(lt_buffer *base, int core, size_t off, lt_dtype dt, int64_t numel,
                         lt_buffer **out)
{
    *out = NULL;
    size_t bytes = (size_t)numel * lt_dtype_size(dt);
    if (!base || !base->data || base->parts || base->base || base->ready_seq || base->fault ||
        off % 64 || off > base->bytes || bytes > base->bytes - off || !lt_core_valid(core))
        return lt_set_error(LT_ERR_INTERNAL, "buffer_view: not a view of a ready whole buffer");
    lt_buffer *b = calloc(1, sizeof *b);
    if (!b) return lt_set_error(LT_ERR_OOM, "core %d: host allocation failed", core);
    atomic_init(&b->refs, 1);
    b->core = core;
    b->dtype = dt;
    b->numel = numel;
    b->data = (char *)base->data + off;
    b->base = lt_buffer_retain(base);
    *out = b;
    return LT_OK;
}

lt_buffer *lt_buffer_retain(lt_buffer *b)
{
    if (b)
        atomic_fetch_add(&b->refs, 1);
    return b;
}

void lt_buffer_release(lt_buffer *b)
{
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
    if (b->base) {                   /* a view: base's memory */
        lt_buffer_release(b->base);
        lt_fault_release(b->fault);
        free(b);
        return;
    }
    atomic_fetch_sub(&g_cores[b->core].bytes_in_use, b->bytes);
    atomic_fetch_sub(&g_cores[b->core].n_buffers, 1);
    if (b->data)
        cache_put(&g_cores[b->core], b->data, cache_class(b->bytes));
    lt_buffer_parts_free(b->parts);
    lt_fault_release(b->fault);
    free(b);
}

/* ------------------------------------------------- values held as parts
 * (the rest: buffer_parts.c) */

lt_status lt_buffer_new_parts(int core, lt_dtype dt, int64_t numel, lt_buffer_parts *parts,
                              lt_buffer **out)
{
    *out = NULL;
    if (core < 0 || core >= LT_MAX_CORES || !g_records_ready || !parts) {
        lt_buffer_parts_free(parts);
        return lt_set_error(LT_ERR_DEVICE, "buffer_new_parts: invalid core %d", core);
    }
    lt_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        lt_buffer_parts_free(parts);
        return lt_set_error(LT_ERR_OOM, "core %d: host allocation failed", core);
    }
    atomic_init(&b->refs, 1);
    b->core = core;
    b->dtype = dt;
    b->numel = numel;
    b->parts = parts;
    atomic_fetch_add(&g_cores[core].n_buffers, 1);
    *out = b;
    return LT_OK;
}

void lt_buffer_adopt(lt_buffer *b, lt_buffer *t)
{
    b->bytes = t->bytes;
    b->data = t->data;
    atomic_fetch_sub(&g_cores[b->core].n_buffers, 1);
    free(t);
}

void lt_core_peak_mark(int core)
{
    if (core < 0 || core >= LT_MAX_CORES)
        return;
    atomic_store(&g_cores[core].mark_peak, atomic_load(&g_cores[core].bytes_in_use));
}

size_t lt_core_peak_since_mark(int core)
{
    if (core < 0 || core >= LT_MAX_CORES)
        return 0;
    return atomic_load(&g_cores[core].mark_peak);
}

lt_status lt_memory_info_get(int core, lt_memory_info *out)
{
    if (!out)
        return lt_set_error(LT_ERR_ARG, "memory_info: null output");
    lt_status st = lt_init();
    if (st != LT_OK)
        return st;
    if (core < 0 || core >= g_n_cores)
        return lt_set_error(LT_ERR_DEVICE, "memory_info: core %d out of range "
                            "(there are %d cores)", core, g_n_cores);
    lt_core *c = &g_cores[core];
    out->bytes_in_use = (int64_t)atomic_load(&c->bytes_in_use);
    out->peak_bytes_in_use = (int64_t)atomic_load(&c->peak_bytes);
    out->bytes_limit = (int64_t)c->budget;
    out->buffers_in_use = (int64_t)atomic_load(&c->n_buffers);
    return LT_OK;
}

size_t lt_core_bytes_in_use(int core)
{
    if (core < 0 || core >= LT_MAX_CORES)
        return 0;
    return atomic_load(&g_cores[core].bytes_in_use);
}

size_t lt_core_cached_bytes(int core)
{
    if (core < 0 || core >= LT_MAX_CORES || !g_records_ready)
        return 0;
    lt_core *c = &g_cores[core];
    pthread_mutex_lock(&c->cache_mu);
    size_t n = c->cached_bytes;
    pthread_mutex_unlock(&c->cache_mu);
    return n;
}

/* ---------------------------------------------------------------- jobs */

void lt_core_lock(int core) { pthread_mutex_lock(&g_cores[core].submit_mu); }
void lt_core_unlock(int core) { pthread_mutex_unlock(&g_cores[core].submit_mu); }

uint64_t lt_core_next_seq(int core)
{
    lt_core *c = &g_cores[core];
    pthread_mutex_lock(&c->mu);
    uint64_t s = c->last_seq + 1;
    pthread_mutex_unlock(&c->mu);
    return s;
}

uint64_t lt_core_last_seq(int core)
{
    if (!lt_core_valid(core)) return 0;
    lt_core *c = &g_cores[core];
    pthread_mutex_lock(&c->mu);
    uint64_t s = c->last_seq;
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* In a fork child: starts the worker the core had in the parent. If the
 * thread cannot be created the core stays stopped (jobs run inline). */
static void core_respawn(lt_core *c)
{
    pthread_mutex_lock(&g_init_mu);
    if (!c->running && atomic_load(&c->respawn)) {
        c->stop = 0;
        if (pthread_create(&c->thread, NULL, core_main, c) == 0)
            c->running = 1;
        atomic_store(&c->respawn, 0);
    }
    pthread_mutex_unlock(&g_init_mu);
}

/* Queues job (FIFO). If the core's worker is not running (after
 * lt_devices_shutdown) the job runs inline on the caller so nothing hangs;
 * in a fork child the worker is started first (see the file comment). */
uint64_t lt_core_submit(int core, lt_job *job)
{
    lt_core *c = &g_cores[core];
    job->cause = NULL;
    job->same = NULL;
    job->queued_ns = lt_profile_on() ? lt_now_ns() : 0;
    if (!c->running && atomic_load(&c->respawn))
        core_respawn(c);
    if (!c->running) {
        pthread_mutex_lock(&c->mu);
        job->seq = ++c->last_seq;
        pthread_mutex_unlock(&c->mu);
        uint64_t seq = job->seq;
        /* the outputs are still poisoned on failure; no wait reports it */
        lt_fault_release(job_execute(job, core));
        pthread_mutex_lock(&c->mu);
        c->done_seq = seq;
        pthread_cond_broadcast(&c->cv_done);
        pthread_mutex_unlock(&c->mu);
        return seq;
    }
    if (!atomic_exchange(&c->used, 1))
        atomic_fetch_add(&g_cores_in_use, 1);
    int64_t now = job->wake == LT_WAKE_HINT ? lt_now_ns() : 0;
    pthread_mutex_lock(&c->submit_mu);
    pthread_mutex_lock(&c->mu);
    uint64_t seq = job->seq = ++c->last_seq;
    job->next = NULL;
    /* the worker is left asleep only for a job that a waiter will take:
     * the core idle (a busy worker takes it next anyway), nothing queued
     * before it but jobs left the same way, one core in use (a wait for
     * all cores takes them one by one) */
    if (job->wake == LT_WAKE_HINT) {
        if (!c->hint_waited) c->quick = 0;   /* the last step was not waited for */
        c->hint_waited = 0;
        c->hint_seq = seq;
        c->hint_ns = now;
    }
    int defer = g_inline && job->inline_ok && !c->busy && (!c->head || c->unwoken) &&
                atomic_load(&g_cores_in_use) <= 1 &&
                (job->wake == LT_WAKE_WAITER ||
                 (job->wake == LT_WAKE_HINT && c->quick));
    if (c->tail)
        c->tail->next = job;
    else
        c->head = job;
    c->tail = job;
    if (defer) {
        c->unwoken = 1;
    } else {
        c->unwoken = 0;
        pthread_cond_signal(&c->cv_work);
    }
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->submit_mu);
    return seq;   /* job may be freed by the worker already */
}

/* Counter "InlineExecute": programs run by a waiting caller (lt_core_wait). */
static lt_counter *inline_counter(void)
{
    static _Atomic(lt_counter *) k;     /* lt_counter_get returns one per name */
    lt_counter *c = atomic_load_explicit(&k, memory_order_acquire);
    if (!c) atomic_store_explicit(&k, c = lt_counter_get("InlineExecute"), memory_order_release);
    return c;
}

/* Runs the core's oldest queued job on the calling thread, which is
 * waiting for it (c->mu held, released meanwhile; see lt_core_wait). The
 * thread's error message is kept (a job sets its own). */
static void run_inline_locked(lt_core *c)
{
    lt_job *job = take_job_locked(c);
    const char *m = lt_last_error();
    char *saved = m && *m ? strdup(m) : NULL;
    uint64_t seq = job->seq;
    lt_counter_add(inline_counter(), 1);
    tl_exec_inline = 1;
    lt_fault *f = job_execute(job, (int)(c - g_cores));   /* job is freed now */
    tl_exec_inline = 0;
    lt_set_error(LT_OK, "%s", saved ? saved : "");
    free(saved);
    pthread_mutex_lock(&c->mu);
    finish_locked(c, seq, f, 0);
}

/* Waits (c->mu held) until done_seq >= seq. With steal, the jobs waited
 * for that no executor has started yet run inline on this thread (not from
 * inside another job, not jobs that must not block a caller); else a short
 * spin on done_seq before sleeping. */
static void wait_done_locked(lt_core *c, uint64_t seq, int steal)
{
    int64_t t0 = 0;
    int slept = 0;
    if (c->done_seq < seq && lt_profile_on()) t0 = lt_now_ns();
    if (steal && c->hint_seq && seq >= c->hint_seq && !c->hint_waited) {
        /* the first wait for the last step sync's job: right after it? */
        c->quick = lt_now_ns() - c->hint_ns < LT_QUICK_WAIT_NS;
        c->hint_waited = 1;
    }
    while (c->done_seq < seq) {
        if (steal && g_inline && c->running && !c->busy && c->head &&
            c->head->seq <= seq && c->head->inline_ok && tl_exec_core < 0) {
            run_inline_locked(c);
            continue;
        }
        if (c->unwoken && !c->busy) {   /* left for a waiter that cannot take it */
            c->unwoken = 0;
            pthread_cond_signal(&c->cv_work);
        }
        if (g_wait_spin > 0 && c->busy) {
            pthread_mutex_unlock(&c->mu);
            for (int s = 0; s < g_wait_spin; s++) {
                uint64_t d = __atomic_load_n(&c->done_seq, __ATOMIC_ACQUIRE);
                if (d >= seq) break;
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
            }
            pthread_mutex_lock(&c->mu);
            if (c->done_seq >= seq) break;
        }
        pthread_cond_wait(&c->cv_done, &c->mu);
        slept = 1;
    }
    if (t0) {
        int64_t t1 = lt_now_ns();
        if (slept && c->done_ns > 0 && t1 > c->done_ns)
            lt_step_time_add(LT_PHASE_DONE, t1 - c->done_ns);
        lt_step_time_add(LT_PHASE_WAIT, t1 - t0);
        lt_step_time_mark_end((int)(c - g_cores), t1);
    }
}

/* Faults are reported once: the first lt_core_wait(report=1) whose range
 * covers a fault that no read has claimed yet returns it; every fault in the
 * range is claimed and dropped from the list. */
lt_status lt_core_wait(int core, uint64_t seq, int report)
{
    if (!lt_core_valid(core))
        return lt_set_error(LT_ERR_DEVICE, "wait: invalid core %d", core);
    lt_core *c = &g_cores[core];
    pthread_mutex_lock(&c->mu);
    if (seq == 0 || seq > c->last_seq)
        seq = c->last_seq;
    wait_done_locked(c, seq, 1);
    lt_status st = LT_OK;
    if (report) {
        lt_fault *first = NULL;
        int64_t more = c->n_dropped;
        int k = 0;
        for (int q = 0; q < c->n_pend; q++) {
            lt_fault *f = c->pend[q];
            if (f->seq > seq) {
                c->pend[k++] = f;
                continue;
            }
            if (!lt_fault_is_claimed(f)) {
                if (!first) first = lt_fault_retain(f);
                else more++;
            }
            lt_fault_claim(f);
            lt_fault_release(f);
        }
        c->n_pend = k;
        if (first) {
            c->n_dropped = 0;
            if (more > 0)
                st = lt_set_error(first->st, "%s (+%lld more failed program%s "
                                  "on core %d)", first->msg, (long long)more,
                                  more > 1 ? "s" : "", core);
            else
                st = lt_set_error(first->st, "%s", first->msg);
            lt_fault_release(first);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

int lt_core_has_unclaimed(int core, uint64_t seq)
{
    if (!lt_core_valid(core)) return 0;
    lt_core *c = &g_cores[core];
    pthread_mutex_lock(&c->mu);
    int any = 0;
    for (int q = 0; q < c->n_pend && !any; q++)
        any = (seq == 0 || c->pend[q]->seq <= seq) &&
              !lt_fault_is_claimed(c->pend[q]);
    pthread_mutex_unlock(&c->mu);
    return any;
}

lt_status lt_limit_inflight(int core, int depth)
{
    if (!lt_core_valid(core))
        return lt_set_error(LT_ERR_DEVICE, "limit_inflight: invalid core %d",
                            core);
    if (depth <= 0) {
        lt_runtime *r = lt_rt_peek();
        depth = r && r->max_inflight > 0 ? (int)(r->max_inflight < LT_INFLIGHT_STEPS
                                                 ? r->max_inflight
                                                 : LT_INFLIGHT_STEPS)
                                         : 2;
    }
    if (depth > LT_INFLIGHT_STEPS)
        depth = LT_INFLIGHT_STEPS;
    lt_core *c = &g_cores[core];
    uint64_t target = 0;
    pthread_mutex_lock(&c->mu);
    uint64_t last = c->last_seq;
    if (last > 0 && (c->n_steps == 0 || c->step_seq[c->n_steps - 1] != last)) {
        if (c->n_steps == LT_INFLIGHT_STEPS) {
            memmove(&c->step_seq[0], &c->step_seq[1],
                    (size_t)(c->n_steps - 1) * sizeof c->step_seq[0]);
            c->n_steps--;
        }
        c->step_seq[c->n_steps++] = last;
    }
    if (c->n_steps >= depth) {
        /* the newest step end that leaves depth - 1 younger ones: waiting
         * for it covers every older one */
        int k = c->n_steps - depth;
        target = c->step_seq[k];
        memmove(&c->step_seq[0], &c->step_seq[k + 1],
                (size_t)(c->n_steps - k - 1) * sizeof c->step_seq[0]);
        c->n_steps -= k + 1;
    }
    pthread_mutex_unlock(&c->mu);
    return target ? lt_core_wait(core, target, 1) : LT_OK;
}

lt_status lt_buffer_wait(lt_buffer *b)
{
    if (!b)
        return LT_OK;
    if (b->parts)                /* parts are ready when they are made */
        return lt_buffer_whole(b);
    if (b->ready_seq == 0)
        return b->fault ? lt_fault_raise(b->fault) : LT_OK;
    lt_core *c = &g_cores[b->core];
    uint64_t seq = b->ready_seq;
    pthread_mutex_lock(&c->mu);
    if (seq > c->last_seq) {   /* stamped but never submitted */
        pthread_mutex_unlock(&c->mu);
        return lt_set_error(LT_ERR_INTERNAL, "buffer_wait: core %d job %llu "
                            "was never submitted", b->core,
                            (unsigned long long)seq);
    }
    wait_done_locked(c, seq, 1);
    lt_fault *f = lt_fault_retain(b->fault);
    pthread_mutex_unlock(&c->mu);
    lt_status st = LT_OK;
    if (f) {
        st = lt_fault_raise(f);
        lt_fault_release(f);
    }
    return st;
}

/* ---------------------------------------------------------------- fork */

/* Before fork(): drains every started core and holds its locks (and the
 * init lock), so that no worker runs a job, no job is queued and no lock is
 * held by a thread that the child will not have. A core whose programs are
 * waiting for something slow (a collective waiting for its peers) delays
 * the fork until they end. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&g_init_mu);
    if (!g_records_ready)
        return;
    for (int i = 0; i < g_n_cores; i++) {
        lt_core *c = &g_cores[i];
        pthread_mutex_lock(&c->submit_mu);
        pthread_mutex_lock(&c->mu);
        if (c->running) {
            c->unwoken = 0;
            pthread_cond_signal(&c->cv_work);
            wait_done_locked(c, c->last_seq, 0);
        }
        pthread_mutex_lock(&c->cache_mu);
    }
}

static void fork_parent(void)
{
    if (g_records_ready)
        for (int i = g_n_cores - 1; i >= 0; i--) {
            lt_core *c = &g_cores[i];
            pthread_mutex_unlock(&c->cache_mu);
            pthread_mutex_unlock(&c->mu);
            pthread_mutex_unlock(&c->submit_mu);
        }
    pthread_mutex_unlock(&g_init_mu);
}

/* In the child: the locks prepare took are made fresh rather than unlocked
 * (a recursive mutex records its owner's thread id, which is the parent's:
 * the child's thread could not unlock it), and so are the condition
 * variables, which may still count the parent's waiting workers. The
 * parent's workers and helper threads are not here: a core that had a
 * worker gets a new one at its next job; its helper pool is dropped without
 * freeing (freeing would join threads that do not exist; its memory is the
 * parent's copy). Every queued job had finished (prepare), so nothing
 * waits for a job that will never run. */
static void fork_child(void)
{
    if (g_records_ready) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
        for (int i = 0; i < g_n_cores; i++) {
            lt_core *c = &g_cores[i];
            pthread_mutex_init(&c->submit_mu, &a);
            pthread_mutex_init(&c->mu, NULL);
            pthread_mutex_init(&c->cache_mu, NULL);
            pthread_cond_init(&c->cv_work, NULL);
            pthread_cond_init(&c->cv_done, NULL);
            c->head = c->tail = NULL;
            c->done_seq = c->last_seq;
            c->busy = 0;
            c->unwoken = 0;
            c->quick = 0;
            c->pool = NULL;
            if (c->running) {
                c->running = 0;
                atomic_store(&c->respawn, 1);
            }
        }
        pthread_mutexattr_destroy(&a);
    }
    pthread_mutex_init(&g_init_mu, NULL);
}

static void atfork_register(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
