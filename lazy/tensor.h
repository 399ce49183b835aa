/*
 * lazy/tensor.h — tensor handles and the per-core front-end state (live
 * tensor lists, trace counts since the last sync), plus the runtime settings
 * read by lt_init. Internal to the C core.
 *
 * A tensor owns one reference to its value node (pending IR, a data leaf, or
 * a scalar leaf). The value of a tensor is read and replaced only under its
 * core's live lock (lt_live_lock), so a sync on one thread and tracing on
 * another never see a freed node.
 */
#ifndef LT_TENSOR_H
#define LT_TENSOR_H

#include <pthread.h>
#include <stdatomic.h>
#include "ir.h"

#define LT_RT_MAX_CORES 64

struct lt_tensor {
    atomic_int refs;
    int core;
    lt_dtype dtype;              /* logical dtype */
    lt_node *value;              /* owned reference; guarded by the live lock */
    lt_shape shape;              /* copy of value's shape (stable for readers) */
    lt_dtype storage;            /* value's storage dtype */
    uint8_t from_step;           /* its value was last set by a sync (a step's
                                    output): lt_tensor_from_step */
    struct lt_tensor *prev, *next;   /* core's live list */
};

typedef struct lt_core_live {
    pthread_mutex_t mu;
    lt_tensor head;              /* sentinel of a circular list */
    int64_t count;               /* live tensors */
    int64_t traced;              /* nodes traced since the last sync */
    int64_t last_sync_end_ns;    /* trace events: end of the last sync */
} lt_core_live;

/* Runtime settings, fixed by lt_init (defaults before). */
typedef struct lt_runtime {
    int n_cores;
    atomic_int bf16;             /* -1 until decided: read it with lt_rt_bf16 */
    int64_t graph_limit;
    int64_t cache_size;
    int64_t max_inflight;        /* programs queued per core before a sync waits */
    int check_finite;            /* LAZYTPU_CHECK_FINITE (lazy/finite.h) */
    int no_hfuse;                /* LAZYTPU_HFUSE=0: no horizontal fusion
                                    (lazy/compile_hfuse.c) */
    int no_epilogue;             /* LAZYTPU_GEMM_EPILOGUE=0: no GEMM epilogues
                                    (compile_pattern.c) */
    atomic_int mm_precision;     /* lt_matmul_precision (lazy/precision.c) */
    struct lt_cache *cache;
    struct lt_pcache *pcache;    /* persistent compile cache (lazy/pcache.h) */
    lt_core_live live[LT_RT_MAX_CORES];
} lt_runtime;

/* The runtime (initialises it lazily: lt_init). NULL when lt_init failed
 * (error set). */
lt_runtime *lt_rt(void);

/* Runs the embedder's caller hook (lt_set_caller_hook), if any: before a
 * sync the library starts itself (graph size limit). Returns 1 if a hook ran
 * (it set the caller frame, which the caller clears afterwards). */
int lt_caller_hook_run(void);
/* The frame to record on a node that is being traced: a malloc'd copy of
 * the thread's caller frame (lt_set_caller) if set, else what the caller
 * hook sets (run here, the frame cleared again afterwards), else NULL. */
char *lt_caller_capture(void);
/* The bf16 storage mode (1: float32 stored as bf16). Decided once, when the
 * first device value is made (or the mode is first asked for), from
 * LAZYTPU_USE_BF16 / XLA_USE_BF16 as they are then, like torch_xla, which
 * reads XLA_USE_BF16 at its first device tensor: a program may set the
 * variable after the engine has loaded (Lightning's XLAPrecision("bf16-true")
 * does). Fixed afterwards until lt_shutdown. */
int lt_rt_bf16(lt_runtime *r);
/* The runtime if initialised, else NULL (never initialises). */
lt_runtime *lt_rt_peek(void);
/* Sets r's matmul precision from LAZYTPU_MATMUL_PRECISION (f32 when unset);
 * LT_ERR_ARG naming the value when it is not a level (lazy/precision.c). */
lt_status lt_rt_precision_init(lt_runtime *r);
/* The matmul precision graphs take when captured now: the runtime's level,
 * LT_MATMUL_F32 before lt_init (never initialises). */
lt_matmul_precision lt_rt_matmul_precision(void);

/* Initialises the live lists and locks (once; no cores, no env). */
void lt_rt_once(void);

lt_core_live *lt_live(int core);   /* core must be valid; runtime initialised */
static inline void lt_live_lock(int core) { pthread_mutex_lock(&lt_live(core)->mu); }
static inline void lt_live_unlock(int core) { pthread_mutex_unlock(&lt_live(core)->mu); }

/* Creates a tensor holding `value` (takes over the caller's reference) and
 * links it in the core's live list; caller must hold the live lock. Never
 * fails (aborts only on host malloc failure, returns NULL then). */
lt_tensor *lt_tensor_new_locked(lt_node *value, lt_dtype logical, int core);

/* 1 if node is a computation (not a data or scalar leaf). */
static inline int lt_node_is_pending(const lt_node *n)
{
    return n->op != LT_OP_data && n->op != LT_OP_scalar;
}

/* Retains and returns t's current value (under the live lock). */
lt_node *lt_tensor_value(lt_tensor *t);

/* Pre-resolved counters/metrics of the front end (resolved once). */
typedef struct lt_fe_metrics {
    lt_counter *create_tensor, *destroy_tensor, *cached, *uncached,
        *mark_step, *size_limit_sync;
    lt_counter *sync_cause[LT_NUM_SYNC_CAUSES];
    lt_metric *to_dev_time, *from_dev_time, *to_dev_bytes, *from_dev_bytes,
        *compile_time, *execute_time, *graph_size;
} lt_fe_metrics;
const lt_fe_metrics *lt_fe_metrics_get(void);

/* Sync of an explicit set of pending root tensors on one core (all on
 * `core`, retained by the caller). report=1 (a step boundary): the waits of
 * this sync (wait=1: the whole core up to its program; wait=0: the
 * in-flight bound) report unclaimed faults of earlier programs once;
 * report=0: they only wait. */
lt_status lt_sync_tensors_core(int core, lt_tensor *const *ts, int n,
                               lt_sync_cause cause, int wait, int report);

/* Forgets the recompilation history (lt_shutdown). */
void lt_sync_state_reset(void);

#endif
