/*
 * lazy/replay.c — recorded programs for whole graphs handed over at once
 * (torch.compile(backend="lazytpu"): dynamo/AOTAutograd FX graphs).
 *
 * Record (once per FX graph and input signature): the caller has traced the
 * graph once on device tensors whose values were data (the placeholders).
 * The graph reaching the outputs is captured, compiled through the same
 * path as lazy syncs (lazy/submit.c: compile cache, CachedCompile /
 * UncachedCompile, the compile trace event, the recompilation diagnosis
 * of a structure recorded before, cause "explicit"), and reduced to a recipe: per program parameter,
 * which input feeds it (or a constant the graph made itself: a scalar value
 * or a device buffer kept alive by the recipe); per output tensor, which
 * program output it is. No IR node is kept.
 *
 * Run (every later call): inputs are checked against the recorded shapes
 * and dtypes. With LAZYTPU_REPLAY_QUEUE=0 a small graph (SPLICE_WORK_MAX) is
 * spliced (below) into the step's pending graph: it runs with
 * the loss and the optimizer as one program at the step boundary. Else, if
 * every input's value is data, the input buffers are bound to
 * the program's parameters, output buffers are allocated, and one job is
 * queued on the core (lazy/submit.c, the job a sync queues): no op is
 * traced, nothing is captured, hashed or looked up; the outputs are data
 * (ready when the job finishes; reads wait), as after a sync. Parameters
 * are never donated (the caller's inputs stay valid). If an input is still
 * pending (a backward graph's incoming gradient, traced lazily by the
 * loss), syncing it first would cost a program of its own; instead the
 * recorded graph is spliced: rebuilt from its template as IR nodes on the
 * inputs' current values (one lt_node_new per node, no shape inference, no
 * dispatcher), so that it runs with the rest of the step as one program at
 * the step boundary. A graph holding products recorded at another matmul
 * precision than the current one is spliced too (its program has the old
 * level).
 *
 * Not replayable (record fails with LT_ERR_ARG, "not replayable: ..."; the
 * caller keeps tracing the graph lazily): random ops (their seed is a
 * per-call value the recipe would freeze), inputs still pending when traced,
 * outputs or inputs on several cores.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor.h"
#include "graph.h"
#include "compile.h"
#include "device.h"
#include "submit.h"
#include "fault.h"
#include "trace_events.h"
#include "options.h"
#include "graph_events.h"

enum { SRC_INPUT = 0, SRC_CONST_BUF, SRC_SCALAR };

typedef struct replay_param {
    int src;              /* SRC_* */
    int input;            /* SRC_INPUT: input index */
    lt_buffer *buf;       /* SRC_CONST_BUF: owned reference */
    double value;         /* SRC_SCALAR */
} replay_param;

struct lt_replay {
    atomic_int refs;
    int core;
    uint64_t key;                 /* graph key of the recorded graph */
    lt_program *prog;             /* owned reference */
    int n_in;
    lt_shape *in_shape;
    uint8_t *in_dtype;            /* logical */
    uint8_t *in_storage;          /* storage */
    int n_params;
    replay_param *params;
    int n_out;
    int *out_prog;                /* per output tensor: program output index */
    uint8_t *out_logical;         /* per output tensor: logical dtype */
    int n_nodes;                  /* nodes of the recorded graph (stats) */
    int products;                 /* the graph holds a matmul or convolution */
    int mm_precision;             /* the matmul precision it was compiled at */
    /* splice template: the recorded graph as node descriptions */
    struct tmpl_node *t;          /* n_nodes entries, post-order */
    int *t_in;                    /* operand positions, flattened */
    int *out_node;                /* per output tensor: template position */
    int n_computed;
    int64_t work;                 /* elements the computed nodes produce */
};

