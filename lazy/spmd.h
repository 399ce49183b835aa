/*
 * lazy/spmd.h — SPMD shardings inside the core (DESIGN.md §8).
 *
 * A sharding (lt_sharding, public handle in lazytpu.h) says how a value of
 * the logical program is laid out over a device mesh: the mesh (axis sizes
 * and the core of each mesh position, row-major), and per tensor dim the
 * mesh axes that split it (packed: axis k is nibble value k + 1, the first
 * nibble the major axis; 0 = not split). It is immutable and refcounted;
 * its hash covers everything but the user's frame.
 *
 * An IR node carries one (lt_node.shard): set by an annotation
 * (lt_tensor_set_sharding: a copy of the value node with the sharding and
 * LT_NODE_SHARD_ANNOT) or propagated forward when the node is made
 * (lt_spmd_forward, from its inputs' shardings and the op's rule class,
 * the spmd column of lazy/ops.def). The sharding is part of the node hash, so of the
 * graph key. After a sync each output's data node keeps the root's sharding,
 * so a parameter updated every step stays sharded.
 *
 * Execution: by default (LAZYTPU_SPMD_PARTITION=1) the sync hands a graph
 * with shardings to lt_spmd_execute (spmd_exec.c): per-core programs with
 * local shapes on every core of the mesh, layout changes (all-reduce,
 * all-gather, ...) between them. With LAZYTPU_SPMD_PARTITION=0 it runs
 * whole on its core. Either way, at each compile lt_spmd_plan works out the
 * partition (layouts, collectives, per-core memory) and the report's
 * "== sharding ==" section shows it and says how the step ran.
 */
#ifndef LT_SPMD_H
#define LT_SPMD_H

#include <stdatomic.h>
#include "lazytpu_spmd.h"
#include "ir.h"
#include "graph.h"

#define LT_SPMD_MAX_DEVICES 64

enum { LT_NODE_SHARD_ANNOT = 4 };   /* lt_node.flags: an explicit annotation */

struct lt_sharding {
    atomic_int refs;
    int mesh_ndim;
    int64_t mesh_shape[LT_MAX_DIMS];
    int n_dev;
    int16_t dev[LT_SPMD_MAX_DEVICES];  /* core of each mesh position, row-major */
    int ndim;
    int64_t axes[LT_MAX_DIMS];         /* per tensor dim: packed mesh axes */
    int manual;                        /* 1: MANUAL ("{manual}"): per-core values of a
                                          manual region (axes all 0; spmd_manual.c) */
    uint64_t hash;
    char *frame;                       /* owned: the annotation's user line, or NULL */
};

typedef enum lt_spmd_rule {
    LT_SPMD_EW = 0,
    LT_SPMD_CONTRACT,
    LT_SPMD_REDUCE,
    LT_SPMD_NORM,
    LT_SPMD_VIEW,
    LT_SPMD_GATHER,
    LT_SPMD_CONV,
    LT_SPMD_COLLECTIVE,
    LT_SPMD_OPAQUE,
    LT_SPMD_NUM_RULES
} lt_spmd_rule;

/* The rule class of op: ops.def's spmd column (lazy/ops.c). */
lt_spmd_rule lt_spmd_rule_of(lt_op op);
/* "ew", "contract", "reduce", "norm", "view", "gather", "conv",
 * "collective", "opaque". */
const char *lt_spmd_rule_name(lt_spmd_rule r);

/* Number of mesh axes packed in code, and the k-th (0-based) of them. */
int lt_spmd_axes_count(int64_t code);
int lt_spmd_axes_get(int64_t code, int k);
/* Shards of a tensor dim split over the packed axes `code` of s's mesh. */
int64_t lt_spmd_dim_shards(const lt_sharding *s, int d);
/* Bit k set for each mesh axis k packed in code. */
unsigned lt_spmd_axes_mask(int64_t code);
/* Shards of a dim split over the packed axes `code` of a mesh whose axis
 * sizes are mesh_shape (the product of those axes' sizes; 1 for code 0). */
int64_t lt_spmd_code_shards(const int64_t *mesh_shape, int64_t code);
/* Adds the report line `head` followed by " <op> xN" for every op with a
 * nonzero count (counts: LT_NUM_OPS entries) to the "sharding" section. */
void lt_spmd_note_replicated(const char *head, const int *counts);

/* A MANUAL sharding (s->manual = 1, no dim split) of ndim dims on the mesh
 * of `mesh` (NULL: a 1-D mesh of cores 0..n_cores-1). New reference; NULL
 * on malloc failure (error set). */
lt_sharding *lt_sharding_new_manual(const lt_sharding *mesh, int ndim, int n_cores);
/* 1 when a and b have the same mesh (axis sizes and cores). */
int lt_spmd_same_mesh(const lt_sharding *a, const lt_sharding *b);

/* ---- manual sharding (spmd_manual.c) ----
 * A manual region runs per core: spmd_full_to_shard gives each core its
 * block of a sharded value (the node's shape is the block's shape), the
 * ops after it run on every core of the mesh on that core's values, and
 * spmd_shard_to_full puts the blocks together again as a value with the
 * sharding given (attrs of both: i[0..nd) the packed mesh axes per dim,
 * i[nd..2nd) the output dims). */

/* man[i] (g->n_nodes entries) = 1 when node i of g holds per-core values:
 * a spmd_full_to_shard, an op reading such a value (but not a
 * spmd_shard_to_full), a leaf held per core from a manual result. Returns
 * the number of such nodes. */
