/*
 * lazy/submit.c — one program's way onto a core (see submit.h): compile
 * cache or compile, output buffers, the job that runs the program, the
 * in-flight bound. Used by lazy/sync.c and lazy/replay.c.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "submit.h"
#include "tensor.h"
#include "cache.h"
#include "pcache.h"
#include "diagnose.h"
#include "fault.h"
#include "trace_events.h"
#include "program.h"
#include "profile.h"
#include "step_time.h"

/* ------------------------------------------------------------ program */

lt_status lt_submit_program(const lt_graph *g, lt_submit_origin origin, lt_sync_cause cause,
                            const char *frame, lt_program **out, int *compiled)
{
    const lt_fe_metrics *m = lt_fe_metrics_get();
    lt_runtime *r = lt_rt();
    *out = NULL;
    if (compiled) *compiled = 0;
    if (!r) return LT_ERR_DEVICE;
    lt_metric_add(m->graph_size, (double)g->n_nodes);
    lt_status pst = lt_pcache_start(r->pcache);   /* the compile cache is now in use */
    if (pst != LT_OK) return pst;
    lt_compile_opts opts = lt_rt_compile_opts();
    lt_program *p = lt_cache_get(r->cache, g->key);
    if (!p && (p = lt_pcache_load(r->pcache, g, &opts)))   /* compiled by an earlier process */
        lt_cache_put(r->cache, g->key, p);
    if (p) {
        lt_counter_add(m->cached, 1);
    } else {
        int64_t t0 = lt_now_ns();
        lt_status st = lt_compile_with(g, &opts, &p);
        if (st != LT_OK) return st;
        int64_t t1 = lt_now_ns();
        lt_pcache_store(r->pcache, g, &opts, p);   /* not in CompileTime */
        lt_metric_add(m->compile_time, (double)(t1 - t0));
        if (lt_trace_enabled()) {
            char a[96];
            snprintf(a, sizeof a, "\"graph\":\"%016llx\",\"nodes\":%d",
                     (unsigned long long)g->key, g->n_nodes);
            lt_trace_event_args("compile", "compile", t0, t1 - t0, LT_TRACE_TID_HOST, a);
        }
        lt_counter_add(m->uncached, 1);
        lt_cache_put(r->cache, g->key, p);
        char *own = origin == LT_SUBMIT_RECORD ? lt_caller_capture() : NULL;
        lt_diagnose_compile_at(g, cause, own ? own : frame, origin == LT_SUBMIT_SYNC);
        free(own);
        if (compiled) *compiled = 1;
    }
    if (lt_program_n_params(p) != g->n_params || lt_program_n_outputs(p) != g->n_outputs) {
        lt_status st = lt_set_error(LT_ERR_INTERNAL, "program of graph %016llx has %d params/"
                                    "%d outputs, graph %d/%d", (unsigned long long)g->key,
                                    lt_program_n_params(p), lt_program_n_outputs(p),
                                    g->n_params, g->n_outputs);
        lt_program_release(p);
        return st;
    }
    *out = p;
    return LT_OK;
}

/* ------------------------------------------------------------ outputs */

