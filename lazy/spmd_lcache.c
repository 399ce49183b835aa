/*
 * lazy/spmd_lcache.c — the level programs of a partitioned step, kept for
 * the next steps of the same plan (spmd_exec.c; docs/spmd.md).
 *
 * Building a level (spmd_exec.c run_level) makes a local graph of new
 * nodes, captures it, hashes it and looks it up in the compile cache: host
 * work that gives the same programs every step of a training loop. The
 * first step of a plan records, per level, where each leaf of its
 * programs came from (src_desc: a value in a layout, a fused sum, an
 * addend, a scalar of the graph, a constant, a split random op's counter
 * offsets), the layout changes counted
 * while building, and each program with its parameter and root mapping.
 * A later step whose plan has the same key (lt_spmdx_plan_key: the graph's
 * key, the mesh, every layout, level, change and first-position choice)
 * finds the sources again in the same order (the same host layout changes,
 * counted alike), and queues the recorded programs on the same positions
 * with this step's buffers and scalar values: no node, capture, hash or
 * cache lookup. The programs are the compile cache's (CachedCompile counts
 * each use, as a lookup would).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "spmd_exec_int.h"
#include "submit.h"
#include "tensor.h"
#include "registry.h"
#include "program.h"

typedef struct lc_prog {
    lt_program *p;
    uint64_t key;
    int n_params, n_outputs;
    int *param_alias;
    int *param_src;            /* per parameter: its source in the level */
    int nr;
    int *roots_i, *root_out;
    int q0, q1, after, threads;
    int n_nodes;               /* of its graph (GraphSize) */
} lc_prog;

typedef struct lc_note {
    int k;
    unsigned axes;
    double bytes;
} lc_note;

typedef struct lc_level {
    int n_src;
    src_desc *src;
    int n_prog;
    lc_prog prog[2];
    int n_notes, cap_notes;
    lc_note *notes;
    int done;                  /* its sources recorded */
} lc_level;

typedef struct lc_entry {
    uint64_t key;
    int refs;
    int ok;                    /* every level recorded and usable */
    int n_levels;
    lc_level *lv;
} lc_entry;

enum { LC_SLOTS = 16 };
static pthread_mutex_t g_lc_mu = PTHREAD_MUTEX_INITIALIZER;
static lc_entry *g_lc[LC_SLOTS];
static int g_lc_next;

static void entry_free(lc_entry *e)
{
    if (!e) return;
    for (int L = 0; L < e->n_levels; L++) {
        lc_level *v = &e->lv[L];
        for (int k = 0; k < v->n_prog; k++) {
            lc_prog *pr = &v->prog[k];
            lt_program_release(pr->p);
            free(pr->param_alias);
            free(pr->param_src);
            free(pr->roots_i);
            free(pr->root_out);
        }
        free(v->src);
        free(v->notes);
    }
    free(e->lv);
    free(e);
}

void lt_spmdx_lcache_release(lc_entry *e)
{
    if (!e) return;
    pthread_mutex_lock(&g_lc_mu);
    int last = --e->refs == 0;
    pthread_mutex_unlock(&g_lc_mu);
    if (last) entry_free(e);
}

lc_entry *lt_spmdx_lcache_get(uint64_t key, int n_levels)
{
    lc_entry *e = NULL;
    pthread_mutex_lock(&g_lc_mu);
    for (int s = 0; s < LC_SLOTS && !e; s++)
        if (g_lc[s] && g_lc[s]->key == key && g_lc[s]->n_levels == n_levels) e = g_lc[s];
    if (e) e->refs++;
    pthread_mutex_unlock(&g_lc_mu);
    return e;
}

static uint64_t mix_lay(uint64_t h, const lay *l, int ndim)
{
    for (int d = 0; d < ndim; d++) h = lt_hash_mix(h, (uint64_t)l->ax[d]);
    h = lt_hash_mix(h, (uint64_t)l->partial << 32 | (uint64_t)l->manual);
    uint64_t ps;
    memcpy(&ps, &l->pscale, sizeof ps);
    return lt_hash_mix(h, ps);
}

