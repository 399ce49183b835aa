/*
 * lazy/spmd_exec.c — partitioned execution of a sharded graph over the
 * cores of its mesh (the default; LAZYTPU_SPMD_PARTITION=0 turns it off;
 * spmd.h, docs/spmd.md).
 *
 * Layouts (spmd_rules.c). Every computed value gets a layout: per dim the
 * packed mesh axes that split it, plus the mesh axes over which it is a
 * partial sum (each core holds an addend; a mean's addends carry a scale).
 * A leaf's annotation seeds the layouts of its consumers (a whole leaf is
 * sliced locally; one held per core is read in place or gathered). Per op:
 *   ew        output split as its first full-size input; inputs brought to
 *             it (broadcast dims whole), partial inputs reduced
 *   mm/addmm  M from a, N from b; K split alike -> partial sum (addmm:
 *             each core adds bias / shards)
 *   sum/mean  kept dims keep their split; a reduced split dim -> partial
 *   bmm       batch like either operand, M / N / K as mm
 *   softmax family: the normalised dim whole
 *   layer norm (+ stats, backward): leading dims keep their split; the
 *             weight/bias gradients are partial sums over them
 *   nll_loss (+ backward), batch split: sum -> partial; mean -> partial
 *             scaled 1/shards when no target is ignore_index
 *   index_select: the indexed dim like the index; embedding_backward with
 *             the indices split -> partial sum
 *   permute, reshape keeping its split dims (merged or split with whole
 *             dims after them), expand, slice/select of a
 *             whole dim: layouts follow (partials pass through the linear
 *             views)
 *   rand_uniform / rand_normal that its consumers want split along dim 0
 *             (their trace-time layouts propagated backward through
 *             elementwise ops: a dropout mask): split so, each position
 *             generating its block of the whole value's stream from a
 *             per-position counter offset (a data input of the one local
 *             program), bitwise the whole value's block
 *   anything else (and any op whose local shape is not the expected one):
 *             replicated — inputs gathered, every core runs it whole
 *             (counted, reported)
 * A dim that its mesh axes do not divide is not split (the value is
 * replicated there instead).
 *
 * Execution: one level per chain of layout changes. level(node) = the
 * highest level of its inputs, +1 over an input whose layout must change
 * (leaves never bump); a node that gathers an input (an FSDP weight, a
 * leaf held per core in another layout) starts a level after every level
 * so far, so gathered values live one level. For each level one local
 * graph (the level's nodes with local shapes; inputs from earlier levels as
 * data leaves) is compiled through the normal compile cache (one program
 * serves every core) and queued on every core of the mesh with that core's
 * buffers: the cores run it in parallel on their workers (their helper
 * threads, their HBM budgets); the host waits for a level only where it
 * changes a layout itself, and not before a step: a program waits on its
 * core for the other cores' jobs writing the buffers it reads (job_after). A whole value that only whole consumers read in its layout, up to
 * the step's results (x->solo: a data-parallel optimizer update), is in the
 * first position's program alone; the other positions run the level
 * without it (a second program); a level the first position runs alone,
 * elementwise throughout, gets every CPU's thread budget (the other cores
 * wait for it). Between levels the layout changes run on the host over the
 * per-core buffers: all-reduce (into one buffer every core reads),
 * reduce-scatter (sum of the addends), all-gather (concatenation),
 * all-to-all, local slices; a partial value every reader wants
 * reduce-scattered (a gradient) is converted as soon as its level is done
 * and its full-size addends freed.
 *
 * Results: a result whose layout splits it stays per core
 * (lt_buffer_parts: each core keeps its shard; a host read or a whole-graph
 * program assembles it, lt_buffer_whole); a partial result is
 * reduce-scattered (or kept whole when a consumer all-reduces it); others
 * are whole on the graph's core. A leaf held per core is read in place
 * when a consumer wants its layout, gathered from the shards otherwise.
 * The sharding stays an attribute of the result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "spmd.h"
#include "tensor.h"
#include "device.h"
#include "submit.h"
#include "compile.h"
#include "shape.h"
#include "registry.h"
#include "program.h"
#include "options.h"

#include "spmd_exec_int.h"

static const char *kname[K_NUM] = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all",
                                   "local slice"};

/* ----------------------------------------------------- host-side movement */

/* d[t] += s[t] for t < n, 8 (4) lanes at a time: the all-reduce's sums, the
 * same additions in the same order as one at a time */
static void add_f32(float *restrict d, const float *restrict s, int64_t n)
{
    typedef float v8 __attribute__((vector_size(32)));
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) {
        v8 a, b;
        memcpy(&a, d + t, sizeof a);
        memcpy(&b, s + t, sizeof b);
        a += b;
        memcpy(d + t, &a, sizeof a);
    }
    for (; t < n; t++) d[t] += s[t];
}

static void add_f64(double *restrict d, const double *restrict s, int64_t n)
{
    typedef double v4 __attribute__((vector_size(32)));
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        v4 a, b;
        memcpy(&a, d + t, sizeof a);
        memcpy(&b, s + t, sizeof b);
        a += b;
        memcpy(d + t, &a, sizeof a);
    }
    for (; t < n; t++) d[t] += s[t];
}

/* mode 0: L = block of G at off; 1: block of G = L; 2: block of G += L */
static void block(char *G, const lt_shape *gs, char *L, const lt_shape *ls, const int64_t *off,
                  size_t es, int mode, lt_dtype dt)
{
    int nd = ls->ndim;
    int64_t rows = 1, run = nd ? ls->dims[nd - 1] : 1;
    for (int d = 0; d + 1 < nd; d++) rows *= ls->dims[d];
    int64_t idx[LT_MAX_DIMS] = {0};
    for (int64_t r = 0; r < rows; r++) {
        int64_t go = 0;
        for (int d = 0; d < nd; d++) go = go * gs->dims[d] + off[d] + (d + 1 < nd ? idx[d] : 0);
        char *gp = G + (size_t)go * es, *lp = L + (size_t)(r * run) * es;
        if (mode == 0) memcpy(lp, gp, (size_t)run * es);
        else if (mode == 1) memcpy(gp, lp, (size_t)run * es);
        else if (dt == LT_F32)
            add_f32((float *)gp, (const float *)lp, run);
        else
            add_f64((double *)gp, (const double *)lp, run);
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < ls->dims[d]) break;
            idx[d] = 0;
        }
    }
}

static void offsets(const xs *x, int q, const lt_shape *s, const lay *l, int64_t *off)
{
    for (int d = 0; d < s->ndim; d++) {
        int64_t k = nshards(x, l->ax[d]);
        off[d] = shard_idx(x, q, l->ax[d]) * (s->dims[d] / k);
    }
}

