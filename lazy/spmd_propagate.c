/*
 * lazy/spmd_propagate.c — forward sharding propagation, one rule per rule
 * class (spmd.h, ops.def's spmd column), run when a node is made from sharded
 * inputs (lt_node_new). The output's sharding is the layout GSPMD would
 * pick for the op without being told:
 *   ew          per output dim, the axes of the first input whose aligned
 *               dim has the output's size (broadcast dims of size 1 give
 *               nothing)
 *   contract    mm [M,K]x[K,N]: M from a, N from b (a split K gives a
 *               partial sum: the output is not split by it); bmm: batch
 *               from either; addmm: mm of inputs 1, 2
 *   reduce      the kept dims keep their axes (a reduced split dim gives a
 *               partial sum, reduced across its axes: not split)
 *   norm        input 0's axes except the normalised dim(s)
 *   view        permute/expand/slice/select/reshape map the split dims that
 *               survive (reshape: a dim whose size and leading product are
 *               unchanged)
 *   gather      index_select: src's dims, the indexed dim from the index
 *   conv        the batch dim of input 0
 *   collective, opaque: none (replicated), except an update of a base
 *               (slice/select/diagonal/as_strided_scatter, scatter,
 *               scatter_add, scatter_reduce: input 0 the base, the output
 *               its shape), which keeps the base's layout as GSPMD gives a
 *               dynamic-update-slice or scatter its operand's sharding: a
 *               write through a view of a sharded tensor (w[0].zero_(),
 *               which functionalization turns into w = select_scatter(w,
 *               ...)) leaves it sharded. The op itself still runs
 *               replicated (the partitioner gathers its inputs).
 * A mesh axis may split one dim only: a later dim that would reuse an axis
 * loses it. An output with no split dim gets no sharding (NULL).
 *
 * Backward (lt_spmd_backward_layouts, at plan time over a captured graph):
 * an unsharded computed value read only by elementwise ops of its shape
 * takes a split consumer's layout (GSPMD's backward propagation: an
 * optimizer state beside a sharded parameter, a dropout mask beside the
 * batch-split activation it multiplies).
 */
#include <stdlib.h>
#include <string.h>
#include "spmd.h"
#include "tensor.h"

/* The first sharded input's sharding (the mesh template), or NULL. */
static const lt_sharding *mesh_of(lt_node *const *in, int n_in)
{
    for (int i = 0; i < n_in; i++)
        if (in[i]->shard) return in[i]->shard;
    return NULL;
}

/* Axes of input i's dim d when i is sharded on the template's mesh. */
static int64_t axes_of(const lt_sharding *m, const lt_node *x, int d)
{
    const lt_sharding *s = x->shard;
    if (!s || d < 0 || d >= s->ndim || s->hash == 0) return 0;
    if (s != m && (s->mesh_ndim != m->mesh_ndim || s->n_dev != m->n_dev ||
                   memcmp(s->mesh_shape, m->mesh_shape, sizeof m->mesh_shape) != 0 ||
                   memcmp(s->dev, m->dev, (size_t)m->n_dev * sizeof m->dev[0]) != 0))
        return 0;   /* another mesh: not propagated */
    return s->axes[d];
}

/* Builds the output sharding from axes[ndim] on m's mesh: drops axes used
 * by an earlier dim and dims of size 0; NULL when nothing is split. */
