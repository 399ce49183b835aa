/*
 * lazy/graph_events.c — the embedder's graph hook (see graph_events.h and
 * include/lazytpu_events.h).
 */
#include <string.h>
#include <stdatomic.h>
#include "graph_events.h"
#include "tensor.h"

static _Atomic(lt_graph_hook_fn) graph_hook;

void lt_set_graph_hook(lt_graph_hook_fn fn) { atomic_store(&graph_hook, fn); }

int lt_graph_events_on(void)
{
    return atomic_load_explicit(&graph_hook, memory_order_relaxed) != NULL;
}

static int64_t node_bytes(const lt_node *n)
{
    return lt_shape_numel(&n->shape) * (int64_t)lt_dtype_size((lt_dtype)n->dtype);
}

void lt_graph_events_program(const lt_graph *g, const lt_program *p, lt_sync_cause cause,
                             int compiled, int replay)
{
    lt_graph_hook_fn fn = atomic_load(&graph_hook);
    if (!fn || !g || !p) return;
    lt_graph_event ev;
    memset(&ev, 0, sizeof ev);
    ev.core = g->core;
    ev.cause = (int)cause;
    ev.replay = replay;
    ev.key = g->key;
    ev.n_params = g->n_params;
    ev.n_outputs = g->n_outputs;
    if (compiled) {
        ev.kind = LT_GRAPH_COMPILE;
        for (int j = 0; j < g->n_params; j++) {
            const lt_node *n = g->nodes[g->param_pos[j]];
            /* a scalar parameter is one value of its dtype */
            ev.input_bytes += n->op == LT_OP_data ? node_bytes(n)
                                                  : (int64_t)lt_dtype_size((lt_dtype)n->dtype);
        }
        for (int k = 0; k < g->n_outputs; k++) {
            int64_t b = node_bytes(g->nodes[g->output_pos[k]]);
            ev.output_bytes += b;
            if (lt_program_output_alias(p, k) >= 0 || lt_program_output_donor(p, k) >= 0)
                ev.aliased_bytes += b;
        }
        ev.scratch_bytes = (int64_t)lt_program_scratch_bytes(p);
        ev.n_kernels = lt_program_n_kernels(p);
        fn(&ev);
    }
    if (replay) return;
    ev.kind = LT_GRAPH_EXECUTE;
    ev.input_bytes = ev.output_bytes = ev.aliased_bytes = ev.scratch_bytes = -1;
    ev.n_kernels = -1;
    fn(&ev);
}

void lt_graph_events_replay(int core, uint64_t key, const lt_program *p)
{
    lt_graph_hook_fn fn = atomic_load(&graph_hook);
    if (!fn || !p) return;
    lt_graph_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = LT_GRAPH_EXECUTE;
    ev.core = core;
    ev.cause = (int)LT_SYNC_EXPLICIT;
    ev.replay = 1;
    ev.key = key;
    ev.n_params = lt_program_n_params(p);
    ev.n_outputs = lt_program_n_outputs(p);
    ev.input_bytes = ev.output_bytes = ev.aliased_bytes = ev.scratch_bytes = -1;
    ev.n_kernels = -1;
    fn(&ev);
}
