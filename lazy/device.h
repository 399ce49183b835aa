/*
 * lazy/device.h — simulated cores and their device buffers.
 *
 * A core is a worker thread with a FIFO of jobs, an OpenMP thread budget
 * (max(1, physical cores / cores in use)) and a device-memory budget
 * (LAZYTPU_HBM_BYTES, default 16 GiB). Buffers are 64-byte aligned host
 * memory accounted against their core's budget. A buffer written by a queued
 * program carries that job's sequence number; it is ready when the core has
 * finished that job.
 */
#ifndef LT_DEVICE_H
#define LT_DEVICE_H

#include <stdatomic.h>
#include "lazytpu.h"
#include "fault.h"

/* Most simulated cores a process can have (base/options.def:
 * LAZYTPU_NUM_CORES 1..64). */
#define LT_MAX_CORES 64

typedef struct lt_buffer {
    atomic_int refs;
    int core;
    lt_dtype dtype;
    int64_t numel;
    size_t bytes;
    void *data;               /* NULL while a value held as parts is not
                                 assembled (lt_buffer_whole) */
    struct lt_buffer_parts *parts;   /* owned, or NULL: the value held as
                                 per-core parts (a sharded value) */
    struct lt_buffer *base;   /* NULL, or a view (lt_buffer_view): data points
                                 into base's memory, on which it holds a
                                 reference; not accounted; never written */
    uint64_t ready_seq;       /* 0 = ready now; else the job seq that writes it */
    struct lt_fault *fault;   /* owned; set (by the core's worker, before the
                                 job counts as done) when the writing job
                                 failed: the buffer is poisoned, its data is
                                 never valid. Read it only after
                                 lt_buffer_wait, or on the core's worker. */
} lt_buffer;

/* Creates the cores (once). n_cores from LAZYTPU_NUM_CORES (default 8). */
lt_status lt_devices_init(void);
/* Drains and joins every worker, frees cores. Buffers still referenced are
 * freed when released later. */
void lt_devices_shutdown(void);
int lt_devices_count(void);
int lt_core_valid(int core);            /* 1 if 0 <= core < count */
int lt_core_omp_threads(int core);      /* OpenMP budget of the core */
/* Sets the thread budget lt_core_omp_threads reports to the calling thread
 * while it runs one job (n > 0; 0 restores the core's share, nproc / cores
 * in use): a job that runs while the other cores wait for it (an SPMD
 * first-core program, lt_submit_job.threads) may use every CPU. A
 * LAZYTPU_OMP_THREADS setting still wins. Returns the previous value. */
int lt_core_set_job_threads(int n);
/* The number of CPUs the process may use (the cores' shares sum to it). */
int lt_core_nproc(void);
/* The core's helper-thread pool (an lt_par_pool, kernels/par.h), created on
 * first use, when called from the thread running one of the core's jobs
 * (its worker, or a waiter running the job inline: one executor per core
 * at a time, so the pool has one issuing thread at a time); NULL from any
 * other thread, after lt_devices_shutdown or on malloc failure. Freed by
 * lt_devices_shutdown. */
void *lt_core_par_pool(int core);
/* 1 when the calling thread is running a core's program inline, as the
 * caller that waits for it (the core's worker is then idle), else 0. */
int lt_core_exec_inline(void);

/* Allocates numel elements of dt on core. Fails with LT_ERR_OOM when the
 * core's budget would be exceeded; the message names the core, the request
 * and the bytes in use / budget. Caller owns 1 reference. */
lt_status lt_buffer_alloc(int core, lt_dtype dt, int64_t numel, lt_buffer **out);
/* A read-only view of numel elements of dtype dt at byte offset off of
 * base's data (ready, whole, not a view itself; off + the view's bytes
 * within base's, off a multiple of 64): a buffer of core `core` holding a
 * reference on base, not counted against any budget. Programs read it;
 * lt_submit_outputs never lets one write it (an aliased output gets a fresh
 * copy). */
