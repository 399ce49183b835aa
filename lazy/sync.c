/*
 * lazy/sync.c — the sync pipeline: pending roots -> capture -> cache / compile
 * -> buffers (alias, donation, allocation) -> job on the core -> roots become
 * data; when and where execution errors of programs are reported (see
 * include/lazytpu.h, Conventions, and docs/errors.md).
 *
 * Steps of one core's sync (lt_sync_tensors_core):
 *   1 roots     take each tensor's pending value (under the live lock)
 *   2 capture   lt_graph_capture
 *   3 program   lt_submit_program: compile cache hit (CachedCompile) or
 *               lt_compile (UncachedCompile, CompileTime, recompilation note)
 *   4 buffers   params from the graph; outputs donated here, else shared,
 *               aliased or allocated by lt_submit_outputs (OOM is reported
 *               here, synchronously); scratch
 *   5 submit    lt_submit_queue: stamp new outputs with the job's seq, queue
 *   6 replace   each root tensor's value becomes a data node of its output
 *   7 bound     lt_submit_bound (or a wait)
 * Steps 3, 4, 5 and 7 are lazy/submit.c's, shared with compiled replay.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor.h"
#include "graph.h"
#include "compile.h"
#include "device.h"
#include "submit.h"
#include "diagnose.h"
#include "graph_dump.h"
#include "trace_events.h"
#include "exec_guard.h"
#include "spmd.h"
#include "options.h"
#include "profile.h"
#include "step_time.h"
#include "graph_events.h"

const char *lt_sync_cause_name(lt_sync_cause c)
{
    switch (c) {
    case LT_SYNC_MARK_STEP: return "mark_step";
    case LT_SYNC_OPTIMIZER_STEP: return "optimizer_step";
    case LT_SYNC_LOADER_STEP: return "loader_step";
    case LT_SYNC_VALUE_READ: return "value_read";
    case LT_SYNC_SIZE_LIMIT: return "size_limit";
    case LT_SYNC_EXPLICIT: return "explicit";
    case LT_SYNC_DYNAMIC_SHAPE: return "dynamic_shape";
    default: return "unknown";
    }
}

void lt_sync_state_reset(void) { lt_diagnose_reset(); }

/* -------------------------------------------------------------- pipeline */

/* Donation check (live lock held): param node d (at graph position pd) may
 * give its buffer to an output when nothing outside this sync can observe
 * it: the buffer is held only by d, d only by the graph and its in-graph
 * users, and no computed node of the graph is held from outside (expected
 * references = 1 graph + in-graph uses + 2 per root tensor: tensor + roots
 * array). */
static int graph_is_closed(const lt_graph *g, const int *expect)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        if (!lt_node_is_pending(n)) continue;
        if (atomic_load(&n->refs) != expect[i]) return 0;
    }
    return 1;
}

static lt_status fail_cleanup(lt_status st, lt_graph *g, lt_program *p,
                              lt_exec_args *a, lt_node **roots, int n)
{
    lt_exec_args_free(a);
    lt_program_release(p);
    lt_graph_free(g);
    for (int i = 0; i < n; i++) lt_node_release(roots[i]);
    free(roots);
    return st;
}

/* Nothing to run: a waiting sync waits for the core, an asynchronous step
 * sync still bounds (and reports) like one that queued a program. */
static lt_status sync_nothing(int core, int wait, int report)
{
    if (wait) return lt_core_wait(core, 0, report);
    return report ? lt_submit_bound(core, 0, 1) : LT_OK;
}

/* Step 2b (LAZYTPU_SPMD_PARTITION=1, the default): a graph holding shardings runs
 * partitioned over its mesh (lt_spmd_execute, synchronously); its roots
 * then take data nodes of the assembled results, with their layouts.
 * *ran = 0: nothing was run, the caller runs g whole. */
