/*
 * lazy/spmd_fuse.c — the all-reduces a first-core program runs itself
 * (spmd_exec.c; docs/spmd.md "Partitioned execution").
 *
 * A partial value (each core of the mesh holds an addend) that only the
 * first position's programs read, each wanting it whole — a data-parallel
 * gradient read by the optimizer update computed by the first core alone,
 * the reshapes/permutes of it the step keeps, the loss — is not
 * all-reduced on the host between levels: the first position's program of
 * its first reader sums the addends itself (data leaves over the other
 * cores' buffers, added in position order: the additions assemble() makes,
 * in the same order, so the values are the same), and a view of such a
 * value is that view of the sum. That program waits for the other cores'
 * jobs it reads (lt_submit_job.after), so the host queues the levels
 * without waiting for them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spmd_exec_int.h"
#include "compile.h"
#include "tensor.h"

/* The conversion of value j to layout w already made this step, or NULL. */
conv *lt_spmdx_conv_find(const xs *x, int j, const lay *w)
{
    int nd = x->g->nodes[j]->shape.ndim;
    for (conv *c = x->convs; c; c = c->next)
        if (c->j == j && lay_same(&c->w, w, nd)) return c;
    return NULL;
}

/* Keeps b, the whole sum of partial value j computed by the first
 * position's program (x->fuse), as j's whole layout for its later readers
 * and the step's results: every position reads that one buffer. */
lt_status lt_spmdx_keep_sum(xs *x, int j, lt_buffer *b)
{
    conv *c = calloc(1, sizeof *c);
    lt_buffer **buf = calloc((size_t)x->nd, sizeof *buf);
    if (!c || !buf) {
        free(c);
        free(buf);
        return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    }
    memset(&c->w, 0, sizeof c->w);
    c->w.pscale = 1;
    c->j = j;
    c->buf = buf;
    c->last = x->n_levels;     /* a result, or read by a later level */
    for (int q = 0; q < x->nd; q++) buf[q] = lt_buffer_retain(b);
    c->next = x->convs;
    x->convs = c;
    return LT_OK;
}

/* A reshape or permute of one value: the same in whole or in addends. */
int lt_spmdx_linear_view(const lt_graph *g, int i)
{
    int op = g->nodes[i]->op;
    return (op == LT_OP_reshape || op == LT_OP_permute) && g->in_off[i + 1] - g->in_off[i] == 1;
}

/* 1 if value j is one of the step's results. */
int lt_spmdx_is_result(const xs *x, int j)
{
    for (int k = 0; k < x->g->n_outputs; k++)
        if (x->g->output_pos[k] == j) return 1;
    return 0;
}

/* Appends (node, bufs, d) to the level's sources. */
lt_status lt_spmdx_add_src(src_buf **src, int *n_src, int *cap, lt_node *node, lt_buffer **bufs,
                           src_desc d)
{
    if (*n_src == *cap) {
        void *t = realloc(*src, (size_t)(*cap * 2) * sizeof **src);
        if (!t) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        *src = t;
        *cap *= 2;
    }
    (*src)[*n_src].node = node;
    (*src)[*n_src].d = d;
    (*src)[(*n_src)++].bufs = bufs;
    return LT_OK;
}

/* The whole value of partial value j (x->fuse) as nodes of the first
 * position's program: its addends (one per position holding one, each a
 * data leaf over that position's buffer) summed in position order, then
 * scaled by the partial's scale: the additions assemble() makes on the
 * host, in the same order. *out: a new reference. */
static lt_status sum_node(xs *x, int j, int core0, lt_node **out, src_buf **src, int *n_src, int *cap);

/* The whole value of fused value j in the first position's program:
 * sumn[j] (made once per level): a data leaf over its sum made by an
 * earlier level, the view of its fused input's whole value, or the sum of
 * its addends (sum_node). */
lt_status lt_spmdx_whole_node(xs *x, int j, int core0, lt_node **sumn, src_buf **src, int *n_src,
                            int *cap)
{
    if (sumn[j]) return LT_OK;
    const lt_graph *g = x->g;
    const lt_node *y = g->nodes[j];
    lay wl;
    memset(&wl, 0, sizeof wl);
    wl.pscale = 1;
    conv *c = lt_spmdx_conv_find(x, j, &wl);
    if (c) {
        sumn[j] = lt_node_new_data(lt_buffer_retain(c->buf[0]), &y->shape, (lt_dtype)y->dtype, core0);
        if (!sumn[j]) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        src_desc sd = {.kind = SRC_WHOLE, .j = j};
        return lt_spmdx_add_src(src, n_src, cap, sumn[j], c->buf, sd);
    }
    if (lt_spmdx_linear_view(g, j) && x->fuse[g->in_pos[g->in_off[j]]]) {
        int u = g->in_pos[g->in_off[j]];
        lt_status st = lt_spmdx_whole_node(x, u, core0, sumn, src, n_src, cap);
        if (st != LT_OK) return st;
        lt_attrs a = y->attrs;
        sumn[j] = lt_node_new((lt_op)y->op, &sumn[u], 1, &a, &y->shape, (lt_dtype)y->dtype, core0, 0);
        return sumn[j] ? LT_OK : lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    }
    return sum_node(x, j, core0, &sumn[j], src, n_src, cap);
}

