/*
 * lazy/spmd_manual.c — manual sharding: torch_xla's enable_manual_sharding /
 * disable_manual_sharding (_spmd_full_to_shard_shape,
 * _spmd_shard_to_full_shape, _mark_manual_sharding), per-core regions of a
 * sharded program (spmd.h, docs/spmd.md "Manual sharding").
 *
 *   spmd_full_to_shard(x)   x sharded S over a mesh -> each core's block of
 *                           x (the node's shape is the block's shape); the
 *                           value's sharding is {manual}
 *   ops on manual values    run on every core of the mesh on that core's
 *                           values (the node's shape is the per-core shape)
 *   spmd_shard_to_full(v)   the per-core blocks put together as one value of
 *                           the full shape with sharding S' (replicated: the
 *                           first core's block is the value)
 *
 * Partitioned (the default): the executor's layouts (spmd_rules.c calls
 * lt_spmdx_rule_manual) give a manual value the layout "manual": per
 * position a buffer of the node's shape, never converted; the boundaries'
 * local ops are copies (the block is the input's local shard, the output's
 * local shard is the block). A manual result of the step stays on the
 * cores (per-core parts marked manual; a host read refuses it, as XLA
 * cannot read it either). Unpartitioned (LAZYTPU_SPMD_PARTITION=0, or a
 * mesh the process cannot run): lt_spmd_manual_expand rewrites the graph
 * to compute every position's values side by side on one core.
 *
 * Refused loudly (never a guessed value): shards that do not divide their
 * dim, a split or partial value read inside a region (only whole values
 * may enter other than through spmd_full_to_shard), two meshes, and in an
 * unpartitioned step a manual value among the step's results.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "spmd_exec_int.h"
#include "tensor.h"
#include "graph.h"
#include "shape_int.h"
#include "kernels/kernel.h"

static int is_boundary(const lt_node *n)
{
    return n->op == LT_OP_spmd_full_to_shard || n->op == LT_OP_spmd_shard_to_full;
}

/* ------------------------------------------------------- op table hooks */

/* Shape rule of both boundaries: attrs i[0..nd) the mesh axes per dim,
 * i[nd..2nd) the output dims. */
lt_status lt_shape_rule_spmd_manual(lt_op op, const lt_operand *in, int n, lt_attrs *a,
                                    lt_shape *out)
{
    int nd = in[0].shape->ndim;
    if (a->n != 2 * nd)
        return lt_shape_fail(LT_ERR_ARG, op, in, n, "needs %d attributes (per dim the mesh axes, "
                             "then the output dims), got %d", 2 * nd, a->n);
    *out = *in[0].shape;
    for (int d = 0; d < nd; d++) {
        if (a->i[nd + d] < 0)
            return lt_shape_fail(LT_ERR_ARG, op, in, n, "output dim %d is negative", d);
        out->dims[d] = a->i[nd + d];
    }
    return LT_OK;
}

/* The boundaries' kernel: never run (the partitioned executor replaces a
 * boundary by a copy, the unpartitioned expansion by slices and
 * concatenations); a program holding one refuses. */
lt_status lt_kernel_spmd_manual(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                                const lt_view *out, const lt_kernel_ctx *ctx)
{
    (void)attrs;
    (void)in;
    (void)n_in;
    (void)out;
    (void)ctx;
    return lt_set_error(LT_ERR_SHAPE, "%s: a manual-sharding boundary runs only in an SPMD step "
                        "(partitioned over the mesh, or expanded per core); it reached a "
                        "single-core program (e.g. a torch.compile graph)", lt_op_name(op));
}

/* ----------------------------------------------------------- graph scans */

/* A data leaf holding per-core values of a manual region (its sharding, or
 * its buffer's parts, say so). */
static int manual_leaf(const lt_node *n)
{
    if (n->op != LT_OP_data) return 0;
    return (n->shard && n->shard->manual) || (n->buf && n->buf->parts && n->buf->parts->manual);
}

int lt_spmd_manual_mark(const lt_graph *g, char *man)
{
    int cnt = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        man[i] = 0;
        if (!lt_node_is_pending(n)) {
            man[i] = manual_leaf(n);
        } else if (n->op == LT_OP_spmd_full_to_shard) {
            man[i] = 1;
        } else if (n->op != LT_OP_spmd_shard_to_full) {
            for (int e = g->in_off[i]; e < g->in_off[i + 1] && !man[i]; e++) man[i] = man[g->in_pos[e]];
        }
        cnt += man[i];
    }
    return cnt;
}

