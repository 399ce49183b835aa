/*
 * lazy/spmd_rules.c — the partitioned executor's layout of each op
 * (spmd_exec_int.h; the rules are listed in spmd_exec.c's header and
 * docs/spmd.md), and the levels of the graph from them.
 */
#include <stdlib.h>
#include <string.h>
#include "spmd_exec_int.h"
#include "tensor.h"

/* ----------------------------------------------------------- layout rules */

static const lay *Tin(const xs *x, int i, int k) { return &x->T[x->g->in_pos[x->g->in_off[i] + k]]; }
static const lt_node *Nin(const xs *x, int i, int k) { return x->g->nodes[x->g->in_pos[x->g->in_off[i] + k]]; }

static void set_replicated(xs *x, int i)
{
    const lt_graph *g = x->g;
    memset(&x->T[i], 0, sizeof x->T[i]);
    x->T[i].pscale = 1;
    for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
        memset(&x->W[e], 0, sizeof x->W[e]);
        x->W[e].pscale = 1;
    }
    x->repl[i] = 1;
}

/* 1 when the integer targets feeding node j (through views, back to an
 * uploaded leaf) certainly hold no `ignore`: a mean loss then divides by
 * the batch size, so per-shard means scaled by 1 / shards add up to it. */
static int targets_without(const xs *x, int j, int64_t ignore)
{
    const lt_graph *g = x->g;
    for (int hops = 0; hops < 16; hops++) {
        const lt_node *n = g->nodes[j];
        if (!lt_node_is_pending(n)) {
            lt_buffer *b = n->buf;
            if (!b || b->parts || !b->data || lt_buffer_wait(b) != LT_OK) return 0;
            if (b->dtype == LT_I64) {
                for (int64_t t = 0; t < b->numel; t++)
                    if (((const int64_t *)b->data)[t] == ignore) return 0;
            } else if (b->dtype == LT_I32) {
                for (int64_t t = 0; t < b->numel; t++)
                    if (((const int32_t *)b->data)[t] == ignore) return 0;
            } else {
                return 0;
            }
            return 1;
        }
        if (lt_spmd_rule_of((lt_op)n->op) != LT_SPMD_VIEW || g->in_off[j + 1] - g->in_off[j] != 1)
            return 0;
        j = g->in_pos[g->in_off[j]];
    }
    return 0;
}

/* bmm [B,M,K] x [B,K,N]: B split like either operand, M like a, N like b,
 * a K split alike on both gives a partial sum. */
static int rule_bmm(xs *x, int i, lay *T, lay *W)
{
    const lt_node *n = x->g->nodes[i];
    const lay *A = Tin(x, i, 0), *B = Tin(x, i, 1);
    int64_t Bt = A->ax[0] ? A->ax[0] : B->ax[0];
    int64_t M = A->ax[1], K = A->ax[2] ? A->ax[2] : B->ax[1], N = B->ax[2];
    unsigned used = lt_spmd_axes_mask(Bt);
    if (lt_spmd_axes_mask(M) & used) M = 0;
    used |= lt_spmd_axes_mask(M);
    if (!partial_ok(n) || (lt_spmd_axes_mask(K) & used)) K = 0;
    used |= lt_spmd_axes_mask(K);
    if (lt_spmd_axes_mask(N) & used) N = 0;
    W[0].ax[0] = W[1].ax[0] = Bt;
    W[0].ax[1] = M;
    W[0].ax[2] = W[1].ax[1] = K;
    W[1].ax[2] = N;
    T->ax[0] = Bt;
    T->ax[1] = M;
    T->ax[2] = N;
    T->partial = lt_spmd_axes_mask(K);
    lay_fix(x, &n->shape, T);
    return T->ax[0] == Bt && T->ax[1] == M && T->ax[2] == N;
}

/* layer norm over the last k dims and its backward: the leading dims keep
 * their split, the normalised ones are whole; weight and bias whole; the
 * gradients of weight and bias are partial sums over the leading splits. */
