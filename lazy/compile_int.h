/*
 * lazy/compile_int.h — state shared by the compiler passes (compile*.c).
 *
 * Pipeline (lt_compile in compile.c):
 *   lt_cc_cse       compile_cse.c   CSE by (node hash, operands), DCE, users
 *   lt_cc_views     compile_view.c  leaves -> params/consts, movement ops ->
 *                                   strided views of their source,
 *                                   optimization barriers -> views through
 *                                   an alias buffer that orders its readers
 *   lt_cc_patterns  compile_pattern.c  scalar scale folded into softmax /
 *                                   softmax_backward kernels
 *   lt_cc_fuse      compile_fuse.c  elementwise groups, stored values,
 *                                   reductions absorbing producer groups
 *   lt_cc_epilogues compile_pattern.c  an elementwise group over an mm /
 *                                   addmm result run inside the GEMM step
 *   lt_cc_emit      compile_emit.c  steps (fused programs, reductions,
 *                                   library kernels, output copies)
 *   lt_cc_hfuse     compile_hfuse.c independent fused steps of the same
 *                                   program merged into one kernel
 *   lt_cc_plan      compile_plan.c  step order, scratch planning by liveness,
 *                                   outputs, donation, aliasing
 */
#ifndef LT_COMPILE_INT_H
#define LT_COMPILE_INT_H

#include "program.h"

enum lt_cn_kind {
    CN_DEAD = 0,
    CN_PARAM,     /* data leaf: pv = contiguous param view */
    CN_SLOT,      /* scalar parameter */
    CN_CONST,     /* constant scalar */
    CN_VIEW,      /* movement folded: pv = view over source base */
    CN_EW,        /* elementwise: in a fusion group */
    CN_REDUCE,    /* reduction / argreduction */
    CN_KERNEL,    /* library kernel, or a materialising copy (fn = view) */
};

typedef struct lt_cnode {
    int canon;        /* CSE representative (position) */
    int kind;         /* enum lt_cn_kind (CN_DEAD if not live) */
    int n_users;      /* live consumer edges (after CSE) */
    int param;        /* CN_PARAM / CN_SLOT: param index */
    int output;       /* first output index this node is, or -1 */
    int buf;          /* materialised buffer id, or -1 */
    int has_pv;       /* pv valid */
    lt_pview pv;      /* where the value can be read */
    int group;        /* CN_EW: group id (union-find root via lt_cc_group) */
    int stored;       /* CN_EW: must be written to its buffer */
    int absorbed_by;  /* CN_EW group absorbed into this reduce position */
    int copy_src;     /* CN_KERNEL materialising copy: 1 */
    lt_pview copy_in; /* its source view */
    lt_dtype ctype;   /* CN_EW: compute type */
    int step;         /* producing step index, -1 */
    /* compile_pattern.c (0 = none, else position + 1): the kernel step of
     * this node runs fold_src's op, attrs and operands (fold_in0 replacing
     * operand 0), plus fold_scale's 0-d value as an extra last input */
    int fold_src, fold_scale, fold_in0;
    /* compile_pattern.c lt_cc_epilogues (0 = none, else position + 1): on
     * an mm/addmm kernel, the root of the elementwise group its step runs
     * on each block of the result (GEMM epilogue); on that group's root,
     * the mm/addmm whose step emits it */
    int epi_group, epi_of;
} lt_cnode;

typedef struct lt_cbuf {
    int64_t bytes;
    int output;       /* >= 0: lives in out_bufs[output] */
    int first, last;  /* step indices of production / last use */
    int64_t offset;   /* scratch byte offset */
    /* An alias (an optimization barrier's value, compile_view.c): no storage
     * and no producer of its own; a view over it reads the storage
     * (al_base, al_index, al_off) of another pview base (never an alias),
     * and a step reading it runs after the producers of the buffers
     * after[0 .. n_after) (buffers with storage; lt_cc_step_edges). */
    int is_alias;
    uint8_t al_base;
    int al_index;
    int64_t al_off;
    int *after;       /* owned */
    int n_after;
} lt_cbuf;