int lt_spmd_has_manual(const lt_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        if (is_boundary(n) || manual_leaf(n)) return 1;
    }
    return 0;
}

static const char *shard_text(const lt_sharding *s, char *b, size_t cap)
{
    if (!s) {
        snprintf(b, cap, "no sharding");
        return b;
    }
    return lt_sharding_str(s, b, cap);
}

static int shard_split(const lt_sharding *s)
{
    if (!s || s->manual) return 0;
    for (int d = 0; d < s->ndim; d++)
        if (s->axes[d]) return 1;
    return 0;
}

static lt_status refuse_split_in(const lt_node *op_node, const lt_node *in, const char *how)
{
    char a[96], b[96], c[160];
    return lt_set_error(LT_ERR_SHAPE, "manual sharding: %s (shape %s) reads a value of shape %s that "
                        "is %s (%s); only whole (replicated) values may enter a manual region "
                        "other than through enable_manual_sharding / _spmd_full_to_shard_shape",
                        lt_op_name((lt_op)op_node->op), lt_shape_str(&op_node->shape, a, sizeof a),
                        lt_shape_str(&in->shape, b, sizeof b), how, shard_text(in->shard, c, sizeof c));
}

/* ---------------------------------------------------- partitioned layouts */

static void lay_zero(lay *l)
{
    memset(l, 0, sizeof *l);
    l->pscale = 1;
}

static lt_status exec_refuse(xs *x, lt_status st)
{
    if (x->err == LT_OK) x->err = st;
    return st;
}

int lt_spmdx_rule_manual(xs *x, int i, const char *man)
{
    const lt_graph *g = x->g;
    const lt_node *n = g->nodes[i];
    if (!man[i] && !is_boundary(n)) return 0;
    lay *T = &x->T[i];
    lay *W = &x->W[g->in_off[i]];
    int nin = g->in_off[i + 1] - g->in_off[i];
    char a[96], b[160];
    lay_zero(T);
    for (int k = 0; k < nin; k++) lay_zero(&W[k]);
    if (n->op == LT_OP_spmd_full_to_shard) {
        int j = g->in_pos[g->in_off[i]];
        const lt_node *y = g->nodes[j];
        if (man[j]) {
            exec_refuse(x, lt_set_error(LT_ERR_SHAPE, "manual sharding: _spmd_full_to_shard_shape of a "
                                        "value (shape %s) that is already per core (manual)",
                                        lt_shape_str(&y->shape, a, sizeof a)));
            return 1;
        }
        if (!n->shard || !lt_spmd_same_mesh(n->shard, x->m)) {
            exec_refuse(x, lt_set_error(LT_ERR_SHAPE, "manual sharding: the value of shape %s enters "
                                        "a manual region over another mesh than the step's (%s); "
                                        "one mesh per step is supported",
                                        lt_shape_str(&y->shape, a, sizeof a),
                                        shard_text(x->m, b, sizeof b)));
            return 1;
        }
        int nd = y->shape.ndim;
        for (int d = 0; d < nd; d++) W[0].ax[d] = n->attrs.i[d];
        lay w = W[0];
        lay_fix(x, &y->shape, &W[0]);
        if (!lay_same(&w, &W[0], nd)) {
            exec_refuse(x, lt_set_error(LT_ERR_SHAPE, "manual sharding: the sharding of the value of "
                                        "shape %s entering the region does not split it evenly "
                                        "over the mesh", lt_shape_str(&y->shape, a, sizeof a)));
            return 1;
        }
        T->manual = 1;
        return 1;
    }
    if (n->op == LT_OP_spmd_shard_to_full) {
        int j = g->in_pos[g->in_off[i]];
        const lt_node *y = g->nodes[j];
        if (!man[j] && (lay_split(&x->T[j], y->shape.ndim) || x->T[j].partial)) {
            exec_refuse(x, refuse_split_in(n, y, x->T[j].partial ? "a partial sum over the mesh"
                                                                 : "split over the mesh"));
            return 1;
        }
        W[0] = x->T[j];
        int nd = n->shape.ndim, any = 0;
        for (int d = 0; d < nd; d++) any |= (T->ax[d] = n->attrs.i[d]) != 0;
        if (any && (!n->shard || !lt_spmd_same_mesh(n->shard, x->m))) {
            exec_refuse(x, lt_set_error(LT_ERR_SHAPE, "manual sharding: _spmd_shard_to_full_shape to "
                                        "%s, a sharding over another mesh than the step's region "
                                        "(%s); one mesh per step is supported",
                                        shard_text(n->shard, a, sizeof a), shard_text(x->m, b, sizeof b)));
            return 1;
        }
        lay t = *T;
        lay_fix(x, &n->shape, T);
        if (!lay_same(&t, T, nd)) {
            exec_refuse(x, lt_set_error(LT_ERR_SHAPE, "manual sharding: _spmd_shard_to_full_shape to "
                                        "shape %s: the sharding does not split it evenly",
                                        lt_shape_str(&n->shape, a, sizeof a)));
            return 1;
        }
        return 1;
    }
    if (!lt_node_is_pending(n)) {
        /* a manual result of an earlier step, held per core */
        const lt_buffer_parts *P = n->buf ? n->buf->parts : NULL;
        if (!P || !P->manual || P->n != x->nd)
            exec_refuse(x, lt_set_error(LT_ERR_SHAPE, "manual sharding: a per-core (manual) value of "
                                        "shape %s is not held per core on this mesh",
                                        lt_shape_str(&n->shape, a, sizeof a)));
        T->manual = 1;
        return 1;
    }
    /* an op of the region: every core runs it on its own values */
    T->manual = 1;
    for (int k = 0; k < nin; k++) {
        int j = g->in_pos[g->in_off[i] + k];
        const lt_node *y = g->nodes[j];
        if (!man[j] && (lay_split(&x->T[j], y->shape.ndim) || x->T[j].partial)) {
            exec_refuse(x, refuse_split_in(n, y, x->T[j].partial ? "a partial sum over the mesh"
                                                                 : "split over the mesh"));
            return 1;
        }
        W[k] = x->T[j];
    }
    return 1;
}