static int rule_lnorm(xs *x, int i, lay *T, lay *W)
{
    const lt_graph *g = x->g;
    const lt_node *n = g->nodes[i];
    lt_op op = (lt_op)n->op;
    int nin = g->in_off[i + 1] - g->in_off[i];
    int bwd = op == LT_OP_layer_norm_backward || op == LT_OP_layer_norm_backward_affine;
    const lt_node *xn = Nin(x, i, bwd ? 1 : 0);
    int nd = xn->shape.ndim, k = n->attrs.n >= 1 ? (int)n->attrs.i[0] : 0;
    if (k < 1 || k > nd) return 0;
    int lead = nd - k;
    lay L;
    memset(&L, 0, sizeof L);
    L.pscale = 1;
    for (int d = 0; d < lead; d++) {
        L.ax[d] = Tin(x, i, bwd ? 1 : 0)->ax[d];
        if (!L.ax[d] && bwd) L.ax[d] = Tin(x, i, 0)->ax[d];
    }
    lay_fix(x, &xn->shape, &L);
    int affine = op == LT_OP_layer_norm_backward_affine;
    if (affine && !partial_ok(n)) memset(L.ax, 0, sizeof L.ax);
    int nx = bwd ? 2 : 1;                  /* (grad,) x take L */
    for (int k2 = 0; k2 < nx; k2++) memcpy(W[k2].ax, L.ax, sizeof L.ax);
    if (bwd)                               /* mean, rstd: [*leading] (or unsplit) */
        for (int k2 = 2; k2 < 4 && k2 < nin; k2++) {
            const lt_shape *s = &Nin(x, i, k2)->shape;
            /* [*leading] or [*leading, 1, ...] (kept normalised dims) */
            int same = s->ndim >= lead;
            for (int d = 0; d < s->ndim && same; d++)
                same = d < lead ? s->dims[d] == xn->shape.dims[d] : s->dims[d] == 1;
            if (same) {
                for (int d = 0; d < lead; d++) W[k2].ax[d] = L.ax[d];
            } else if (lay_split(&L, lead)) {
                return 0;
            }
        }
    if (op == LT_OP_layer_norm || op == LT_OP_layer_norm_backward) {
        memcpy(T->ax, L.ax, sizeof L.ax);
    } else if (op == LT_OP_layer_norm_stats) {
        for (int d = 0; d < lead; d++) T->ax[1 + d] = L.ax[d];
    } else {
        for (int d = 0; d < lead; d++) T->partial |= lt_spmd_axes_mask(L.ax[d]);
    }
    lay_fix(x, &n->shape, T);
    return 1;
}

/* nll_loss (logp [N,C], target [N]) and its backward (grad, logp, target),
 * no class weights: the batch split. reduction none: the loss split like
 * the batch; sum: a partial sum; mean: a partial sum scaled by 1 / shards
 * (only when no target is ignore_index: a mean divides by the count of the
 * others), its backward's grad scaled alike (spmd_exec.c run_level). */
static int rule_nll(xs *x, int i, lay *T, lay *W)
{
    const lt_graph *g = x->g;
    const lt_node *n = g->nodes[i];
    int bwd = n->op == LT_OP_nll_loss_backward;
    int nin = g->in_off[i + 1] - g->in_off[i];
    if (nin != (bwd ? 3 : 2) || n->attrs.n < 2) return 0;
    const lt_node *lp = Nin(x, i, bwd), *tg = Nin(x, i, bwd + 1);
    if (lp->shape.ndim != 2 || tg->shape.ndim != 1) return 0;
    int64_t b = Tin(x, i, bwd)->ax[0] ? Tin(x, i, bwd)->ax[0] : Tin(x, i, bwd + 1)->ax[0];
    int64_t red = n->attrs.i[0];
    if (!b) return 1;                      /* nothing split: whole on every core */
    if (lp->shape.dims[0] % nshards(x, b)) return 0;
    if (red != 0 && !partial_ok(n)) return 0;
    if (red == 1 && !targets_without(x, g->in_pos[g->in_off[i] + bwd + 1], n->attrs.i[1])) return 0;
    W[bwd].ax[0] = W[bwd + 1].ax[0] = b;
    if (bwd) {
        T->ax[0] = b;
        if (red == 0) W[0].ax[0] = b;
    } else if (red == 0) {
        T->ax[0] = b;
    } else {
        T->partial = lt_spmd_axes_mask(b);
        if (red == 1) T->pscale = 1.0 / (double)nshards(x, b);
    }
    lay_fix(x, &n->shape, T);
    return 1;
}