/* With LAZYTPU_REPLAY_QUEUE=0, a recorded graph producing at most this many
 * elements (1 MiB of f32: the MLP's forward, ~34K) joins the step's graph:
 * less work per step (one program, no second wake-up, the core's threads
 * not beside the host tracing the rest of the step), faster on a loaded
 * machine; queued (the default) it overlaps the host's tracing, which on a
 * quiet machine measured as fast or faster. A larger graph (the
 * transformer's forward) always queues: spliced it measured 1.5x slower. */
#define SPLICE_WORK_MAX ((int64_t)1 << 18)

/* One node of the splice template: a computed node is rebuilt from its
 * description; a leaf is an input's current value or a constant node the
 * recording shares (a scalar, or a device buffer the graph made itself). */
typedef struct tmpl_node {
    uint16_t op;
    uint8_t dtype, flags;
    int n_in, in_off;             /* operands: t_in[in_off .. in_off + n_in) */
    int input;                    /* leaf fed by input `input`, else -1 */
    lt_node *konst;               /* constant leaf (owned reference), else NULL */
    lt_shape shape;
    lt_attrs attrs;
} tmpl_node;

/* ------------------------------------------------------------ metrics */

typedef struct replay_metrics {
    lt_counter *run, *splice, *record, *input_sync;
    lt_metric *replay_time;
} replay_metrics;

static const replay_metrics *rm(void)
{
    static replay_metrics m;
    static atomic_int ready;
    if (!atomic_load_explicit(&ready, memory_order_acquire)) {
        m.run = lt_counter_get("CompiledGraphRun");
        m.splice = lt_counter_get("CompiledGraphSplice");
        m.record = lt_counter_get("CompiledGraphRecord");
        m.input_sync = lt_counter_get("CompiledGraphInputSync");
        m.replay_time = lt_metric_get("CompiledGraphHostTime", LT_UNIT_NS);
        atomic_store_explicit(&ready, 1, memory_order_release);
    }
    return &m;
}

/* ------------------------------------------------------------ lifetime */

static void replay_free(lt_replay *r)
{
    if (!r) return;
    for (int j = 0; j < r->n_params && r->params; j++)
        if (r->params[j].src == SRC_CONST_BUF) lt_buffer_release(r->params[j].buf);
    lt_program_release(r->prog);
    for (int i = 0; i < r->n_nodes && r->t; i++) lt_node_release(r->t[i].konst);
    free(r->t);
    free(r->t_in);
    free(r->out_node);
    free(r->params);
    free(r->in_shape);
    free(r->in_dtype);
    free(r->in_storage);
    free(r->out_prog);
    free(r->out_logical);
    free(r);
}

lt_replay *lt_replay_retain(lt_replay *r)
{
    if (r) atomic_fetch_add(&r->refs, 1);
    return r;
}

void lt_replay_release(lt_replay *r)
{
    if (r && atomic_fetch_sub(&r->refs, 1) == 1) replay_free(r);
}

int lt_replay_n_outputs(const lt_replay *r) { return r ? r->n_out : 0; }
int lt_replay_n_nodes(const lt_replay *r) { return r ? r->n_nodes : 0; }
uint64_t lt_replay_key(const lt_replay *r) { return r ? r->key : 0; }

/* ------------------------------------------------------------ inputs */

/* Syncs the pending tensors among ts (all on core): one sync, no wait. */
static lt_status sync_pending(int core, lt_tensor *const *ts, int n)
{
    lt_tensor **pend = NULL;
    int np = 0;
    lt_live_lock(core);
    for (int i = 0; i < n; i++) {
        if (!lt_node_is_pending(ts[i]->value)) continue;
        if (!pend) pend = malloc((size_t)n * sizeof *pend);
        if (!pend) break;
        pend[np++] = ts[i];
    }
    lt_live_unlock(core);
    if (np == 0) {
        free(pend);
        return LT_OK;
    }
    lt_counter_add(rm()->input_sync, 1);
    lt_status st = lt_sync_tensors_core(core, pend, np, LT_SYNC_EXPLICIT, 0, 0);
    free(pend);
    return st;
}

