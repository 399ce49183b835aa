/*
 * lazy/kernels/par.c — per-core helper threads with generation-stamped
 * dynamic chunk claiming (see par.h for why not an OpenMP region).
 *
 * Protocol. The issuing thread (the core's worker) publishes a job: it
 * voids the worker-id word (next gen, no id left: a helper still reading
 * the previous job's fields sees that they may be mixed and drops them),
 * stores fn/arg/n_chunks/workers, then one claim word per worker slot k
 * (gen << 32 | first chunk of k's range: the chunks split into `workers`
 * contiguous ranges), the worker-id word (gen << 32 | 1) and finally gen,
 * and wakes sleeping helpers. Anyone runs chunk c only after a successful
 * CAS of a slot's claim word from (gen << 32 | c) to (gen << 32 | c + 1)
 * with c below the slot's range end; a helper whose view of the job is
 * stale fails that CAS (other generation, or the range taken), so it never
 * runs a chunk of a job that has finished. Worker w claims from its own
 * slot first, then steals from the others' in turn: a late helper's range
 * is run by the issuer. Each claimer adds the number of chunks it ran to
 * `done` once; the issuer returns when done == n_chunks, i.e. it waits
 * only for chunks actually being run.
 *
 * Why a range per worker: with one shared claim word every chunk was a
 * contended atomic on a cache line both threads write, and consecutive
 * kernels gave each thread arbitrary parts of the tensors the other had
 * just written. On this VM the two vCPUs sometimes sit far apart (a
 * core-to-core round trip of ~320 ns instead of ~55 ns, for minutes); the
 * synchronous CNN step then took 2.2-2.5x as long with both threads at
 * 100% (the "two levels" of issue 25). With ranges, a worker's claims stay
 * in its own cache line and, when kernels split tensors alike, it runs the
 * part of each tensor it wrote before.
 */
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "par.h"
#include "device.h"     /* lt_core_par_pool: the pool lives in the core record */
#include "options.h"

#define LT_PAR_MAX_HELPERS 63
/* Helper polls before sleeping. A pause is ~140 cycles on Skylake and
 * later, so 4000 polls were ~200 us of a core after every job: on 2 cores
 * that starved the tracing thread (MLP step: 1.3 -> 1.1 ms CPU at 200).
 * Late helpers cost little: chunks are claimed dynamically. */
#define LT_PAR_SPIN 200
#define LT_PAR_WAIT_SPIN 200   /* issuer polls before yielding */
/* While a program runs (lt_par_hold), helpers keep polling between its
 * jobs after LT_PAR_SPIN, yielding the CPU at each poll, instead of
 * sleeping: a sleeping helper reached by a futex wake starts its first
 * chunk 10-20 us after the job is published (loaded: hundreds), and a step
 * has several jobs. Polling with pause instead of sched_yield made the
 * MLP's loaded step 2x slower (the spinning helper took CPU time the
 * issuer and the host needed); yielding only runs when nothing else
 * wants the CPU. Bounded (~1-2 ms on an idle CPU): a long serial kernel
 * does not keep a helper polling through it. */
#define LT_PAR_HOLD_SPIN 2000
/* After the last chunk of a job issued by a caller that runs its program
 * inline (lt_core_exec_inline: the core's worker is idle, the host will
 * trace the next step on the other CPU) a helper keeps polling, yielding
 * the CPU at each poll, for LAZYTPU_PAR_SPIN_US (default 3000 us) before
 * it sleeps, the way an OpenMP team waits between parallel regions
 * (libgomp spins for a while by default, and eager PyTorch's kernels start
 * on awake threads because of it). A step that waits for its result runs
 * its program on the calling thread after ~1 ms of tracing: a helper that
 * slept meanwhile is reached by a futex wake that, on this VM, often lands
 * after the first kernels have run alone. Polling with sched_yield gives
 * the CPU to any runnable thread, so only an otherwise idle CPU spins.
 * Synchronous steps against eager, measured in one process, 0 vs 3000 us
 * (2026-11-28, docs/benchmarks.md): MLP 1.32-1.34x -> 1.24-1.31x, CNN
 * 0.67-0.69x -> 0.54-0.64x. After a job issued by the core's worker (the
 * host is tracing meanwhile: three threads on two CPUs) the helper sleeps
 * soon as before: polling there made the torch.compile MLP step, whose
 * forward program runs on the worker, 1.34-1.43x -> 1.37-1.83x eager. */