lt_op lt_spmdx_local_op(const xs *x, int i)
{
    const lt_node *n = x->g->nodes[i];
    return is_boundary(n) ? LT_OP_copy : (lt_op)n->op;
}

/* -------------------------------------------------- unpartitioned expansion */

typedef struct ex {
    const lt_graph *g;
    const lt_sharding *M;      /* the regions' mesh */
    int nd;                    /* its positions */
    int core;
    lt_node **c;               /* per node: nd clones (manual) or one (c[i * nd]) */
} ex;

static void coords_of(const lt_sharding *M, int q, int *coord)
{
    for (int a = M->mesh_ndim - 1, r = q; a >= 0; a--) {
        coord[a] = (int)(r % M->mesh_shape[a]);
        r /= (int)M->mesh_shape[a];
    }
}

static lt_node *slice_of(lt_node *v, int d, int64_t start, int64_t len, int core)
{
    lt_attrs a;
    memset(&a, 0, sizeof a);
    a.n = 4;
    a.i[0] = d;
    a.i[1] = start;
    a.i[2] = start + len;
    a.i[3] = 1;
    lt_shape s = v->shape;
    s.dims[d] = len;
    return lt_node_new(LT_OP_slice, &v, 1, &a, &s, (lt_dtype)v->dtype, core, 0);
}

/* The block of the full value whose block index per dim is b (dims < d
 * fixed), concatenated along dims d.. (S's splits); blocks from input j. */