static lt_status check_core(lt_tensor *const *ts, int n, int *core, const char *what)
{
    for (int i = 0; i < n; i++) {
        if (!ts[i]) return lt_set_error(LT_ERR_ARG, "replay: %s %d is NULL", what, i);
        if (*core < 0) *core = ts[i]->core;
        if (ts[i]->core != *core)
            return lt_set_error(LT_ERR_ARG, "not replayable: %s %d is on core %d, "
                                "others on core %d", what, i, ts[i]->core, *core);
    }
    return LT_OK;
}

lt_status lt_replay_sync_inputs(lt_tensor *const *inputs, int n_in)
{
    if (n_in < 0 || (n_in > 0 && !inputs))
        return lt_set_error(LT_ERR_ARG, "replay: bad input list");
    if (!lt_rt()) return LT_ERR_DEVICE;
    int core = -1;
    lt_status st = check_core(inputs, n_in, &core, "input");
    if (st != LT_OK || core < 0) return st;
    return sync_pending(core, inputs, n_in);
}

/* ------------------------------------------------------------ record */

/* The splice template of g (r->params already mapped). */
static lt_status build_template(lt_replay *r, const lt_graph *g)
{
    int n = g->n_nodes;
    r->t = calloc((size_t)n, sizeof *r->t);
    r->t_in = malloc((size_t)(g->in_off[n] ? g->in_off[n] : 1) * sizeof *r->t_in);
    r->out_node = malloc((size_t)r->n_out * sizeof *r->out_node);
    int *param_of = malloc((size_t)(n ? n : 1) * sizeof *param_of);
    if (!r->t || !r->t_in || !r->out_node || !param_of) {
        free(param_of);
        return lt_set_error(LT_ERR_INTERNAL, "replay_record: out of host memory");
    }
    for (int i = 0; i < n; i++) param_of[i] = -1;
    for (int j = 0; j < g->n_params; j++) param_of[g->param_pos[j]] = j;
    memcpy(r->t_in, g->in_pos, (size_t)g->in_off[n] * sizeof *r->t_in);
    for (int i = 0; i < n; i++) {
        const lt_node *nd = g->nodes[i];
        tmpl_node *t = &r->t[i];
        t->op = nd->op;
        t->dtype = nd->dtype;
        t->flags = nd->flags;
        t->n_in = g->in_off[i + 1] - g->in_off[i];
        t->in_off = g->in_off[i];
        t->shape = nd->shape;
        t->attrs = nd->attrs;
        t->input = -1;
        if (nd->op != LT_OP_data && nd->op != LT_OP_scalar) {
            r->n_computed++;
            r->work += lt_shape_numel(&nd->shape);
            continue;
        }
        int j = param_of[i];
        if (j >= 0 && r->params[j].src == SRC_INPUT) t->input = r->params[j].input;
        else t->konst = lt_node_retain((lt_node *)nd);
    }
    for (int i = 0; i < r->n_out; i++) r->out_node[i] = g->output_pos[g->root_out[i]];
    free(param_of);
    return LT_OK;
}

static lt_status record_fail(lt_replay *r, lt_graph *g, lt_node **roots, int n,
                             lt_status st)
{
    replay_free(r);
    lt_graph_free(g);
    for (int i = 0; i < n; i++) lt_node_release(roots[i]);
    free(roots);
    return st;
}

