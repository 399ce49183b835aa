/*
 * lazy/spmd_partition.c — the SPMD partition plan of a captured graph: the
 * layout of every value on the mesh, the collectives a per-core program
 * needs where layouts disagree, the ops that must run replicated, and the
 * per-core memory of that program (spmd.h, docs/spmd.md).
 *
 * Layouts. Each node starts from its sharding (annotated, or propagated
 * forward when it was traced: spmd_propagate.c). A backward pass then
 * gives an unsharded computed value the layout of its consumers when every
 * consumer is elementwise on the same shape and sharded (GSPMD's backward
 * propagation: an optimizer state updated alongside a sharded parameter
 * becomes sharded like it). Leaves keep their layout (it is where their
 * buffers are).
 *
 * Per op, by rule class (a value may also be a partial sum over some mesh
 * axes: each core holds an addend):
 *   ew          inputs brought to the output's layout: a split dim the
 *               output does not split is all-gathered (split differently:
 *               all-to-all); a dim the output splits and the input does not
 *               is sliced locally (free); a partial input is reduced first
 *               (reduce-scatter when the output splits exactly over the
 *               partial axes, else all-reduce)
 *   contract    M from a, N from b as the output wants them (a weight split
 *               on N over an axis the output spends on M is all-gathered:
 *               FSDP); K split alike on both -> the output is a partial sum
 *               over K's axes; split differently -> b all-gathered on K
 *   reduce      a reduced split dim -> partial sum (arg-reductions gather)
 *   norm        the normalised dims all-gathered when split
 *   view        reshape that does not keep a split dim gathers it
 *   gather      index_select: the table split on the indexed dim is gathered
 *   conv        batch split runs locally; any other split is gathered
 *   batch ops   nll_loss (+ backward), embedding_backward, layer norm's and
 *               a convolution's weight gradients on each core's batch slice
 *               (plan_batch_op, as the executor's rules)
 *   random      rand_uniform / rand_normal that its consumers want split
 *               along dim 0 (the backward pass): each core generates its
 *               block of the stream, no collective
 *   opaque, collective: every split input gathered, partial inputs reduced,
 *               the op runs replicated (counted: SpmdReplicatedOps)
 * Outputs that are partial sums are reduced at the end.
 *
 * Memory: one core's live bytes walked in post-order (params held all
 * along, each value freed after its last use, outputs kept, gathered
 * temporaries live during their op), with local shapes ceil(dim / shards)
 * as XLA pads them. The same walk with every layout replicated gives the
 * unpartitioned figure. Both are plan figures: the compiler's fusion keeps
 * fewer intermediates alive.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd.h"
#include "registry.h"
#include "tensor.h"
#include "device.h"

enum { C_ALL_GATHER = 0, C_ALL_REDUCE, C_REDUCE_SCATTER, C_ALL_TO_ALL, C_NUM };
static const char *cname[C_NUM] = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all"};

#define MAX_ROWS 48

typedef struct row {
    int kind;
    unsigned axes;
    uint16_t op;
    int count;
    double bytes;
    const char *frame;
} row;

typedef struct plan {
    const lt_graph *g;
    const lt_sharding *mesh;   /* template: mesh shape and devices */
    int64_t (*ax)[LT_MAX_DIMS];/* per node: per dim packed axes */
    unsigned *partial;         /* per node: mesh axes it is a partial sum over */
    double *temp;              /* per node: bytes of gathered temporaries */
    row rows[MAX_ROWS];
    int n_rows;
    int n_coll;
    double coll_bytes;
    int replicated[LT_NUM_OPS];
    int n_replicated;
} plan;

void lt_spmd_note_replicated(const char *head, const int *counts)
{
    char line[1024];
    size_t len = (size_t)snprintf(line, sizeof line, "%s", head);
    for (int op = 0; op < LT_NUM_OPS && len < sizeof line; op++)
        if (counts[op])
            len += (size_t)snprintf(line + len, sizeof line - len, " %s x%d",
                                    lt_op_name((lt_op)op), counts[op]);
    lt_metrics_note("sharding", line);
}

static int64_t shards_of(const plan *p, int64_t code)
{
    return lt_spmd_code_shards(p->mesh->mesh_shape, code);
}