/* The global value of per-position buffers in layout A, into G. */
static lt_status assemble(const xs *x, const lt_node *n, const lay *A, lt_buffer **bufs, char *G)
{
    size_t es = lt_dtype_size((lt_dtype)n->dtype);
    int64_t numel = lt_shape_numel(&n->shape);
    unsigned used = A->partial;
    for (int d = 0; d < n->shape.ndim; d++) used |= lt_spmd_axes_mask(A->ax[d]);
    if (A->partial) memset(G, 0, (size_t)numel * es);
    lt_shape ls;
    local_shape(x, &n->shape, A, &ls);
    for (int q = 0; q < x->nd; q++) {
        int rep = 1;
        for (int a = 0; a < x->m->mesh_ndim; a++)
            if (!(used >> a & 1) && x->coord[q][a]) rep = 0;
        if (!rep) continue;
        lt_status st = lt_buffer_wait(bufs[q]);
        if (st != LT_OK) return st;
        int64_t off[LT_MAX_DIMS];
        offsets(x, q, &n->shape, A, off);
        block(G, &n->shape, bufs[q]->data, &ls, off, es, A->partial ? 2 : 1, (lt_dtype)n->dtype);
    }
    if (A->partial && A->pscale != 1) {
        for (int64_t t = 0; t < numel; t++) {
            if (n->dtype == LT_F32) ((float *)G)[t] = (float)(((float *)G)[t] * A->pscale);
            else ((double *)G)[t] *= A->pscale;
        }
    }
    return LT_OK;
}

/* Per-position buffers of the global G in layout B (on each position's core). */
static lt_status distribute(const xs *x, const lt_node *n, const lay *B, char *G, lt_buffer **out)
{
    size_t es = lt_dtype_size((lt_dtype)n->dtype);
    lt_shape ls;
    local_shape(x, &n->shape, B, &ls);
    for (int q = 0; q < x->nd; q++) {
        lt_status st = lt_buffer_alloc(x->m->dev[q], (lt_dtype)n->dtype, lt_shape_numel(&ls), &out[q]);
        if (st != LT_OK) return st;
        int64_t off[LT_MAX_DIMS];
        offsets(x, q, &n->shape, B, off);
        block(G, &n->shape, out[q]->data, &ls, off, es, 0, (lt_dtype)n->dtype);
    }
    return LT_OK;
}


/* With LAZYTPU_SPMD_INPUT_VIEWS, out[q] = views of device data b (value n,
 * ready and whole) in layout B when only dim 0 is split and every block
 * starts on a 64-byte boundary: each block of a row-major value split
 * along dim 0 is a contiguous run of b (the loader's batch). Returns 1 if
 * so (out filled), else 0 (out untouched). */
static int split_views(const xs *x, const lt_node *n, const lay *B, lt_buffer *b, lt_buffer **out)
{
    if (!lt_opt_int(LT_OPT_SPMD_INPUT_VIEWS) || B->manual || B->partial || n->shape.ndim < 1 ||
        !b->data || b->parts || b->base || b->numel != lt_shape_numel(&n->shape) ||
        b->dtype != (lt_dtype)n->dtype)
        return 0;
    for (int d = 1; d < n->shape.ndim; d++)
        if (B->ax[d]) return 0;
    size_t es = lt_dtype_size((lt_dtype)n->dtype);
    lt_shape ls;
    local_shape(x, &n->shape, B, &ls);
    int64_t row = n->shape.dims[0] ? b->numel / n->shape.dims[0] : 0;
    for (int q = 0; q < x->nd; q++) {
        int64_t off[LT_MAX_DIMS];
        offsets(x, q, &n->shape, B, off);
        if (off[0] + ls.dims[0] > n->shape.dims[0] || ((size_t)(off[0] * row) * es) % 64) return 0;
    }
    for (int q = 0; q < x->nd; q++) {
        int64_t off[LT_MAX_DIMS];
        offsets(x, q, &n->shape, B, off);
        if (lt_buffer_view(b, x->m->dev[q], (size_t)(off[0] * row) * es, b->dtype,
                           lt_shape_numel(&ls), &out[q]) != LT_OK) {
            for (int k = 0; k <= q; k++) {
                lt_buffer_release(out[k]);
                out[k] = NULL;
            }
            lt_set_error(LT_OK, "%s", "");
            return 0;
        }
    }
    lt_counter_inc_name("SpmdInputViews", 1);
    return 1;
}

/* Counts an executed layout change of kind k over the mesh axes `axes`. */
void lt_spmdx_note(xs *x, int k, unsigned axes, double bytes)
{
    x->count[k]++;
    x->bytes[k] += bytes;
    x->ax_count[k][axes & 255]++;
    x->ax_bytes[k][axes & 255] += bytes;
}

/* The mesh axes a change from layout A to B runs over. */
static unsigned change_axes(const lay *A, const lay *B, int ndim)
{
    if (A->partial) return A->partial;
    unsigned m = 0;
    for (int d = 0; d < ndim; d++)
        if (A->ax[d] != B->ax[d]) m |= lt_spmd_axes_mask(A->ax[d]) | lt_spmd_axes_mask(B->ax[d]);
    return m;
}