/* The factor run_level applies to input 0 of node i's local op
 * (spmd_exec_int.h). */
double lt_spmdx_in0_scale(const xs *x, int i)
{
    const lt_node *n = x->g->nodes[i];
    if (n->op == LT_OP_addmm && x->T[i].partial) {
        double sh = 1;
        for (int a = 0; a < x->m->mesh_ndim; a++)
            if (x->T[i].partial >> a & 1) sh *= (double)x->m->mesh_shape[a];
        return 1.0 / sh;
    }
    if (n->op == LT_OP_nll_loss_backward && !x->repl[i] && n->attrs.n >= 1 && n->attrs.i[0] == 1 &&
        x->T[i].ax[0])
        return 1.0 / (double)nshards(x, x->T[i].ax[0]);
    return 1;
}

/* index_select(src, idx[K]) along dim: that dim split like the index (the
 * table whole on it), the others like src. */
static int rule_index_select(xs *x, int i, lay *T, lay *W)
{
    const lt_node *n = x->g->nodes[i];
    const lt_node *src = Nin(x, i, 0), *idx = Nin(x, i, 1);
    int dim = n->attrs.n >= 1 ? (int)n->attrs.i[0] : -1;
    if (dim < 0 || dim >= src->shape.ndim || idx->shape.ndim != 1) return 0;
    T->ax[dim] = Tin(x, i, 1)->ax[0];
    for (int d = 0; d < src->shape.ndim; d++)
        if (d != dim) T->ax[d] = Tin(x, i, 0)->ax[d];
    lay_fix(x, &n->shape, T);
    for (int d = 0; d < src->shape.ndim; d++)
        if (d != dim) W[0].ax[d] = T->ax[d];
    W[1].ax[0] = T->ax[dim];
    return 1;
}

/* embedding_backward(grad [...,D], idx [...]): grad and idx split alike
 * over the index dims; each core's table gradient is an addend. */
static int rule_embedding_bwd(xs *x, int i, lay *T, lay *W)
{
    const lt_node *n = x->g->nodes[i];
    const lt_node *ix = Nin(x, i, 1);
    if (!partial_ok(n)) return 1;          /* whole */
    lay L;
    memset(&L, 0, sizeof L);
    for (int d = 0; d < ix->shape.ndim; d++)
        L.ax[d] = Tin(x, i, 1)->ax[d] ? Tin(x, i, 1)->ax[d] : Tin(x, i, 0)->ax[d];
    lay_fix(x, &ix->shape, &L);
    for (int d = 0; d < ix->shape.ndim; d++) {
        W[0].ax[d] = W[1].ax[d] = L.ax[d];
        T->partial |= lt_spmd_axes_mask(L.ax[d]);
    }
    return 1;
}

/* cat along dim: the other dims split like the first input splitting them. */
static int rule_cat(xs *x, int i, lay *T, lay *W)
{
    const lt_graph *g = x->g;
    const lt_node *n = g->nodes[i];
    int nin = g->in_off[i + 1] - g->in_off[i];
    int dim = n->attrs.n >= 1 ? (int)n->attrs.i[0] : -1;
    if (dim < 0 || dim >= n->shape.ndim) return 0;
    for (int k = 0; k < nin; k++)
        if (Nin(x, i, k)->shape.ndim != n->shape.ndim) return 0;
    for (int d = 0; d < n->shape.ndim; d++)
        for (int k = 0; k < nin && d != dim && !T->ax[d]; k++) T->ax[d] = Tin(x, i, k)->ax[d];
    lay_fix(x, &n->shape, T);
    for (int k = 0; k < nin; k++) memcpy(W[k].ax, T->ax, sizeof T->ax);
    return 1;
}

/* rand_uniform / rand_normal (seed): split along dim 0 as its consumers
 * want it (x->rand_ax, from the backward propagation of the consumers'
 * shardings: plan_randoms), the other dims whole: each position's
 * block is a contiguous run of the whole value's elements, which its local
 * op generates from its counter offset (lt_spmdx_offset_in) with the
 * whole value's values. Anything else: no rule (replicated). */