static lt_node *assemble_blocks(ex *E, const lt_node *n, int j, int manual_in, const lt_sharding *S,
                                int d, int64_t *b)
{
    int nd = n->shape.ndim;
    if (d == nd) {
        int q = 0;
        if (manual_in && S && shard_split(S)) {
            int coord[LT_MAX_DIMS] = {0};
            for (int e = 0; e < nd; e++) {
                int64_t r = b[e];
                for (int k = lt_spmd_axes_count(S->axes[e]) - 1; k >= 0; k--) {
                    int ax = lt_spmd_axes_get(S->axes[e], k);
                    coord[ax] = (int)(r % S->mesh_shape[ax]);
                    r /= S->mesh_shape[ax];
                }
            }
            for (int a = 0; a < S->mesh_ndim; a++) q = q * (int)S->mesh_shape[a] + coord[a];
        }
        return lt_node_retain(E->c[(size_t)j * E->nd + (manual_in ? q : 0)]);
    }
    int64_t k = S ? lt_spmd_dim_shards(S, d) : 1;
    if (k == 1) {
        b[d] = 0;
        return assemble_blocks(E, n, j, manual_in, S, d + 1, b);
    }
    lt_node *parts[LT_SPMD_MAX_DEVICES];
    int made = 0;
    lt_node *out = NULL;
    for (int64_t t = 0; t < k; t++) {
        b[d] = t;
        parts[made] = assemble_blocks(E, n, j, manual_in, S, d + 1, b);
        if (!parts[made]) goto done;
        made++;
    }
    lt_shape s = parts[0]->shape;
    s.dims[d] = parts[0]->shape.dims[d] * k;
    lt_attrs a;
    memset(&a, 0, sizeof a);
    a.n = 1;
    a.i[0] = d;
    out = lt_node_new(LT_OP_cat, parts, made, &a, &s, (lt_dtype)n->dtype, E->core, 0);
done:
    for (int t = 0; t < made; t++) lt_node_release(parts[t]);
    return out;
}

/* A copy of n reading `in` (its flags, frame and sharding kept), or n itself
 * when the inputs are n's. */
static lt_node *clone_with(lt_node *n, lt_node **in, int core)
{
    int same = 1;
    for (int k = 0; k < n->n_in; k++) same &= in[k] == n->in[k];
    if (same) return lt_node_retain(n);
    lt_node *m = lt_node_new((lt_op)n->op, in, n->n_in, &n->attrs, &n->shape, (lt_dtype)n->dtype, core,
                             n->flags);
    if (!m) return NULL;
    if (n->frame) m->frame = strdup(n->frame);
    if (n->shard) {
        lt_sharding_release(m->shard);
        m->shard = lt_sharding_retain(n->shard);
        lt_node_rehash(m);
    }
    return m;
}