uint64_t lt_spmdx_plan_key(const xs *x, const char *is_out)
{
    const lt_graph *g = x->g;
    uint64_t h = lt_hash_mix(0x4c4556454c53ULL, g->key);   /* "LEVELS" */
    h = lt_hash_mix(h, x->m->hash);
    h = lt_hash_mix(h, (uint64_t)g->core);
    h = lt_hash_mix(h, (uint64_t)x->nd);
    h = lt_hash_mix(h, (uint64_t)x->n_levels);
    for (int i = 0; i < g->n_nodes; i++) {
        int nd = g->nodes[i]->shape.ndim;
        h = mix_lay(h, &x->T[i], nd);
        h = lt_hash_mix(h, (uint64_t)x->level[i] << 32 | (uint64_t)x->last_use[i]);
        h = lt_hash_mix(h, (uint64_t)(x->solo[i] | x->repl[i] << 2 | is_out[i] << 3 | x->fuse[i] << 4));
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) {
            h = mix_lay(h, &x->W[e], g->nodes[g->in_pos[e]]->shape.ndim);
            h = lt_hash_mix(h, (uint64_t)x->bump[e]);
        }
    }
    return h;
}

lc_entry *lt_spmdx_rec_begin(const xs *x, uint64_t key)
{
    lc_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->lv = calloc((size_t)(x->n_levels ? x->n_levels : 1), sizeof *e->lv);
    if (!e->lv) {
        free(e);
        return NULL;
    }
    e->key = key;
    e->refs = 1;
    e->ok = 1;
    e->n_levels = x->n_levels;
    return e;
}

void lt_spmdx_rec_level(xs *x, lc_entry *e, int L)
{
    x->rec = e && e->ok && L < e->n_levels ? &e->lv[L] : NULL;
}

/* Marks the level's entry unusable (x->rec points into it). */
static void rec_fail(xs *x)
{
    if (!x->rec) return;
    x->rec->n_prog = -1;
    x->rec = NULL;
}

void lt_spmdx_rec_prog(xs *x, lt_program *p, const lt_graph *lg, const src_buf *src, int n_src,
                       const int *roots_i, int nr, int q0, int q1, int after, int threads)
{
    lc_level *v = x->rec;
    if (!v) return;
    if (v->n_prog < 0 || v->n_prog >= 2) {
        rec_fail(x);
        return;
    }
    lc_prog *pr = &v->prog[v->n_prog];
    memset(pr, 0, sizeof *pr);
    int np = lg->n_params ? lg->n_params : 1;
    pr->param_alias = malloc((size_t)np * sizeof *pr->param_alias);
    pr->param_src = malloc((size_t)np * sizeof *pr->param_src);
    pr->roots_i = malloc((size_t)(nr ? nr : 1) * sizeof *pr->roots_i);
    pr->root_out = malloc((size_t)(nr ? nr : 1) * sizeof *pr->root_out);
    v->n_prog++;               /* freed with the entry from here on */
    if (!pr->param_alias || !pr->param_src || !pr->roots_i || !pr->root_out) {
        rec_fail(x);
        return;
    }
    for (int jp = 0; jp < lg->n_params; jp++) {
        const lt_node *pn = lg->nodes[lg->param_pos[jp]];
        int t = 0;
        while (t < n_src && src[t].node != pn) t++;
        /* a leaf the level did not record (a data leaf must have its
         * buffers; a scalar its value) */
        if (t == n_src || (pn->op == LT_OP_data) != (src[t].bufs != NULL)) {
            rec_fail(x);
            return;
        }
        pr->param_src[jp] = t;
        pr->param_alias[jp] = lg->param_alias[jp];
    }
    for (int r = 0; r < nr; r++) {
        pr->roots_i[r] = roots_i[r];
        pr->root_out[r] = lg->root_out[r];
    }
    pr->p = lt_program_retain(p);
    pr->key = lg->key;
    pr->n_params = lg->n_params;
    pr->n_outputs = lg->n_outputs;
    pr->nr = nr;
    pr->n_nodes = lg->n_nodes;
    pr->q0 = q0;
    pr->q1 = q1;
    pr->after = after;
    pr->threads = threads;
}