static lt_sharding *make(const lt_sharding *m, const lt_shape *out, int64_t *axes)
{
    unsigned used = 0;
    int any = 0;
    for (int d = 0; d < out->ndim; d++) {
        int64_t c = axes[d], keep = 0;
        int k2 = 0;
        for (int k = 0, n = lt_spmd_axes_count(c); k < n && out->dims[d] > 0; k++) {
            int ax = lt_spmd_axes_get(c, k);
            if (used >> ax & 1) break;   /* keep the major part only */
            used |= 1u << ax;
            keep |= (int64_t)(ax + 1) << (4 * k2++);
        }
        axes[d] = keep;
        any |= keep != 0;
    }
    if (!any) return NULL;
    /* the template's own layout (an elementwise chain): shared, not copied */
    if (m->ndim == out->ndim && memcmp(m->axes, axes, (size_t)out->ndim * sizeof axes[0]) == 0)
        return lt_sharding_retain((lt_sharding *)m);
    int64_t ids[LT_SPMD_MAX_DEVICES];
    for (int i = 0; i < m->n_dev; i++) ids[i] = m->dev[i];
    lt_sharding *s = NULL;
    /* the derived layout keeps the annotation's line (the report names it) */
    if (lt_sharding_new(m->mesh_ndim, m->mesh_shape, ids, out->ndim, axes, m->frame, &s) != LT_OK)
        return NULL;
    return s;
}

static lt_sharding *rule_ew(const lt_sharding *m, lt_node *const *in, int n_in,
                            const lt_shape *out)
{
    int64_t axes[LT_MAX_DIMS] = {0};
    for (int d = 0; d < out->ndim; d++) {
        for (int i = 0; i < n_in && !axes[d]; i++) {
            const lt_node *x = in[i];
            int xd = d - (out->ndim - x->shape.ndim);
            if (xd < 0 || x->shape.dims[xd] != out->dims[d]) continue;
            axes[d] = axes_of(m, x, xd);
        }
    }
    return make(m, out, axes);
}

static lt_sharding *rule_contract(const lt_sharding *m, lt_op op, lt_node *const *in,
                                  int n_in, const lt_shape *out)
{
    int64_t axes[LT_MAX_DIMS] = {0};
    if (op == LT_OP_addmm && n_in == 3) in++;
    const lt_node *a = in[0], *b = in[1];
    if (out->ndim == 2 && a->shape.ndim == 2 && b->shape.ndim == 2) {
        axes[0] = axes_of(m, a, 0);
        axes[1] = axes_of(m, b, 1);
    } else if (out->ndim == 3 && a->shape.ndim == 3 && b->shape.ndim == 3) {
        axes[0] = axes_of(m, a, 0) ? axes_of(m, a, 0) : axes_of(m, b, 0);
        axes[1] = axes_of(m, a, 1);
        axes[2] = axes_of(m, b, 2);
    }
    return make(m, out, axes);
}

static lt_sharding *rule_reduce(const lt_sharding *m, lt_op op, const lt_attrs *at,
                                lt_node *const *in, const lt_shape *out)
{
    int64_t axes[LT_MAX_DIMS] = {0};
    const lt_node *x = in[0];
    uint64_t mask;
    int keep;
    if (op == LT_OP_argmax || op == LT_OP_argmin) {
        if (at->i[0] < 0) return NULL;
        mask = 1ULL << at->i[0];
        keep = (int)at->i[1];
    } else {
        mask = (uint64_t)at->i[0];      /* 0 = no dim reduced */
        keep = (int)at->i[1];
    }
    int o = 0;
    for (int d = 0; d < x->shape.ndim; d++) {
        int reduced = (mask >> d) & 1;
        if (reduced && !keep) continue;
        if (o >= out->ndim) return NULL;
        axes[o++] = reduced ? 0 : axes_of(m, x, d);
    }
    if (o != out->ndim) return NULL;
    return make(m, out, axes);
}

static lt_sharding *rule_norm(const lt_sharding *m, lt_op op, const lt_attrs *at,
                              lt_node *const *in, const lt_shape *out)
{
    int64_t axes[LT_MAX_DIMS] = {0};
    const lt_node *x = in[0];
    if (op == LT_OP_layer_norm_stats) {
        /* [2, *leading] from x[*leading, *normalised] */
        int k = (int)at->i[0];
        for (int d = 0; d + k < x->shape.ndim && d + 1 < out->ndim; d++)
            axes[d + 1] = axes_of(m, x, d);
        return make(m, out, axes);
    }
    if (!lt_shape_equal(&x->shape, out)) return NULL;
    for (int d = 0; d < out->ndim; d++) axes[d] = axes_of(m, x, d);
    if (op == LT_OP_layer_norm || op == LT_OP_layer_norm_backward) {
        int k = (int)at->i[0];
        for (int d = out->ndim - k; d < out->ndim; d++)
            if (d >= 0) axes[d] = 0;
    } else {
        int d = (int)at->i[0];
        if (d >= 0 && d < out->ndim) axes[d] = 0;
    }
    return make(m, out, axes);
}

