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
 *
 * A partial value that programs every position runs read whole (batch
 * norm's statistics over a split batch: the forward mean and variance, the
 * backward sums; LAZYTPU_SPMD_SUM_EVERY=1, fuse 3) is summed so by each of
 * those programs, every position adding the same addends in the same
 * order (the same bits on every core, and as the host's all-reduce makes
 * them); each position keeps its own sum for later levels. A program waits
 * on its core for the jobs writing the addends it reads (their buffers are
 * its parameters), so the host queues the whole step without waiting.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "spmd_exec_int.h"
#include "compile.h"
#include "tensor.h"
#include "options.h"

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
typedef struct same_bufs {
    struct same_bufs *next;
    lt_buffer *b[];
} same_bufs;

lt_buffer **lt_spmdx_same_bufs(xs *x, lt_buffer *b)
{
    same_bufs *s = malloc(sizeof *s + (size_t)x->nd * sizeof s->b[0]);
    if (!s) {
        lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        return NULL;
    }
    for (int q = 0; q < x->nd; q++) s->b[q] = b;   /* borrowed: x->val holds b */
    s->next = x->sames;
    x->sames = s;
    return s->b;
}

void lt_spmdx_sames_free(xs *x)
{
    while (x->sames) {
        same_bufs *s = x->sames;
        x->sames = s->next;
        free(s);
    }
}

