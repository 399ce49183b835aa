/*
 * lazy/diagnose.h — slow-step diagnosis (internal side; the public entry
 * points lt_fallback_record, lt_fallback_report, lt_debug_enabled,
 * lt_debug_set and lt_diagnose_take_warnings are in include/lazytpu.h).
 *
 * Three analyses, all fed from rare events only (never per traced op):
 *   recompilation  every uncached compile records its shape-free structure
 *                  key, parameter shapes/dtypes and a compact signature (op
 *                  and attribute hash per node). A structure compiled again
 *                  is explained: "input 3 (f32) [64, 784] -> [32, 784]" or
 *                  "structure changed: first differing op at position k".
 *                  A new structure from the same site (core, sync cause,
 *                  caller frame) is compared with that site's last graph.
 *   fallback       per aten op: calls, total time, first 3 distinct frames.
 *   warnings       with LAZYTPU_DEBUG=1 / PT_XLA_DEBUG=1: at every step
 *                  boundary after a warm-up of 2 steps, rates over the last
 *                  4 steps; one stderr line per problem, naming the fix.
 * All functions are thread-safe.
 */
#ifndef LT_DIAGNOSE_H
#define LT_DIAGNOSE_H

#include "graph.h"

#define LT_DIAG_WARMUP_STEPS 2
#define LT_DIAG_WINDOW 4

/* Reads LAZYTPU_DEBUG / PT_XLA_DEBUG (lt_init). */
void lt_diagnose_init(void);
/* Forgets all history: recompilation tables, step windows, fallbacks,
 * pending warnings (lt_shutdown). */
void lt_diagnose_reset(void);

/* An uncached compile of g caused by a sync with `cause` (caller frame =
 * the thread's lt_set_caller frame, NULL/"" if none). Notes a recompilation
 * (section "recompilation", counter Recompilation::<cause>) when g's
 * structure or site compiled before. */
void lt_diagnose_compile(const lt_graph *g, lt_sync_cause cause,
                         const char *frame);
/* lt_diagnose_compile, with by_site 0: only a structure that compiled
 * before is explained (shapes, dtypes, matmul precision, eviction); a new
 * structure is not compared with the site's last graph, nor recorded as
 * it (compiled replays: FX graphs recorded from the autograd thread share
 * no user frame, and a new FX graph is no recompilation). */
void lt_diagnose_compile_at(const lt_graph *g, lt_sync_cause cause,
                            const char *frame, int by_site);
/* A value was read on the host (.item()/.cpu()/print): counted in the step
 * window of the warnings (lt_host_read_record calls it for every read). */
void lt_diagnose_value_read(int core, const char *frame);
/* A step boundary (mark_step, optimizer_step, loader_step) on core:
 * evaluates the warnings when debug is on. */
void lt_diagnose_step(int core);

/* 1 for sync causes that end a training step. */
static inline int lt_cause_is_step(lt_sync_cause c)
{
    return c == LT_SYNC_MARK_STEP || c == LT_SYNC_OPTIMIZER_STEP ||
           c == LT_SYNC_LOADER_STEP;
}

/* The calling thread's caller frame ("" if none); valid until the next
 * lt_set_caller on this thread. */
const char *lt_caller_frame(void);

#endif