static int rule_random(xs *x, int i, lay *T)
{
    const lt_graph *g = x->g;
    const lt_node *n = g->nodes[i];
    if (!x->rand_ax || !x->rand_ax[i] || g->in_off[i + 1] - g->in_off[i] != 1 || n->shape.ndim < 1)
        return 0;
    T->ax[0] = x->rand_ax[i];
    lay_fix(x, &n->shape, T);
    return T->ax[0] != 0;
}

/* x->rand_ax: per node, the mesh axes splitting dim 0 that the consumers
 * of a random op want (0: none; NULL when g has no random op to split):
 * the layouts the trace gave the graph's values (annotated, propagated
 * forward), propagated backward through elementwise consumers of the same
 * shape (the dropout mask: rand -> lt -> cast -> mul with the batch-split
 * activation), as the plan does (spmd_partition.c). */
static void plan_randoms(xs *x)
{
    const lt_graph *g = x->g;
    int any = 0;
    for (int i = 0; i < g->n_nodes && !any; i++)
        any = lt_op_kind_of((lt_op)g->nodes[i]->op) == LT_KIND_RANDOM && lt_node_is_pending(g->nodes[i]) &&
              g->in_off[i + 1] - g->in_off[i] == 1;
    if (!any) return;
    int64_t (*ax)[LT_MAX_DIMS] = calloc((size_t)g->n_nodes, sizeof *ax);
    x->rand_ax = calloc((size_t)g->n_nodes, sizeof *x->rand_ax);
    if (!ax || !x->rand_ax) {          /* no hint: replicated, as without one */
        free(ax);
        free(x->rand_ax);
        x->rand_ax = NULL;
        return;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        if (n->shard && n->shard->n_dev == x->m->n_dev && n->shard->mesh_ndim == x->m->mesh_ndim &&
            !n->shard->manual)
            for (int d = 0; d < n->shape.ndim && d < n->shard->ndim; d++) ax[i][d] = n->shard->axes[d];
    }
    lt_spmd_backward_layouts(g, ax);
    for (int i = 0; i < g->n_nodes; i++)
        if (lt_op_kind_of((lt_op)g->nodes[i]->op) == LT_KIND_RANDOM) x->rand_ax[i] = ax[i][0];
    free(ax);
}