void lt_spmdx_rec_srcs(xs *x, const src_buf *src, int n_src)
{
    lc_level *v = x->rec;
    if (!v) return;
    if (v->n_prog < 0) {
        rec_fail(x);
        return;
    }
    v->src = malloc((size_t)(n_src ? n_src : 1) * sizeof *v->src);
    if (!v->src) {
        rec_fail(x);
        return;
    }
    for (int t = 0; t < n_src; t++) v->src[t] = src[t].d;
    v->n_src = n_src;
    v->done = 1;
    x->rec = NULL;
}

void lt_spmdx_rec_note(xs *x, int k, unsigned axes, double bytes)
{
    lc_level *v = x->rec;
    if (!v) return;
    if (v->n_notes == v->cap_notes) {
        int cap = v->cap_notes ? 2 * v->cap_notes : 8;
        void *t = realloc(v->notes, (size_t)cap * sizeof *v->notes);
        if (!t) {
            rec_fail(x);
            return;
        }
        v->notes = t;
        v->cap_notes = cap;
    }
    v->notes[v->n_notes++] = (lc_note){k, axes, bytes};
}

void lt_spmdx_rec_end(lc_entry *e, int ok)
{
    if (!e) return;
    for (int L = 0; L < e->n_levels && ok; L++)
        if (!e->lv[L].done || e->lv[L].n_prog < 0) ok = 0;
    if (ok) {
        pthread_mutex_lock(&g_lc_mu);
        lc_entry *old = g_lc[g_lc_next];
        g_lc[g_lc_next] = e;
        g_lc_next = (g_lc_next + 1) % LC_SLOTS;
        int last = old && --old->refs == 0;
        pthread_mutex_unlock(&g_lc_mu);
        if (last) entry_free(old);
    } else {
        lt_spmdx_lcache_release(e);
    }
}

/* ------------------------------------------------------------ replay */

/* 1 when the buffers found for v's programs alias as they did when they
 * were built (two leaves, one buffer), at every position they run on. */
static int alias_holds(const xs *x, const lc_level *v, lt_buffer ***bufs)
{
    for (int k = 0; k < v->n_prog; k++) {
        const lc_prog *pr = &v->prog[k];
        for (int jp = 0; jp < pr->n_params; jp++) {
            lt_buffer **b = bufs[pr->param_src[jp]];
            if (!b) continue;
            for (int j2 = 0; j2 < jp; j2++) {
                lt_buffer **b2 = bufs[pr->param_src[j2]];
                if (!b2) continue;
                for (int q = pr->q0; q < pr->q1; q++)
                    if ((b[q] == b2[q]) != (pr->param_alias[jp] == j2)) return 0;
                if (pr->param_alias[jp] == j2) break;
            }
        }
    }
    (void)x;
    return 1;
}