static lt_status sync_spmd(int core, lt_graph *g, lt_tensor **rts, lt_node **roots, int nr,
                           lt_sync_cause cause, int *ran)
{
    *ran = 0;
    int nout = g->n_outputs;
    lt_buffer **ob = calloc((size_t)(nout ? nout : 1), sizeof *ob);
    lt_node **outn = calloc((size_t)(nout ? nout : 1), sizeof *outn);
    lt_node **old = calloc((size_t)(nr ? nr : 1), sizeof *old);
    if (!ob || !outn || !old) {
        free(ob);
        free(outn);
        free(old);
        return lt_set_error(LT_ERR_INTERNAL, "sync: out of host memory");
    }
    lt_status st = lt_spmd_execute(g, cause, lt_caller_frame(), ob, ran);
    if (st == LT_OK && *ran) {
        lt_spmd_plan_out sp;
        lt_spmd_plan(g, &sp, 0);
        for (int k = 0; k < nout; k++) {
            const lt_node *rn = g->nodes[g->output_pos[k]];
            outn[k] = lt_node_new_data(ob[k], &rn->shape, (lt_dtype)rn->dtype, core);
            ob[k] = NULL;
            if (!outn[k]) st = LT_ERR_INTERNAL;
            else if (sp.n_sharded) lt_spmd_set_output(outn[k], &sp, k);
        }
        lt_spmd_plan_free(&sp);
        if (st == LT_OK) {
            lt_live_lock(core);
            for (int i = 0; i < nr; i++) {
                lt_node *nv = outn[g->root_out[i]];
                if (rts[i]->value == roots[i]) {
                    old[i] = rts[i]->value;
                    rts[i]->value = lt_node_retain(nv);
                    rts[i]->from_step = 1;
                }
            }
            lt_live_unlock(core);
        }
    }
    for (int i = 0; i < nr; i++) lt_node_release(old[i]);
    for (int k = 0; k < nout; k++) {
        lt_buffer_release(ob[k]);
        lt_node_release(outn[k]);
    }
    free(ob);
    free(outn);
    free(old);
    return st;
}

