/*
 * lazy/spmd_exec_int.h — the partitioned executor's private types and
 * helpers, shared by spmd_exec.c (levels, layout changes, results) and
 * spmd_rules.c (the layout of each op). Not a public interface.
 */
#ifndef LT_SPMD_EXEC_INT_H
#define LT_SPMD_EXEC_INT_H

#include <string.h>
#include "spmd.h"
#include "device.h"
#include "shape.h"
#include "compile.h"
#define LT_MAX_ARITY_SPMD 64   /* a graph with a wider node runs whole */

enum { K_GATHER = 0, K_REDUCE, K_SCATTER, K_TO_ALL, K_SLICE, K_NUM };

typedef struct lay {
    int64_t ax[LT_MAX_DIMS];
    unsigned partial;
    double pscale;             /* the sum of the addends times this */
    unsigned manual;           /* per-core values of a manual region (spmd_manual.c):
                                  each position its own buffer of the node's shape */
} lay;

typedef struct conv {          /* a value brought to another layout */
    int j;
    int last;                  /* freed after this level */
    lay w;
    lt_buffer **buf;           /* per mesh position */
    struct conv *next;
} conv;

typedef struct xs {
    const lt_graph *g;
    const lt_sharding *m;
    int nd;
    int coord[LT_SPMD_MAX_DEVICES][LT_MAX_DIMS];
    lay *T;                    /* per node */
    lay *W;                    /* per edge (in_pos index) */
    char *bump;                /* per edge: layout change before the consumer */
    int *level;
    char *repl;                /* per node: run replicated (no rule) */
    char *solo;                /* per node: whole, and read only by the first position:
                                  computed there alone */
    lt_buffer ***val;          /* per node: per-position buffers, layout T */
    conv *convs;
    int n_levels;
    int count[K_NUM];
    double bytes[K_NUM];
    int ax_count[K_NUM][256];  /* per kind and mesh axes (bit k: axis k) */
    double ax_bytes[K_NUM][256];
    int replicated[LT_NUM_OPS];
    int n_replicated;
    int compiled;              /* a per-core program was compiled this step */
    int *last_use;             /* per node: the last level reading its value */
    size_t held[LT_SPMD_MAX_DEVICES];   /* per position: bytes on its core before the step */
    size_t peak[LT_SPMD_MAX_DEVICES];   /* and the step's high-water mark */
    int n_parts;               /* results kept as per-core shards */
    char *fuse;                /* per node: a partial value whose every reader is a
                                  first-position program wanting it whole: summed
                                  there, in that program (no host all-reduce); 3:
                                  read whole by every position's programs, each of
                                  which sums it (a batch-norm statistic); 2: a whole
                                  product (spmd_fuse.c) */
    struct same_bufs *sames;   /* per-position arrays naming one buffer (an addend
                                  every position reads): lt_spmdx_same_bufs */
    uint64_t last_seq[LT_SPMD_MAX_DEVICES];   /* per position: its core's last job */
    int waited;                /* every job queued so far is done */
    int cur_level;             /* the level being run */
    struct lc_level *rec;      /* the level being built is recorded here
                                  (spmd_lcache.c), or NULL */
    lt_status err;             /* set by the layouts: the step is refused (manual sharding) */
    int64_t *rand_ax;          /* per node: the axes a random op's consumers want its
                                  dim 0 split over (0: none); NULL: no random op */
    lt_buffer ***offs;         /* per node: a split random op's per-position counter
                                  offsets (lt_spmdx_offset_in), or NULL */
} xs;

static inline int64_t nshards(const xs *x, int64_t code)
{
    return lt_spmd_code_shards(x->m->mesh_shape, code);
}

/* index of position q's block along a dim split over `code` */
static inline int64_t shard_idx(const xs *x, int q, int64_t code)
{
    int64_t idx = 0;
    for (int k = 0, c = lt_spmd_axes_count(code); k < c; k++) {
        int a = lt_spmd_axes_get(code, k);
        idx = idx * x->m->mesh_shape[a] + x->coord[q][a];
    }
    return idx;
}

