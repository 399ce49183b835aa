/*
 * lazy/graph_events.h — the embedder's graph hook (internal side; the
 * public half is include/lazytpu_events.h): the sync pipeline and compiled
 * replays report each program they are about to queue.
 */
#ifndef LT_GRAPH_EVENTS_H
#define LT_GRAPH_EVENTS_H

#include "lazytpu_events.h"
#include "graph.h"
#include "compile.h"

/* 1 when a hook is registered (one atomic load). */
int lt_graph_events_on(void);
/* A sync's program p for captured graph g is about to be queued: with a
 * hook, a COMPILE event (when `compiled`, with the sizes of g and p) then an
 * EXECUTE event. `replay`: a torch.compile recording (lt_replay_record; no
 * EXECUTE event follows, the replay's runs report themselves). Calls out:
 * the caller holds no lock. */
void lt_graph_events_program(const lt_graph *g, const lt_program *p, lt_sync_cause cause,
                             int compiled, int replay);
/* A recorded replay of graph `key` (program p) is about to be queued on
 * core: an EXECUTE event with replay = 1. Calls out: no lock held. */
void lt_graph_events_replay(int core, uint64_t key, const lt_program *p);

#endif