/* Bytes of node i on one core with layout ax (NULL: unsplit). */
static double local_bytes(const plan *p, int i, const int64_t *ax)
{
    const lt_node *n = p->g->nodes[i];
    double b = (double)lt_dtype_size((lt_dtype)n->dtype);
    for (int d = 0; d < n->shape.ndim; d++) {
        int64_t s = ax ? shards_of(p, ax[d]) : 1;
        b *= (double)((n->shape.dims[d] + s - 1) / s);
    }
    return b;
}

static void add(plan *p, int kind, unsigned axes, int i, double bytes)
{
    const lt_node *n = p->g->nodes[i];
    p->n_coll++;
    p->coll_bytes += bytes;
    for (int r = 0; r < p->n_rows; r++) {
        row *w = &p->rows[r];
        if (w->kind == kind && w->axes == axes && w->op == n->op) {
            w->count++;
            w->bytes += bytes;
            return;
        }
    }
    if (p->n_rows == MAX_ROWS) return;
    row *w = &p->rows[p->n_rows++];
    w->kind = kind;
    w->axes = axes;
    w->op = n->op;
    w->count = 1;
    w->bytes = bytes;
    w->frame = NULL;
    for (int k = 0; k < n->n_in && !w->frame; k++)
        if (n->in[k]->shard) w->frame = n->in[k]->shard->frame;
    if (!w->frame && n->shard) w->frame = n->shard->frame;
}

/* Input at graph position j used by node i as laid out `want` over its
 * dims (0 where j is broadcast): collectives to get it there. */
static void bring(plan *p, int i, int j, const int64_t *want, unsigned want_split)
{
    const int64_t *have = p->ax[j];
    const lt_node *x = p->g->nodes[j];
    if (p->partial[j]) {
        int kind = (want_split && (want_split & p->partial[j]) == p->partial[j])
                       ? C_REDUCE_SCATTER : C_ALL_REDUCE;
        add(p, kind, p->partial[j], i, local_bytes(p, j, have));
    }
    unsigned gather = 0;
    int to_all = 0;
    for (int d = 0; d < x->shape.ndim; d++) {
        if (have[d] && have[d] != want[d]) {
            gather |= lt_spmd_axes_mask(have[d]);
            if (want[d]) to_all = 1;
        }
    }
    if (gather) {
        add(p, to_all ? C_ALL_TO_ALL : C_ALL_GATHER, gather, i, local_bytes(p, j, have));
        p->temp[i] += local_bytes(p, j, NULL);
    }
}

static void bring_whole(plan *p, int i, int j)
{
    int64_t none[LT_MAX_DIMS] = {0};
    bring(p, i, j, none, 0);
}

static int in_pos(const plan *p, int i, int k) { return p->g->in_pos[p->g->in_off[i] + k]; }

/* Gradient and loss ops the partitioned executor runs on each core's slice
 * of the batch (spmd_rules.c: rule_nll, rule_embedding_bwd, rule_lnorm's
 * affine gradient, a convolution's weight gradient), planned alike: the
 * batch-like input dims as they are, the output split like the batch
 * (nll_loss reduction none, nll_loss_backward) or a partial sum over the
 * batch's axes (float only, as the executor). 0 when the op is none of
 * them or nothing splits its batch: then it is planned replicated. */