lt_status lt_replay_record(lt_tensor *const *inputs, int n_in,
                           lt_tensor *const *outputs, int n_out, lt_replay **out)
{
    if (!out || n_in < 0 || n_out <= 0 || (n_in > 0 && !inputs) || !outputs)
        return lt_set_error(LT_ERR_ARG, "replay_record: bad arguments");
    *out = NULL;
    if (!lt_rt()) return LT_ERR_DEVICE;
    int core = -1;
    lt_status st = check_core(outputs, n_out, &core, "output");
    if (st == LT_OK) st = check_core(inputs, n_in, &core, "input");
    if (st != LT_OK) return st;

    lt_replay *r = calloc(1, sizeof *r);
    lt_node **roots = calloc((size_t)n_out, sizeof *roots);
    lt_node **invals = calloc((size_t)(n_in ? n_in : 1), sizeof *invals);
    lt_graph g;
    memset(&g, 0, sizeof g);
    if (!r || !roots || !invals) {
        free(invals);
        free(roots);
        free(r);
        return lt_set_error(LT_ERR_INTERNAL, "replay_record: out of host memory");
    }
    atomic_init(&r->refs, 1);
    r->core = core;
    r->n_in = n_in;
    r->n_out = n_out;
    r->in_shape = calloc((size_t)(n_in ? n_in : 1), sizeof *r->in_shape);
    r->in_dtype = calloc((size_t)(n_in ? n_in : 1), 1);
    r->in_storage = calloc((size_t)(n_in ? n_in : 1), 1);
    r->out_prog = calloc((size_t)n_out, sizeof *r->out_prog);
    r->out_logical = calloc((size_t)n_out, 1);
    if (!r->in_shape || !r->in_dtype || !r->in_storage || !r->out_prog || !r->out_logical) {
        free(invals);
        return record_fail(r, &g, roots, 0,
                           lt_set_error(LT_ERR_INTERNAL, "replay_record: out of host memory"));
    }

    lt_live_lock(core);
    int pending_in = -1;
    for (int i = 0; i < n_in; i++) {
        invals[i] = lt_node_retain(inputs[i]->value);
        r->in_shape[i] = inputs[i]->shape;
        r->in_dtype[i] = (uint8_t)inputs[i]->dtype;
        r->in_storage[i] = (uint8_t)inputs[i]->storage;
        if (lt_node_is_pending(invals[i]) && pending_in < 0) pending_in = i;
    }
    for (int i = 0; i < n_out; i++) {
        roots[i] = lt_node_retain(outputs[i]->value);
        r->out_logical[i] = (uint8_t)outputs[i]->dtype;
    }
    lt_live_unlock(core);

#define RELEASE_INVALS() do { \
        for (int q_ = 0; q_ < n_in; q_++) lt_node_release(invals[q_]); \
        free(invals); } while (0)

    if (pending_in >= 0) {
        RELEASE_INVALS();
        return record_fail(r, &g, roots, n_out,
                           lt_set_error(LT_ERR_ARG, "not replayable: input %d was "
                                        "pending when the graph was traced", pending_in));
    }

    st = lt_graph_capture(roots, n_out, &g);
    if (st != LT_OK) {
        RELEASE_INVALS();
        return record_fail(r, &g, roots, n_out, st);
    }
    r->n_nodes = g.n_nodes;
    r->key = g.key;
    r->mm_precision = g.mm_precision;
    for (int i = 0; i < g.n_nodes; i++) {
        lt_op_kind kind = lt_op_kind_of((lt_op)g.nodes[i]->op);
        if (kind == LT_KIND_MATMUL || kind == LT_KIND_CONV) r->products = 1;
    }
    for (int i = 0; i < g.n_nodes; i++)
        if (lt_op_kind_of((lt_op)g.nodes[i]->op) == LT_KIND_RANDOM) {
            RELEASE_INVALS();
            return record_fail(r, &g, roots, n_out,
                               lt_set_error(LT_ERR_ARG, "not replayable: random op %s",
                                            lt_op_name((lt_op)g.nodes[i]->op)));
        }

    /* parameters: inputs (by node, then by buffer), else constants */
    r->n_params = g.n_params;
    r->params = calloc((size_t)(g.n_params ? g.n_params : 1), sizeof *r->params);
    if (!r->params) {
        RELEASE_INVALS();
        return record_fail(r, &g, roots, n_out,
                           lt_set_error(LT_ERR_INTERNAL, "replay_record: out of host memory"));
    }
    for (int j = 0; j < g.n_params; j++) {
        const lt_node *pn = g.nodes[g.param_pos[j]];
        replay_param *rp = &r->params[j];
        if (pn->op != LT_OP_data) {
            rp->src = SRC_SCALAR;
            rp->value = pn->value;
            continue;
        }
        int found = -1;
        for (int i = 0; i < n_in && found < 0; i++)
            if (invals[i] == pn) found = i;
        for (int i = 0; i < n_in && found < 0; i++)
            if (invals[i]->op == LT_OP_data && invals[i]->buf == pn->buf &&
                lt_shape_equal(&invals[i]->shape, &pn->shape))
                found = i;
        if (found >= 0) {
            rp->src = SRC_INPUT;
            rp->input = found;
        } else {
            rp->src = SRC_CONST_BUF;
            rp->buf = lt_buffer_retain(pn->buf);
            if (lt_opt_int(LT_OPT_REPLAY_DEBUG)) {
                char sh[64];
                lt_shape_str(&pn->shape, sh, sizeof sh);
                fprintf(stderr, "replay: param %d (%s%s) is a constant\n", j,
                        lt_dtype_name((lt_dtype)pn->dtype), sh);
            }
        }
    }
    RELEASE_INVALS();