static lt_sharding *rule_view(const lt_sharding *m, lt_op op, const lt_attrs *at,
                              lt_node *const *in, const lt_shape *out)
{
    int64_t axes[LT_MAX_DIMS] = {0};
    const lt_node *x = in[0];
    const lt_shape *xs = &x->shape;
    switch (op) {
    case LT_OP_permute:
        for (int d = 0; d < out->ndim && d < at->n; d++) axes[d] = axes_of(m, x, (int)at->i[d]);
        break;
    case LT_OP_expand:
        for (int d = 0; d < out->ndim; d++) {
            int xd = d - (out->ndim - xs->ndim);
            if (xd >= 0 && xs->dims[xd] == out->dims[d]) axes[d] = axes_of(m, x, xd);
        }
        break;
    case LT_OP_slice:
        for (int d = 0; d < out->ndim; d++)
            axes[d] = (d == at->i[0] && out->dims[d] != xs->dims[d]) ? 0 : axes_of(m, x, d);
        break;
    case LT_OP_select:
        for (int d = 0, o = 0; d < xs->ndim; d++)
            if (d != at->i[0] && o < out->ndim) axes[o++] = axes_of(m, x, d);
        break;
    case LT_OP_reshape: {
        /* a split input dim maps to the output dim that starts at the same
         * leading product and either is it, or merges it with minor dims
         * ([B, S] -> [B*S]: B's split is the major part), or is its major
         * part when the shards still divide it ([B*S] -> [B, S]) */
        int64_t lead_in = 1;
        for (int d = 0; d < xs->ndim; d++) {
            int64_t c = axes_of(m, x, d);
            if (c) {
                int64_t lead_out = 1, n = 1;
                for (int k = 0, q = lt_spmd_axes_count(c); k < q; k++)
                    n *= m->mesh_shape[lt_spmd_axes_get(c, k)];
                for (int e = 0; e < out->ndim; e++) {
                    if (lead_out == lead_in) {
                        int64_t od = out->dims[e], id = xs->dims[d];
                        if (od == id || (od > id && od % id == 0) ||
                            (od < id && id % od == 0 && od % n == 0))
                            axes[e] = c;
                        break;
                    }
                    lead_out *= out->dims[e];
                    if (lead_out > lead_in) break;
                }
            }
            lead_in *= xs->dims[d];
        }
        break;
    }
    default:
        return NULL;
    }
    return make(m, out, axes);
}

static lt_sharding *rule_gather(const lt_sharding *m, lt_op op, const lt_attrs *at,
                                lt_node *const *in, int n_in, const lt_shape *out)
{
    int64_t axes[LT_MAX_DIMS] = {0};
    if (op != LT_OP_index_select || n_in != 2) return NULL;
    const lt_node *src = in[0], *idx = in[1];
    int dim = (int)at->i[0];
    for (int d = 0; d < out->ndim; d++)
        axes[d] = d == dim ? (idx->shape.ndim == 1 ? axes_of(m, idx, 0) : 0) : axes_of(m, src, d);
    return make(m, out, axes);
}

static lt_sharding *rule_conv(const lt_sharding *m, lt_node *const *in, const lt_shape *out)
{
    int64_t axes[LT_MAX_DIMS] = {0};
    const lt_node *x = in[0];
    if (out->ndim >= 3 && x->shape.ndim == out->ndim && x->shape.dims[0] == out->dims[0])
        axes[0] = axes_of(m, x, 0);
    return make(m, out, axes);
}