/* Buffers of value j in layout w (per position; borrowed from x). */
lt_status lt_spmdx_value_in(xs *x, int j, const lay *w, lt_buffer ***out)
{
    const lt_node *n = x->g->nodes[j];
    int pending = lt_node_is_pending(n);
    if (pending && lay_same(&x->T[j], w, n->shape.ndim)) {
        *out = x->val[j];
        return LT_OK;
    }
    for (conv *c = x->convs; c; c = c->next)
        if (c->j == j && lay_same(&c->w, w, n->shape.ndim)) {
            for (int d = 0; d < n->shape.ndim; d++)
                if (c->w.ax[d] != w->ax[d]) goto next;
            *out = c->buf;
            return LT_OK;
        next:;
        }
    conv *c = calloc(1, sizeof *c);
    if (!c) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    c->buf = calloc((size_t)x->nd, sizeof *c->buf);
    if (!c->buf) {
        free(c);
        return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    }
    c->j = j;
    c->w = *w;
    c->last = x->cur_level;
    c->next = x->convs;
    x->convs = c;
    *out = c->buf;
    lt_status st = LT_OK;
    const lt_buffer_parts *P = pending ? NULL : n->buf->parts;
    if (P && P->n == x->nd && P->layout_key == lay_key(x, w, n->shape.ndim)) {
        for (int q = 0; q < x->nd; q++) c->buf[q] = lt_buffer_retain(P->part[q]);   /* its own shard */
    } else if (P) {
        /* held per core in another layout: gathered from the shards */
        size_t es = lt_dtype_size((lt_dtype)n->dtype);
        char *G = malloc(n->buf->numel ? (size_t)n->buf->numel * es : 1);
        if (!G) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        lt_buffer_parts_assemble(P, es, G);
        st = distribute(x, n, w, G, c->buf);
        free(G);
        int k = lay_split(w, n->shape.ndim) ? K_TO_ALL : K_GATHER;
        int64_t ln = 1;
        for (int d = 0; d < P->ndim; d++) ln *= P->ldims[d];
        unsigned wa = 0;
        for (int d = 0; d < n->shape.ndim; d++) wa |= lt_spmd_axes_mask(w->ax[d]);
        lt_spmdx_note(x, k, P->layout_axes | wa, (double)ln * (double)es);
    } else if (!pending) {
        if (!lay_split(w, n->shape.ndim)) {
            /* shared, read-only; not waited for: each program reading it
             * waits on its core for the job writing it (job_after) */
            for (int q = 0; q < x->nd; q++) c->buf[q] = lt_buffer_retain(n->buf);
        } else {
            lt_status s0 = lt_buffer_wait(n->buf);
            if (s0 != LT_OK) return s0;
            if (!split_views(x, n, w, n->buf, c->buf)) st = distribute(x, n, w, n->buf->data, c->buf);
        }
    } else {
        if (!lay_split(w, n->shape.ndim) && !w->partial) {
            /* wanted whole on every core: assembled once into a buffer of
             * the graph's core that every core reads (read-only) */
            lt_buffer *wb = NULL;
            st = lt_buffer_alloc(x->g->core, (lt_dtype)n->dtype, lt_shape_numel(&n->shape), &wb);
            if (st == LT_OK) st = assemble(x, n, &x->T[j], x->val[j], wb->data);
            for (int q = 0; q < x->nd && wb; q++) c->buf[q] = lt_buffer_retain(wb);
            lt_buffer_release(wb);
        } else {
            size_t bytes = (size_t)lt_shape_numel(&n->shape) * lt_dtype_size((lt_dtype)n->dtype);
            char *G = malloc(bytes ? bytes : 1);
            if (!G) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
            st = assemble(x, n, &x->T[j], x->val[j], G);
            if (st == LT_OK) st = distribute(x, n, w, G, c->buf);
            free(G);
        }
        int k = kind_of(&x->T[j], w, n->shape.ndim);
        lt_shape ls;
        local_shape(x, &n->shape, &x->T[j], &ls);
        lt_spmdx_note(x, k, change_axes(&x->T[j], w, n->shape.ndim),
             (double)lt_shape_numel(&ls) * (double)lt_dtype_size((lt_dtype)n->dtype));
    }
    return st;
}

/* Output j (layout A split, not partial; per-position buffers bufs) kept as
 * per-core shards: a buffer of the graph's core holding parts. */
static lt_status keep_parts(xs *x, int j, const lay *A, lt_buffer **bufs, lt_buffer **out)
{
    const lt_node *n = x->g->nodes[j];
    lt_buffer_parts *P = lt_buffer_parts_new(x->nd);
    if (!P) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    unsigned used = 0;
    for (int d = 0; d < n->shape.ndim; d++) used |= lt_spmd_axes_mask(A->ax[d]);
    lt_shape ls;
    local_shape(x, &n->shape, A, &ls);
    P->ndim = n->shape.ndim;
    for (int d = 0; d < n->shape.ndim; d++) {
        P->dims[d] = n->shape.dims[d];
        P->ldims[d] = ls.dims[d];
    }
    P->layout_key = lay_key(x, A, n->shape.ndim);
    P->layout_axes = used;
    P->manual = A->manual != 0;
    for (int q = 0; q < x->nd; q++) {
        P->part[q] = lt_buffer_retain(bufs[q]);
        offsets(x, q, &n->shape, A, P->off[q]);
        P->owner[q] = 1;
        for (int a = 0; a < x->m->mesh_ndim; a++)
            if (!(used >> a & 1) && x->coord[q][a]) P->owner[q] = 0;
    }
    x->n_parts++;
    return lt_buffer_new_parts(x->g->core, (lt_dtype)n->dtype, lt_shape_numel(&n->shape), P, out);
}

/* The layout a partial result j is kept in: split over the axes it is
 * partial on, on its first dim they divide; 0 when there is none. */
static int out_layout(const xs *x, int j, lay *B)
{
    const lt_node *n = x->g->nodes[j];
    const lay *A = &x->T[j];
    memset(B, 0, sizeof *B);
    B->pscale = 1;
    int64_t code = 0;
    for (int a = 0, k = 0; a < x->m->mesh_ndim; a++)
        if (A->partial >> a & 1) code |= (int64_t)(a + 1) << (4 * k++);
    if (!code) return 0;
    for (int d = 0; d < n->shape.ndim; d++)
        if (n->shape.dims[d] % nshards(x, code) == 0) {
            B->ax[d] = code;
            return 1;
        }
    return 0;
}

/* Partial values whose every reader (consumers and the step's results)
 * wants one reduce-scattered layout get it at the end of their level (the
 * full-size addends are freed at once, as FSDP reduce-scatters each layer's
 * gradients): eg[j] = 1 and eg_w[j] that layout. */
static void plan_eager(xs *x, const char *is_gout, char *eg, lay *eg_w, char *whole)
{
    const lt_graph *g = x->g;
    for (int i = 0; i < g->n_nodes; i++)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            int j = g->in_pos[e];
            const lt_node *y = g->nodes[j];
            if (!lt_node_is_pending(y) || !x->T[j].partial) continue;
            if (x->bump[e] && !x->W[e].partial && !lay_split(&x->W[e], y->shape.ndim)) whole[j] = 1;
            if (eg[j] == 2) continue;
            if (!x->bump[e] || kind_of(&x->T[j], &x->W[e], y->shape.ndim) != K_SCATTER) eg[j] = 2;
            else if (!eg[j]) {
                eg[j] = 1;
                eg_w[j] = x->W[e];
            } else if (!lay_same(&eg_w[j], &x->W[e], y->shape.ndim)) {
                eg[j] = 2;
            }
        }
    /* a result read by no consumer in a new layout is kept as out_layout
     * gives; one that is (eg 1) is kept in the consumers' layout; one that a
     * consumer reads whole (all-reduced) is kept whole (whole[j]) */
    for (int k = 0; k < g->n_outputs; k++) {
        int j = g->output_pos[k];
        lay B;
        if (!lt_node_is_pending(g->nodes[j]) || !x->T[j].partial || eg[j] || whole[j]) continue;
        if (out_layout(x, j, &B)) {
            eg[j] = 1;
            eg_w[j] = B;
        }
    }
    (void)is_gout;
}

/* The layout partial result j is kept in (as its consumers read it when
 * they all read it reduce-scattered alike); 0: assembled whole. */
