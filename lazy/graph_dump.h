/*
 * lazy/graph_dump.h — captured graphs as text or Graphviz DOT, for
 * lt_graph_text / lt_graph_dot and LAZYTPU_SAVE_GRAPHS=<file> (every sync
 * appends its graph, in DOT when the file name ends in ".dot", else text,
 * with the graph key, the sync cause and the caller frame).
 *
 * Text, one node per line in post-order:
 *   graph 1f0c...: 6 nodes, 3 params, 1 output (struct 93ab..., core 0)
 *   %0 = data() f32[64, 784]  # param 0
 *   %1 = scalar(0.01) f64[]  # param 1
 *   %4 = sum(%3) f32[] attrs=[3, 0]  # output 0
 */
#ifndef LT_GRAPH_DUMP_H
#define LT_GRAPH_DUMP_H

#include "graph.h"

/* g as text (dot=0) or DOT (dot=1). `title` (may be NULL) is added to the
 * header / graph label. malloc'd; NULL on malloc failure. */
char *lt_graph_dump(const lt_graph *g, int dot, const char *title);

/* Reads LAZYTPU_SAVE_GRAPHS (lt_init). */
void lt_graph_dump_init(void);
/* 1 when syncs append their graphs to a file. */
int lt_graph_dump_enabled(void);
/* Appends g (synced for `cause`, from `frame`, "" if unknown) to the
 * LAZYTPU_SAVE_GRAPHS file. Errors opening/writing the file are reported
 * once on stderr and disable the dump; never fails the sync. */
void lt_graph_dump_sync(const lt_graph *g, lt_sync_cause cause, const char *frame);

#endif