lt_status lt_submit_outputs(int core, const lt_program *p, lt_exec_args *a, char *fresh)
{
    for (int k = 0; k < a->n_outputs; k++) {
        if (a->out_bufs[k]) continue;
        int same = lt_program_output_same(p, k);   /* same value: share */
        if (same >= 0 && same < k && a->out_bufs[same]) {
            a->out_bufs[k] = lt_buffer_retain(a->out_bufs[same]);
            continue;
        }
        int j = lt_program_output_alias(p, k);
        if (j >= 0 && j < a->n_params && a->param_bufs[j] && a->param_bufs[j]->base) {
            /* a view is never written: the output gets a copy of it */
            const lt_buffer *v = a->param_bufs[j];
            lt_status st = lt_buffer_alloc(core, v->dtype, v->numel, &a->out_bufs[k]);
            if (st != LT_OK) return st;
            memcpy(a->out_bufs[k]->data, v->data, (size_t)v->numel * lt_dtype_size(v->dtype));
            fresh[k] = 1;
            continue;
        }
        if (j >= 0 && j < a->n_params && a->param_bufs[j]) {
            lt_status su = lt_buffer_unpart(a->param_bufs[j]);   /* written whole */
            if (su != LT_OK) return su;
            a->out_bufs[k] = lt_buffer_retain(a->param_bufs[j]);
            continue;
        }
        lt_status st = lt_buffer_alloc(core, lt_program_output_dtype(p, k),
                                       lt_shape_numel(lt_program_output_shape(p, k)),
                                       &a->out_bufs[k]);
        if (st != LT_OK) return st;
        fresh[k] = 1;
    }
    size_t sb = lt_program_scratch_bytes(p);
    if (sb > 0) return lt_buffer_alloc(core, LT_BOOL, (int64_t)sb, &a->scratch);
    return LT_OK;
}

/* ------------------------------------------------------------ the job */

static lt_status job_run(lt_job *job, int core)
{
    lt_submit_job *j = (lt_submit_job *)job;
    /* A node of this graph already failed in an earlier program (a value
     * read synced part of this graph): this program is that failure again,
     * reported (and claimed) as the same fault, not run. */
    for (int i = 0; i < j->n_nodes; i++) {
        lt_fault *nf = lt_node_fault(j->nodes[i]);
        if (!nf) continue;
        job->same = lt_fault_retain(nf);
        lt_program_abstain(j->prog, lt_fault_origin(nf)->msg);
        return lt_set_error(nf->st, "%s", nf->msg);
    }
    /* the other cores' jobs whose outputs this program reads: done first
     * (a plain wait on this thread: their faults stay with their buffers,
     * which this program then finds poisoned) */
    for (int k = 0; k < j->n_after; k++) lt_core_wait(j->after_core[k], j->after_seq[k], 0);
    int was = j->threads > 0 ? lt_core_set_job_threads(j->threads) : 0;
    int64_t t0 = lt_now_ns();
    lt_status st = lt_program_run(j->prog, &j->args, core, &job->cause);
    int64_t t1 = lt_now_ns();
    if (j->threads > 0) lt_core_set_job_threads(was);
    if (!j->eager_op) lt_metric_add(lt_fe_metrics_get()->execute_time, (double)(t1 - t0));
    if (lt_profile_on()) lt_step_time_add(LT_PHASE_EXECUTE, t1 - t0);
    if (lt_trace_enabled()) {
        char a[64];
        snprintf(a, sizeof a, "\"graph\":\"%016llx\"", (unsigned long long)j->key);
        lt_trace_event_args("execute", "execute", t0, t1 - t0, core, a);
    }
    return st;
}

/* The program failed: the node that failed keeps the fault (a later graph
 * holding it fails the same way), and every buffer it was to write
 * (stamped with its seq: fresh or donated, not aliased inputs) is poisoned
 * with f. */
static void job_fail(lt_job *job, lt_fault *f)
{
    lt_submit_job *j = (lt_submit_job *)job;
    if (j->failed_node >= 0 && j->failed_node < j->n_nodes)
        lt_node_set_fault(j->nodes[j->failed_node], f);
    for (int k = 0; k < j->args.n_outputs; k++) {
        lt_buffer *b = j->args.out_bufs[k];
        if (!b || b->ready_seq != job->seq || b->fault == f) continue;
        lt_fault_release(b->fault);
        b->fault = lt_fault_retain(f);
    }
}

void lt_submit_job_free(lt_submit_job *j)
{
    if (!j) return;
    free(j->frame);
    free(j->after_core);
    free(j->after_seq);
    lt_exec_args_free(&j->args);
    for (int i = j->n_nodes - 1; i >= 0; i--) lt_node_release(j->nodes[i]);
    free(j->nodes);
    lt_program_release(j->prog);
    free(j);
}