#undef RELEASE_INVALS
    for (int i = 0; i < n_out; i++) r->out_prog[i] = g.root_out[i];
    if (build_template(r, &g) != LT_OK)
        return record_fail(r, &g, roots, n_out, LT_ERR_INTERNAL);

    /* program: the same path as lazy syncs */
    lt_program *p = NULL;
    int compiled = 0;
    st = lt_submit_program(&g, LT_SUBMIT_RECORD, LT_SYNC_EXPLICIT, NULL, &p, &compiled);
    if (st != LT_OK) return record_fail(r, &g, roots, n_out, st);
    if (lt_graph_events_on()) lt_graph_events_program(&g, p, LT_SYNC_EXPLICIT, compiled, 1);
    r->prog = p;
    lt_counter_add(rm()->record, 1);
    lt_graph_free(&g);
    for (int i = 0; i < n_out; i++) lt_node_release(roots[i]);
    free(roots);
    *out = r;
    return LT_OK;
}

/* ------------------------------------------------------------ run */

/* Rebuilds the recorded graph on the inputs' current values (some pending):
 * new IR nodes, no op traced through lt_trace, nothing executed; the outputs
 * are pending and run with the rest of the step at its boundary. */
static lt_status splice(lt_replay *r, lt_tensor *const *inputs, lt_tensor **outputs)
{
    int core = r->core, n = r->n_nodes;
    lt_node **tmp = calloc((size_t)(n ? n : 1), sizeof *tmp);
    if (!tmp) return lt_set_error(LT_ERR_INTERNAL, "replay_run: out of host memory");
    lt_status st = LT_OK;
    lt_core_live *L = lt_live(core);
    lt_runtime *rt = lt_rt();
    int over = 0;
    lt_node *ins_inline[8];
    pthread_mutex_lock(&L->mu);
    for (int i = 0; i < n && st == LT_OK; i++) {
        const tmpl_node *t = &r->t[i];
        if (t->input >= 0) {
            tmp[i] = lt_node_retain(inputs[t->input]->value);
            continue;
        }
        if (t->konst) {
            tmp[i] = lt_node_retain(t->konst);
            continue;
        }
        lt_node **ins = t->n_in <= 8 ? ins_inline : malloc((size_t)t->n_in * sizeof *ins);
        if (!ins) {
            st = lt_set_error(LT_ERR_INTERNAL, "replay_run: out of host memory");
            break;
        }
        for (int k = 0; k < t->n_in; k++) ins[k] = tmp[r->t_in[t->in_off + k]];
        tmp[i] = lt_node_new((lt_op)t->op, ins, t->n_in, &t->attrs, &t->shape,
                             (lt_dtype)t->dtype, core, t->flags);
        if (ins != ins_inline) free(ins);
        if (!tmp[i]) st = LT_ERR_INTERNAL;
    }
    if (st == LT_OK) {
        for (int i = 0; i < r->n_out; i++)
            outputs[i] = lt_tensor_new_locked(lt_node_retain(tmp[r->out_node[i]]),
                                              (lt_dtype)r->out_logical[i], core);
        L->traced += r->n_computed;
        over = rt && L->traced > rt->graph_limit;
    }
    pthread_mutex_unlock(&L->mu);
    for (int i = n - 1; i >= 0; i--) lt_node_release(tmp[i]);
    free(tmp);
    if (st != LT_OK) return st;
    for (int i = 0; i < r->n_out; i++)
        if (!outputs[i]) {
            for (int q = 0; q < r->n_out; q++) {
                lt_tensor_release(outputs[q]);
                outputs[q] = NULL;
            }
            return lt_set_error(LT_ERR_INTERNAL, "replay_run: out of host memory");
        }
    lt_counter_add(rm()->run, 1);
    lt_counter_add(rm()->splice, 1);
    if (over) {
        lt_counter_add(lt_fe_metrics_get()->size_limit_sync, 1);
        return lt_sync_core(core, LT_SYNC_SIZE_LIMIT, 0);
    }
    return LT_OK;
}