static _Atomic int64_t g_spin_ns = -1;   /* LAZYTPU_PAR_SPIN_US * 1000, read once */

struct lt_par_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;                     /* under mu */
    int n_threads;                /* helpers started (issuer thread only) */
    pid_t pid;                    /* process the helpers live in (a forked
                                     child has none of them) */
    pthread_t th[LT_PAR_MAX_HELPERS];
    _Atomic uint64_t gen;         /* current job generation, 0 = none */
    _Atomic(lt_par_fn) fn;
    _Atomic(void *) arg;
    _Atomic int64_t n_chunks;
    _Atomic int workers;
    _Atomic int split;            /* ranges: workers, or 1 (one shared range) */
    _Atomic uint64_t wid;         /* gen << 32 | next worker id */
    /* per worker slot, each on a cache line of its own: gen << 32 | next
     * chunk of the slot's range */
    struct { _Alignas(64) _Atomic uint64_t w; } claim[LT_PAR_MAX_HELPERS + 1];
    _Alignas(64) _Atomic int64_t done;   /* chunks finished of the current job */
    _Alignas(64) _Atomic int hold;       /* lt_par_hold: a program is running */
    _Atomic uint64_t hold_epoch;  /* programs begun (helpers woken once each) */
    _Atomic int linger;           /* the job's issuer runs inline: poll long */
    _Atomic int ready;            /* helpers named and at their nice level */
};

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* First chunk of range k (k <= w) when n chunks split into w ranges. */
static inline int64_t range_start(int64_t n, int w, int k)
{
    return n * k / w;
}

/* Claims the next chunk of generation g in slot k's range: its index, or -1
 * if the job is another one or the range has no chunk left. */
static int64_t claim_in(lt_par_pool *p, uint64_t g, int64_t n, int w, int k)
{
    int64_t end = range_start(n, w, k + 1);
    uint64_t v = atomic_load(&p->claim[k].w);
    for (;;) {
        if ((v >> 32) != (g & 0xffffffffu) || (int64_t)(v & 0xffffffffu) >= end)
            return -1;
        if (atomic_compare_exchange_weak(&p->claim[k].w, &v, v + 1))
            return (int64_t)(v & 0xffffffffu);
    }
}

/* Runs the chunks worker `me` can claim of generation g (its own range,
 * then the others' in turn; split: the number of ranges, 1 for one range
 * all workers claim from) and returns how many it ran. */
static int64_t run_chunks(lt_par_pool *p, uint64_t g, int64_t n, int split, int me,
                          lt_par_fn fn, void *arg)
{
    int64_t ran = 0, c;
    for (int i = 0; i < split; i++) {
        int k = (me + i) % split;
        while ((c = claim_in(p, g, n, split, k)) >= 0) {
            fn(arg, c, me);
            ran++;
        }
    }
    return ran;
}

/* Takes a worker id for generation g, or -1 (stale job / enough workers). */
static int claim_worker(lt_par_pool *p, uint64_t g, int workers)
{
    uint64_t v = atomic_load(&p->wid);
    for (;;) {
        if ((v >> 32) != (g & 0xffffffffu) || (int)(v & 0xffffffffu) >= workers)
            return -1;
        if (atomic_compare_exchange_weak(&p->wid, &v, v + 1))
            return (int)(v & 0xffffffffu);
    }
}

void lt_par_thread_start(const char *name)
{
    prctl(PR_SET_NAME, name, 0, 0, 0);
    /* one process per core (spawn, MPI): the ranks' workers meet at every
     * collective, and hosts ahead of them gain nothing (8-process
     * fashion_mnist: ~6% fewer images/s at 5); threads keep their level */
    int delta = (int)lt_opt_int(LT_OPT_WORKER_NICE);
    if (delta <= 0 || lt_opt_int(LT_OPT_WORLD_SIZE) > 1)
        return;
    /* Linux: the nice value is per thread; PRIO_PROCESS with a thread id
     * addresses one thread, with the pid the main thread */
    errno = 0;
    int host = getpriority(PRIO_PROCESS, (id_t)getpid());
    if (errno)
        return;
    id_t tid = (id_t)syscall(SYS_gettid);
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, tid);
    if (errno)
        return;
    int target = host + delta > 19 ? 19 : host + delta;
    if (target > cur)      /* a helper started by a worker has its level */
        (void)setpriority(PRIO_PROCESS, tid, target);
}