static int plan_batch_op(plan *p, int i)
{
    const lt_graph *g = p->g;
    const lt_node *n = g->nodes[i];
    int nin = g->in_off[i + 1] - g->in_off[i];
    int flt = n->dtype == LT_F32 || n->dtype == LT_F64;
    int64_t none[LT_MAX_DIMS] = {0};
    switch (n->op) {
    case LT_OP_nll_loss:
    case LT_OP_nll_loss_backward: {
        int bwd = n->op == LT_OP_nll_loss_backward;
        if (nin != (bwd ? 3 : 2) || n->attrs.n < 2) return 0;
        int lp = in_pos(p, i, bwd), tg = in_pos(p, i, bwd + 1);
        if (g->nodes[lp]->shape.ndim != 2 || g->nodes[tg]->shape.ndim != 1) return 0;
        int64_t b = p->ax[lp][0] ? p->ax[lp][0] : p->ax[tg][0];
        int64_t red = n->attrs.i[0];
        if (!b || g->nodes[lp]->shape.dims[0] % shards_of(p, b) || (red != 0 && !flt)) return 0;
        int64_t w[LT_MAX_DIMS] = {b};
        bring(p, i, lp, w, 0);
        bring(p, i, tg, w, 0);
        if (bwd) bring(p, i, in_pos(p, i, 0), red == 0 ? w : none, 0);
        memset(p->ax[i], 0, sizeof p->ax[i]);
        if (bwd || red == 0) p->ax[i][0] = b;
        else p->partial[i] = lt_spmd_axes_mask(b);
        return 1;
    }
    case LT_OP_embedding_backward:
    case LT_OP_layer_norm_backward_affine:
    case LT_OP_conv2d_backward_weight:
    case LT_OP_conv3d_backward_weight: {
        /* the split dims: the index's (embedding), the leading dims of x
         * (layer norm: all but the k normalised ones), the batch (conv) */
        int emb = n->op == LT_OP_embedding_backward, ln = n->op == LT_OP_layer_norm_backward_affine;
        int src = emb ? in_pos(p, i, 1) : ln ? in_pos(p, i, 1) : in_pos(p, i, 0);
        const lt_node *x = g->nodes[src];
        int lead = emb ? x->shape.ndim : ln ? x->shape.ndim - (n->attrs.n ? (int)n->attrs.i[0] : 0) : 1;
        if (!flt || lead < 1) return 0;
        int64_t w[LT_MAX_DIMS] = {0};
        unsigned part = 0;
        for (int d = 0; d < lead; d++) {
            w[d] = p->ax[src][d] ? p->ax[src][d] : p->ax[in_pos(p, i, 0)][d];
            part |= lt_spmd_axes_mask(w[d]);
        }
        if (!part) return 0;
        for (int k = 0; k < nin; k++) {
            int q = in_pos(p, i, k);
            if (ln && k >= 2) {                /* mean, rstd: [*leading] */
                bring(p, i, q, w, 0);
            } else if (k < 2) {
                int64_t wk[LT_MAX_DIMS] = {0};
                for (int d = 0; d < lead && d < g->nodes[q]->shape.ndim; d++) wk[d] = w[d];
                bring(p, i, q, wk, 0);
            } else {
                bring_whole(p, i, q);
            }
        }
        memset(p->ax[i], 0, sizeof p->ax[i]);
        p->partial[i] = part;
        return 1;
    }
    default:
        return 0;
    }
}