int lt_spmd_manual_mark(const lt_graph *g, char *man);
/* 1 if g holds a manual-sharding boundary (spmd_full_to_shard /
 * spmd_shard_to_full) or a manual leaf. */
int lt_spmd_has_manual(const lt_graph *g);
/* For a whole (unpartitioned) run of g on its core: replaces *g by the
 * graph that computes every mesh position's per-core values of the manual
 * regions side by side (the block of each position sliced from the full
 * value; spmd_shard_to_full concatenating the positions' blocks), equal to
 * what the partitioned run gives. roots/nr: the roots g was captured
 * from (their order is kept). LT_ERR_ARG
 * (naming the op, shape and sharding) when a manual value is itself a
 * result of the step or a region reads a split value. */
lt_status lt_spmd_manual_expand(lt_graph *g, lt_node *const *roots, int nr);

/* The sharding of the op's output computed from its inputs' shardings by
 * the op's rule class, or NULL (no input sharded, the rule gives none, or
 * every dim ends up unsplit). New reference. Never fails (NULL on malloc
 * failure: the value is then simply unannotated). */
lt_sharding *lt_spmd_forward(lt_op op, const lt_attrs *a, lt_node *const *in,
                             int n_in, const lt_shape *out);

/* Backward propagation over captured graph g (spmd_propagate.c): ax[i]
 * (g->n_nodes rows, LT_MAX_DIMS packed mesh axes per dim, filled in by the
 * caller from the nodes' shardings) of a computed node with no sharding,
 * read only by elementwise ops of its shape, becomes the layout of the
 * last such consumer (in graph order) that is split. Others unchanged;
 * on malloc failure nothing changes. */
void lt_spmd_backward_layouts(const lt_graph *g, int64_t (*ax)[LT_MAX_DIMS]);

/* A new node equal to n (same op, operands, attrs, buffer or value) with
 * sharding s (NULL: none) and LT_NODE_SHARD_ANNOT when annotated. Caller
 * owns 1 reference; NULL on malloc failure (error set). */
lt_node *lt_node_with_sharding(lt_node *n, lt_sharding *s, int annotated);

/* The sharding old's tensor keeps when an in-place update replaces old by
 * nv (lt_tensor_assign): old's sharding when it has one (not manual) of
 * nv's rank that nv does not have, else NULL. Borrowed from old; caller
 * holds the core's live lock. */
lt_sharding *lt_spmd_kept_sharding(const lt_node *old, const lt_node *nv);

/* The partition plan of a graph (spmd_partition.c). */
typedef struct lt_spmd_plan_out {
    int n_sharded;                 /* nodes carrying a sharding; 0: no plan */
    double peak_bytes;             /* one core's planned peak */
    double peak_bytes_unpartitioned;
    double param_bytes;            /* one core's share of the graph's leaves */
    double param_bytes_unpartitioned;
    int n_collectives;
    double collective_bytes;
    int n_replicated;              /* ops without a rule, run replicated */
    int n_outputs;
    lt_sharding **out_shard;       /* per output: its planned layout (one
                                      reference each) or NULL */
} lt_spmd_plan_out;

/* Plans g over the mesh of its first sharded value: layouts (annotated,
 * forward-propagated, then backward through elementwise consumers),
 * collectives where layouts disagree, replicated fallbacks, per-core
 * memory. With report=1 also writes the graph's lines into the report's
 * "sharding" section and counts SpmdGraphs, SpmdUnpartitionedGraphs,
 * SpmdPlannedCollectives, SpmdReplicatedOps. *res is zeroed (n_sharded 0)
 * when nothing in g is sharded; free it with lt_spmd_plan_free. */
lt_status lt_spmd_plan(const lt_graph *g, lt_spmd_plan_out *res, int report);
/* report = 2: the same lines, the first saying the graph ran partitioned
 * (SpmdUnpartitionedGraphs not counted); the replicated ops are then
 * listed and counted by the executor, by its own rules. */
void lt_spmd_plan_free(lt_spmd_plan_out *res);
/* Output k's data node `out` takes its planned layout (sync step 6). */
void lt_spmd_set_output(lt_node *out, const lt_spmd_plan_out *res, int k);

/* Runs g partitioned over the mesh of its first sharded value
 * (spmd_exec.c): layouts per value, per-core programs with local shapes on
 * every core of the mesh (compiled through the compile cache, queued on the
 * cores' workers, run in parallel, one level at a time), layout changes
 * between them on the host. On LT_OK with *ran = 1, out_bufs[k]
 * (g->n_outputs entries, zeroed by the caller) holds a new reference to
 * output k's value on g->core (a split result held as per-core parts,
 * lt_buffer_parts; others whole), every buffer ready, SpmdPartitionedExecute,
 * the metrics SpmdCorePeakBytes / SpmdCoreHeldBytes and
 * SpmdExecutedCollectives are counted and, when a per-core program was
 * compiled, the report's sharding section has the plan (mode 2) and the
 * executed collectives. *ran = 0 with LT_OK: g has no sharding or cannot
 * be partitioned here (the reason is in the report): run it whole. An
 * error (OOM on a core naming it, a kernel's failure) leaves out_bufs
 * empty. */
lt_status lt_spmd_execute(const lt_graph *g, lt_sync_cause cause, const char *frame,
                          struct lt_buffer **out_bufs, int *ran);

#endif