/* Decides T[i] and W of i's inputs; returns 0 when the op has no rule. */
static int rule(xs *x, int i)
{
    const lt_graph *g = x->g;
    const lt_node *n = g->nodes[i];
    int nin = g->in_off[i + 1] - g->in_off[i];
    lay *T = &x->T[i];
    lay *W = &x->W[g->in_off[i]];
    memset(T, 0, sizeof *T);
    T->pscale = 1;
    for (int k = 0; k < nin; k++) {
        memset(&W[k], 0, sizeof W[k]);
        W[k].pscale = 1;
    }
    lt_op op = (lt_op)n->op;
    const lt_shape *O = &n->shape;
    if (op == LT_OP_opt_barrier) {
        /* the value of input 0 in its layout; the fence inputs stay as
         * they are (they are only waited for) */
        for (int k = 0; k < nin; k++) W[k] = *Tin(x, i, k);
        *T = W[0];
        return 1;
    }
    switch (lt_spmd_rule_of(op)) {
    case LT_SPMD_EW:
        /* an annotated elementwise value takes its annotation (GSPMD's
         * sharding constraint): the inputs are brought to it */
        if ((n->flags & LT_NODE_SHARD_ANNOT) && n->shard && n->shard->n_dev == x->m->n_dev &&
            n->shard->mesh_ndim == x->m->mesh_ndim) {
            for (int d = 0; d < O->ndim && d < n->shard->ndim; d++) T->ax[d] = n->shard->axes[d];
            lay_fix(x, O, T);
        } else {
            for (int od = 0; od < O->ndim; od++)
                for (int k = 0; k < nin && !T->ax[od]; k++) {
                    const lt_node *y = Nin(x, i, k);
                    int d = od - (O->ndim - y->shape.ndim);
                    if (d >= 0 && y->shape.dims[d] == O->dims[od]) T->ax[od] = Tin(x, i, k)->ax[d];
                }
            lay_fix(x, O, T);
        }
        for (int k = 0; k < nin; k++) {
            const lt_node *y = Nin(x, i, k);
            for (int d = 0; d < y->shape.ndim; d++) {
                int od = d + (O->ndim - y->shape.ndim);
                if (od >= 0 && y->shape.dims[d] == O->dims[od]) W[k].ax[d] = T->ax[od];
            }
        }
        return 1;
    case LT_SPMD_CONTRACT: {
        if (op == LT_OP_bmm) return rule_bmm(x, i, T, W);
        if (op != LT_OP_mm && op != LT_OP_addmm) return 0;
        int base = op == LT_OP_addmm ? 1 : 0;
        const lay *A = Tin(x, i, base), *B = Tin(x, i, base + 1);
        int64_t M = A->ax[0], K = A->ax[1] ? A->ax[1] : B->ax[0], N = B->ax[1];
        /* addmm with K split: each core adds bias / shards (the local
         * graph scales it), so the addends sum to a @ b + bias */
        if (!partial_ok(n)) K = 0;
        if (lt_spmd_axes_mask(M) & lt_spmd_axes_mask(K)) K = 0;
        if (lt_spmd_axes_mask(N) & (lt_spmd_axes_mask(M) | lt_spmd_axes_mask(K))) N = 0;
        W[base].ax[0] = M;
        W[base].ax[1] = K;
        W[base + 1].ax[0] = K;
        W[base + 1].ax[1] = N;
        T->ax[0] = M;
        T->ax[1] = N;
        T->partial = lt_spmd_axes_mask(K);
        lay_fix(x, O, T);
        if (T->ax[0] != M || T->ax[1] != N) return 0;
        if (base) {
            const lt_node *b = Nin(x, i, 0);
            for (int d = 0; d < b->shape.ndim; d++) {
                int od = d + (2 - b->shape.ndim);
                if (b->shape.dims[d] == O->dims[od]) W[0].ax[d] = T->ax[od];
            }
        }
        return 1;
    }
    case LT_SPMD_REDUCE: {
        /* other reductions (attrs of their own): replicated */
        if ((op != LT_OP_sum && op != LT_OP_mean) || n->attrs.n < 1) return 0;
        const lay *A = Tin(x, i, 0);
        const lt_node *y = Nin(x, i, 0);
        uint64_t mask = (uint64_t)n->attrs.i[0];
        int keep = n->attrs.n >= 2 ? n->attrs.i[1] != 0 : 0;
        int linear = (op == LT_OP_sum || op == LT_OP_mean) && partial_ok(n);
        int od = 0;
        T->pscale = 1;
        for (int d = 0; d < y->shape.ndim; d++) {
            int red = (int)((mask >> d) & 1);
            if (red) {
                if (A->ax[d] && linear) {
                    W[0].ax[d] = A->ax[d];
                    T->partial |= lt_spmd_axes_mask(A->ax[d]);
                    if (op == LT_OP_mean) T->pscale /= (double)nshards(x, A->ax[d]);
                }
                if (keep) od++;
            } else {
                W[0].ax[d] = A->ax[d];
                T->ax[od++] = A->ax[d];
            }
        }
        if (linear && A->partial) {
            W[0].partial = A->partial;
            W[0].pscale = A->pscale;
            T->partial |= A->partial;
            T->pscale *= A->pscale;
        }
        if (od != O->ndim) return 0;
        return 1;
    }
    case LT_SPMD_NORM: {
        if (op == LT_OP_layer_norm || op == LT_OP_layer_norm_stats || op == LT_OP_layer_norm_backward ||
            op == LT_OP_layer_norm_backward_affine)
            return rule_lnorm(x, i, T, W);
        if (op != LT_OP_softmax && op != LT_OP_log_softmax && op != LT_OP_softmax_backward &&
            op != LT_OP_log_softmax_backward)
            return 0;
        int dim = (int)n->attrs.i[0];
        if (dim < 0) dim += O->ndim;
        if (dim < 0 || dim >= O->ndim) return 0;
        /* per dim the first input splitting it (a replicated gradient is
         * sliced locally rather than the output gathered) */
        for (int d = 0; d < O->ndim; d++)
            for (int k = 0; k < nin && d != dim && !T->ax[d]; k++)
                if (lt_shape_equal(&Nin(x, i, k)->shape, O)) T->ax[d] = Tin(x, i, k)->ax[d];
        lay_fix(x, O, T);
        for (int k = 0; k < nin; k++)
            if (lt_shape_equal(&Nin(x, i, k)->shape, O)) memcpy(W[k].ax, T->ax, sizeof T->ax);
            else return 0;
        return 1;
    }
    case LT_SPMD_CONV: {
        /* the batch dim (0) split; a convolution's weight whole */
        int weight = op == LT_OP_conv2d || op == LT_OP_conv3d || op == LT_OP_conv2d_backward_input ||
                     op == LT_OP_conv3d_backward_input;
        if (O->ndim < 1) return 0;
        for (int k = 0; k < nin && !T->ax[0]; k++) {
            const lt_node *y = Nin(x, i, k);
            if (!(weight && k == 1) && y->shape.ndim >= 1 && y->shape.dims[0] == O->dims[0])
                T->ax[0] = Tin(x, i, k)->ax[0];
        }
        lay_fix(x, O, T);
        for (int k = 0; k < nin; k++) {
            const lt_node *y = Nin(x, i, k);
            if (!(weight && k == 1) && y->shape.ndim >= 1 && y->shape.dims[0] == O->dims[0])
                W[k].ax[0] = T->ax[0];
        }
        return 1;
    }
    case LT_SPMD_VIEW: {
        const lay *A = Tin(x, i, 0);
        const lt_node *y = Nin(x, i, 0);
        if (op == LT_OP_permute) {
            if (n->attrs.n != O->ndim || O->ndim != y->shape.ndim) return 0;
            for (int od = 0; od < O->ndim; od++) {
                if (n->attrs.i[od] < 0 || n->attrs.i[od] >= y->shape.ndim) return 0;
                T->ax[od] = A->ax[n->attrs.i[od]];
            }
            memcpy(W[0].ax, A->ax, sizeof A->ax);
        } else if (op == LT_OP_reshape) {
            /* a split dim survives when a dim of the output has the same
             * number of elements before it and a size its shards divide
             * (merged with or split from the whole dims after it: each
             * core's block is the same run of elements); a split dim
             * merged into an earlier split dim (batch x heads before a
             * bmm) has no such output dim: it is gathered along its own
             * axes only, the others stay split */
            for (int d = 0; d < y->shape.ndim; d++) {
                if (!A->ax[d]) continue;
                int64_t before = 1, ob = 1;
                for (int e = 0; e < d; e++) before *= y->shape.dims[e];
                int found = 0;
                for (int od = 0; od < O->ndim && !found; od++) {
                    if (ob == before && !T->ax[od] && O->dims[od] % nshards(x, A->ax[d]) == 0) {
                        T->ax[od] = W[0].ax[d] = A->ax[d];
                        found = 1;
                    }
                    ob *= O->dims[od];
                }
                if (!found) W[0].ax[d] = 0;
            }
        } else if (op == LT_OP_expand) {
            for (int d = 0; d < y->shape.ndim; d++) {
                int od = d + (O->ndim - y->shape.ndim);
                if (y->shape.dims[d] == O->dims[od]) T->ax[od] = W[0].ax[d] = A->ax[d];
            }
        } else if (op == LT_OP_slice || op == LT_OP_select) {
            int dim = (int)n->attrs.i[0];
            if (dim < 0 || dim >= y->shape.ndim) return 0;
            for (int d = 0, od = 0; d < y->shape.ndim; d++) {
                if (d == dim) {
                    if (op == LT_OP_slice) T->ax[od++] = 0;
                    continue;
                }
                T->ax[od++] = W[0].ax[d] = A->ax[d];
            }
        } else {
            return 0;
        }
        lay_fix(x, O, T);
        if (A->partial) {           /* linear: the addends pass through */
            W[0].partial = T->partial = A->partial;
            W[0].pscale = T->pscale = A->pscale;
        }
        return 1;
    }
    case LT_SPMD_GATHER:
        return op == LT_OP_index_select ? rule_index_select(x, i, T, W) : 0;
    default:
        if (lt_op_kind_of(op) == LT_KIND_RANDOM) return rule_random(x, i, T);
        if (op == LT_OP_nll_loss || op == LT_OP_nll_loss_backward) return rule_nll(x, i, T, W);
        if (op == LT_OP_embedding_backward) return rule_embedding_bwd(x, i, T, W);
        if (op == LT_OP_cat) return rule_cat(x, i, T, W);
        if (op == LT_OP_layer_norm_backward_affine) return rule_lnorm(x, i, T, W);
        if ((op == LT_OP_conv2d_backward_weight || op == LT_OP_conv3d_backward_weight) &&
            partial_ok(n)) {
            /* (grad, x) split alike on the batch: each core's weight
             * gradient is an addend */
            int64_t b = Tin(x, i, 0)->ax[0] ? Tin(x, i, 0)->ax[0] : Tin(x, i, 1)->ax[0];
            if (!b || Nin(x, i, 0)->shape.dims[0] % nshards(x, b)) return 0;
            W[0].ax[0] = W[1].ax[0] = b;
            T->partial = lt_spmd_axes_mask(b);
            return 1;
        }
        return 0;
    }
}