lt_status lt_replay_run(lt_replay *r, lt_tensor *const *inputs, int n_in,
                        lt_tensor **outputs)
{
    if (!r || !outputs || n_in != r->n_in || (n_in > 0 && !inputs))
        return lt_set_error(LT_ERR_ARG, "replay_run: expected %d inputs, got %d",
                            r ? r->n_in : -1, n_in);
    int64_t t0 = lt_now_ns();
    int core = r->core;
    for (int i = 0; i < n_in; i++) {
        const lt_tensor *t = inputs[i];
        if (!t) return lt_set_error(LT_ERR_ARG, "replay_run: input %d is NULL", i);
        if (t->core != core || t->dtype != r->in_dtype[i] || t->storage != r->in_storage[i] ||
            !lt_shape_equal(&t->shape, &r->in_shape[i])) {
            char a[128], b[128];
            lt_shape_str(&r->in_shape[i], a, sizeof a);
            lt_shape_str(&t->shape, b, sizeof b);
            return lt_set_error(LT_ERR_SHAPE, "replay_run: input %d is %s%s on core %d, "
                                "the graph was recorded for %s%s on core %d", i,
                                lt_dtype_name(t->dtype), b, t->core,
                                lt_dtype_name((lt_dtype)r->in_dtype[i]), a, core);
        }
    }
    /* spliced into the pending graph when small (SPLICE_WORK_MAX) and
     * LAZYTPU_REPLAY_QUEUE=0, and whenever an input is still pending or the matmul precision
     * changed since the recording (the spliced graph compiles at the
     * current level) */
    int pending = (r->products && (int)lt_rt_matmul_precision() != r->mm_precision) ||
                  (r->work <= SPLICE_WORK_MAX && !lt_opt_int(LT_OPT_REPLAY_QUEUE));
    lt_live_lock(core);
    for (int i = 0; i < n_in && !pending; i++) pending = lt_node_is_pending(inputs[i]->value);
    lt_live_unlock(core);
    if (pending) {
        for (int i = 0; i < r->n_out; i++) outputs[i] = NULL;
        lt_status sst = splice(r, inputs, outputs);
        lt_metric_add(rm()->replay_time, (double)(lt_now_ns() - t0));
        return sst;
    }
    lt_status st = lt_execution_check("a graph recorded by torch.compile(backend=\"lazytpu\") "
                                      "would run on its data inputs");
    if (st != LT_OK) return st;

    const lt_program *p = r->prog;
    int no = lt_program_n_outputs(p);
    lt_submit_job *job = lt_submit_job_new();
    lt_node **outn = calloc((size_t)no, sizeof *outn);
    char *fresh = calloc((size_t)no, 1);
    if (job) job->eager_op = 0;    /* a compiled graph, even in eager mode */
    if (!job || !outn || !fresh) {
        free(job);
        free(outn);
        free(fresh);
        return lt_set_error(LT_ERR_INTERNAL, "replay_run: out of host memory");
    }
    lt_exec_args *a = &job->args;
    a->n_params = r->n_params;
    a->n_outputs = no;
    a->param_bufs = calloc((size_t)(r->n_params ? r->n_params : 1), sizeof *a->param_bufs);
    a->param_values = calloc((size_t)(r->n_params ? r->n_params : 1), sizeof *a->param_values);
    a->out_bufs = calloc((size_t)no, sizeof *a->out_bufs);
    if (!a->param_bufs || !a->param_values || !a->out_bufs) {
        st = lt_set_error(LT_ERR_INTERNAL, "replay_run: out of host memory");
        goto fail;
    }

    /* bind inputs (their values are data now: a concurrent assign may only
     * replace them by other data or by a pending value traced later, which
     * this call must not see; the buffer read here is the one bound) */
    lt_live_lock(core);
    for (int j = 0; j < r->n_params; j++) {
        const replay_param *rp = &r->params[j];
        if (rp->src == SRC_SCALAR) {
            a->param_values[j] = rp->value;
        } else if (rp->src == SRC_CONST_BUF) {
            a->param_bufs[j] = lt_buffer_retain(rp->buf);
        } else {
            lt_node *v = inputs[rp->input]->value;
            if (v->op == LT_OP_data) a->param_bufs[j] = lt_buffer_retain(v->buf);
        }
    }
    lt_live_unlock(core);
    for (int j = 0; j < r->n_params; j++)
        if (r->params[j].src != SRC_SCALAR && !a->param_bufs[j]) {
            st = lt_set_error(LT_ERR_ARG, "replay_run: input %d changed to a pending "
                              "value during the call", r->params[j].input);
            goto fail;
        }

    for (int j = 0; j < r->n_params; j++) {
        st = lt_buffer_whole(a->param_bufs[j]);   /* a value held per core: assembled */
        if (st != LT_OK) goto fail;
    }
    st = lt_submit_outputs(core, p, a, fresh);
    if (st != LT_OK) goto fail;
    for (int k = 0; k < no; k++) {
        outn[k] = lt_node_new_data(lt_buffer_retain(a->out_bufs[k]),
                                   lt_program_output_shape(p, k),
                                   lt_program_output_dtype(p, k), core);
        if (!outn[k]) {
            st = lt_set_error(LT_ERR_INTERNAL, "replay_run: out of host memory");
            goto fail;
        }
    }

    job->key = r->key;
    job->prog = lt_program_retain(r->prog);
    a->cause = LT_SYNC_EXPLICIT;
    /* the worker starts it at once, also in a loop that waits after each
     * step: it runs while the host traces the rest of the step (leaving it
     * for the step's wait measured slower: bench/step_latency.py) */
    job->job.wake = LT_WAKE_NOW;
    if (lt_graph_events_on()) lt_graph_events_replay(core, r->key, p);
    uint64_t seq = lt_submit_queue(core, job, fresh);
    free(fresh);

    lt_live_lock(core);
    for (int i = 0; i < r->n_out; i++)
        outputs[i] = lt_tensor_new_locked(lt_node_retain(outn[r->out_prog[i]]),
                                          (lt_dtype)r->out_logical[i], core);
    lt_live_unlock(core);
    for (int k = 0; k < no; k++) lt_node_release(outn[k]);
    free(outn);
    lt_counter_add(rm()->run, 1);
    lt_metric_add(rm()->replay_time, (double)(lt_now_ns() - t0));
    for (int i = 0; i < r->n_out; i++)
        if (!outputs[i]) {
            for (int q = 0; q < r->n_out; q++) {
                lt_tensor_release(outputs[q]);
                outputs[q] = NULL;
            }
            return lt_set_error(LT_ERR_INTERNAL, "replay_run: out of host memory");
        }
    /* bound the pipeline like a step sync (no error reporting here) */
    return lt_submit_bound(core, seq, 0);

fail:
    for (int k = 0; k < no; k++) lt_node_release(outn[k]);
    free(outn);
    free(fresh);
    lt_submit_job_free(job);
    return st;
}