static int result_layout(const xs *x, int j, const char *eg, const lay *eg_w, const char *whole,
                         lay *B)
{
    if (whole[j]) {
        memset(B, 0, sizeof *B);
        B->pscale = 1;
        return 1;
    }
    if (eg[j] == 1) {
        *B = eg_w[j];
        return 1;
    }
    return out_layout(x, j, B);
}

/* After level L: the layout changes made for it and the values no later
 * level reads are freed (a later level re-gathers what it needs). */
static void free_after_level(xs *x, int L, const char *keep_val)
{
    for (conv **pc = &x->convs; *pc;) {
        conv *c = *pc;
        if (c->last > L) {
            pc = &c->next;
            continue;
        }
        *pc = c->next;
        for (int q = 0; q < x->nd; q++) lt_buffer_release(c->buf[q]);
        free(c->buf);
        free(c);
    }
    for (int i = 0; i < x->g->n_nodes; i++)
        if (x->val[i] && !keep_val[i] && x->last_use[i] <= L) {
            for (int q = 0; q < x->nd; q++) lt_buffer_release(x->val[i][q]);
            free(x->val[i]);
            x->val[i] = NULL;
        }
}

/* ------------------------------------------------------------- one level */

/* The level graph of `roots` (nodes of the level's local graph; roots_i:
 * their nodes in x->g), captured, compiled through the compile cache and
 * queued on the cores of positions [q0, q1) with each position's buffers
 * (src: the per-position buffers of the graph's data leaves); the roots'
 * per-position results go to x->val. */
static lt_status queue_level(xs *x, lt_node **roots, const int *roots_i, int nr, int q0, int q1,
                             const src_buf *src, int n_src, lt_sync_cause cause, const char *frame,
                             int after, int threads)
{
    lt_graph lg;
    memset(&lg, 0, sizeof lg);
    lt_program *p = NULL;
    lt_status st = lt_graph_capture(roots, nr, &lg);
    if (st != LT_OK) goto out;
    int compiled = 0;
    st = lt_submit_program(&lg, LT_SUBMIT_RECORD, cause, NULL, &p, &compiled);
    x->compiled |= compiled;
    if (st != LT_OK) goto out;
    /* each parameter of the local graph: the per-position buffers it came from */
    lt_buffer ***pb = calloc((size_t)(lg.n_params ? lg.n_params : 1), sizeof *pb);
    if (!pb) {
        st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        goto out;
    }
    for (int jp = 0; jp < lg.n_params; jp++) {
        lt_node *pn = lg.nodes[lg.param_pos[jp]];
        if (pn->op != LT_OP_data) continue;
        for (int t = 0; t < n_src && !pb[jp]; t++)
            if (src[t].node == pn) pb[jp] = src[t].bufs;
        if (!pb[jp]) st = lt_set_error(LT_ERR_INTERNAL, "spmd: a parameter of a level's program without its source");
    }
    if (st == LT_OK) {
        lt_spmdx_rec_prog(x, p, &lg, src, n_src, roots_i, nr, q0, q1, after, threads);
        lprog_run r = {.p = p, .key = lg.key, .n_params = lg.n_params, .n_outputs = lg.n_outputs,
                       .param_alias = lg.param_alias, .pb = pb, .pv = NULL, .nr = nr,
                       .roots_i = roots_i, .root_out = lg.root_out};
        double *pv = calloc((size_t)(lg.n_params ? lg.n_params : 1), sizeof *pv);
        if (!pv) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        for (int jp = 0; jp < lg.n_params && pv; jp++) pv[jp] = lg.nodes[lg.param_pos[jp]]->value;
        r.pv = pv;
        if (st == LT_OK) st = lt_spmdx_queue_jobs(x, &r, q0, q1, cause, frame, after, threads);
        free(pv);
    }
    free(pb);
out:
    if (p) lt_program_release(p);
    if (lg.nodes) lt_graph_free(&lg);
    return st;
}

/* Level L: one local graph (the level's nodes with local shapes; inputs
 * from earlier levels as data leaves), built and captured once, compiled
 * through the compile cache, then queued on every core of the mesh with
 * that core's buffers (the cores run their programs in parallel on their
 * workers; each core's queue keeps the levels in order, a layout change
 * waits for the buffers it reads). */