/* The attrs of i's local op (sizes written in them made local). */
void lt_spmdx_local_attrs(const xs *x, int i, lt_attrs *a)
{
    const lt_node *n = x->g->nodes[i];
    *a = n->attrs;
    if (lt_spmdx_local_op(x, i) != (lt_op)n->op) {   /* a manual boundary: a copy */
        memset(a, 0, sizeof *a);
        return;
    }
    if (n->op == LT_OP_reshape || n->op == LT_OP_expand) {
        for (int d = 0; d < n->shape.ndim && d < a->n; d++)
            if (x->T[i].ax[d]) a->i[d] = n->shape.dims[d] / nshards(x, x->T[i].ax[d]);
    }
    if (lt_op_kind_of((lt_op)n->op) == LT_KIND_RANDOM) {   /* {dtype, ndim, dims...} */
        for (int d = 0; d < n->shape.ndim && 2 + d < a->n; d++)
            if (x->T[i].ax[d]) a->i[2 + d] = n->shape.dims[d] / nshards(x, x->T[i].ax[d]);
    }
}

/* The counter offsets of random op i split along dim 0 (rule_random): per
 * position an int64 0-dim buffer on its core holding the index, in the
 * whole value, of its block's first element. Made once per step. */
lt_status lt_spmdx_offset_in(xs *x, int i, lt_buffer ***out)
{
    const lt_node *n = x->g->nodes[i];
    const lay *T = &x->T[i];
    if (!x->offs) {
        x->offs = calloc((size_t)x->g->n_nodes, sizeof *x->offs);
        if (!x->offs) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    }
    if (x->offs[i]) {
        *out = x->offs[i];
        return LT_OK;
    }
    if (n->shape.ndim < 1 || !T->ax[0])
        return lt_set_error(LT_ERR_INTERNAL, "spmd: a counter offset for an unsplit value");
    for (int d = 1; d < n->shape.ndim; d++)
        if (T->ax[d]) return lt_set_error(LT_ERR_INTERNAL, "spmd: a random value split past dim 0");
    lt_buffer **b = calloc((size_t)x->nd, sizeof *b);
    if (!b) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    int64_t block = (n->shape.dims[0] / nshards(x, T->ax[0]));
    for (int d = 1; d < n->shape.ndim; d++) block *= n->shape.dims[d];
    for (int q = 0; q < x->nd; q++) {
        lt_status st = lt_buffer_alloc(x->m->dev[q], LT_I64, 1, &b[q]);
        if (st != LT_OK) {
            for (int r = 0; r < q; r++) lt_buffer_release(b[r]);
            free(b);
            return st;
        }
        *(int64_t *)b[q]->data = shard_idx(x, q, T->ax[0]) * block;
    }
    x->offs[i] = b;
    *out = b;
    return LT_OK;
}

