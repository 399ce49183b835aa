/*
 * lazy/submit.h — one program's way onto a core, written once and used by
 * the lazy sync (lazy/sync.c) and compiled replay (lazy/replay.c):
 *
 *   program  lt_submit_program: the compile cache's program for a captured
 *            graph (CachedCompile), else lt_compile and store it
 *            (UncachedCompile, CompileTime, the "compile" trace event, the
 *            recompilation diagnosis); GraphSize
 *   outputs  lt_submit_outputs: output buffers shared, aliased to a
 *            parameter or allocated (OOM is reported here, synchronously);
 *            scratch
 *   queue    lt_submit_job_new + lt_submit_queue: one job type runs every
 *            program (ExecuteTime, the "execute" trace event; a failure
 *            poisons the buffers the program was to write)
 *   bound    lt_submit_bound: at most LAZYTPU_MAX_INFLIGHT programs in
 *            flight per core
 *
 * Capture is lt_graph_capture* (graph.c); donation of parameter buffers is
 * the sync's (a replay never donates: its inputs stay the caller's).
 */
#ifndef LT_SUBMIT_H
#define LT_SUBMIT_H

#include "graph.h"
#include "compile.h"
#include "device.h"

/* Who asks for a program: what the recompilation diagnosis knows of it. */
typedef enum lt_submit_origin {
    LT_SUBMIT_SYNC,       /* a sync: frame = the sync's caller frame; a new
                             structure at the same site (core, cause,
                             frame) is explained against the site's last */
    LT_SUBMIT_RECORD      /* a compiled replay's recording: frame NULL, taken
                             on a compile only (the thread's frame, else the
                             embedder's caller hook: lt_caller_capture); only
                             a structure compiled before is explained */
} lt_submit_origin;

/* The program for captured graph g: a compile cache hit, else compiled and
 * stored; a compile is diagnosed (lt_diagnose_compile_at) with `cause` and
 * the frame as `origin` says. On LT_OK *out holds a new reference whose
 * parameter and output counts match g, and *compiled (may be NULL) is 1
 * when this call compiled it. Fails with lt_compile's status, or
 * LT_ERR_INTERNAL when the cached program does not fit g; *out is then
 * NULL. */
lt_status lt_submit_program(const lt_graph *g, lt_submit_origin origin, lt_sync_cause cause,
                            const char *frame, lt_program **out, int *compiled);

/* Fills every output buffer of a (a->n_outputs entries, out_bufs allocated;
 * entries already set, e.g. donated, are kept) for program p on core: an
 * earlier output holding the same value is shared, an output aliasing a
 * parameter takes that parameter's buffer (a->param_bufs), the rest is
 * allocated and marked in fresh[k] (to be stamped with the job's seq).
 * Allocates a->scratch when p needs one. On failure (LT_ERR_OOM naming the
 * core, ...) the buffers taken so far stay in a for lt_exec_args_free. */
lt_status lt_submit_outputs(int core, const lt_program *p, lt_exec_args *a, char *fresh);

/* A job that runs one program on a core. The fields are the caller's to fill
 * before lt_submit_queue; the job owns each of them from then on (released on
 * the core's worker when the program is done). */
typedef struct lt_submit_job {
    lt_job job;                    /* the core's view (run / fail / done) */
    uint64_t key;                  /* graph key (trace events) */
    lt_program *prog;              /* owned reference */
    lt_exec_args args;             /* owned; args.cause is the caller's */
    lt_node **nodes;               /* owned references to the graph's nodes
                                      (a node that failed before makes the
                                      program that failure again; messages
                                      name nodes), or NULL */
    int n_nodes;
    char *frame;                   /* the sync's caller frame (messages), or NULL */
    int failed_node;               /* lt_exec_args.failed_node */
    int eager_op;                  /* made in an eager-op scope (lt_submit_job_new):
                                      not counted in ExecuteTime; 0 for a replay */
    int n_after;                   /* jobs of other cores this one runs after: it */
    int *after_core;               /* reads their outputs (an SPMD first-core program */
    uint64_t *after_seq;           /* summing the other cores' addends); owned, or NULL */
    int threads;                   /* > 0: the program's thread budget (a program
                                      the other cores wait for: lt_core_set_job_threads);
                                      0: the core's share */
} lt_submit_job;

/* A zeroed job (eager_op: the calling thread's eager-op scope); NULL with
 * LT_ERR_INTERNAL set when out of host memory. */
lt_submit_job *lt_submit_job_new(void);
/* Frees a job that was never queued, with everything it owns. NULL is a
 * no-op. */
void lt_submit_job_free(lt_submit_job *j);
/* Queues j on core and returns its seq: under the core's submit lock, every
 * output buffer with fresh[k] set (fresh may be NULL: none) is stamped
 * with the job's seq, so readers wait for this job. Takes j. */
uint64_t lt_submit_queue(int core, lt_submit_job *j, const char *fresh);

/* Bounds the pipeline: the host may trace ahead of the core by at most
 * max_inflight programs (step N+1 traces while step N runs). Without it a
 * loop that never reads a value queues every step, holding every step's
 * buffers (memory grows, no buffer is ever reused). Waits for the programs
 * more than max_inflight older than `seq` (0: the last queued); with report
 * their unclaimed faults are reported (a step sync), else not. */
lt_status lt_submit_bound(int core, uint64_t seq, int report);
/* Marks core's last queued job as the end of a step that queued several
 * programs on it (a partitioned step: one per level): lt_submit_bound then
 * counts that step as one program, so the host still traces step N+1 while
 * the cores run step N. Thread-safe. */
void lt_submit_mark_step(int core);

#endif