static lt_status run_level(xs *x, int L, lt_sync_cause cause, const char *frame,
                           const char *is_out)
{
    const lt_graph *g = x->g;
    int core0 = x->m->dev[0];
    int nn = g->n_nodes;
    lt_node **ln = calloc((size_t)nn, sizeof *ln);
    int *roots_i = malloc((size_t)(2 * nn) * sizeof *roots_i);
    lt_node **roots = malloc((size_t)(2 * nn) * sizeof *roots);
    int n_src = 0, cap_src = 64;
    src_buf *src = malloc((size_t)cap_src * sizeof *src);
    lt_node **sumn = calloc((size_t)nn, sizeof *sumn);   /* per fused value: its sum here */
    lt_status st = LT_OK;
    int nr = 0;
    if (!ln || !roots_i || !roots || !src || !sumn) {
        st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        goto out;
    }
    for (int i = 0; i < nn && st == LT_OK; i++) {
        const lt_node *n = g->nodes[i];
        if (!lt_node_is_pending(n) || x->level[i] != L) continue;
        int nin = g->in_off[i + 1] - g->in_off[i];
        lt_node *in[LT_MAX_ARITY_SPMD];
        lt_shape ls[LT_MAX_ARITY_SPMD];
        int made = 0;
        for (int k = 0; k < nin && st == LT_OK; k++) {
            int e = g->in_off[i] + k, j = g->in_pos[e];
            const lt_node *y = g->nodes[j];
            if (y->op == LT_OP_scalar) {
                in[k] = lt_node_new_scalar(y->value, (lt_dtype)y->dtype, core0, y->flags);
                src_desc sd = {.kind = SRC_GSCALAR, .j = j};
                if (in[k] && lt_spmdx_add_src(&src, &n_src, &cap_src, in[k], NULL, sd) != LT_OK) {
                    lt_node_release(in[k]);
                    in[k] = NULL;
                }
            } else if (lt_node_is_pending(y) && x->level[j] == L && !x->bump[e]) {
                in[k] = lt_node_retain(ln[j]);
            } else if (x->fuse[j] && !lt_spmdx_conv_find(x, j, &x->W[e])) {
                st = lt_spmdx_whole_node(x, j, core0, sumn, &src, &n_src, &cap_src);
                in[k] = st == LT_OK ? lt_node_retain(sumn[j]) : NULL;
                if (st != LT_OK) break;
            } else {
                lt_buffer **b = NULL;
                st = lt_spmdx_value_in(x, j, &x->W[e], &b);
                if (st != LT_OK) break;
                local_shape(x, &y->shape, &x->W[e], &ls[k]);
                in[k] = lt_node_new_data(lt_buffer_retain(b[0]), &ls[k], (lt_dtype)y->dtype, core0);
                src_desc sd = {.kind = SRC_VALUE, .j = j, .w = x->W[e]};
                if (in[k] && lt_spmdx_add_src(&src, &n_src, &cap_src, in[k], b, sd) != LT_OK) {
                    lt_node_release(in[k]);
                    in[k] = NULL;
                }
            }
            if (!in[k]) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
            else made = k + 1;
        }
        int nl = nin;                  /* the local op's inputs */
        if (st == LT_OK && made == nin && lt_op_kind_of((lt_op)n->op) == LT_KIND_RANDOM &&
            !x->T[i].manual && n->shape.ndim >= 1 && x->T[i].ax[0]) {
            /* a random value split along dim 0: each position generates
             * its block of the whole value's stream, from its counter
             * offset (per-position data) */
            lt_buffer **b = NULL;
            st = lt_spmdx_offset_in(x, i, &b);
            lt_shape s0 = {.ndim = 0};
            in[nin] = st == LT_OK ? lt_node_new_data(lt_buffer_retain(b[0]), &s0, LT_I64, core0) : NULL;
            src_desc sd = {.kind = SRC_OFFSET, .j = i};
            if (in[nin] && lt_spmdx_add_src(&src, &n_src, &cap_src, in[nin], b, sd) != LT_OK) {
                lt_node_release(in[nin]);
                in[nin] = NULL;
            }
            if (in[nin]) made = nl = nin + 1;
            else if (st == LT_OK) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        }
        double s0 = st == LT_OK && made == nin && nin > 0 ? lt_spmdx_in0_scale(x, i) : 1;
        if (s0 != 1) {
            /* the bias's share of a partial sum, a mean loss's local share */
            lt_node *sc = lt_node_new_scalar(s0, (lt_dtype)in[0]->dtype, core0, LT_NODE_WRAPPED);
            src_desc sd = {.kind = SRC_CONST, .v = s0};
            if (sc && lt_spmdx_add_src(&src, &n_src, &cap_src, sc, NULL, sd) != LT_OK) {
                lt_node_release(sc);
                sc = NULL;
            }
            lt_attrs na;
            memset(&na, 0, sizeof na);
            lt_node *two[2] = {in[0], sc};
            lt_node *bs = sc ? lt_node_new(LT_OP_mul, two, 2, &na, &in[0]->shape,
                                           (lt_dtype)in[0]->dtype, core0, 0) : NULL;
            lt_node_release(sc);
            if (!bs) {
                st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
            } else {
                lt_node_release(in[0]);
                in[0] = bs;
            }
        }
        if (st == LT_OK) {
            lt_attrs a;
            lt_spmdx_local_attrs(x, i, &a);
            lt_shape os;
            local_shape(x, &n->shape, &x->T[i], &os);
            ln[i] = lt_node_new(lt_spmdx_local_op(x, i), in, nl, &a, &os, (lt_dtype)n->dtype, core0,
                                n->flags & ~LT_NODE_SHARD_ANNOT);
            if (!ln[i]) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        }
        for (int k = 0; k < made; k++) lt_node_release(in[k]);
        if (st == LT_OK && is_out[i]) {
            roots_i[nr] = i;
            roots[nr++] = ln[i];
        }
    }
    /* a fused result no program reads (a data-parallel loss): summed in
     * the last level's first-position program */
    lay whole_lay;
    memset(&whole_lay, 0, sizeof whole_lay);
    whole_lay.pscale = 1;
    for (int j = 0; j < nn && st == LT_OK && L == x->n_levels - 1; j++)
        if (x->fuse[j] && !sumn[j] && !lt_spmdx_conv_find(x, j, &whole_lay) && lt_spmdx_is_result(x, j))
            st = lt_spmdx_whole_node(x, j, core0, sumn, &src, &n_src, &cap_src);
    /* a sum a later level or the step reads: a root too (kept by keep_sum) */
    int n_sums = 0;
    for (int j = 0; j < nn && st == LT_OK; j++) {
        if (!sumn[j] || sumn[j]->op == LT_OP_data) continue;
        n_sums++;
        if (x->last_use[j] > L || lt_spmdx_is_result(x, j)) {
            roots_i[nr] = -1 - j;
            roots[nr++] = sumn[j];
        }
    }
    if (st != LT_OK || nr == 0) goto out;
    /* values only the first position computes (x->solo) go in its program
     * alone; the other positions run the level without them */
    /* (a sum every position makes, fuse 3, is in both programs) */
    int n_solo = 0;
    for (int r = 0; r < nr; r++)
        n_solo += roots_i[r] < 0 ? x->fuse[-1 - roots_i[r]] != 3 : x->solo[roots_i[r]];
    if (!n_solo) {
        st = queue_level(x, roots, roots_i, nr, 0, x->nd, src, n_src, cause, frame, 0, 0);
    } else {
        int nk = 0;
        for (int r = 0; r < nr; r++) nk += roots_i[r] >= 0 && !x->solo[roots_i[r]];   /* not sums alone */
        /* a level of the first position alone (data parallel: the sum of
         * the gradients and the update): the other cores wait for it, so
         * it may use every CPU (its ops are elementwise or run alike on
         * any number of threads: the values do not change) */
        int thr = nk == 0 ? lt_core_nproc() : 0;
        st = queue_level(x, roots, roots_i, nr, 0, 1, src, n_src, cause, frame, n_sums > 0, thr);
        int others = nk;           /* values the other positions compute */
        nk = 0;
        for (int r = 0; r < nr && others; r++)
            if (roots_i[r] < 0 ? x->fuse[-1 - roots_i[r]] == 3 : !x->solo[roots_i[r]]) {
                roots_i[nk] = roots_i[r];
                roots[nk++] = roots[r];
            }
        if (st == LT_OK && nk) st = queue_level(x, roots, roots_i, nk, 1, x->nd, src, n_src, cause, frame, 0, 0);
    }
out:
    if (st == LT_OK) lt_spmdx_rec_srcs(x, src, n_src);   /* also for a level without roots */
    if (ln)
        for (int i = 0; i < nn; i++) lt_node_release(ln[i]);
    if (sumn)
        for (int i = 0; i < nn; i++) lt_node_release(sumn[i]);
    free(sumn);
    free(ln);
    free(roots_i);
    free(roots);
    free(src);
    return st;
}

/* ------------------------------------------------------------ the report */