static void plan_node(plan *p, int i)
{
    const lt_graph *g = p->g;
    const lt_node *n = g->nodes[i];
    int nin = g->in_off[i + 1] - g->in_off[i];
    int64_t *out = p->ax[i];
    unsigned out_split = 0;
    for (int d = 0; d < n->shape.ndim; d++) out_split |= lt_spmd_axes_mask(out[d]);
    if (nin == 0) return;
    if (n->op == LT_OP_opt_barrier) {
        /* input 0 as it is (its layout, a partial sum stays one); the
         * other tensors of the barrier are only waited for: no collective */
        p->partial[i] = p->partial[in_pos(p, i, 0)];
        return;
    }
    switch (lt_spmd_rule_of((lt_op)n->op)) {
    case LT_SPMD_EW:
        for (int k = 0; k < nin; k++) {
            int j = in_pos(p, i, k);
            const lt_node *x = g->nodes[j];
            int64_t want[LT_MAX_DIMS] = {0};
            for (int d = 0; d < x->shape.ndim; d++) {
                int od = d + (n->shape.ndim - x->shape.ndim);
                if (od >= 0 && x->shape.dims[d] == n->shape.dims[od]) want[d] = out[od];
            }
            bring(p, i, j, want, out_split);
        }
        return;
    case LT_SPMD_CONTRACT: {
        int base = (n->op == LT_OP_addmm && nin == 3) ? 1 : 0;
        int a = in_pos(p, i, base), b = in_pos(p, i, base + 1);
        const lt_node *A = g->nodes[a];
        int nd = A->shape.ndim;            /* 2: mm, 3: bmm */
        int64_t wa[LT_MAX_DIMS] = {0}, wb[LT_MAX_DIMS] = {0}, o[LT_MAX_DIMS];
        int64_t ka = p->ax[a][nd - 1], kb = p->ax[b][nd - 2];
        int64_t k = ka ? ka : kb;
        /* K split on one operand only, over an axis the output splits: that
         * operand is gathered (an FSDP weight) rather than the output made
         * a partial sum and scattered */
        if ((!ka || !kb) && (lt_spmd_axes_mask(k) & out_split)) k = 0;
        unsigned kmask = lt_spmd_axes_mask(k);
        memcpy(o, out, sizeof o);
        /* output dims split over K's axes: computed whole as a partial sum,
         * then reduce-scattered to the output's layout (FSDP's gradient) */
        int scatter = (kmask & out_split) != 0;
        if (scatter)
            for (int d = 0; d < n->shape.ndim; d++)
                if (lt_spmd_axes_mask(o[d]) & kmask) o[d] = 0;
        if (nd == 3) wa[0] = wb[0] = o[0];
        wa[nd - 2] = o[nd - 2];
        wa[nd - 1] = k;
        wb[nd - 2] = k;
        wb[nd - 1] = o[nd - 1];
        if (base) {
            int64_t wbias[LT_MAX_DIMS] = {0};
            int q = in_pos(p, i, 0);
            int bd = g->nodes[q]->shape.ndim;
            if (bd >= 1) wbias[bd - 1] = o[n->shape.ndim - 1];
            bring(p, i, q, wbias, 0);
        }
        bring(p, i, a, wa, 0);
        bring(p, i, b, wb, 0);
        if (scatter) {
            double full = local_bytes(p, i, o);
            add(p, C_REDUCE_SCATTER, kmask, i, full);
            p->temp[i] += full;
        } else {
            p->partial[i] = kmask;
        }
        return;
    }
    case LT_SPMD_REDUCE: {
        int j = in_pos(p, i, 0);
        const lt_node *x = g->nodes[j];
        int arg = n->op == LT_OP_argmax || n->op == LT_OP_argmin;
        uint64_t mask = arg ? (n->attrs.i[0] < 0 ? ~0ULL : 1ULL << n->attrs.i[0])
                            : (uint64_t)n->attrs.i[0];
        int linear = n->op == LT_OP_sum || n->op == LT_OP_mean;
        int64_t want[LT_MAX_DIMS];
        unsigned part = 0;
        for (int d = 0; d < x->shape.ndim; d++) {
            want[d] = p->ax[j][d];
            if (((mask >> d) & 1) && want[d]) {
                if (arg) want[d] = 0;
                else part |= lt_spmd_axes_mask(want[d]);
            }
        }
        if (p->partial[j] && linear) {
            part |= p->partial[j];
            unsigned keep = p->partial[j];
            p->partial[j] = 0;
            bring(p, i, j, want, 0);
            p->partial[j] = keep;
        } else {
            bring(p, i, j, want, 0);
        }
        p->partial[i] = part;
        return;
    }
    case LT_SPMD_NORM:
    case LT_SPMD_VIEW:
    case LT_SPMD_GATHER:
    case LT_SPMD_CONV: {
        /* input 0 as the output lays it out where the dims correspond
         * (same shape: dim by dim; otherwise the split dims the forward
         * rule kept); other inputs whole unless they match the output */
        int j = in_pos(p, i, 0);
        const lt_node *x = g->nodes[j];
        int64_t want[LT_MAX_DIMS] = {0};
        int rule = lt_spmd_rule_of((lt_op)n->op);
        if (lt_shape_equal(&x->shape, &n->shape)) {
            for (int d = 0; d < x->shape.ndim; d++) want[d] = out[d];
        } else {
            /* keep the input's split dims whose axes the output still uses */
            for (int d = 0; d < x->shape.ndim; d++)
                if (p->ax[j][d] && (lt_spmd_axes_mask(p->ax[j][d]) & out_split)) want[d] = p->ax[j][d];
            if (rule == LT_SPMD_GATHER && n->op == LT_OP_index_select) {
                int dim = (int)n->attrs.i[0];
                if (dim >= 0 && dim < x->shape.ndim) want[dim] = 0;
            }
            if (rule == LT_SPMD_CONV)
                for (int d = 1; d < x->shape.ndim; d++) want[d] = 0;
        }
        int linear_view = rule == LT_SPMD_VIEW;
        if (p->partial[j] && linear_view) {
            unsigned keep = p->partial[j];
            p->partial[j] = 0;
            bring(p, i, j, want, out_split);
            p->partial[j] = keep;
            p->partial[i] = keep;
        } else {
            bring(p, i, j, want, out_split);
        }
        for (int k = 1; k < nin; k++) {
            int q = in_pos(p, i, k);
            const lt_node *y = g->nodes[q];
            if (lt_shape_equal(&y->shape, &n->shape)) {
                bring(p, i, q, out, out_split);
            } else if (rule == LT_SPMD_GATHER && n->op == LT_OP_index_select) {
                int64_t wi[LT_MAX_DIMS] = {0};
                wi[0] = out[(int)n->attrs.i[0]];
                bring(p, i, q, wi, out_split);
            } else {
                bring_whole(p, i, q);
            }
        }
        return;
    }
    default:
        if (lt_op_kind_of((lt_op)n->op) == LT_KIND_RANDOM && nin == 1 && n->shape.ndim >= 1 &&
            p->ax[i][0] && n->shape.dims[0] % shards_of(p, p->ax[i][0]) == 0) {
            /* split along dim 0 as its consumers want it: each core
             * generates its block of the stream (spmd_rules.c rule_random);
             * the other dims whole (a consumer splitting them slices) */
            for (int d = 1; d < LT_MAX_DIMS; d++) p->ax[i][d] = 0;
            return;
        }
        if (plan_batch_op(p, i)) return;
        for (int k = 0; k < nin; k++) bring_whole(p, i, in_pos(p, i, k));
        p->replicated[n->op]++;
        p->n_replicated++;
        return;
    }
}