lt_status lt_buffer_view(lt_buffer *base, int core, size_t off, lt_dtype dt, int64_t numel,
                         lt_buffer **out);
lt_buffer *lt_buffer_retain(lt_buffer *b);
void lt_buffer_release(lt_buffer *b);   /* frees and un-accounts at 0 */
/* Blocks until the buffer's writer job finished. Returns LT_OK, or, when
 * that job failed (the buffer is poisoned), the job's fault: its status and
 * message, every time it is called; the fault is then claimed (a later
 * lt_core_wait does not report it again). */
lt_status lt_buffer_wait(lt_buffer *b);
size_t lt_core_bytes_in_use(int core);

/* A value stored as per-core parts (SPMD: each core of a mesh keeps its
 * shard). Part q is a block of the global row-major value: its shape is
 * ldims, its offset off[q]; owner[q] = 1 for one copy of each block (the
 * others repeat it). layout_key names the layout the parts were made in
 * (the SPMD executor's; compared, never interpreted here). */
typedef struct lt_buffer_parts {
    int n;
    lt_buffer **part;                 /* n owned references, ready */
    int ndim;
    int64_t dims[LT_MAX_DIMS], ldims[LT_MAX_DIMS];
    int64_t (*off)[LT_MAX_DIMS];      /* n rows */
    char *owner;                      /* n entries */
    uint64_t layout_key;
    unsigned layout_axes;             /* the mesh axes that layout splits over */
    int manual;                       /* per-core values of a manual region (each part
                                         the whole node shape): no global value, never
                                         assembled (lt_buffer_whole refuses) */
} lt_buffer_parts;

/* An lt_buffer_parts of n positions with part/off/owner allocated and
 * zeroed (caller fills them), or NULL when out of host memory. */
lt_buffer_parts *lt_buffer_parts_new(int n);
/* Writes the global value of p (elements of es bytes) to dst (host memory
 * of the global size). */
void lt_buffer_parts_assemble(const lt_buffer_parts *p, size_t es, void *dst);
/* Releases the parts and frees p (NULL: no-op). */
void lt_buffer_parts_free(lt_buffer_parts *p);
/* A buffer of numel elements of dt on core whose value is `parts` (taken,
 * also on failure): data is NULL and no bytes are accounted on core until
 * lt_buffer_whole. Caller owns 1 reference. */
lt_status lt_buffer_new_parts(int core, lt_dtype dt, int64_t numel, lt_buffer_parts *parts,
                              lt_buffer **out);
/* 1 when a and b hold one storage: the same buffer, or two buffers held as
 * the same per-core parts (the same part buffer at every position, the same
 * layout and global dims: two results of a partitioned step that view one
 * value); else 0. Thread-safe. */
int lt_buffer_same_storage(lt_buffer *a, lt_buffer *b);
/* Makes b->data hold the whole value: a buffer held as parts is assembled
 * once (its bytes then accounted on b->core; LT_ERR_OOM naming the core when
 * they do not fit); the parts stay (readers that want a shard keep using
 * them). LT_OK at once for a plain buffer. Thread-safe. */
lt_status lt_buffer_whole(lt_buffer *b);
/* lt_buffer_whole, then the parts are dropped: for a buffer about to be
 * written whole (an output aliasing or donated to a program). */
lt_status lt_buffer_unpart(lt_buffer *b);
/* b (held as parts, no data) takes t's memory and its accounting on
 * b->core; t (a fresh buffer of b's size from lt_buffer_alloc, one
 * reference) is freed. For lt_buffer_whole. */
void lt_buffer_adopt(lt_buffer *b, lt_buffer *t);
/* Per-core high-water mark since the last lt_core_peak_mark(core) (which
 * sets it to the bytes in use now): the SPMD executor's per-step peak. */
void lt_core_peak_mark(int core);
size_t lt_core_peak_since_mark(int core);
/* Bytes of freed device buffers the core keeps for reuse (its buffer
 * cache); 0 for an invalid core or with the cache disabled. */