void lt_spmdx_offsets_free(xs *x)
{
    for (int i = 0; x->offs && i < x->g->n_nodes; i++)
        if (x->offs[i]) {
            for (int q = 0; q < x->nd; q++) lt_buffer_release(x->offs[i][q]);
            free(x->offs[i]);
        }
    free(x->offs);
    x->offs = NULL;
    free(x->rand_ax);
    x->rand_ax = NULL;
}

/* 1 when the local op on the wanted input layouts gives T's local shape. */
static int local_shape_ok(const xs *x, int i)
{
    const lt_graph *g = x->g;
    const lt_node *n = g->nodes[i];
    int nin = g->in_off[i + 1] - g->in_off[i];
    lt_shape ls[LT_MAX_ARITY_SPMD];
    lt_operand in[LT_MAX_ARITY_SPMD];
    if (nin > LT_MAX_ARITY_SPMD) return 0;
    for (int k = 0; k < nin; k++) {
        const lt_node *y = Nin(x, i, k);
        local_shape(x, &y->shape, &x->W[g->in_off[i] + k], &ls[k]);
        in[k].shape = &ls[k];
        in[k].dtype = (lt_dtype)y->dtype;
        in[k].wrapped = (y->flags & LT_NODE_WRAPPED) != 0;
    }
    lt_attrs a;
    lt_spmdx_local_attrs(x, i, &a);
    lt_shape got, want;
    lt_dtype dt;
    if (lt_infer((lt_op)n->op, in, nin, &a, &got, &dt) != LT_OK) return 0;
    local_shape(x, &n->shape, &x->T[i], &want);
    return lt_shape_equal(&got, &want);
}