static lt_status expand_node(ex *E, int i, const char *man)
{
    const lt_graph *g = E->g;
    lt_node *n = g->nodes[i];
    int nd = E->nd, nin = g->in_off[i + 1] - g->in_off[i];
    lt_node **c = E->c;
    char a[96], b[160];
    if (!lt_node_is_pending(n)) {
        if (!man[i]) {
            c[(size_t)i * nd] = lt_node_retain(n);
            return LT_OK;
        }
        const lt_buffer_parts *P = n->buf ? n->buf->parts : NULL;
        if (!P || !P->manual || P->n != nd)
            return lt_set_error(LT_ERR_SHAPE, "manual sharding: a per-core (manual) value of shape %s "
                                "is not held per core on the step's mesh",
                                lt_shape_str(&n->shape, a, sizeof a));
        for (int q = 0; q < nd; q++) {
            c[(size_t)i * nd + q] = lt_node_new_data(lt_buffer_retain(P->part[q]), &n->shape,
                                                     (lt_dtype)n->dtype, E->core);
            if (!c[(size_t)i * nd + q]) return LT_ERR_INTERNAL;
        }
        return LT_OK;
    }
    if (n->op == LT_OP_spmd_full_to_shard) {
        int j = g->in_pos[g->in_off[i]];
        if (man[j])
            return lt_set_error(LT_ERR_SHAPE, "manual sharding: _spmd_full_to_shard_shape of a value "
                                "(shape %s) that is already per core (manual)",
                                lt_shape_str(&g->nodes[j]->shape, a, sizeof a));
        if (!n->shard || !lt_spmd_same_mesh(n->shard, E->M))
            return lt_set_error(LT_ERR_SHAPE, "manual sharding: two meshes in the manual regions of "
                                "one step (%s and %s)", shard_text(n->shard, a, sizeof a),
                                shard_text(E->M, b, sizeof b));
        for (int q = 0; q < nd; q++) {
            int coord[LT_MAX_DIMS];
            coords_of(E->M, q, coord);
            lt_node *v = lt_node_retain(c[(size_t)j * nd]);
            for (int d = 0; d < n->shape.ndim && v; d++) {
                int64_t code = n->attrs.i[d];
                if (!code) continue;
                int64_t idx = 0;
                for (int k = 0, cn = lt_spmd_axes_count(code); k < cn; k++) {
                    int ax = lt_spmd_axes_get(code, k);
                    idx = idx * E->M->mesh_shape[ax] + coord[ax];
                }
                lt_node *s = slice_of(v, d, idx * n->shape.dims[d], n->shape.dims[d], E->core);
                lt_node_release(v);
                v = s;
            }
            if (!v) return LT_ERR_INTERNAL;
            c[(size_t)i * nd + q] = v;
        }
        return LT_OK;
    }
    if (n->op == LT_OP_spmd_shard_to_full) {
        int j = g->in_pos[g->in_off[i]];
        if (!man[j] && shard_split(g->nodes[j]->shard))
            return refuse_split_in(n, g->nodes[j], "split over the mesh");
        if (man[j] && shard_split(n->shard) && !lt_spmd_same_mesh(n->shard, E->M))
            return lt_set_error(LT_ERR_SHAPE, "manual sharding: _spmd_shard_to_full_shape to %s, a "
                                "sharding over another mesh than the region's (%s)",
                                shard_text(n->shard, a, sizeof a), shard_text(E->M, b, sizeof b));
        int64_t bi[LT_MAX_DIMS] = {0};
        lt_node *v = assemble_blocks(E, n, j, man[j], n->shard, 0, bi);
        if (!v) return LT_ERR_INTERNAL;
        if (n->shard) {
            lt_sharding_release(v->shard);
            v->shard = lt_sharding_retain(n->shard);
            v->flags |= LT_NODE_SHARD_ANNOT;
            lt_node_rehash(v);
        }
        c[(size_t)i * nd] = v;
        return LT_OK;
    }
    lt_node *in[LT_MAX_ARITY_SPMD];
    lt_node **inp = nin <= LT_MAX_ARITY_SPMD ? in : malloc((size_t)nin * sizeof *inp);
    if (!inp) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    lt_status st = LT_OK;
    for (int q = 0; q < (man[i] ? nd : 1) && st == LT_OK; q++) {
        for (int k = 0; k < nin; k++) {
            int j = g->in_pos[g->in_off[i] + k];
            if (man[i] && !man[j] && lt_node_is_pending(g->nodes[j]) && shard_split(g->nodes[j]->shard)) {
                st = refuse_split_in(n, g->nodes[j], "split over the mesh");
                break;
            }
            if (man[i] && !man[j] && g->nodes[j]->op == LT_OP_data && shard_split(g->nodes[j]->shard)) {
                st = refuse_split_in(n, g->nodes[j], "split over the mesh");
                break;
            }
            inp[k] = c[(size_t)j * nd + (man[j] ? q : 0)];
        }
        if (st != LT_OK) break;
        lt_node *m = man[i] ? lt_node_new((lt_op)n->op, inp, nin, &n->attrs, &n->shape,
                                          (lt_dtype)n->dtype, E->core, n->flags & ~LT_NODE_SHARD_ANNOT)
                            : clone_with(n, inp, E->core);
        if (m && man[i] && n->frame) m->frame = strdup(n->frame);
        if (!m) st = LT_ERR_INTERNAL;
        else c[(size_t)i * nd + q] = m;
    }
    if (inp != in) free(inp);
    return st;
}