static lt_status sync_core_impl(int core, lt_tensor *const *ts, int n,
                                lt_sync_cause cause, int wait, int report)
{
    const lt_fe_metrics *m = lt_fe_metrics_get();
    lt_runtime *r = lt_rt();
    if (!r) return LT_ERR_DEVICE;
    lt_counter_add(m->sync_cause[(unsigned)cause < LT_NUM_SYNC_CAUSES ? cause : LT_SYNC_EXPLICIT], 1);
    if (n == 0) return sync_nothing(core, wait, report);
    /* LAZYTPU_PROFILE: phase times (step_time.h) */
    int prof = lt_profile_on();
    int64_t pt = prof ? lt_now_ns() : 0;
#define PHASE(ph) do { if (prof) { int64_t t_ = lt_now_ns(); \
        lt_step_time_add(ph, t_ - pt); pt = t_; } } while (0)
    if (prof) lt_step_time_trace(core, pt);

    /* 1 roots */
    lt_node **roots = malloc((size_t)n * sizeof *roots);
    lt_exec_args args;
    memset(&args, 0, sizeof args);
    if (!roots) return lt_set_error(LT_ERR_INTERNAL, "sync: out of host memory");
    int nr = 0;
    lt_tensor **rts = malloc((size_t)n * sizeof *rts);
    if (!rts) {
        free(roots);
        return lt_set_error(LT_ERR_INTERNAL, "sync: out of host memory");
    }
    lt_live_lock(core);
    for (int i = 0; i < n; i++) {
        lt_node *v = ts[i]->value;
        if (!v || !lt_node_is_pending(v)) continue;
        rts[nr] = ts[i];
        roots[nr++] = lt_node_retain(v);
    }
    /* the execution guard refuses before anything changes: the graph stays
     * pending (and its size counted) for the step boundary after the guard */
    int refused = nr > 0 && lt_exec_guard_on();
    int64_t traced = r->live[core].traced;
    if (!refused) r->live[core].traced = 0;
    lt_live_unlock(core);
    if (nr == 0) {
        free(roots);
        free(rts);
        return sync_nothing(core, wait, report);
    }
    if (refused) {
        lt_status st0 = lt_execution_check(lt_exec_cause_what(cause));
        if (st0 != LT_OK) {
            for (int i = 0; i < nr; i++) lt_node_release(roots[i]);
            free(roots);
            free(rts);
            return st0;
        }
    }

    /* 2 capture */
    lt_graph g;
    lt_status st = lt_graph_capture_sized(roots, nr, &g, traced);
    if (st != LT_OK) {
        free(rts);
        return fail_cleanup(st, &g, NULL, &args, roots, nr);
    }
    lt_exec_log_graph(g.key);
    PHASE(LT_PHASE_CAPTURE);
    if (lt_graph_dump_enabled()) lt_graph_dump_sync(&g, cause, lt_caller_frame());

    /* 2b SPMD: run partitioned over the mesh (LAZYTPU_SPMD_PARTITION, default 1) */
    if (lt_opt_int(LT_OPT_SPMD_PARTITION)) {
        int ran = 0;
        st = sync_spmd(core, &g, rts, roots, nr, cause, &ran);
        if (st != LT_OK || ran) {
            free(rts);
            fail_cleanup(st, &g, NULL, &args, roots, nr);
            return st != LT_OK ? st : sync_nothing(core, wait, report);
        }
    }

    /* 2c manual-sharding regions in a step run whole: every core's values
     * computed side by side on this core (spmd_manual.c) */
    if (lt_spmd_has_manual(&g)) {
        st = lt_spmd_manual_expand(&g, roots, nr);
        if (st != LT_OK) {
            free(rts);
            return fail_cleanup(st, &g, NULL, &args, roots, nr);
        }
    }

    /* 3 program */
    int compiled = 0;
    lt_program *p = NULL;
    st = lt_submit_program(&g, LT_SUBMIT_SYNC, cause, lt_caller_frame(), &p, &compiled);
    if (st != LT_OK) {
        free(rts);
        return fail_cleanup(st, &g, NULL, &args, roots, nr);
    }
    if (lt_graph_events_on()) lt_graph_events_program(&g, p, cause, compiled, 0);

    PHASE(LT_PHASE_PROGRAM);

    /* 4 buffers */
    args.n_params = g.n_params;
    args.n_outputs = g.n_outputs;
    args.param_bufs = calloc((size_t)(g.n_params ? g.n_params : 1), sizeof *args.param_bufs);
    args.param_values = calloc((size_t)(g.n_params ? g.n_params : 1), sizeof *args.param_values);
    args.out_bufs = calloc((size_t)g.n_outputs, sizeof *args.out_bufs);
    char *fresh = calloc((size_t)g.n_outputs, 1);      /* 1 = stamp ready_seq */
    char *donated = calloc((size_t)(g.n_params ? g.n_params : 1), 1);
    int *expect = NULL;
    if (!args.param_bufs || !args.param_values || !args.out_bufs || !fresh || !donated) {
        free(fresh);
        free(donated);
        free(rts);
        return fail_cleanup(lt_set_error(LT_ERR_INTERNAL, "sync: out of host memory"),
                            &g, p, &args, roots, nr);
    }

    int any_donor = 0;
    for (int k = 0; k < g.n_outputs; k++)
        if (lt_program_output_alias(p, k) < 0 && lt_program_output_donor(p, k) >= 0) any_donor = 1;
    if (any_donor) {
        expect = calloc((size_t)g.n_nodes, sizeof *expect);
        if (expect) {
            for (int i = 0; i < g.n_nodes; i++) expect[i] += 1;
            for (int e = 0; e < g.in_off[g.n_nodes]; e++) expect[g.in_pos[e]]++;
            for (int i = 0; i < nr; i++) expect[g.output_pos[g.root_out[i]]] += 2;
        }
    }

    lt_live_lock(core);
    int closed = expect ? graph_is_closed(&g, expect) : 0;
    for (int k = 0; k < g.n_outputs; k++) {
        int j = lt_program_output_alias(p, k);
        if (j >= 0) continue;
        j = lt_program_output_donor(p, k);
        if (j < 0 || j >= g.n_params || donated[j] || !closed) continue;
        int pd = g.param_pos[j];
        lt_node *d = g.nodes[pd];
        if (d->op != LT_OP_data || !d->buf || g.param_alias[j] >= 0) continue;
        if (d->buf->parts) continue;    /* a value held per core is read, never written */
        if (atomic_load(&d->buf->refs) != 1 || atomic_load(&d->refs) != expect[pd]) continue;
        /* another param aliasing the same buffer would be read after the write */
        int shared = 0;
        for (int q = 0; q < g.n_params; q++)
            if (g.param_alias[q] == j) shared = 1;
        if (shared) continue;
        donated[j] = 1;
        args.out_bufs[k] = lt_buffer_retain(d->buf);
        fresh[k] = 1;
    }
    lt_live_unlock(core);
    free(expect);

    for (int j = 0; j < g.n_params; j++) {
        lt_node *pn = g.nodes[g.param_pos[j]];
        if (pn->op == LT_OP_data) args.param_bufs[j] = lt_buffer_retain(pn->buf);
        else args.param_values[j] = pn->value;
    }
    /* a sharded value held per core, read whole here: assembled once */
    for (int j = 0; j < g.n_params && st == LT_OK; j++) st = lt_buffer_whole(args.param_bufs[j]);
    if (st == LT_OK) st = lt_submit_outputs(core, p, &args, fresh);
    if (st != LT_OK) {
        free(fresh);
        free(donated);
        free(rts);
        return fail_cleanup(st, &g, p, &args, roots, nr);
    }

    /* output data nodes, made before submitting (the job owns args after) */
    lt_node **outn = calloc((size_t)g.n_outputs, sizeof *outn);
    lt_node **old = malloc((size_t)nr * sizeof *old);
    if (!outn || !old) {
        free(old);
        free(fresh);
        free(donated);
        free(rts);
        return fail_cleanup(lt_set_error(LT_ERR_INTERNAL, "sync: out of host memory"),
                            &g, p, &args, roots, nr);
    }
    lt_spmd_plan_out sp;          /* SPMD: the outputs' layouts (and, on a compile,
                                     the report's sharding lines) */
    lt_spmd_plan(&g, &sp, compiled);
    for (int k = 0; k < g.n_outputs; k++) {
        const lt_node *rn = g.nodes[g.output_pos[k]];
        outn[k] = lt_node_new_data(lt_buffer_retain(args.out_bufs[k]), &rn->shape,
                                   (lt_dtype)rn->dtype, core);
        if (outn[k] && sp.n_sharded) lt_spmd_set_output(outn[k], &sp, k);
        if (!outn[k]) {
            lt_spmd_plan_free(&sp);
            lt_buffer_release(args.out_bufs[k]);
            for (int q = 0; q < k; q++) lt_node_release(outn[q]);
            free(outn);
            free(old);
            free(fresh);
            free(donated);
            free(rts);
            return fail_cleanup(LT_ERR_INTERNAL, &g, p, &args, roots, nr);
        }
    }
    lt_spmd_plan_free(&sp);
    lt_submit_job *job = lt_submit_job_new();
    if (!job) {
        for (int k = 0; k < g.n_outputs; k++) lt_node_release(outn[k]);
        free(outn);
        free(old);
        free(fresh);
        free(donated);
        free(rts);
        return fail_cleanup(LT_ERR_INTERNAL, &g, p, &args, roots, nr);
    }

    PHASE(LT_PHASE_BUFFERS);

    /* 5 submit */
    job->prog = p;                 /* the job takes our program reference */
    job->key = g.key;
    job->args = args;
    job->args.cause = cause;
    job->nodes = g.nodes;          /* the job takes the graph's node references */
    job->n_nodes = g.n_nodes;
    job->frame = lt_caller_frame()[0] ? strdup(lt_caller_frame()) : NULL;
    /* the caller waits next (a waiting sync, a value read: lt_tensor_to_host):
     * its wait runs the program inline; a step boundary right after which
     * the caller waited last time may be waited for again (LT_WAKE_HINT) */
    job->job.wake = wait || cause == LT_SYNC_VALUE_READ ? LT_WAKE_WAITER
                    : lt_cause_is_step(cause) ? LT_WAKE_HINT : LT_WAKE_NOW;
    g.nodes = NULL;
    g.n_nodes = 0;
    uint64_t seq = lt_submit_queue(core, job, fresh);
    free(fresh);
    free(donated);

    /* 6 replace (a tensor assigned meanwhile keeps its newer value) */
    lt_live_lock(core);
    for (int i = 0; i < nr; i++) {
        lt_node *nv = outn[g.root_out[i]];
        if (rts[i]->value == roots[i]) {
            old[i] = rts[i]->value;
            rts[i]->value = lt_node_retain(nv);
            rts[i]->from_step = 1;
        } else {
            old[i] = NULL;
        }
    }
    lt_live_unlock(core);
    for (int i = 0; i < nr; i++) lt_node_release(old[i]);
    free(old);
    for (int k = 0; k < g.n_outputs; k++) lt_node_release(outn[k]);
    free(outn);
    free(rts);
    lt_graph_free(&g);
    for (int i = 0; i < nr; i++) lt_node_release(roots[i]);
    free(roots);
    PHASE(LT_PHASE_SUBMIT);