void lt_spmdx_plan_layouts(xs *x)
{
    const lt_graph *g = x->g;
    /* manual-sharding regions: per-core values (spmd_manual.c) */
    char *man = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
    if (!man) {
        x->err = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        return;
    }
    lt_spmd_manual_mark(g, man);
    plan_randoms(x);
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        memset(&x->T[i], 0, sizeof x->T[i]);
        x->T[i].pscale = 1;
        if (!lt_node_is_pending(n)) {
            if (n->shard && n->shard->n_dev == x->m->n_dev && n->shard->mesh_ndim == x->m->mesh_ndim)
                for (int d = 0; d < n->shape.ndim && d < n->shard->ndim; d++)
                    x->T[i].ax[d] = n->shard->axes[d];
            lay_fix(x, &n->shape, &x->T[i]);
            if (man[i]) lt_spmdx_rule_manual(x, i, man);
            x->level[i] = -1;
            continue;
        }
        int nin = g->in_off[i + 1] - g->in_off[i];
        if (lt_spmdx_rule_manual(x, i, man)) {
            /* a manual region's op or boundary: run per core as it is */
        } else if (nin == 0 || !rule(x, i) || !local_shape_ok(x, i)) {
            int gathered = 0;
            for (int k = 0; k < nin; k++)
                if (lt_node_is_pending(Nin(x, i, k)))
                    gathered |= lay_split(Tin(x, i, k), Nin(x, i, k)->shape.ndim) ||
                                Tin(x, i, k)->partial;
            set_replicated(x, i);
            if (gathered) {
                x->replicated[n->op]++;
                x->n_replicated++;
            }
        }
        int lv = 0, gather = 0;
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            int j = g->in_pos[e];
            const lt_node *y = g->nodes[j];
            if (!lt_node_is_pending(y)) {
                x->bump[e] = 0;
                const lt_buffer_parts *P = y->buf ? y->buf->parts : NULL;
                if (P && P->layout_key != lay_key(x, &x->W[e], y->shape.ndim)) gather = 1;
                continue;
            }
            x->bump[e] = !lay_same(&x->T[j], &x->W[e], y->shape.ndim);
            if (x->bump[e]) {
                int k = kind_of(&x->T[j], &x->W[e], y->shape.ndim);
                if (k == K_GATHER || k == K_TO_ALL) gather = 1;
            }
            int l = x->level[j] + x->bump[e];
            if (l > lv) lv = l;
        }
        /* a gathered input (an FSDP weight) starts a level after every level
         * so far: gathered values live one level, as FSDP gathers one layer */
        if (gather && lv < x->n_levels) lv = x->n_levels;
        x->level[i] = lv;
        if (lv + 1 > x->n_levels) x->n_levels = lv + 1;
    }
    free(man);
}