static inline void local_shape(const xs *x, const lt_shape *s, const lay *l, lt_shape *out)
{
    *out = *s;
    for (int d = 0; d < s->ndim; d++) out->dims[d] = s->dims[d] / nshards(x, l->ax[d]);
}

static inline int lay_same(const lay *a, const lay *b, int ndim)
{
    if (a->partial != b->partial || a->manual != b->manual) return 0;
    for (int d = 0; d < ndim; d++)
        if (a->ax[d] != b->ax[d]) return 0;
    return 1;
}

/* 1 when the positions hold different values: split, or manual. */
static inline int lay_split(const lay *l, int ndim)
{
    if (l->manual) return 1;
    for (int d = 0; d < ndim; d++)
        if (l->ax[d]) return 1;
    return 0;
}

/* Drops splits that do not divide their dim or reuse a mesh axis. */
static inline void lay_fix(const xs *x, const lt_shape *s, lay *l)
{
    unsigned used = l->partial;
    for (int d = 0; d < s->ndim; d++) {
        if (!l->ax[d]) continue;
        if (s->dims[d] % nshards(x, l->ax[d]) || (lt_spmd_axes_mask(l->ax[d]) & used)) l->ax[d] = 0;
        else used |= lt_spmd_axes_mask(l->ax[d]);
    }
    for (int d = s->ndim; d < LT_MAX_DIMS; d++) l->ax[d] = 0;
}

/* Names layout l of an ndim value over x's mesh (lt_buffer_parts.layout_key). */
static inline uint64_t lay_key(const xs *x, const lay *l, int ndim)
{
    uint64_t h = 0x4c41594f5554ULL;   /* "LAYOUT" */
    h = lt_hash_mix(h, (uint64_t)x->m->mesh_ndim);
    for (int a = 0; a < x->m->mesh_ndim; a++) h = lt_hash_mix(h, (uint64_t)x->m->mesh_shape[a]);
    for (int q = 0; q < x->m->n_dev; q++) h = lt_hash_mix(h, (uint64_t)x->m->dev[q]);
    h = lt_hash_mix(h, (uint64_t)ndim);
    for (int d = 0; d < ndim; d++) h = lt_hash_mix(h, (uint64_t)l->ax[d]);
    if (l->manual) h = lt_hash_mix(h, 0x4d414e55414cULL);   /* "MANUAL" */
    return h | 1;
}

static inline int partial_ok(const lt_node *n)
{
    return n->dtype == LT_F32 || n->dtype == LT_F64;
}

/* The kind of the change from layout A to layout B. */
static inline int kind_of(const lay *A, const lay *B, int ndim)
{
    if (A->partial) {
        for (int d = 0; d < ndim; d++)
            if (B->ax[d] && (lt_spmd_axes_mask(B->ax[d]) & A->partial)) return K_SCATTER;
        return K_REDUCE;
    }
    int gather = 0, split = 0;
    for (int d = 0; d < ndim; d++) {
        if (A->ax[d] && A->ax[d] != B->ax[d]) gather = 1;
        if (B->ax[d] && A->ax[d] != B->ax[d]) split = 1;
    }
    return gather ? (split ? K_TO_ALL : K_GATHER) : K_SLICE;
}

/* Layouts of every node of x->g (x->T, x->W), the ops run replicated
 * (x->repl, x->replicated), the level of each node and the edges that
 * change layout (x->level, x->bump, x->n_levels): spmd_rules.c. */
void lt_spmdx_plan_layouts(xs *x);
/* The attrs of node i's local op (sizes written in them made local). */
void lt_spmdx_local_attrs(const xs *x, int i, lt_attrs *a);
/* A random op i split along dim 0 reads, as its local op's second input,
 * its block's counter offset: per position an int64 0-dim buffer of that
 * position's core holding the whole value's index of the block's first
 * element (borrowed from x; made once per step). LT_ERR_INTERNAL when i
 * is not split along dim 0 alone; allocation failures as lt_buffer_alloc. */