static void report(const xs *x, const char *why)
{
    const lt_graph *g = x->g;
    char line[640], m[48], b[32];
    size_t len = 0;
    m[0] = 0;
    for (int q = 0; q < x->m->mesh_ndim && len < sizeof m; q++)
        len += (size_t)snprintf(m + len, sizeof m - len, "%s%lld", q ? "x" : "",
                                (long long)x->m->mesh_shape[q]);
    if (why) {
        snprintf(line, sizeof line, "graph %016llx: mesh %s: NOT partitioned (%s): the step ran whole on core %d",
                 (unsigned long long)g->key, m, why, g->core);
        lt_metrics_note("sharding", line);
        return;
    }
    snprintf(line, sizeof line,
             "graph %016llx: mesh %s: ran PARTITIONED over %d cores (%d levels, per-core programs "
             "with local shapes)",
             (unsigned long long)g->key, m, x->nd, x->n_levels);
    lt_metrics_note("sharding", line);
    int qp = 0;
    for (int q = 1; q < x->nd; q++)
        if (x->peak[q] > x->peak[qp]) qp = q;
    char b2[32];
    snprintf(line, sizeof line,
             "  per core (measured this step): peak %s on core %d (held before the step %s), "
             "%d results kept as per-core shards; metrics SpmdCorePeakBytes / SpmdCoreHeldBytes "
             "every step",
             lt_fmt_bytes((double)x->peak[qp], b, sizeof b), x->m->dev[qp],
             lt_fmt_bytes((double)x->held[qp], b2, sizeof b2), x->n_parts);
    lt_metrics_note("sharding", line);
    for (int k = 0; k < K_NUM; k++)
        for (unsigned ax = 0; ax < 256; ax++) {
            if (!x->ax_count[k][ax]) continue;
            char axes[96];
            size_t al = 0;
            axes[0] = 0;
            for (int a = 0; a < x->m->mesh_ndim && al < sizeof axes; a++)
                if (ax >> a & 1)
                    al += (size_t)snprintf(axes + al, sizeof axes - al, "%s%d(%lld)", al ? "," : "",
                                           a, (long long)x->m->mesh_shape[a]);
            snprintf(line, sizeof line, "  executed %-14s x%-4d %10s per core  mesh axis %s", kname[k],
                     x->ax_count[k][ax], lt_fmt_bytes(x->ax_bytes[k][ax], b, sizeof b),
                     ax ? axes : "-");
            lt_metrics_note("sharding", line);
        }
    if (x->n_replicated)
        lt_spmd_note_replicated("  executed replicated (inputs gathered):", x->replicated);
}

/* ------------------------------------------------------------- entry point */

static lt_status execute(const lt_graph *g, const lt_sharding *m, lt_sync_cause cause,
                         const char *frame, lt_buffer **out_bufs, int *ran);

/* The mesh: the first sharding not {manual}, NULL when no node is sharded. */
static const lt_sharding *mesh_of(const lt_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->shard && !g->nodes[i]->shard->manual) return g->nodes[i]->shard;
    return NULL;
}

/* The host's own work for a partitioned step (plan, levels, layout
 * changes, queueing): thread CPU time, metric SpmdHostTime. */
lt_status lt_spmd_execute(const lt_graph *g, lt_sync_cause cause, const char *frame,
                          lt_buffer **out_bufs, int *ran)
{
    /* no sharded node: nothing to partition. Checked before the clock reads:
     * CLOCK_THREAD_CPUTIME_ID is a system call (no vDSO), two per step of
     * every unsharded program, and a point where the host can be preempted */
    *ran = 0;
    const lt_sharding *m = mesh_of(g);
    if (!m)
        return LT_OK;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    lt_status st = execute(g, m, cause, frame, out_bufs, ran);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    if (*ran)
        lt_metric_add(lt_metric_get("SpmdHostTime", LT_UNIT_NS),
                      (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec));
    return st;
}