#undef PHASE
    if (prof) lt_step_time_mark_end(core, pt);

    if (wait) return lt_core_wait(core, seq, report);
    return lt_submit_bound(core, seq, report);
}

lt_status lt_sync_tensors_core(int core, lt_tensor *const *ts, int n,
                               lt_sync_cause cause, int wait, int report)
{
    if (!lt_trace_enabled()) return sync_core_impl(core, ts, n, cause, wait, report);
    int64_t t0 = lt_now_ns();
    lt_core_live *L = lt_live(core);
    pthread_mutex_lock(&L->mu);
    int64_t prev = L->last_sync_end_ns;
    pthread_mutex_unlock(&L->mu);
    if (prev > 0 && prev < t0)
        lt_trace_event("trace", "trace", prev, t0 - prev, LT_TRACE_TID_HOST);
    lt_status st = sync_core_impl(core, ts, n, cause, wait, report);
    int64_t t1 = lt_now_ns();
    char a[64];
    snprintf(a, sizeof a, "\"cause\":\"%s\",\"core\":%d", lt_sync_cause_name(cause), core);
    lt_trace_event_args("sync", "sync", t0, t1 - t0, LT_TRACE_TID_HOST, a);
    pthread_mutex_lock(&L->mu);
    L->last_sync_end_ns = t1;
    pthread_mutex_unlock(&L->mu);
    return st;
}