lt_status lt_spmdx_offset_in(xs *x, int i, lt_buffer ***out);
/* Releases the offsets made this step and x->rand_ax. */
void lt_spmdx_offsets_free(xs *x);
/* The factor node i's local op applies to its input 0 (1: none): an
 * addmm with a partial result adds bias / shards; a mean nll_loss_backward
 * split over the batch scales its grad by 1 / shards. */
double lt_spmdx_in0_scale(const xs *x, int i);

/* spmd_manual.c: when node i is in a manual region or is one of its
 * boundaries (man: lt_spmd_manual_mark), decides T[i] and W of its inputs
 * and returns 1 (a refusal sets x->err); else 0. */
int lt_spmdx_rule_manual(xs *x, int i, const char *man);
/* The op node i runs as on each core (a boundary: a copy). */
lt_op lt_spmdx_local_op(const xs *x, int i);

/* ---- spmd_exec.c and spmd_fuse.c */

/* Where a leaf of a level's graph comes from, as a later step of the same
 * plan finds it again (spmd_lcache.c): the value of node j in layout w
 * (lt_spmdx_value_in), j's whole sum made by a first-position program
 * (SRC_WHOLE), the addend position q holds of partial value j (SRC_ADDEND),
 * the value of scalar node j of the graph (SRC_GSCALAR), the constant v, or
 * the per-position counter offsets of split random op j (SRC_OFFSET:
 * lt_spmdx_offset_in). */
enum { SRC_VALUE = 0, SRC_WHOLE, SRC_ADDEND, SRC_GSCALAR, SRC_CONST, SRC_OFFSET };
typedef struct src_desc {
    int kind, j, q;
    lay w;
    double v;
} src_desc;

/* A leaf of a level's graph, the per-position buffers it reads (NULL for a
 * scalar) and where it comes from. */
typedef struct src_buf {
    lt_node *node;
    lt_buffer **bufs;
    src_desc d;
} src_buf;

/* Counts an executed layout change of kind k over the mesh axes `axes`
 * (bytes per core): the report's executed lines, SpmdExecutedCollectives. */
void lt_spmdx_note(xs *x, int k, unsigned axes, double bytes);
/* Appends (node, bufs, where it comes from) to a level's sources (*src
 * grown as needed). */
lt_status lt_spmdx_add_src(src_buf **src, int *n_src, int *cap, lt_node *node, lt_buffer **bufs,
                           src_desc d);
/* Buffers of value j in layout w (per position, borrowed from x; made
 * once per step and layout: a layout change on the host when needed). */
lt_status lt_spmdx_value_in(xs *x, int j, const lay *w, lt_buffer ***out);
/* The conversion of value j to layout w made this step, or NULL. */
conv *lt_spmdx_conv_find(const xs *x, int j, const lay *w);
/* 1 if value j is one of the step's results. */
int lt_spmdx_is_result(const xs *x, int j);
/* 1 if node i is a reshape or permute of one value (the same on a whole
 * value and on each addend of a partial one). */
int lt_spmdx_linear_view(const lt_graph *g, int i);

/* spmd_fuse.c: x->fuse, the partial values the first position's programs
 * sum themselves (after the layouts, solo, levels and last uses). */
void lt_spmdx_plan_fuse(xs *x);
/* Marks in mark the values whose per-position blocks the first position's
 * product of fused value j (x->fuse[j] == 2) reads. */
void lt_spmdx_product_blocks(const xs *x, int j, char *mark);
/* The whole value of fused value j as a node of the first position's
 * program being built (sumn[j], made once per level; its data leaves
 * appended to the level's sources); the sum counted as an all-reduce. */