static void *helper_main(void *argp)
{
    lt_par_pool *p = argp;
    uint64_t seen = 0, served = 0;    /* last job / last program woken for */
    int64_t last = 0;                 /* mono_ns() after a lingering job, 0: none */
    lt_par_thread_start("lt-helper");
    atomic_fetch_add(&p->ready, 1);
    for (;;) {
        uint64_t g = atomic_load(&p->gen);
        int64_t spin = atomic_load_explicit(&g_spin_ns, memory_order_relaxed);
        int recent = last != 0 && spin > 0;         /* poll until last + spin */
        for (int s = 0; g == seen && (s < LT_PAR_SPIN ||
                                      (s < LT_PAR_HOLD_SPIN && atomic_load(&p->hold)) ||
                                      (recent && ((s & 15) || (recent = mono_ns() - last < spin))));
             s++) {
            if (s < LT_PAR_SPIN)
                cpu_relax();
            else
                sched_yield();      /* held: runnable, but never ahead of work */
            g = atomic_load(&p->gen);
        }
        if (g == seen) {
            int held = 0;
            pthread_mutex_lock(&p->mu);
            while (!p->stop && (g = atomic_load(&p->gen)) == seen) {
                uint64_t e = atomic_load(&p->hold_epoch);
                if (atomic_load(&p->hold) && e != served) {   /* a program began */
                    served = e;
                    held = 1;
                    break;
                }
                pthread_cond_wait(&p->cv, &p->mu);
            }
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop)
                return NULL;
            if (held && g == seen)
                continue;               /* poll for the program's jobs */
        }
        seen = g;
        lt_par_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
        int64_t n = atomic_load_explicit(&p->n_chunks, memory_order_relaxed);
        int workers = atomic_load_explicit(&p->workers, memory_order_relaxed);
        int linger = atomic_load_explicit(&p->linger, memory_order_relaxed);
        int split = atomic_load_explicit(&p->split, memory_order_relaxed);
        int w = claim_worker(p, g, workers);
        if (w < 0)
            continue;
        /* the fields above are job g's only if the issuer had not begun to
         * publish the next job meanwhile (a helper preempted after loading
         * gen, while job g finished without it): it invalidates wid's
         * generation before rewriting them (seqlock) */
        atomic_thread_fence(memory_order_acquire);
        if ((atomic_load_explicit(&p->wid, memory_order_relaxed) >> 32) != (g & 0xffffffffu))
            continue;
        int64_t ran = run_chunks(p, g, n, split, w, fn, arg);
        if (ran)
            atomic_fetch_add(&p->done, ran);
        last = linger ? mono_ns() : 0;
    }
}

lt_par_pool *lt_par_pool_new(void)
{
    /* over-aligned members (the claim words' cache lines) */
    size_t size = (sizeof(lt_par_pool) + 63) / 64 * 64;
    lt_par_pool *p = aligned_alloc(64, size);
    if (!p)
        return NULL;
    memset(p, 0, size);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->pid = getpid();
    return p;
}