lt_status lt_sync(lt_tensor *const *tensors, int n, lt_sync_cause cause,
                  int wait)
{
    if (n < 0 || (n > 0 && !tensors))
        return lt_set_error(LT_ERR_ARG, "sync: bad tensor list");
    lt_runtime *r = lt_rt();
    if (!r) return LT_ERR_DEVICE;
    for (int i = 0; i < n; i++)
        if (!tensors[i]) return lt_set_error(LT_ERR_ARG, "sync: tensor %d is NULL", i);
    if (cause == LT_SYNC_MARK_STEP) lt_counter_add(lt_fe_metrics_get()->mark_step, 1);
    /* group by core, in order of first appearance */
    lt_tensor **grp = malloc((size_t)(n ? n : 1) * sizeof *grp);
    if (!grp) return lt_set_error(LT_ERR_INTERNAL, "sync: out of host memory");
    lt_status first = LT_OK;
    char done[LT_RT_MAX_CORES] = {0};
    for (int i = 0; i < n; i++) {
        int core = tensors[i]->core;
        if (done[core]) continue;
        done[core] = 1;
        int k = 0;
        for (int q = i; q < n; q++)
            if (tensors[q]->core == core) grp[k++] = tensors[q];
        lt_status st = lt_sync_tensors_core(core, grp, k, cause, wait, 0);
        if (lt_cause_is_step(cause)) lt_diagnose_step(core);
        if (st != LT_OK && first == LT_OK) first = st;
        if (st != LT_OK) break;
    }
    free(grp);
    /* waiting: the listed tensors' own faults, if any (claimed) */
    for (int i = 0; i < n && wait && first == LT_OK; i++) {
        lt_node *v = lt_tensor_value(tensors[i]);
        if (v->op == LT_OP_data) first = lt_buffer_wait(v->buf);
        lt_node_release(v);
    }
    return first;
}