lt_status lt_spmd_manual_expand(lt_graph *g, lt_node *const *roots, int nr)
{
    int nn = g->n_nodes;
    char *man = calloc((size_t)(nn ? nn : 1), 1);
    if (!man) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    lt_spmd_manual_mark(g, man);
    ex E;
    memset(&E, 0, sizeof E);
    E.g = g;
    E.core = g->core;
    for (int i = 0; i < nn && !E.M; i++) {
        const lt_node *n = g->nodes[i];
        if ((n->op == LT_OP_spmd_full_to_shard || (n->op == LT_OP_data && man[i])) && n->shard)
            E.M = n->shard;
    }
    E.nd = E.M ? E.M->n_dev : 1;
    lt_status st = LT_OK;
    char a[96];
    for (int r = 0; r < nr && st == LT_OK; r++) {
        int j = g->output_pos[g->root_out[r]];
        if (man[j])
            st = lt_set_error(LT_ERR_SHAPE, "manual sharding: a per-core (manual) value of shape %s "
                              "is a result of a step that runs whole on one core "
                              "(LAZYTPU_SPMD_PARTITION=0, or a mesh this process cannot run): "
                              "pass it through disable_manual_sharding / _spmd_shard_to_full_shape "
                              "before the step ends, or run partitioned",
                              lt_shape_str(&g->nodes[j]->shape, a, sizeof a));
    }
    E.c = st == LT_OK ? calloc((size_t)(nn ? nn : 1) * (size_t)E.nd, sizeof *E.c) : NULL;
    if (st == LT_OK && !E.c) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    for (int i = 0; i < nn && st == LT_OK; i++) st = expand_node(&E, i, man);
    lt_node **er = NULL;
    if (st == LT_OK) {
        er = malloc((size_t)(nr ? nr : 1) * sizeof *er);
        if (!er) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        for (int r = 0; r < nr && er; r++) er[r] = E.c[(size_t)g->output_pos[g->root_out[r]] * E.nd];
    }
    (void)roots;
    if (st == LT_OK) {
        lt_graph ng;
        memset(&ng, 0, sizeof ng);
        st = lt_graph_capture(er, nr, &ng);
        if (st == LT_OK) {
            lt_graph_free(g);
            *g = ng;
        } else if (ng.nodes) {
            lt_graph_free(&ng);
        }
    }
    free(er);
    if (E.c)
        for (size_t k = 0; k < (size_t)nn * (size_t)E.nd; k++) lt_node_release(E.c[k]);
    free(E.c);
    free(man);
    return st;
}

/* ------------------------------------------------------------ the C API */

lt_status lt_tensor_spmd_full_to_shard(lt_tensor *t, lt_tensor **out)
{
    if (!t || !out) return lt_set_error(LT_ERR_ARG, "_spmd_full_to_shard_shape: NULL argument");
    *out = NULL;
    lt_node *v = lt_tensor_value(t);
    lt_sharding *s = lt_sharding_retain(v->shard);
    lt_shape shape = v->shape;
    lt_node_release(v);
    char a[96], b[160];
    lt_status st = LT_OK;
    if (!s) {
        st = lt_set_error(LT_ERR_ARG, "_spmd_full_to_shard_shape: Input tensor is not sharded "
                          "(shape %s): mark_sharding it first", lt_shape_str(&shape, a, sizeof a));
    } else if (s->manual) {
        st = lt_set_error(LT_ERR_ARG, "_spmd_full_to_shard_shape: the tensor (shape %s) is already "
                          "manual-sharded", lt_shape_str(&shape, a, sizeof a));
    } else if (s->ndim != shape.ndim) {
        st = lt_set_error(LT_ERR_SHAPE, "_spmd_full_to_shard_shape: a sharding of %d dims on a "
                          "tensor of shape %s", s->ndim, lt_shape_str(&shape, a, sizeof a));
    }
    lt_attrs at;
    memset(&at, 0, sizeof at);
    int nd = shape.ndim;
    for (int d = 0; d < nd && st == LT_OK; d++) {
        int64_t k = lt_spmd_dim_shards(s, d);
        if (shape.dims[d] % k)
            st = lt_set_error(LT_ERR_SHAPE, "_spmd_full_to_shard_shape: dim %d of the tensor of shape "
                              "%s is not divisible by its %lld shards (sharding %s): uneven manual "
                              "shards (XLA's padding) are not supported by lazytpu", d,
                              lt_shape_str(&shape, a, sizeof a), (long long)k,
                              lt_sharding_str(s, b, sizeof b));
        at.i[d] = s->axes[d];
        at.i[nd + d] = shape.dims[d] / k;
    }
    at.n = 2 * nd;
    if (st == LT_OK) st = lt_trace1(LT_OP_spmd_full_to_shard, t, &at, out);
    if (st == LT_OK) {
        lt_sharding *ms = lt_sharding_new_manual(s, nd, 0);
        st = ms ? lt_tensor_set_sharding(*out, ms) : LT_ERR_INTERNAL;
        lt_sharding_release(ms);
        if (st != LT_OK) {
            lt_tensor_release(*out);
            *out = NULL;
        }
    }
    lt_sharding_release(s);
    return st;
}