/* 1 for an op that writes into a copy of its input 0 (the base) and gives
 * a value of the base's shape. */
static int updates_base(lt_op op)
{
    return lt_op_kind_of(op) == LT_KIND_SCATTER || op == LT_OP_scatter ||
           op == LT_OP_scatter_add || op == LT_OP_scatter_reduce;
}

lt_sharding *lt_spmd_forward(lt_op op, const lt_attrs *a, lt_node *const *in,
                             int n_in, const lt_shape *out)
{
    const lt_sharding *m = mesh_of(in, n_in);
    if (!m || out->ndim == 0) return NULL;
    if (updates_base(op)) {
        /* the base's layout (file comment); none when the base has none */
        int64_t axes[LT_MAX_DIMS] = {0};
        if (n_in < 1 || !in[0]->shard || in[0]->shard->manual || !lt_shape_equal(&in[0]->shape, out))
            return NULL;
        for (int d = 0; d < out->ndim; d++) axes[d] = axes_of(in[0]->shard, in[0], d);
        return make(in[0]->shard, out, axes);
    }
    if (op == LT_OP_opt_barrier) {
        /* an optimization barrier: input 0's layout, whatever the other
         * tensors behind the same barrier are (they are only waited for) */
        int64_t axes[LT_MAX_DIMS] = {0};
        for (int d = 0; d < out->ndim; d++) axes[d] = axes_of(m, in[0], d);
        return make(m, out, axes);
    }
    switch (lt_spmd_rule_of(op)) {
    case LT_SPMD_EW: return rule_ew(m, in, n_in, out);
    case LT_SPMD_CONTRACT: return n_in >= 2 ? rule_contract(m, op, in, n_in, out) : NULL;
    case LT_SPMD_REDUCE: return rule_reduce(m, op, a, in, out);
    case LT_SPMD_NORM: return rule_norm(m, op, a, in, out);
    case LT_SPMD_VIEW: return rule_view(m, op, a, in, out);
    case LT_SPMD_GATHER: return rule_gather(m, op, a, in, n_in, out);
    case LT_SPMD_CONV: return rule_conv(m, in, out);
    default: return NULL;
    }
}

/* Backward propagation (spmd.h): an unsharded computed value takes the
 * layout of its consumers when every consumer is elementwise on its shape
 * and one of them is split. */
void lt_spmd_backward_layouts(const lt_graph *g, int64_t (*ax)[LT_MAX_DIMS])
{
    int n = g->n_nodes;
    int *first = malloc((size_t)(n ? n : 1) * sizeof *first);
    char *ok = malloc((size_t)(n ? n : 1));
    if (!first || !ok) goto out;
    for (int i = 0; i < n; i++) {
        first[i] = -1;
        ok[i] = 1;
    }
    for (int i = 0; i < n; i++) {
        const lt_node *c = g->nodes[i];
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            int j = g->in_pos[e];
            int same = lt_spmd_rule_of((lt_op)c->op) == LT_SPMD_EW &&
                       lt_shape_equal(&c->shape, &g->nodes[j]->shape);
            if (!same) ok[j] = 0;
        }
    }
    /* reverse post-order: consumers are settled before their inputs */
    for (int i = n - 1; i >= 0; i--) {
        const lt_node *c = g->nodes[i];
        int sharded = 0;
        for (int d = 0; d < c->shape.ndim; d++) sharded |= ax[i][d] != 0;
        if (!sharded || lt_spmd_rule_of((lt_op)c->op) != LT_SPMD_EW) continue;
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            int j = g->in_pos[e];
            const lt_node *x = g->nodes[j];
            if (!lt_node_is_pending(x) || !ok[j] || x->shard || first[j] >= 0) continue;
            if (!lt_shape_equal(&x->shape, &c->shape)) continue;
            first[j] = i;
            memcpy(ax[j], ax[i], sizeof ax[j]);
        }
    }
out:
    free(first);
    free(ok);
}