typedef struct lt_cctx {
    const lt_graph *g;
    int n;
    lt_cnode *cn;
    int *param_of_pos;    /* position -> param index or -1 */
    lt_cbuf *bufs;
    int n_bufs, cap_bufs;
    /* groups: union-find over positions (only CN_EW nodes) */
    int *uf;
    int *gsize;
    /* emitted steps */
    lt_step *steps;
    int n_steps, cap_steps;
    int *step_anchor;     /* position the step is ordered by */
    uint64_t *consts;
    uint8_t *const_dtype;
    int n_consts, cap_consts;
    lt_program *prog;
    int no_fuse;          /* LAZYTPU_CHECK_FINITE: one op per step */
    int no_hfuse;         /* LAZYTPU_HFUSE=0 (or no_fuse) */
    int no_epilogue;      /* LAZYTPU_GEMM_EPILOGUE=0 */
    int *mark;            /* scratch marks for DFS (generation) */
    int mark_gen;
    int *stack;
} lt_cctx;

static inline int lt_cc_in(const lt_cctx *c, int pos, int k)
{
    return c->cn[c->g->in_pos[c->g->in_off[pos] + k]].canon;
}
static inline int lt_cc_nin(const lt_cctx *c, int pos)
{
    return c->g->in_off[pos + 1] - c->g->in_off[pos];
}
static inline const lt_node *lt_cc_node(const lt_cctx *c, int pos)
{
    return c->g->nodes[pos];
}

lt_status lt_cc_cse(lt_cctx *c);
lt_status lt_cc_views(lt_cctx *c);
lt_status lt_cc_patterns(lt_cctx *c);
lt_status lt_cc_fuse(lt_cctx *c);
lt_status lt_cc_epilogues(lt_cctx *c);
lt_status lt_cc_emit(lt_cctx *c);
lt_status lt_cc_hfuse(lt_cctx *c);
lt_status lt_cc_plan(lt_cctx *c);
/* The step graph through buffers (compile_plan.c): prod[b] is the step
 * writing buffer b or -1; the readers of step s become adj[off[s] ..
 * off[s+1]) (CSR by producer, a reader once per input it reads) and
 * indeg[s] counts the edges into s. off (n_steps + 1) and indeg (n_steps)
 * are caller-allocated and zeroed; *adj is malloc'd (caller frees).
 * LT_ERR_OOM (nothing allocated) on failure. */
lt_status lt_cc_step_edges(const lt_cctx *c, const int *prod, int *off, int *indeg, int **adj);

/* pv with an alias buffer base (an optimization barrier's value) replaced by
 * the storage it names; any other pv unchanged. */
void lt_cc_resolve_alias(const lt_cctx *c, lt_pview *pv);

/* Union-find root of position p's group. */
int lt_cc_group(lt_cctx *c, int p);
/* New buffer id of `bytes`; -1 on OOM (error set). */
int lt_cc_new_buf(lt_cctx *c, int64_t bytes);
/* Contiguous view of shape/dtype over buffer id. */
lt_pview lt_cc_buf_view(int buf, const lt_shape *s, lt_dtype dt);
/* Makes node p materialised in a buffer of its own (pv = contiguous). */
lt_status lt_cc_materialise(lt_cctx *c, int p);
/* View pv broadcast (right-aligned, stride 0) to shape. */
lt_pview lt_cc_broadcast(const lt_pview *pv, const lt_shape *shape);
/* Appends a step (takes ownership of its arrays); returns index or -1. */
int lt_cc_add_step(lt_cctx *c, const lt_step *s, int anchor);
/* Folds a movement op over src into dst; 0 = needs a contiguous source. */
int lt_cc_fold_view(lt_op op, const lt_attrs *a, const lt_shape *out_shape,
                    const lt_view *src, lt_view *dst);
size_t lt_cc_esize(lt_dtype dt);

#endif