static double peak_bytes(plan *p, int split, double *param_bytes)
{
    const lt_graph *g = p->g;
    int n = g->n_nodes;
    int *last = malloc((size_t)n * sizeof *last);
    char *keep = calloc((size_t)n, 1);
    if (!last || !keep) {
        free(last);
        free(keep);
        return 0;
    }
    for (int i = 0; i < n; i++) last[i] = -1;
    for (int i = 0; i < n; i++)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) last[g->in_pos[e]] = i;
    for (int k = 0; k < g->n_outputs; k++) keep[g->output_pos[k]] = 1;
    /* a buffer reached through several data nodes (views made before an
     * annotation, aliases) is held once; so is a value held per core that
     * several data nodes reach through distinct buffers of the same parts
     * (the results of a partitioned step that view one value, such as a
     * parameter and its view) */
    for (int j = 0; j < g->n_params; j++) {
        if (g->param_alias[j] >= 0) {
            keep[g->param_pos[j]] = 2;
            continue;
        }
        lt_buffer *bj = g->nodes[g->param_pos[j]]->buf;
        if (!bj || !bj->parts) continue;
        for (int q = 0; q < j; q++) {
            const lt_node *nq = g->nodes[g->param_pos[q]];
            if (keep[g->param_pos[q]] != 2 && nq->buf && nq->buf->parts &&
                lt_buffer_same_storage(bj, nq->buf)) {
                keep[g->param_pos[j]] = 2;
                break;
            }
        }
    }
    double live = 0, peak = 0, params = 0;
    for (int i = 0; i < n; i++)
        if (!lt_node_is_pending(g->nodes[i]) && keep[i] != 2) {
            double b = local_bytes(p, i, split ? p->ax[i] : NULL);
            params += b;
            live += b;
        }
    peak = live;
    for (int i = 0; i < n; i++) {
        if (!lt_node_is_pending(g->nodes[i])) continue;
        double b = local_bytes(p, i, split ? p->ax[i] : NULL);
        double t = split ? p->temp[i] : 0;
        if (live + b + t > peak) peak = live + b + t;
        live += b;
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            int j = g->in_pos[e];
            if (last[j] == i && !keep[j] && lt_node_is_pending(g->nodes[j])) {
                live -= local_bytes(p, j, split ? p->ax[j] : NULL);
                last[j] = -2;
            }
        }
    }
    free(last);
    free(keep);
    if (param_bytes) *param_bytes = params;
    return peak;
}