size_t lt_core_cached_bytes(int core);

/* A job run on the core's worker thread. run() returns a status; on failure
 * it must have called lt_set_error, and it may set `cause` (an owned
 * reference) to the fault of a poisoned input it found. The core then makes
 * one lt_fault of the message (derived from `cause` if set) and calls
 * fail(), if given, which attaches it to the job's output buffers
 * (lt_buffer.fault); the fault is also kept on the core's list of
 * unclaimed faults for lt_core_wait. done() is always called last, on the
 * worker (free the job there). */
typedef struct lt_job {
    lt_status (*run)(struct lt_job *job, int core);
    void (*fail)(struct lt_job *job, struct lt_fault *f);   /* may be NULL */
    void (*done)(struct lt_job *job);
    struct lt_job *next;      /* queue link, owned by the core */
    uint64_t seq;             /* assigned by lt_core_submit */
    struct lt_fault *cause;   /* see above; NULLed by lt_core_submit */
    struct lt_fault *same;    /* set by a failing run() (an owned reference)
                                 when the failure is an earlier one again
                                 (lt_node_set_fault): that fault is used as
                                 is, not a new one. NULLed by lt_core_submit */
    int inline_ok;            /* the job may run on a thread waiting for it
                                 instead of the core's worker (see
                                 lt_core_wait); 0 for jobs that must not
                                 block a caller (collectives) */
    int64_t queued_ns;        /* lt_now_ns at submit (LAZYTPU_PROFILE only) */
    int wake;                 /* LT_WAKE_*: whether lt_core_submit wakes the
                                 core's worker for this job */
} lt_job;

/* How a submitted job reaches an executor (with inline execution on; a job
 * that is not inline_ok, or with several cores in use, always wakes). */
enum {
    LT_WAKE_NOW = 0,      /* wake the worker: the caller goes on (pipelining) */
    LT_WAKE_HINT,         /* a step sync: the worker is not woken when the
                             caller waited right after its previous one
                             (mark_step(); wait_device_ops()): the wait
                             that follows runs it inline */
    LT_WAKE_WAITER        /* the caller waits for it next (a sync with wait,
                             a value read): the worker is not woken */
};

/* Queues job on core; assigns and returns job->seq (> 0). Never blocks on
 * execution. */
uint64_t lt_core_submit(int core, lt_job *job);
/* Sequence number the next submitted job will get (to stamp output buffers
 * before submitting). Call with the submit lock semantics of lt_core_lock. */
void lt_core_lock(int core);
void lt_core_unlock(int core);
uint64_t lt_core_next_seq(int core);
/* Sequence number of the last submitted job (0 = none yet). */
uint64_t lt_core_last_seq(int core);
/* Waits until all jobs up to seq (0 = all submitted so far) are done.
 * Inline execution (LAZYTPU_INLINE_EXEC, default on): while the core's
 * worker is not running a job, a waiter takes the queued jobs it waits for
 * (inline_ok ones, oldest first, one executor at a time per core) and runs
 * them on its own thread with the core's helper pool, instead of sleeping
 * until the worker wakes, runs them and wakes it back; results, faults and
 * trace/profile events are the same (a job left unwoken by its LT_WAKE_*
 * that the waiter cannot take wakes the worker). Otherwise it spins
 * LAZYTPU_WAIT_SPIN polls on the job's completion before sleeping.
 * report=0: returns LT_OK (a plain wait; errors stay with their buffers).
 * report=1: returns the first unclaimed fault of a job in that range (its
 * status and message, with " (+N more failed programs on core C)" when
 * there were several) and claims every fault in the range, so each failure
 * is reported at most once; LT_OK when there was none. LT_ERR_DEVICE for an
 * invalid core. */
lt_status lt_core_wait(int core, uint64_t seq, int report);
/* 1 if core has an unclaimed fault of a job <= seq (0 = any) that has
 * finished; never waits. */
int lt_core_has_unclaimed(int core, uint64_t seq);

#endif
