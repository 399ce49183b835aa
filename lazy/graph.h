/*
 * lazy/graph.h — a captured graph: what a sync hands to the compiler.
 *
 * Capture walks the pending roots with an iterative post-order DFS (inputs
 * before users, operands in order, each node once). Position i in nodes[] is
 * the node's id inside this graph; programs refer to nodes by position only,
 * so a cached program runs any graph with the same key.
 *
 * key: hash over the post-order sequence of (node hash, operand positions),
 * the parameter aliasing pattern and the output positions. Equal keys mean
 * the same computation up to parameter values; a graph holding a product
 * also mixes in the matmul precision it was captured at. struct_key: the
 * same without shapes and precision (for recompilation analysis).
 */
#ifndef LT_GRAPH_H
#define LT_GRAPH_H

#include "ir.h"

typedef struct lt_graph {
    int core;
    int n_nodes;
    lt_node **nodes;      /* post-order; the graph holds a reference to each */
    int *in_pos;          /* operand positions, flattened ... */
    int *in_off;          /* ... node i's operands are in_pos[in_off[i] .. in_off[i+1]) */
    int n_params;
    int *param_pos;       /* positions of parameters: data leaves and non-const
                             scalars, in post-order */
    int *param_alias;     /* per param: index of the first earlier param with
                             the same buffer, or -1 */
    int n_outputs;
    int *output_pos;      /* positions of the roots, in the order given (dups
                             removed: roots[] -> output index via root_out[]) */
    int *root_out;        /* per root given to capture: its output index */
    uint64_t key;
    uint64_t struct_key;
    int mm_precision;     /* lt_matmul_precision at capture when the graph
                             holds a product (matmul or convolution node),
                             else LT_MATMUL_F32; mixed into key, not into
                             struct_key */
} lt_graph;

/* Captures the graph reaching roots (all on one core). Root nodes that are
 * already data leaves are still outputs (the program copies nothing for
 * them: see compile). Returns LT_OK, or LT_ERR_* with a message. */
lt_status lt_graph_capture(lt_node *const *roots, int n_roots, lt_graph *g);
/* lt_graph_capture with the expected node count (e.g. nodes traced since
 * the last sync) to size its tables once; any hint <= 0 is fine. */
lt_status lt_graph_capture_sized(lt_node *const *roots, int n_roots, lt_graph *g,
                                 int64_t size_hint);
void lt_graph_free(lt_graph *g);   /* releases node references */

#endif