lt_status lt_spmdx_run_cached_level(xs *x, lc_entry *e, int L, lt_sync_cause cause,
                                    const char *frame, int *rebuild)
{
    *rebuild = 0;
    const lc_level *v = &e->lv[L];
    const lt_fe_metrics *m = lt_fe_metrics_get();
    int ns = v->n_src ? v->n_src : 1;
    lt_buffer ***bufs = calloc((size_t)ns, sizeof *bufs);
    double *vals = calloc((size_t)ns, sizeof *vals);
    lt_status st = LT_OK;
    if (!bufs || !vals) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    lay whole;
    memset(&whole, 0, sizeof whole);
    whole.pscale = 1;
    /* the sources, in the order the build found them (the same layout
     * changes, made and counted alike) */
    for (int t = 0; t < v->n_src && st == LT_OK; t++) {
        const src_desc *d = &v->src[t];
        switch (d->kind) {
        case SRC_VALUE:
            st = lt_spmdx_value_in(x, d->j, &d->w, &bufs[t]);
            break;
        case SRC_WHOLE: {
            conv *c = lt_spmdx_conv_find(x, d->j, &whole);
            if (!c) st = lt_set_error(LT_ERR_INTERNAL, "spmd: a recorded level reads a sum not made");
            else bufs[t] = c->buf;
            break;
        }
        case SRC_ADDEND:
            if (!x->val[d->j] || !x->val[d->j][d->q])
                st = lt_set_error(LT_ERR_INTERNAL, "spmd: a recorded level reads an addend not made");
            else if (!(bufs[t] = lt_spmdx_same_bufs(x, x->val[d->j][d->q]))) st = LT_ERR_INTERNAL;
            break;
        case SRC_GSCALAR:
            vals[t] = x->g->nodes[d->j]->value;
            break;
        case SRC_OFFSET:
            st = lt_spmdx_offset_in(x, d->j, &bufs[t]);
            break;
        default:
            vals[t] = d->v;
            break;
        }
    }
    if (st == LT_OK && !alias_holds(x, v, bufs)) {
        *rebuild = 1;          /* built again (the sources found stay made) */
        free(bufs);
        free(vals);
        return LT_OK;
    }
    for (int k = 0; k < v->n_notes && st == LT_OK; k++)
        lt_spmdx_note(x, v->notes[k].k, v->notes[k].axes, v->notes[k].bytes);
    for (int k = 0; k < v->n_prog && st == LT_OK; k++) {
        const lc_prog *pr = &v->prog[k];
        int np = pr->n_params ? pr->n_params : 1;
        lt_buffer ***pb = calloc((size_t)np, sizeof *pb);
        double *pv = calloc((size_t)np, sizeof *pv);
        if (!pb || !pv) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        for (int jp = 0; jp < pr->n_params && st == LT_OK; jp++) {
            pb[jp] = bufs[pr->param_src[jp]];
            pv[jp] = vals[pr->param_src[jp]];
        }
        lt_metric_add(m->graph_size, (double)pr->n_nodes);
        lt_counter_add(m->cached, 1);
        lprog_run r = {.p = pr->p, .key = pr->key, .n_params = pr->n_params,
                       .n_outputs = pr->n_outputs, .param_alias = pr->param_alias, .pb = pb,
                       .pv = pv, .nr = pr->nr, .roots_i = pr->roots_i, .root_out = pr->root_out};
        if (st == LT_OK) st = lt_spmdx_queue_jobs(x, &r, pr->q0, pr->q1, cause, frame, pr->after, pr->threads);
        free(pb);
        free(pv);
    }
    free(bufs);
    free(vals);
    return st;
}

/* ------------------------------------------------------------ queueing */

/* 1 if step s is a 2-D matrix product the kernels never split along K
 * (lt_kutil_gemm_par splits K only when K >= 2 max(M, N)): each element
 * of the result is summed alike on any number of threads. */
static int step_mm_unsplit(const lt_step *s)
{
    if (s->op != LT_OP_mm || s->n_in < 2) return 0;
    const lt_shape *a = &s->in[0].v.shape, *b = &s->in[1].v.shape;
    if (a->ndim != 2 || b->ndim != 2) return 0;
    int64_t M = a->dims[0], K = a->dims[1], N = b->dims[1];
    return K < 2 * (M > N ? M : N);
}

/* 1 if every step of p computes each output element alone, so its value
 * does not depend on how many threads share the elements: fused
 * elementwise programs, a concatenation, a product not split along K (the
 * first core's product of a data-parallel weight gradient) */
static int prog_elementwise(const lt_program *p)
{
    for (int s = 0; s < p->n_steps; s++) {
        const lt_step *st = &p->steps[s];
        if (st->kind == LT_STEP_FUSED) continue;
        if (st->kind == LT_STEP_KERNEL && st->op == LT_OP_cat) continue;
        if ((st->kind == LT_STEP_KERNEL || st->kind == LT_STEP_GEMM_EPI) && step_mm_unsplit(st)) continue;
        return 0;
    }
    return 1;
}

/* Sets job's `after` list (job on `core`): the other cores' jobs writing
 * its parameter buffers, and with all_cores every other position's last
 * job; per core the latest such job. */