lt_status lt_spmdx_whole_node(xs *x, int j, int core0, lt_node **sumn, src_buf **src, int *n_src,
                              int *cap);
/* Keeps b, the whole value of fused value j made by position q's program,
 * for j's later readers and the step's results: at q == 0 for every
 * position (a first-position sum), at q > 0 (fuse 3: every position sums
 * it) for position q. */
lt_status lt_spmdx_keep_sum(xs *x, int j, int q, lt_buffer *b);
/* A per-position array (x->nd entries, owned by x until the step ends:
 * lt_spmdx_sames_free) whose every entry is b: a buffer every position's
 * program reads (another core's addend), as a level's source. NULL when out
 * of host memory (error set). */
lt_buffer **lt_spmdx_same_bufs(xs *x, lt_buffer *b);
void lt_spmdx_sames_free(xs *x);

/* ---- spmd_lcache.c: the level programs of a plan, kept for its next steps */

/* One program of a level queued on positions [q0, q1): its parameters'
 * buffers per position (pb; NULL for a scalar parameter, whose value is
 * pv), the roots' nodes in x->g (roots_i; -1 - j: the sum of fused j) and
 * their output indices. */
typedef struct lprog_run {
    lt_program *p;
    uint64_t key;
    int n_params, n_outputs;
    const int *param_alias;
    lt_buffer ***pb;
    const double *pv;
    int nr;
    const int *roots_i, *root_out;
} lprog_run;

/* Queues r's program on the cores of positions [q0, q1) with each
 * position's buffers; the roots' per-position results go to x->val (a
 * fused sum to lt_spmdx_keep_sum). after: the first position waits for
 * every other position's last job; threads > 1: an elementwise program
 * runs with that many threads. */
lt_status lt_spmdx_queue_jobs(xs *x, const lprog_run *r, int q0, int q1, lt_sync_cause cause,
                              const char *frame, int after, int threads);

/* Names x's plan (the graph's key, the mesh, every layout, level, change
 * and first-position choice that shapes the level programs). */
uint64_t lt_spmdx_plan_key(const xs *x, const char *is_out);
/* The recorded level programs of plan `key` (of n_levels levels), or
 * NULL; a reference for lt_spmdx_lcache_release. */
struct lc_entry *lt_spmdx_lcache_get(uint64_t key, int n_levels);
void lt_spmdx_lcache_release(struct lc_entry *e);
/* A new entry recording x's levels as they are built (x->rec is set per
 * level by lt_spmdx_rec_level), or NULL when out of host memory. */
struct lc_entry *lt_spmdx_rec_begin(const xs *x, uint64_t key);
/* Level L of e is recorded from here on (x->rec). */
void lt_spmdx_rec_level(xs *x, struct lc_entry *e, int L);
/* Records a program built for the current level (x->rec; no-op when NULL):
 * lg its graph, src the level's sources its data leaves and scalars came
 * from (an unknown leaf makes the entry unusable). */
void lt_spmdx_rec_prog(xs *x, lt_program *p, const lt_graph *lg, const src_buf *src, int n_src,
                       const int *roots_i, int nr, int q0, int q1, int after, int threads);
/* Records the level's sources (after its programs) and a layout change
 * counted while it was built (an in-program all-reduce). */
void lt_spmdx_rec_srcs(xs *x, const src_buf *src, int n_src);
void lt_spmdx_rec_note(xs *x, int k, unsigned axes, double bytes);
/* Keeps e (complete, every level usable) for the plan's next steps. */
void lt_spmdx_rec_end(struct lc_entry *e, int ok);
/* Runs level L from e: the sources found again for this step, the notes
 * counted, the programs queued as built. *rebuild = 1 (nothing queued):
 * the sources found do not alias as when it was built; build the level. */
lt_status lt_spmdx_run_cached_level(xs *x, struct lc_entry *e, int L, lt_sync_cause cause,
                                    const char *frame, int *rebuild);

#endif