static void axes_text(const lt_sharding *m, unsigned axes, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (int a = 0; a < m->mesh_ndim && len < cap; a++)
        if (axes >> a & 1)
            len += (size_t)snprintf(buf + len, cap - len, "%s%d(%lld)", len ? "," : "", a,
                                    (long long)m->mesh_shape[a]);
}

lt_status lt_spmd_plan(const lt_graph *g, lt_spmd_plan_out *res, int report)
{
    memset(res, 0, sizeof *res);
    const lt_sharding *mesh = NULL;
    for (int i = 0; i < g->n_nodes && !mesh; i++)   /* the first sharding not {manual} */
        if (g->nodes[i]->shard && !g->nodes[i]->shard->manual) mesh = g->nodes[i]->shard;
    if (!mesh)
        for (int i = 0; i < g->n_nodes && !mesh; i++) mesh = g->nodes[i]->shard;
    if (!mesh) return LT_OK;
    plan *p = calloc(1, sizeof *p);
    if (!p) return lt_set_error(LT_ERR_INTERNAL, "spmd plan: out of host memory");
    p->g = g;
    p->mesh = mesh;
    p->ax = calloc((size_t)g->n_nodes, sizeof *p->ax);
    p->partial = calloc((size_t)g->n_nodes, sizeof *p->partial);
    p->temp = calloc((size_t)g->n_nodes, sizeof *p->temp);
    if (!p->ax || !p->partial || !p->temp) {
        free(p->ax);
        free(p->partial);
        free(p->temp);
        free(p);
        return lt_set_error(LT_ERR_INTERNAL, "spmd plan: out of host memory");
    }
    int sharded = 0, annotated = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        if (!n->shard) continue;
        sharded++;
        annotated += (n->flags & LT_NODE_SHARD_ANNOT) != 0;
        /* another mesh than the first value's: treated as unsplit */
        if (n->shard->n_dev != mesh->n_dev || n->shard->mesh_ndim != mesh->mesh_ndim) continue;
        for (int d = 0; d < n->shape.ndim && d < n->shard->ndim; d++) p->ax[i][d] = n->shard->axes[d];
    }
    lt_spmd_backward_layouts(g, p->ax);
    for (int i = 0; i < g->n_nodes; i++) plan_node(p, i);
    for (int k = 0; k < g->n_outputs; k++) {
        int j = g->output_pos[k];
        if (!p->partial[j]) continue;
        unsigned split = 0;
        for (int d = 0; d < g->nodes[j]->shape.ndim; d++) split |= lt_spmd_axes_mask(p->ax[j][d]);
        add(p, (split & p->partial[j]) == p->partial[j] && split ? C_REDUCE_SCATTER : C_ALL_REDUCE,
            p->partial[j], j, local_bytes(p, j, p->ax[j]));
    }
    double params_split = 0, params_whole = 0;
    res->n_sharded = sharded;
    res->peak_bytes = peak_bytes(p, 1, &params_split);
    res->peak_bytes_unpartitioned = peak_bytes(p, 0, &params_whole);
    res->param_bytes = params_split;
    res->param_bytes_unpartitioned = params_whole;
    res->n_collectives = p->n_coll;
    res->collective_bytes = p->coll_bytes;
    res->n_replicated = p->n_replicated;
    /* layouts of the outputs (one reference each; NULL = unsharded) */
    res->n_outputs = g->n_outputs;
    res->out_shard = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *res->out_shard);
    /* the per-core values of a manual region (spmd_manual.c) are {manual} */
    char *man = lt_spmd_has_manual(g) ? calloc((size_t)g->n_nodes, 1) : NULL;
    if (man) lt_spmd_manual_mark(g, man);
    for (int k = 0; k < g->n_outputs && res->out_shard; k++) {
        int j = g->output_pos[k];
        const lt_node *n = g->nodes[j];
        if (man && man[j]) {
            res->out_shard[k] = lt_sharding_new_manual(mesh, n->shape.ndim, 0);
            continue;
        }
        if (n->shard) {
            res->out_shard[k] = lt_sharding_retain(n->shard);
            continue;
        }
        int any = 0;
        for (int d = 0; d < n->shape.ndim; d++) any |= p->ax[j][d] != 0;
        if (!any) continue;
        int64_t ids[LT_SPMD_MAX_DEVICES];
        for (int q = 0; q < mesh->n_dev; q++) ids[q] = mesh->dev[q];
        lt_sharding_new(mesh->mesh_ndim, mesh->mesh_shape, ids, n->shape.ndim, p->ax[j],
                        mesh->frame, &res->out_shard[k]);
    }
    free(man);
    if (report) {
        char line[640], a[32], b[32], c[32], d[32], m[48];
        size_t len = 0;
        m[0] = 0;
        for (int q = 0; q < mesh->mesh_ndim && len < sizeof m; q++)
            len += (size_t)snprintf(m + len, sizeof m - len, "%s%lld", q ? "x" : "",
                                    (long long)mesh->mesh_shape[q]);
        if (report == 2)
            snprintf(line, sizeof line,
                     "graph %016llx: mesh %s, %d of %d values sharded (%d annotated in the graph); "
                     "partitioned: the plan, then the executed lines",
                     (unsigned long long)g->key, m, sharded, g->n_nodes, annotated);
        else
            snprintf(line, sizeof line,
                     "graph %016llx: mesh %s, %d of %d values sharded (%d annotated in the graph); "
                     "NOT partitioned: the step ran whole on core %d",
                     (unsigned long long)g->key, m, sharded, g->n_nodes, annotated, g->core);
        lt_metrics_note("sharding", line);
        snprintf(line, sizeof line,
                 "  plan per core: peak %s (params %s); unpartitioned: peak %s (params %s); "
                 "%d collectives moving %s; %d ops replicated",
                 lt_fmt_bytes(res->peak_bytes, a, sizeof a), lt_fmt_bytes(params_split, b, sizeof b),
                 lt_fmt_bytes(res->peak_bytes_unpartitioned, c, sizeof c),
                 lt_fmt_bytes(params_whole, d, sizeof d), p->n_coll,
                 lt_fmt_bytes(p->coll_bytes, m, sizeof m), p->n_replicated);
        lt_metrics_note("sharding", line);
        for (int r = 0; r < p->n_rows; r++) {
            const row *w = &p->rows[r];
            char ax[64];
            axes_text(mesh, w->axes, ax, sizeof ax);
            snprintf(line, sizeof line, "  %-14s x%-4d %10s  mesh axis %s  before %s%s%s",
                     cname[w->kind], w->count, lt_fmt_bytes(w->bytes, a, sizeof a), ax,
                     lt_op_name((lt_op)w->op), w->frame ? "  (layout from " : "",
                     w->frame ? w->frame : "");
            if (w->frame) strncat(line, ")", sizeof line - strlen(line) - 1);
            lt_metrics_note("sharding", line);
        }
        /* partitioned (report 2): the executor lists and counts what it ran
         * replicated, by its own rules */
        if (p->n_replicated && report != 2)
            lt_spmd_note_replicated("  replicated (no rule: inputs gathered):", p->replicated);
        lt_counter_inc_name("SpmdGraphs", 1);
        if (report != 2) lt_counter_inc_name("SpmdUnpartitionedGraphs", 1);
        lt_counter_inc_name("SpmdPlannedCollectives", p->n_coll);
        if (report != 2) lt_counter_inc_name("SpmdReplicatedOps", p->n_replicated);
    }
    free(p->ax);
    free(p->partial);
    free(p->temp);
    free(p);
    return LT_OK;
}

void lt_spmd_plan_free(lt_spmd_plan_out *res)
{
    for (int k = 0; k < res->n_outputs && res->out_shard; k++)
        lt_sharding_release(res->out_shard[k]);
    free(res->out_shard);
    memset(res, 0, sizeof *res);
}
