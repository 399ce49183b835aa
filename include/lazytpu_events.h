/*
 * lazytpu_events.h — graph events for the embedder's own analysis (the
 * torch_xla layer's PT_XLA_DEBUG "Compilation Analysis" / "Execution
 * Analysis" blocks). Kept beside lazytpu.h (which it includes) so that the
 * shim's files that do not use it do not depend on it.
 *
 * With a hook registered, every program the core is about to run calls it on
 * the thread that asked for it (a sync, a value read, a compiled replay),
 * before the program is queued: first a COMPILE event when that graph missed
 * the compile cache and was compiled now, then an EXECUTE event. No hook: one
 * atomic load per program.
 */
#ifndef LAZYTPU_EVENTS_H
#define LAZYTPU_EVENTS_H

#include "lazytpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lt_graph_event_kind {
    LT_GRAPH_COMPILE = 0,      /* the graph was compiled (cache miss) */
    LT_GRAPH_EXECUTE = 1       /* its program is queued to run */
} lt_graph_event_kind;

typedef struct lt_graph_event {
    int kind;                  /* lt_graph_event_kind */
    int core;
    int cause;                 /* lt_sync_cause of the sync; LT_SYNC_EXPLICIT
                                  for a recording or replay */
    int replay;                /* 1: a torch.compile recording (COMPILE) or
                                  replay of one (EXECUTE) */
    uint64_t key;              /* graph key (the compile cache's) */
    int n_params;              /* program inputs: data leaves and non-constant
                                  scalars */
    int n_outputs;
    /* COMPILE only (-1 for EXECUTE): bytes of the inputs, of the outputs,
     * of the outputs written into an input's buffer, of the program's
     * scratch (intermediates not fused away) */
    int64_t input_bytes, output_bytes, aliased_bytes, scratch_bytes;
    int n_kernels;             /* COMPILE only: kernels of the program */
} lt_graph_event;

typedef void (*lt_graph_hook_fn)(const lt_graph_event *ev);

/* Registers fn (NULL unregisters). fn may be called from any thread that
 * syncs, replays or reads a value; it must not sync itself. The event is
 * valid during the call only. */
LT_API void lt_set_graph_hook(lt_graph_hook_fn fn);

#ifdef __cplusplus
}
#endif

#endif