lt_status lt_tensor_spmd_shard_to_full(lt_tensor *t, lt_sharding *s, const int64_t *dims, int ndim,
                                       lt_tensor **out)
{
    if (!t || !out || (ndim > 0 && !dims))
        return lt_set_error(LT_ERR_ARG, "_spmd_shard_to_full_shape: NULL argument");
    *out = NULL;
    lt_node *v = lt_tensor_value(t);
    int manual = v->shard && v->shard->manual;
    lt_shape shape = v->shape;
    lt_node_release(v);
    char a[96], b[160], c[96];
    if (!manual)
        return lt_set_error(LT_ERR_ARG, "_spmd_shard_to_full_shape: Input tensor is not manual "
                            "sharded (shape %s): enable_manual_sharding / _mark_manual_sharding it "
                            "first", lt_shape_str(&shape, a, sizeof a));
    if (s && s->manual)
        return lt_set_error(LT_ERR_ARG, "_spmd_shard_to_full_shape: the target sharding is {manual}");
    lt_shape full;
    memset(&full, 0, sizeof full);
    full.ndim = ndim;
    for (int d = 0; d < ndim && d < LT_MAX_DIMS; d++) full.dims[d] = dims[d];
    if (ndim != shape.ndim || (s && s->ndim != ndim))
        return lt_set_error(LT_ERR_SHAPE, "_spmd_shard_to_full_shape: full shape %s for a tensor of "
                            "shape %s (sharding %s)", lt_shape_str(&full, a, sizeof a),
                            lt_shape_str(&shape, c, sizeof c), shard_text(s, b, sizeof b));
    lt_attrs at;
    memset(&at, 0, sizeof at);
    for (int d = 0; d < ndim; d++) {
        int64_t k = s ? lt_spmd_dim_shards(s, d) : 1;
        if (dims[d] < 0 || dims[d] % k || dims[d] / k != shape.dims[d])
            return lt_set_error(LT_ERR_SHAPE, "_spmd_shard_to_full_shape: the full shape %s split by "
                                "%s does not give shards of the tensor's shape %s (dim %d: %lld "
                                "shards; uneven shards are not supported by lazytpu)",
                                lt_shape_str(&full, a, sizeof a), shard_text(s, b, sizeof b),
                                lt_shape_str(&shape, c, sizeof c), d, (long long)k);
        at.i[d] = s ? s->axes[d] : 0;
        at.i[ndim + d] = dims[d];
    }
    at.n = 2 * ndim;
    lt_status st = lt_trace1(LT_OP_spmd_shard_to_full, t, &at, out);
    if (st == LT_OK && s) {
        st = lt_tensor_set_sharding(*out, s);
        if (st != LT_OK) {
            lt_tensor_release(*out);
            *out = NULL;
        }
    }
    return st;
}

lt_status lt_tensor_spmd_mark_manual(lt_tensor *t, const lt_sharding *mesh)
{
    if (!t) return lt_set_error(LT_ERR_ARG, "_mark_manual_sharding: NULL tensor");
    lt_node *v = lt_tensor_value(t);
    int pending = lt_node_is_pending(v);
    lt_shape shape = v->shape;
    const lt_sharding *m = mesh ? mesh : (v->shard && !v->shard->manual ? v->shard : NULL);
    lt_sharding *ms = pending ? lt_sharding_new_manual(m, shape.ndim, lt_devices_count()) : NULL;
    lt_node_release(v);
    char a[96];
    if (!pending)
        return lt_set_error(LT_ERR_ARG, "_mark_manual_sharding: Marking any data tensors as manual "
                            "is not supported (tensor of shape %s holds device data, not a "
                            "computed value)", lt_shape_str(&shape, a, sizeof a));
    if (!ms) return LT_ERR_INTERNAL;
    lt_status st = lt_tensor_set_sharding(t, ms);
    lt_sharding_release(ms);
    return st;
}

int lt_tensor_from_step(lt_tensor *t)
{
    if (!t) return 0;
    lt_live_lock(t->core);
    int r = t->from_step && t->value && t->value->op == LT_OP_data;
    lt_live_unlock(t->core);
    return r;
}