static lt_status sum_node(xs *x, int j, int core0, lt_node **out, src_buf **src, int *n_src, int *cap)
{
    const lt_node *y = x->g->nodes[j];
    const lay *A = &x->T[j];
    lt_attrs na;
    memset(&na, 0, sizeof na);
    lt_node *acc = NULL;
    lt_status st = LT_OK;
    for (int q = 0; q < x->nd && st == LT_OK; q++) {
        int rep = 1;
        for (int a = 0; a < x->m->mesh_ndim; a++)
            if (!(A->partial >> a & 1) && x->coord[q][a]) rep = 0;
        if (!rep) continue;
        /* the leaf reads x->val[j][q]: its source array, seen from position
         * 0 (the only one running this program), starts there */
        lt_node *d = lt_node_new_data(lt_buffer_retain(x->val[j][q]), &y->shape, (lt_dtype)y->dtype, core0);
        if (!d) {
            st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
            break;
        }
        src_desc sd = {.kind = SRC_ADDEND, .j = j, .q = q};
        st = lt_spmdx_add_src(src, n_src, cap, d, &x->val[j][q], sd);
        if (acc && st == LT_OK) {
            lt_node *two[2] = {acc, d};
            lt_node *sum = lt_node_new(LT_OP_add, two, 2, &na, &y->shape, (lt_dtype)y->dtype, core0, 0);
            if (!sum) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
            lt_node_release(acc);
            lt_node_release(d);
            acc = sum;
        } else if (st == LT_OK) {
            acc = d;
        } else {
            lt_node_release(d);
        }
    }
    if (st == LT_OK && acc && A->pscale != 1) {
        lt_node *sc = lt_node_new_scalar(A->pscale, (lt_dtype)y->dtype, core0, LT_NODE_WRAPPED);
        src_desc sd = {.kind = SRC_CONST, .v = A->pscale};
        if (sc && lt_spmdx_add_src(src, n_src, cap, sc, NULL, sd) != LT_OK) {
            lt_node_release(sc);
            sc = NULL;
        }
        lt_node *two[2] = {acc, sc};
        lt_node *m = sc ? lt_node_new(LT_OP_mul, two, 2, &na, &y->shape, (lt_dtype)y->dtype, core0, 0) : NULL;
        lt_node_release(sc);
        lt_node_release(acc);
        acc = m;
        if (!m) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    }
    if (st != LT_OK) {
        lt_node_release(acc);
        acc = NULL;
    } else {
        /* an all-reduce, run by the first position's program */
        double by = (double)lt_shape_numel(&y->shape) * (double)lt_dtype_size((lt_dtype)y->dtype);
        lt_spmdx_note(x, K_REDUCE, A->partial, by);
        lt_spmdx_rec_note(x, K_REDUCE, A->partial, by);
    }
    *out = acc;
    return st;
}

/* x->fuse: partial values (f32/f64, not split, a power-of-two scale: the
 * sums exact as the host's) whose every reader is a first-position program
 * wanting them whole, or a reshape/permute of them that is fused too, with
 * the graph on the first position's core. Their whole value is made in the
 * first position's program of their first reader (or, for a result no
 * program reads, of the last level): the sum of the addends, or the view of
 * the fused value it views (lt_spmdx_whole_node) — not a host all-reduce or
 * reduce-scatter between levels. A data-parallel gradient, the views of it
 * the step keeps, and the loss are all made so. */
void lt_spmdx_plan_fuse(xs *x)
{
    const lt_graph *g = x->g;
    if (x->m->dev[0] != g->core) return;
    for (int j = 0; j < g->n_nodes; j++) {
        const lt_node *y = g->nodes[j];
        int e2;
        /* summed at a later level than its own (the addends complete) */
        x->fuse[j] = lt_node_is_pending(y) && x->level[j] < x->n_levels - 1 && x->T[j].partial && partial_ok(y) &&
                     !lay_split(&x->T[j], y->shape.ndim) && frexp(x->T[j].pscale, &e2) == 0.5;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < g->n_nodes; i++)
            for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
                int j = g->in_pos[e];
                if (!x->fuse[j]) continue;
                int ok = x->bump[e] ? x->solo[i] && !x->W[e].partial &&
                                          !lay_split(&x->W[e], g->nodes[j]->shape.ndim)
                                    : x->fuse[i] && lt_spmdx_linear_view(g, i) &&
                                          x->T[i].partial == x->T[j].partial &&
                                          x->T[i].pscale == x->T[j].pscale;
                if (!ok) {
                    x->fuse[j] = 0;
                    changed = 1;
                }
            }
    }
    /* read by a program, or a result */
    for (int j = 0; j < g->n_nodes; j++) {
        if (!x->fuse[j] || lt_spmdx_is_result(x, j)) continue;
        int read = 0;
        for (int i = j + 1; i < g->n_nodes && !read; i++)
            for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++)
                if (g->in_pos[e] == j) read = 1;
        x->fuse[j] = (char)read;
    }
}