lt_status lt_sync_core(int core, lt_sync_cause cause, int wait)
{
    lt_runtime *r = lt_rt();
    if (!r) return LT_ERR_DEVICE;
    if (!lt_core_valid(core))
        return lt_set_error(LT_ERR_DEVICE, "sync: invalid core %d (have %d cores)",
                            core, r->n_cores);
    if (cause == LT_SYNC_MARK_STEP) lt_counter_add(lt_fe_metrics_get()->mark_step, 1);
    lt_core_live *L = lt_live(core);
    pthread_mutex_lock(&L->mu);
    int64_t cap = L->count, k = 0;
    lt_tensor **ts = malloc((size_t)(cap ? cap : 1) * sizeof *ts);
    if (!ts) {
        pthread_mutex_unlock(&L->mu);
        return lt_set_error(LT_ERR_INTERNAL, "sync: out of host memory");
    }
    for (lt_tensor *t = L->head.next; t != &L->head; t = t->next) {
        if (!t->value || !lt_node_is_pending(t->value)) continue;
        /* a tensor whose count already dropped to 0 is being released: skip */
        int c = atomic_load(&t->refs);
        while (c > 0 && !atomic_compare_exchange_weak(&t->refs, &c, c + 1)) {}
        if (c <= 0) continue;
        ts[k++] = t;
    }
    pthread_mutex_unlock(&L->mu);
    /* a graph cut or a value read is no place to report other programs'
     * errors; a step boundary is */
    int report = cause != LT_SYNC_SIZE_LIMIT && cause != LT_SYNC_VALUE_READ;
    lt_status st = lt_sync_tensors_core(core, ts, (int)k, cause, wait, report);
    if (lt_cause_is_step(cause)) lt_diagnose_step(core);
    for (int64_t i = 0; i < k; i++) lt_tensor_release(ts[i]);
    free(ts);
    return st;
}

lt_status lt_wait(int core)
{
    lt_runtime *r = lt_rt_peek();
    if (!r) return LT_OK;
    if (core >= 0) {
        if (!lt_core_valid(core))
            return lt_set_error(LT_ERR_DEVICE, "wait: invalid core %d", core);
        return lt_core_wait(core, 0, 1);
    }
    /* every core finishes; the faults of the first core that has any are
     * reported (claimed), other cores' stay for the next wait */
    for (int c = 0; c < r->n_cores; c++) lt_core_wait(c, 0, 0);
    for (int c = 0; c < r->n_cores; c++)
        if (lt_core_has_unclaimed(c, 0)) return lt_core_wait(c, 0, 1);
    return LT_OK;
}