void lt_par_pool_free(lt_par_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < p->n_threads && p->pid == getpid(); k++)
        pthread_join(p->th[k], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

static void run_omp(int workers, int64_t n_chunks, lt_par_fn fn, void *arg)
{
#pragma omp parallel num_threads(workers) if (workers > 1)
    {
        int w = omp_get_thread_num();
#pragma omp for schedule(static)
        for (int64_t c = 0; c < n_chunks; c++)
            fn(arg, c, w);
    }
}

void lt_par_pool_hold(lt_par_pool *p, int on)
{
    if (!p || p->n_threads == 0 || p->pid != getpid())
        return;                     /* no helper started yet: none to keep */
    if (!on) {
        atomic_store(&p->hold, 0);
        return;
    }
    atomic_store(&p->hold, 1);
    atomic_fetch_add(&p->hold_epoch, 1);
    pthread_mutex_lock(&p->mu);     /* sleeping helpers start polling now */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int lt_par_linger(int (*ready)(void *), void *arg, int64_t ns)
{
    int64_t end = mono_ns() + ns;
    for (int s = 0;; s++) {
        if (ready(arg))
            return 1;
        if ((s & 15) == 15 && mono_ns() >= end)
            return 0;
        if (ns <= 0)
            return 0;
        sched_yield();
    }
}

void lt_par_hold(const lt_kernel_ctx *ctx, int on)
{
    static int enabled = -1;        /* LAZYTPU_PAR_HOLD: read once */
    if (enabled < 0)
        enabled = (int)lt_opt_int(LT_OPT_PAR_HOLD);
    if (enabled && ctx && ctx->nthreads >= 2)
        lt_par_pool_hold((lt_par_pool *)lt_core_par_pool(ctx->core), on);
}

void lt_par_for(const lt_kernel_ctx *ctx, int workers, int64_t n_chunks,
                lt_par_fn fn, void *arg)
{
    /* the core's pool, when called on that core's worker thread */
    lt_par_run(ctx ? (lt_par_pool *)lt_core_par_pool(ctx->core) : NULL,
               workers, n_chunks, fn, arg);
}

void lt_par_run(lt_par_pool *p, int workers, int64_t n_chunks, lt_par_fn fn,
                void *arg)
{
    if (n_chunks <= 0)
        return;
    if (workers > n_chunks)
        workers = (int)n_chunks;
    if (workers > LT_PAR_MAX_HELPERS + 1)
        workers = LT_PAR_MAX_HELPERS + 1;
    if (workers <= 1) {
        for (int64_t c = 0; c < n_chunks; c++)
            fn(arg, c, 0);
        return;
    }
    if (!p || n_chunks > 0x7fffffff) {
        run_omp(workers, n_chunks, fn, arg);
        return;
    }
    if (p->pid != getpid()) {                   /* forked: no helpers here */
        for (int64_t c = 0; c < n_chunks; c++)
            fn(arg, c, 0);
        return;
    }
    if (atomic_load_explicit(&g_spin_ns, memory_order_relaxed) < 0)   /* before any
                                                                        helper reads it */
        atomic_store_explicit(&g_spin_ns, lt_opt_int(LT_OPT_PAR_SPIN_US) * 1000,
                              memory_order_relaxed);
    while (p->n_threads < workers - 1) {        /* start helpers on demand */
        if (pthread_create(&p->th[p->n_threads], NULL, helper_main, p) != 0)
            break;
        p->n_threads++;
        /* once per helper: it has its name and nice level before any job
         * (a busy machine may not run a new thread for a while; whoever
         * lists the process's threads meanwhile saw an unnamed one) */
        while (atomic_load(&p->ready) < p->n_threads)
            sched_yield();
    }
    if (p->n_threads == 0) {
        for (int64_t c = 0; c < n_chunks; c++)
            fn(arg, c, 0);
        return;
    }
    if (workers > p->n_threads + 1)
        workers = p->n_threads + 1;
    uint64_t g = atomic_load(&p->gen) + 1;
    if ((g & 0xffffffffu) == 0)                 /* keep 0 = "no job" */
        g++;
    /* the previous job's worker ids are void before its fields change: a
     * helper that read them mixed sees it (helper_main) */
    atomic_store_explicit(&p->wid, ((g & 0xffffffffu) << 32) | (uint64_t)(LT_PAR_MAX_HELPERS + 1),
                          memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->n_chunks, n_chunks, memory_order_relaxed);
    atomic_store_explicit(&p->workers, workers, memory_order_relaxed);
    atomic_store_explicit(&p->linger, lt_core_exec_inline(), memory_order_relaxed);
    int split = lt_opt_int(LT_OPT_PAR_RANGES) ? workers : 1;
    atomic_store_explicit(&p->split, split, memory_order_relaxed);
    atomic_store(&p->done, 0);
    for (int k = 0; k < workers; k++)
        atomic_store(&p->claim[k].w, ((g & 0xffffffffu) << 32) |
                                     (uint64_t)range_start(n_chunks, split, k));
    atomic_store(&p->wid, ((g & 0xffffffffu) << 32) | 1);
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->gen, g);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    int64_t mine = run_chunks(p, g, n_chunks, split, 0, fn, arg);
    atomic_fetch_add(&p->done, mine);
    /* wait for chunks still running on helpers: a short spin, then yield
     * so that the tracing thread gets this core meanwhile (2000 polls were
     * ~100 us of pure spinning per job) */
    for (int s = 0; atomic_load(&p->done) < n_chunks; s++) {
        if (s < LT_PAR_WAIT_SPIN)
            cpu_relax();
        else
            sched_yield();     /* a helper is mid-chunk (or preempted) */
    }
}