static lt_status job_after(xs *x, lt_submit_job *job, int core, int all_cores)
{
    uint64_t want[LT_SPMD_MAX_DEVICES];
    int cores[LT_SPMD_MAX_DEVICES], n = 0;
    const lt_exec_args *a = &job->args;
    for (int t = 0; t < x->nd; t++) {
        int c = x->m->dev[t];
        if (c == core) continue;
        uint64_t w = all_cores ? x->last_seq[t] : 0;
        for (int jp = 0; jp < a->n_params; jp++) {
            const lt_buffer *b = a->param_bufs[jp];
            if (b && !b->parts && b->core == c && b->ready_seq > w) w = b->ready_seq;
        }
        if (!w) continue;
        cores[n] = c;
        want[n++] = w;
    }
    if (!n) return LT_OK;
    job->after_core = malloc((size_t)n * sizeof *job->after_core);
    job->after_seq = malloc((size_t)n * sizeof *job->after_seq);
    if (!job->after_core || !job->after_seq) return lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
    for (int k = 0; k < n; k++) {
        job->after_core[k] = cores[k];
        job->after_seq[k] = want[k];
    }
    job->n_after = n;
    return LT_OK;
}

lt_status lt_spmdx_queue_jobs(xs *x, const lprog_run *r, int q0, int q1, lt_sync_cause cause,
                              const char *frame, int after, int threads)
{
    lt_status st = LT_OK;
    int np = r->n_params ? r->n_params : 1, no = r->n_outputs ? r->n_outputs : 1;
    for (int q = q0; q < q1 && st == LT_OK; q++) {
        int core = x->m->dev[q];
        lt_submit_job *job = lt_submit_job_new();
        char *fresh = calloc((size_t)no, 1);
        if (!job || !fresh) {
            free(job);
            free(fresh);
            st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
            break;
        }
        job->eager_op = 0;
        lt_exec_args *args = &job->args;
        args->n_params = r->n_params;
        args->n_outputs = r->n_outputs;
        args->param_bufs = calloc((size_t)np, sizeof *args->param_bufs);
        args->param_values = calloc((size_t)np, sizeof *args->param_values);
        args->out_bufs = calloc((size_t)no, sizeof *args->out_bufs);
        if (!args->param_bufs || !args->param_values || !args->out_bufs)
            st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
        for (int jp = 0; jp < r->n_params && st == LT_OK; jp++) {
            if (r->pb[jp]) args->param_bufs[jp] = lt_buffer_retain(r->pb[jp][q]);
            else args->param_values[jp] = r->pv[jp];
        }
        /* the capture's aliasing (two leaves, one buffer) must hold on this
         * core too */
        for (int jp = 0; jp < r->n_params && st == LT_OK; jp++)
            if (r->param_alias[jp] >= 0 && args->param_bufs[jp] != args->param_bufs[r->param_alias[jp]])
                st = lt_set_error(LT_ERR_INTERNAL, "spmd: a level's parameters alias on one core only");
        if (st == LT_OK) st = lt_submit_outputs(core, r->p, args, fresh);
        for (int k = 0; k < r->nr && st == LT_OK; k++) {
            int i = r->roots_i[k];
            if (i < 0) {               /* the in-program sum of partial value -1 - i */
                st = lt_spmdx_keep_sum(x, -1 - i, q, args->out_bufs[r->root_out[k]]);
                continue;
            }
            if (!x->val[i]) x->val[i] = calloc((size_t)x->nd, sizeof *x->val[i]);
            if (!x->val[i]) st = lt_set_error(LT_ERR_INTERNAL, "spmd: out of host memory");
            else x->val[i][q] = lt_buffer_retain(args->out_bufs[r->root_out[k]]);
        }
        /* a program summing other cores' addends runs after their jobs;
         * any program after the jobs of other cores writing the buffers it
         * reads (the host does not wait for the cores before a step: the
         * first core's update of the last step may still be running) */
        if (st == LT_OK) st = job_after(x, job, core, after && !x->waited);
        if (st != LT_OK) {
            lt_submit_job_free(job);
            free(fresh);
            break;
        }
        job->prog = lt_program_retain(r->p);
        job->threads = threads > 1 && prog_elementwise(r->p) ? threads : 0;
        if (job->threads) lt_counter_inc_name("SpmdFirstCoreWidePrograms", 1);
        job->key = r->key;
        args->cause = cause;
        job->frame = frame && frame[0] ? strdup(frame) : NULL;
        job->job.wake = LT_WAKE_NOW;
        x->last_seq[q] = lt_submit_queue(core, job, fresh);
        x->waited = 0;
        free(fresh);
    }
    return st;
}