lt_status lt_spmdx_keep_sum(xs *x, int j, int q, lt_buffer *b)
{
    if (q > 0) {               /* every position sums it: position q's own */
        lay wl;
        memset(&wl, 0, sizeof wl);
        wl.pscale = 1;
        conv *f = lt_spmdx_conv_find(x, j, &wl);
        if (!f) return lt_set_error(LT_ERR_INTERNAL, "spmd: a position's sum before the first's");
        lt_buffer_release(f->buf[q]);
        f->buf[q] = lt_buffer_retain(b);
        return LT_OK;
    }
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

/* The whole value of contraction-fused value j (x->fuse[j] == 2): its
 * product over the whole contracted dim, computed by the first position's
 * program from the operands' blocks instead of the sum of the cores'
 * partial products. *out: a new reference. */
static lt_status product_node(xs *x, int j, int core0, lt_node **out, src_buf **src, int *n_src,
                              int *cap);

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
    if (x->fuse[j] == 2) return product_node(x, j, core0, &sumn[j], src, n_src, cap);
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
        lt_buffer **sb = lt_spmdx_same_bufs(x, x->val[j][q]);
        st = sb ? lt_spmdx_add_src(src, n_src, cap, d, sb, sd) : LT_ERR_INTERNAL;
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

/* The positions holding the blocks of a dim split over `code`, by block
 * index (the others along the remaining mesh axes, coordinate 0 there):
 * pos[b] for b < nshards; 0 when some block has no such position. */
static int blocks_of(const xs *x, int64_t code, int *pos)
{
    int64_t k = nshards(x, code);
    unsigned axes = lt_spmd_axes_mask(code);
    for (int64_t b = 0; b < k; b++) pos[b] = -1;
    for (int q = 0; q < x->nd; q++) {
        int rep = 1;
        for (int a = 0; a < x->m->mesh_ndim; a++)
            if (!(axes >> a & 1) && x->coord[q][a]) rep = 0;
        if (!rep) continue;
        int64_t b = shard_idx(x, q, code);
        if (b < 0 || b >= k || pos[b] >= 0) return 0;
        pos[b] = q;
    }
    for (int64_t b = 0; b < k; b++)
        if (pos[b] < 0) return 0;
    return 1;
}

/* 1 when the whole value of value u can be made in the first position's
 * program of a level after lu: a data value (read whole); a reshape or
 * permute of such a value (that view of its whole value); or a value the
 * cores computed at level lu or before, not partial, split along one dim at most
 * (its blocks concatenated in block order, or position 0's copy). With
 * mark, each value whose blocks are read is marked there. */
static int whole_ok(const xs *x, int u, int lu, char *mark, int depth)
{
    const lt_graph *g = x->g;
    const lt_node *n = g->nodes[u];
    if (!lt_node_is_pending(n)) return n->op == LT_OP_data && !n->buf->parts;
    if (depth > 8 || x->level[u] > lu || x->T[u].partial || x->T[u].manual || x->fuse[u] || x->solo[u])
        return 0;
    if (lt_spmdx_linear_view(g, u) && whole_ok(x, g->in_pos[g->in_off[u]], lu, mark, depth + 1)) return 1;
    int ds = -1;
    for (int d = 0; d < n->shape.ndim; d++)
        if (x->T[u].ax[d]) {
            if (ds >= 0) return 0;
            ds = d;
        }
    int pos[LT_SPMD_MAX_DEVICES];
    if (ds >= 0 && !blocks_of(x, x->T[u].ax[ds], pos)) return 0;
    if (mark) mark[u] = 1;
    return 1;
}

/* The whole value of value u (whole_ok) as a node of the first position's
 * program, into *out (a new reference); its leaves appended to the
 * level's sources. */
static lt_status whole_of(xs *x, int u, int core0, lt_node **out, src_buf **src, int *n_src,
                          int *cap)
{
    const lt_graph *g = x->g;
    const lt_node *y = g->nodes[u];
    *out = NULL;
    if (!lt_node_is_pending(y)) {
        lay wl;
        memset(&wl, 0, sizeof wl);
        wl.pscale = 1;
        lt_buffer **b = NULL;
        lt_status st = lt_spmdx_value_in(x, u, &wl, &b);
        if (st != LT_OK) return st;
        lt_node *n = lt_node_new_data(lt_buffer_retain(b[0]), &y->shape, (lt_dtype)y->dtype, core0);
        if (!n) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        src_desc sd = {.kind = SRC_VALUE, .j = u, .w = wl};
        st = lt_spmdx_add_src(src, n_src, cap, n, b, sd);
        if (st != LT_OK) lt_node_release(n);
        else *out = n;
        return st;
    }
    if (lt_spmdx_linear_view(g, u) && whole_ok(x, g->in_pos[g->in_off[u]], x->level[u], NULL, 1)) {
        lt_node *v = NULL;
        lt_status st = whole_of(x, g->in_pos[g->in_off[u]], core0, &v, src, n_src, cap);
        if (st != LT_OK) return st;
        lt_attrs a = y->attrs;
        *out = lt_node_new((lt_op)y->op, &v, 1, &a, &y->shape, (lt_dtype)y->dtype, core0, 0);
        lt_node_release(v);
        return *out ? LT_OK : lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    }
    int ds = -1;
    for (int d = 0; d < y->shape.ndim; d++)
        if (x->T[u].ax[d]) ds = d;
    int pos[LT_SPMD_MAX_DEVICES] = {0};
    int64_t k = ds < 0 ? 1 : nshards(x, x->T[u].ax[ds]);
    if (ds >= 0 && !blocks_of(x, x->T[u].ax[ds], pos))
        return lt_set_error(LT_ERR_INTERNAL, "spmd: a product's blocks");
    lt_shape ls;
    local_shape(x, &y->shape, &x->T[u], &ls);
    lt_node *parts[LT_SPMD_MAX_DEVICES];
    int made = 0;
    lt_status st = LT_OK;
    for (int64_t b = 0; b < k && st == LT_OK; b++) {
        int q = pos[b];
        if (!x->val[u] || !x->val[u][q]) {
            st = lt_set_error(LT_ERR_INTERNAL, "spmd: a product's operand block not made");
            break;
        }
        lt_node *n = lt_node_new_data(lt_buffer_retain(x->val[u][q]), &ls, (lt_dtype)y->dtype, core0);
        if (!n) {
            st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
            break;
        }
        src_desc sd = {.kind = SRC_ADDEND, .j = u, .q = q};
        lt_buffer **sb = lt_spmdx_same_bufs(x, x->val[u][q]);
        st = sb ? lt_spmdx_add_src(src, n_src, cap, n, sb, sd) : LT_ERR_INTERNAL;
        if (st != LT_OK) lt_node_release(n);
        else parts[made++] = n;
    }
    if (st == LT_OK && made == 1) {
        *out = parts[0];
        return LT_OK;
    }
    if (st == LT_OK) {
        lt_attrs a;
        memset(&a, 0, sizeof a);
        a.n = 1;
        a.i[0] = ds;
        *out = lt_node_new(LT_OP_cat, parts, made, &a, &y->shape, (lt_dtype)y->dtype, core0, 0);
        if (!*out) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    }
    for (int t = 0; t < made; t++) lt_node_release(parts[t]);
    return st;
}

static lt_status product_node(xs *x, int j, int core0, lt_node **out, src_buf **src, int *n_src,
                              int *cap)
{
    const lt_graph *g = x->g;
    const lt_node *y = g->nodes[j];
    lt_node *in[2] = {NULL, NULL};
    *out = NULL;
    lt_status st = whole_of(x, g->in_pos[g->in_off[j]], core0, &in[0], src, n_src, cap);
    if (st == LT_OK) st = whole_of(x, g->in_pos[g->in_off[j] + 1], core0, &in[1], src, n_src, cap);
    if (st == LT_OK) {
        lt_attrs a = y->attrs;
        *out = lt_node_new(LT_OP_mm, in, 2, &a, &y->shape, (lt_dtype)y->dtype, core0, 0);
        if (!*out) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    }
    lt_node_release(in[0]);
    lt_node_release(in[1]);
    if (st == LT_OK) {
        /* the all-reduce the plan has, run as the product over the whole
         * contracted dim (no partial products written, none summed) */
        double by = (double)lt_shape_numel(&y->shape) * (double)lt_dtype_size((lt_dtype)y->dtype);
        lt_spmdx_note(x, K_REDUCE, x->T[j].partial, by);
        lt_spmdx_rec_note(x, K_REDUCE, x->T[j].partial, by);
    }
    return st;
}

/* 1 when fused value j (summed, not a view) may be computed as a whole
 * product (x->fuse[j] == 2): an f32 mm, its sum unscaled, each operand's
 * whole value can be made by the first position (whole_ok). With mark:
 * the values whose blocks that reads are marked. */
static int product_ok(const xs *x, int j, char *mark)
{
    const lt_graph *g = x->g;
    const lt_node *y = g->nodes[j];
    if (y->op != LT_OP_mm || y->dtype != LT_F32 || g->in_off[j + 1] - g->in_off[j] != 2 ||
        x->T[j].pscale != 1)
        return 0;
    for (int e = g->in_off[j]; e < g->in_off[j + 1]; e++)
        if (g->nodes[g->in_pos[e]]->dtype != LT_F32 || !whole_ok(x, g->in_pos[e], x->level[j], mark, 0))
            return 0;
    return 1;
}

void lt_spmdx_product_blocks(const xs *x, int j, char *mark)
{
    product_ok(x, j, mark);
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
/* Drops the fusion of every value a reader cannot take fused (a reader
 * on another level wanting a layout the sum is not, or a view that is not
 * fused itself), until none is left. */
static void fuse_settle(xs *x, int every)
{
    const lt_graph *g = x->g;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < g->n_nodes; i++)
            for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
                int j = g->in_pos[e];
                if (!x->fuse[j]) continue;
                int ok = x->bump[e] ? (x->solo[i] || every) && !x->W[e].partial &&
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
}

void lt_spmdx_plan_fuse(xs *x)
{
    const lt_graph *g = x->g;
    if (x->m->dev[0] != g->core) return;
    int every = (int)lt_opt_int(LT_OPT_SPMD_SUM_EVERY);
    for (int j = 0; j < g->n_nodes; j++) {
        const lt_node *y = g->nodes[j];
        int e2;
        /* summed at a later level than its own (the addends complete) */
        x->fuse[j] = lt_node_is_pending(y) && x->level[j] < x->n_levels - 1 && x->T[j].partial && partial_ok(y) &&
                     !lay_split(&x->T[j], y->shape.ndim) && frexp(x->T[j].pscale, &e2) == 0.5;
    }
    fuse_settle(x, every);
    /* read by a program, or a result */
    for (int j = 0; j < g->n_nodes; j++) {
        if (!x->fuse[j] || lt_spmdx_is_result(x, j)) continue;
        int read = 0;
        for (int i = j + 1; i < g->n_nodes && !read; i++)
            for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++)
                if (g->in_pos[e] == j) read = 1;
        x->fuse[j] = (char)read;
    }
    /* a result that a program every position runs reads whole: all-reduced
     * on the host (the step's result is the first position's sum, which
     * these programs do not keep), and what its fusion needed settled */
    int dropped = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            int j = g->in_pos[e];
            if (x->fuse[j] && x->bump[e] && !x->solo[i] && lt_spmdx_is_result(x, j)) {
                x->fuse[j] = 0;
                dropped = 1;
            }
        }
    if (dropped) fuse_settle(x, every);
    /* read whole by a program every position runs (a batch-norm
     * statistic): each such program sums the addends itself, in position
     * order (the same additions on every core); the fused value a view of
     * it reads is summed so too */
    for (int i = 0; i < g->n_nodes; i++)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++)
            if (x->fuse[g->in_pos[e]] && x->bump[e] && !x->solo[i]) x->fuse[g->in_pos[e]] = 3;
    int n3 = 0;
    for (int j = 0; j < g->n_nodes; j++) n3 += x->fuse[j] == 3;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int j = 0; j < g->n_nodes; j++) {
            if (x->fuse[j] != 3 || !lt_spmdx_linear_view(g, j)) continue;
            int u = g->in_pos[g->in_off[j]];
            if (x->fuse[u] && x->fuse[u] != 3) {
                x->fuse[u] = 3;
                changed = 1;
                n3++;
            }
        }
    }
    if (n3) lt_counter_inc_name("SpmdEveryPositionSums", n3);
    /* a data-parallel weight gradient (the batch contracted): the first
     * position's product over the whole batch, not 8 partial products
     * summed (LAZYTPU_SPMD_PRODUCT) */
    if (!lt_opt_int(LT_OPT_SPMD_PRODUCT)) return;
    int n = 0;
    for (int j = 0; j < g->n_nodes; j++)
        if (x->fuse[j] == 1 && !lt_spmdx_linear_view(g, j) && product_ok(x, j, NULL)) {
            x->fuse[j] = 2;
            n++;
        }
    if (n) lt_counter_inc_name("SpmdWholeProducts", n);
}