static void job_done(lt_job *job) { lt_submit_job_free((lt_submit_job *)job); }

static _Thread_local int tl_eager_op;

int lt_set_eager_op_scope(int on)
{
    int was = tl_eager_op;
    tl_eager_op = on != 0;
    return was;
}

lt_submit_job *lt_submit_job_new(void)
{
    lt_submit_job *j = calloc(1, sizeof *j);
    if (!j) lt_set_error(LT_ERR_INTERNAL, "submit: out of host memory");
    else j->eager_op = tl_eager_op;
    return j;
}

uint64_t lt_submit_queue(int core, lt_submit_job *j, const char *fresh)
{
    j->job.run = job_run;
    j->job.fail = job_fail;
    j->job.done = job_done;
    j->args.nodes = j->nodes;      /* for error messages */
    j->args.n_nodes = j->n_nodes;
    j->args.sync_frame = j->frame;
    j->failed_node = -1;
    j->args.failed_node = j->nodes ? &j->failed_node : NULL;
    /* a program with collectives waits for its peers: it stays on the
     * core's worker, never run inline by a caller waiting for it */
    j->job.inline_ok = 1;
    for (int s = 0; s < j->prog->n_steps; s++)
        if (lt_op_kind_of(j->prog->steps[s].op) == LT_KIND_COLLECTIVE) j->job.inline_ok = 0;
    lt_buffer **out = j->args.out_bufs;
    int n = j->args.n_outputs;
    lt_core_lock(core);
    uint64_t seq = lt_core_next_seq(core);
    for (int k = 0; k < n && fresh; k++)
        if (fresh[k]) out[k]->ready_seq = seq;
    lt_core_submit(core, &j->job);  /* j may be done and freed from here on */
    lt_core_unlock(core);
    return seq;
}

/* ------------------------------------------------------------ bound */

/* Per core, the last seqs of the latest marked steps (lt_submit_mark_step),
 * oldest first. */
#define LT_STEP_MARKS 8
static pthread_mutex_t g_marks_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_marks[LT_MAX_CORES][LT_STEP_MARKS];
static int g_n_marks[LT_MAX_CORES];

void lt_submit_mark_step(int core)
{
    if (core < 0 || core >= LT_MAX_CORES) return;
    uint64_t last = lt_core_last_seq(core);
    pthread_mutex_lock(&g_marks_mu);
    int n = g_n_marks[core];
    if (!n || g_marks[core][n - 1] != last) {
        if (n == LT_STEP_MARKS) {
            memmove(&g_marks[core][0], &g_marks[core][1], (size_t)(n - 1) * sizeof g_marks[0][0]);
            n--;
        }
        g_marks[core][n++] = last;
        g_n_marks[core] = n;
    }
    pthread_mutex_unlock(&g_marks_mu);
}

lt_status lt_submit_bound(int core, uint64_t seq, int report)
{
    lt_runtime *rtm = lt_rt();
    if (seq == 0) seq = lt_core_last_seq(core);
    if (!rtm || rtm->max_inflight <= 0 || seq <= (uint64_t)rtm->max_inflight) return LT_OK;
    uint64_t target = seq - (uint64_t)rtm->max_inflight;
    /* seq ends a marked step: the end of the step max_inflight steps
     * before it (programs of one step count as one) */
    if (core >= 0 && core < LT_MAX_CORES) {
        pthread_mutex_lock(&g_marks_mu);
        int n = g_n_marks[core];
        int64_t k = n - 1 - rtm->max_inflight;
        if (n && g_marks[core][n - 1] == seq) {
            if (k < 0)
                target = 0;    /* fewer marked steps so far than the bound */
            else if (g_marks[core][k] < target)
                target = g_marks[core][k];
        }
        pthread_mutex_unlock(&g_marks_mu);
    }
    return target ? lt_core_wait(core, target, report) : LT_OK;
}