static lt_status execute(const lt_graph *g, const lt_sharding *m, lt_sync_cause cause,
                         const char *frame, lt_buffer **out_bufs, int *ran)
{
    int n_cores = lt_devices_count();
    const char *why = NULL;
    for (int q = 0; q < m->n_dev; q++)
        if (m->dev[q] >= n_cores || m->dev[q] < 0) why = "the mesh names cores this process does not have";
    for (int i = 0; i < g->n_nodes; i++)
        if (g->in_off[i + 1] - g->in_off[i] > LT_MAX_ARITY_SPMD) why = "an op with more than 64 inputs";
    /* one core: partitioning is the identity (the step is that core's
     * program as it stands) */
    if (!why && m->n_dev == 1 && m->dev[0] == g->core) why = "a mesh of one core";
    if (why) {
        xs y;
        memset(&y, 0, sizeof y);
        y.g = g;
        y.m = m;
        report(&y, why);
        return LT_OK;
    }
    /* the cores may still run the last step (data parallel: the first
     * core's update): this step's programs wait for the buffers they read
     * (job_after); the host only bounds how far it runs ahead */
    for (int q = 0; q < m->n_dev; q++) {
        lt_status st = lt_submit_bound(m->dev[q], 0, 0);
        if (st != LT_OK) return st;
    }
    xs *x = calloc(1, sizeof *x);
    if (!x) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    struct lc_entry *lc = NULL, *rec = NULL;
    int nn = g->n_nodes, ne = g->in_off[nn];
    x->g = g;
    x->m = m;
    x->nd = m->n_dev;
    for (int q = 0; q < m->n_dev; q++)
        for (int a = m->mesh_ndim - 1, r = q; a >= 0; a--) {
            x->coord[q][a] = (int)(r % m->mesh_shape[a]);
            r /= (int)m->mesh_shape[a];
        }
    x->T = calloc((size_t)nn, sizeof *x->T);
    x->W = calloc((size_t)(ne ? ne : 1), sizeof *x->W);
    x->bump = calloc((size_t)(ne ? ne : 1), 1);
    x->level = calloc((size_t)nn, sizeof *x->level);
    x->repl = calloc((size_t)nn, 1);
    x->solo = calloc((size_t)nn, 1);
    x->val = calloc((size_t)nn, sizeof *x->val);
    x->last_use = calloc((size_t)nn, sizeof *x->last_use);
    char *wait_after = NULL;
    x->fuse = calloc((size_t)nn, 1);
    char *is_out = calloc((size_t)nn, 1);
    char *is_gout = calloc((size_t)nn, 1);
    char *eg = calloc((size_t)nn, 1);
    char *whole = calloc((size_t)nn, 1);
    char *keep_val = calloc((size_t)nn, 1);   /* a result read from x->val */
    lay *eg_w = calloc((size_t)nn, sizeof *eg_w);
    lt_status st = LT_OK;
    if (!x->T || !x->W || !x->bump || !x->level || !x->repl || !x->solo || !x->val || !x->last_use || !x->fuse ||
        !is_out || !is_gout || !eg || !eg_w || !keep_val || !whole) {
        st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        goto out;
    }
    lt_spmdx_plan_layouts(x);
    if (x->err != LT_OK) {         /* refused (manual sharding): nothing ran */
        st = x->err;
        goto out;
    }
    /* a level's outputs: values used at a later level or by the step */
    for (int i = 0; i < nn; i++)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            int j = g->in_pos[e];
            if (lt_node_is_pending(g->nodes[j]) && (x->bump[e] || x->level[j] != x->level[i]))
                is_out[j] = 1;
        }
    for (int k = 0; k < g->n_outputs; k++)
        is_out[g->output_pos[k]] = is_gout[g->output_pos[k]] = keep_val[g->output_pos[k]] = 1;
    /* a whole value (not split, not partial) that only whole consumers read
     * in its own layout, up to the step's results (data parallel: the
     * all-reduced gradients' optimizer update), is computed by the first
     * position alone, not by every core of the mesh: its consumers are
     * solo too, and a whole result is taken from the first position */
    for (int i = 0; i < nn; i++)
        x->solo[i] = lt_node_is_pending(g->nodes[i]) && !x->T[i].partial &&
                     !lay_split(&x->T[i], g->nodes[i]->shape.ndim);
    for (int i = nn - 1; i >= 0; i--)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++)
            if (!x->solo[i] || x->bump[e]) x->solo[g->in_pos[e]] = 0;
    for (int i = 0; i < nn; i++)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++)
            if (x->level[i] > x->last_use[g->in_pos[e]]) x->last_use[g->in_pos[e]] = x->level[i];
    lt_spmdx_plan_fuse(x);
    /* the levels after which the host must wait for the cores: before a
     * level that changes the layout of a computed value on the host (it
     * reads the cores' buffers; it also keeps a level's buffers freed
     * before the next allocates), and after a level whose partial values
     * are converted as soon as they are complete. Elsewhere (data
     * parallel: the forward/backward level, then the first core's sum of
     * the gradients and update) the next level is queued at once, and a
     * first-core program summing other cores' addends runs after their
     * jobs; the last level is not waited for when every result is a
     * buffer a program writes (the host traces the next step meanwhile). */
    for (int j = 0; j < nn; j++)
        if (x->fuse[j]) {
            keep_val[j] = 0;           /* a result is its sum (lt_spmdx_keep_sum) */
            /* the addends of a value summed (not a view of a fused value)
             * are kept per position until the sum has run */
            if (x->fuse[j] == 2 || (lt_spmdx_linear_view(g, j) && x->fuse[g->in_pos[g->in_off[j]]]))
                is_out[j] = 0;         /* no core computes it: its readers and
                                          the step read its sum */
            if (x->fuse[j] == 2) {
                /* a whole product: its operands' blocks are kept instead,
                 * the cores compute no partial product */
                char *mark = calloc((size_t)nn, 1);
                if (!mark) {
                    st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
                    goto out;
                }
                lt_spmdx_product_blocks(x, j, mark);
                for (int u = 0; u < nn; u++)
                    if (mark[u]) {
                        is_out[u] = 1;
                        x->last_use[u] = x->n_levels - 1;
                    }
                free(mark);
            } else if (!(lt_spmdx_linear_view(g, j) && x->fuse[g->in_pos[g->in_off[j]]])) {
                is_out[j] = 1;
                x->last_use[j] = x->n_levels - 1;
            }
        }
    wait_after = calloc((size_t)(x->n_levels + 1), 1);
    if (!wait_after) {
        st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        goto out;
    }
    for (int i = 0; i < nn; i++)
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            int j = g->in_pos[e];
            if (!lt_node_is_pending(g->nodes[j]) || x->fuse[j] || !x->bump[e]) continue;
            if (x->level[i] > 0) wait_after[x->level[i] - 1] = 1;
        }
    for (int j = 0; j < nn; j++)
        if (lt_node_is_pending(g->nodes[j]) && x->T[j].partial && !x->fuse[j]) wait_after[x->level[j]] = 1;
    int every = (int)lt_opt_int(LT_OPT_SPMD_SUM_EVERY);
    for (int k = 0; k < g->n_outputs; k++) {
        int j = g->output_pos[k];
        const lt_node *n = g->nodes[j];
        /* (a whole value every position computes, a batch-norm weight's
         * gradient from the sums every position made: position 0's buffer,
         * written by a program, under LAZYTPU_SPMD_SUM_EVERY) */
        if (lt_node_is_pending(n) && !x->fuse[j] &&
            (x->T[j].partial || lay_split(&x->T[j], n->shape.ndim) || (!x->solo[j] && !every) ||
             x->m->dev[0] != g->core))
            wait_after[x->n_levels - 1] = 1;
    }
    for (int q = 0; q < x->nd; q++) {
        x->held[q] = lt_core_bytes_in_use(m->dev[q]);
        lt_core_peak_mark(m->dev[q]);
    }
    plan_eager(x, is_gout, eg, eg_w, whole);
    /* the level programs of this plan as an earlier step built them, or
     * built now and recorded for the next steps (spmd_lcache.c) */
    uint64_t pkey = lt_spmdx_plan_key(x, is_out);
    if (lt_opt_int(LT_OPT_SPMD_REUSE)) {
        lc = lt_spmdx_lcache_get(pkey, x->n_levels);
        rec = lc ? NULL : lt_spmdx_rec_begin(x, pkey);
    }
    for (int L = 0; L < x->n_levels && st == LT_OK; L++) {
        x->cur_level = L;
        int rebuild = 1;
        if (lc) st = lt_spmdx_run_cached_level(x, lc, L, cause, frame, &rebuild);
        if (st == LT_OK && rebuild) {
            lt_spmdx_rec_level(x, rec, L);
            st = run_level(x, L, cause, frame, is_out);
            x->rec = NULL;
        }
        /* the level done on every core before the next: the buffers it
         * frees are free before the next level allocates */
        if (wait_after[L] || x->compiled) {
            for (int q = 0; q < x->nd && st == LT_OK; q++) lt_core_wait(m->dev[q], 0, 0);
            x->waited = 1;
        }
        /* partial values reduce-scattered as soon as they are complete */
        for (int j = 0; j < nn && st == LT_OK; j++) {
            if (x->level[j] != L || !x->val[j] || !x->T[j].partial || x->fuse[j]) continue;
            lay B;
            if (!result_layout(x, j, eg, eg_w, whole, &B)) continue;
            if (eg[j] != 1 && !is_gout[j] && !whole[j]) continue;
            lt_buffer **b = NULL;
            st = lt_spmdx_value_in(x, j, &B, &b);
            if (st != LT_OK) break;
            for (conv *c = x->convs; c; c = c->next)
                if (c->j == j && c->buf == b) c->last = is_gout[j] ? x->n_levels : x->last_use[j];
            if (eg[j] == 1) {          /* no reader wants the addends */
                for (int q = 0; q < x->nd; q++) lt_buffer_release(x->val[j][q]);
                free(x->val[j]);
                x->val[j] = NULL;
            } else {
                keep_val[j] = 0;       /* the result is the conversion */
            }
        }
        free_after_level(x, L, keep_val);
    }
    /* the cores' programs done (a failed one reports here, naming its
     * core); left running when the last level was not waited for (a
     * failure then poisons the results, reported when they are read) */
    for (int q = 0; q < x->nd && (st != LT_OK || x->waited); q++) {
        lt_status sq = lt_core_wait(m->dev[q], 0, 1);
        if (st == LT_OK) st = sq;
    }
    for (int q = 0; q < x->nd && st == LT_OK; q++) lt_submit_mark_step(m->dev[q]);
    /* the step's results, whole on the graph's core */
    for (int k = 0; k < g->n_outputs && st == LT_OK; k++) {
        int j = g->output_pos[k];
        const lt_node *n = g->nodes[j];
        if (!lt_node_is_pending(n)) {
            if (n->op != LT_OP_data) {
                st = lt_set_error(LT_ERR_INTERNAL, "spmd: a scalar output");
                break;
            }
            out_bufs[k] = lt_buffer_retain(n->buf);
            continue;
        }
        const lay *A = &x->T[j];
        if (!A->partial && !lay_split(A, n->shape.ndim) && x->val[j][0]->core == g->core) {
            out_bufs[k] = lt_buffer_retain(x->val[j][0]);
            continue;
        }
        if (!A->partial && lay_split(A, n->shape.ndim)) {
            st = keep_parts(x, j, A, x->val[j], &out_bufs[k]);   /* each core keeps its shard */
            continue;
        }
        lay B;
        if (x->fuse[j]) {              /* summed by the first position's program */
            memset(&B, 0, sizeof B);
            B.pscale = 1;
            conv *c = lt_spmdx_conv_find(x, j, &B);
            if (!c) st = lt_set_error(LT_ERR_INTERNAL, "spmd: a summed result without its sum");
            else out_bufs[k] = lt_buffer_retain(c->buf[0]);
            continue;
        }
        if (A->partial && result_layout(x, j, eg, eg_w, whole, &B)) {
            /* a sum of addends (a gradient): reduce-scattered over the axes
             * it is partial on, each core keeps its shard */
            lt_buffer **b = NULL;
            st = lt_spmdx_value_in(x, j, &B, &b);
            if (st == LT_OK && !lay_split(&B, n->shape.ndim)) out_bufs[k] = lt_buffer_retain(b[0]);
            else if (st == LT_OK) st = keep_parts(x, j, &B, b, &out_bufs[k]);
            continue;
        }
        st = lt_buffer_alloc(g->core, (lt_dtype)n->dtype, lt_shape_numel(&n->shape), &out_bufs[k]);
        if (st == LT_OK) st = assemble(x, n, A, x->val[j], out_bufs[k]->data);
        if (A->partial) {
            lt_shape ls;
            local_shape(x, &n->shape, A, &ls);
            lt_spmdx_note(x, K_REDUCE, A->partial,
                 (double)lt_shape_numel(&ls) * (double)lt_dtype_size((lt_dtype)n->dtype));
        }
    }
    /* results that view one value (a parameter and its view) keep the same
     * per-core shards: they get one buffer, as a whole step gives them, so
     * the next step's graph sees one parameter through two data nodes and a
     * host read assembles it once */
    for (int k = 1; k < g->n_outputs && st == LT_OK; k++) {
        if (!out_bufs[k] || !out_bufs[k]->parts) continue;
        for (int k2 = 0; k2 < k; k2++)
            if (out_bufs[k2] != out_bufs[k] && lt_buffer_same_storage(out_bufs[k2], out_bufs[k])) {
                lt_buffer_release(out_bufs[k]);
                out_bufs[k] = lt_buffer_retain(out_bufs[k2]);
                break;
            }
    }
    for (int q = 0; q < x->nd; q++) x->peak[q] = lt_core_peak_since_mark(m->dev[q]);
    if (st == LT_OK) {
        *ran = 1;
        lt_counter_inc_name("SpmdPartitionedExecute", 1);
        if (lc) lt_counter_inc_name("SpmdLevelProgramsReused", 1);
        int nc = 0;
        for (int k = 0; k < K_NUM; k++)
            if (k != K_SLICE) nc += x->count[k];
        lt_counter_inc_name("SpmdExecutedCollectives", nc);
        int n_solo = 0;
        for (int i = 0; i < nn; i++) n_solo += x->solo[i];
        lt_counter_inc_name("SpmdFirstCoreOnlyOps", n_solo);
        size_t pk = 0, hd = 0;
        for (int q = 0; q < x->nd; q++) {
            if (x->peak[q] > pk) pk = x->peak[q];
            if (x->held[q] > hd) hd = x->held[q];
        }
        lt_metric_add(lt_metric_get("SpmdCorePeakBytes", LT_UNIT_BYTES), (double)pk);
        lt_metric_add(lt_metric_get("SpmdCoreHeldBytes", LT_UNIT_BYTES), (double)hd);
        if (x->compiled) {
            lt_spmd_plan_out sp;
            lt_spmd_plan(g, &sp, 2);
            lt_spmd_plan_free(&sp);
            report(x, NULL);
            lt_counter_inc_name("SpmdReplicatedOps", x->n_replicated);
        }
    } else {
        for (int k = 0; k < g->n_outputs; k++) {
            lt_buffer_release(out_bufs[k]);
            out_bufs[k] = NULL;
        }
    }
out:
    lt_spmdx_lcache_release(lc);
    lt_spmdx_rec_end(rec, st == LT_OK);
    for (int i = 0; i < nn && x->val; i++)
        if (x->val[i]) {
            for (int q = 0; q < x->nd; q++) lt_buffer_release(x->val[i][q]);
            free(x->val[i]);
        }
    while (x->convs) {
        conv *c = x->convs;
        x->convs = c->next;
        for (int q = 0; q < x->nd; q++) lt_buffer_release(c->buf[q]);
        free(c->buf);
        free(c);
    }
    lt_spmdx_offsets_free(x);
    lt_spmdx_sames_free(x);
    free(wait_after);
    free(x->fuse);
    free(is_out);
    free(is_gout);
    free(eg);
    free(whole);
    free(keep_val);
    free(eg_w);
    free(x->last_use);
    free(x->T);
    free(x->W);
    free(x->bump);
    free(x->level);
    free(x->repl);
    free(x->solo);
    free(x->val);
    free(x);
    return st;
}
