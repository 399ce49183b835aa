/*
 * lazy/exec.c — lt_program_run: resolves program views against the
 * execution's buffers and runs the steps in order on the calling thread
 * (the core's worker) with the core's OpenMP budget.
 *
 * Failures: a poisoned input fails the program before its first step; a
 * failing step stops it. Either way the message names the step's op, input
 * shapes/dtypes and frames (lt_fault_where), and the remaining collective
 * steps abstain from their collectives so that peer ranks fail too instead
 * of waiting (see compile.h).
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "program.h"
#include "finite.h"
#include "profile.h"
#include "par.h"         /* lt_par_hold: helpers awake while the program runs */

static int bind(const lt_program *p, const lt_exec_args *a,
                const uint64_t *slots, const lt_pview *pv, lt_view *out)
{
    *out = pv->v;
    switch (pv->base) {
    case LT_BASE_PARAM:
        if (pv->index >= a->n_params || !a->param_bufs[pv->index])
            return -1;
        out->data = a->param_bufs[pv->index]->data;
        return 0;
    case LT_BASE_SLOT:
        out->data = (void *)&slots[pv->index];
        return 0;
    case LT_BASE_CONST:
        out->data = (void *)&p->consts[pv->index];
        return 0;
    case LT_BASE_SCRATCH:
        if (!a->scratch)
            return -1;
        out->data = (char *)a->scratch->data + pv->byte_off;
        return 0;
    case LT_BASE_OUTPUT:
        if (pv->index >= a->n_outputs || !a->out_bufs[pv->index])
            return -1;
        out->data = a->out_bufs[pv->index]->data;
        return 0;
    default:
        return -1;
    }
}

/* First step operand reading parameter j: *step, *k; 0 if none. */
static int param_reader(const lt_program *p, int j, int *step, int *k)
{
    for (int s = 0; s < p->n_steps; s++)
        for (int q = 0; q < p->steps[s].n_in; q++) {
            const lt_pview *pv = &p->steps[s].in[q];
            if (pv->base == LT_BASE_PARAM && pv->index == j) {
                *step = s;
                *k = q;
                return 1;
            }
        }
    return 0;
}

static const lt_node *step_node(const lt_step *step, const lt_exec_args *a)
{
    if (!a->nodes || step->node < 0 || step->node >= a->n_nodes) return NULL;
    return a->nodes[step->node];
}

/* Appends where step s failed to the thread's error message. */
static lt_status with_where(lt_status st, const lt_program *p, int s,
                            const lt_exec_args *a, int core)
{
    char msg[1024], where[512];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    const lt_step *step = s >= 0 ? &p->steps[s] : NULL;
    lt_view in[8];
    int n_in = 0;
    if (step)
        for (; n_in < step->n_in && n_in < 8; n_in++) in[n_in] = step->in[n_in].v;
    const lt_node *nd = step ? step_node(step, a) : NULL;
    int op = !step || (step->kind == LT_STEP_FUSED && !nd) ? -1 : (int)step->op;
    lt_fault_where(where, sizeof where, nd, op, in, n_in, a->sync_frame,
                   a->cause, core);
    return lt_set_error(st, "%s%s", msg, where);
}

/* A poisoned parameter some step reads: fails like that step would, naming
 * the input and the original error. LT_OK if there is none. */
static lt_status check_params(const lt_program *p, const lt_exec_args *a,
                              int core, lt_fault **cause)
{
    for (int j = 0; j < a->n_params; j++) {
        lt_buffer *b = a->param_bufs ? a->param_bufs[j] : NULL;
        int s, k;
        if (!b || !b->fault || !param_reader(p, j, &s, &k)) continue;
        lt_fault *o = lt_fault_origin(b->fault);
        const lt_step *step = &p->steps[s];
        const lt_pview *pv = &step->in[k];
        char sh[160];
        lt_shape_str(&pv->v.shape, sh, sizeof sh);
        const lt_node *nd = step_node(step, a);
        if (step->kind == LT_STEP_FUSED)   /* k is the group's input, not the op's */
            lt_set_error(o->st, "%s (fused elementwise): an input (%s%s) was "
                         "poisoned by an earlier error: %s",
                         nd ? lt_op_name((lt_op)nd->op) : "elementwise",
                         lt_dtype_name(pv->v.dtype), sh, o->msg);
        else
            lt_set_error(o->st, "%s: input %d (%s%s) was poisoned by an "
                         "earlier error: %s", lt_op_name(step->op), k,
                         lt_dtype_name(pv->v.dtype), sh, o->msg);
        if (cause) *cause = lt_fault_retain(b->fault);
        if (a->failed_node) *a->failed_node = step->node;
        return with_where(o->st, p, s, a, core);
    }
    return LT_OK;
}

/* After a failure: every collective step from `from` on takes part in its
 * collective as a failure, so that the peers are not left waiting. The
 * peers are told `reason` (NULL: the thread's error message). Keeps the
 * thread's error message. */
static void abstain_from(const lt_program *p, int from, const char *reason)
{
    int any = 0;
    for (int s = from; s < p->n_steps && !any; s++)
        any = lt_op_kind_of(p->steps[s].op) == LT_KIND_COLLECTIVE;
    if (!any) return;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    for (int s = from; s < p->n_steps; s++)
        if (lt_op_kind_of(p->steps[s].op) == LT_KIND_COLLECTIVE)
            lt_collective_abstain(p->steps[s].op, reason ? reason : msg);
    lt_set_error(LT_OK, "%s", msg);
}

void lt_exec_args_free(lt_exec_args *a)
{
    if (a->param_bufs)
        for (int j = 0; j < a->n_params; j++) lt_buffer_release(a->param_bufs[j]);
    if (a->out_bufs)
        for (int k = 0; k < a->n_outputs; k++) lt_buffer_release(a->out_bufs[k]);
    lt_buffer_release(a->scratch);
    free(a->param_bufs);
    free(a->param_values);
    free(a->out_bufs);
    memset(a, 0, sizeof *a);
}

void lt_program_abstain(const lt_program *p, const char *reason)
{
    abstain_from(p, 0, reason);
}

lt_status lt_program_run(const lt_program *p, const lt_exec_args *args,
                         int core, lt_fault **cause)
{
    if (cause) *cause = NULL;
    if (args->failed_node) *args->failed_node = -1;
    if (args->n_params != p->n_params || args->n_outputs != p->n_outputs)
        return lt_set_error(LT_ERR_INTERNAL, "run: program has %d params / "
                            "%d outputs, got %d / %d", p->n_params,
                            p->n_outputs, args->n_params, args->n_outputs);
    if (p->scratch_bytes && (!args->scratch ||
                             args->scratch->bytes < p->scratch_bytes))
        return lt_set_error(LT_ERR_INTERNAL, "run: scratch of %zu bytes "
                            "needed", p->scratch_bytes);
    lt_status st = check_params(p, args, core, cause);
    if (st != LT_OK) {
        /* the peers learn the original error (this rank's derived message
         * would only wrap it in this program's "input k was poisoned") */
        abstain_from(p, 0, cause && *cause ? lt_fault_origin(*cause)->msg : NULL);
        return st;
    }
    int np = p->n_params;
    uint64_t *slots = calloc(np ? np : 1, sizeof *slots);
    if (!slots) {
        st = lt_set_error(LT_ERR_OOM, "run: out of host memory");
        abstain_from(p, 0, NULL);
        return st;
    }
    for (int j = 0; j < np; j++)
        if (p->param_scalar[j])
            lt_slot_store(&slots[j], args->param_values ? args->param_values[j]
                          : 0.0, (lt_dtype)p->param_dtype[j]);
    lt_kernel_ctx ctx = {core, lt_core_omp_threads(core), p->mm_precision};
    lt_par_hold(&ctx, 1);       /* the core's helpers stay awake for its kernels */
    int prof = lt_profile_on();
    int cap = 0;
    lt_view *views = NULL;
    int s = 0;
    for (; s < p->n_steps && st == LT_OK; s++) {
        const lt_step *step = &p->steps[s];
        int need = step->n_in + step->n_out;
        if (need > cap) {
            lt_view *nv = realloc(views, need * sizeof *nv);
            if (!nv) {
                st = lt_set_error(LT_ERR_OOM, "run: out of host memory");
                break;
            }
            views = nv;
            cap = need;
        }
        lt_view *in = views, *out = views + step->n_in;
        int bad = 0;
        for (int k = 0; k < step->n_in; k++)
            bad |= bind(p, args, slots, &step->in[k], &in[k]);
        for (int k = 0; k < step->n_out; k++)
            bad |= bind(p, args, slots, &step->out[k], &out[k]);
        if (bad) {
            st = lt_set_error(LT_ERR_INTERNAL, "run: step %d (%s) has an "
                              "unbound buffer", s, lt_op_name(step->op));
            break;
        }
        int64_t t0 = prof ? lt_now_ns() : 0;
        switch (step->kind) {
        case LT_STEP_FUSED:
            st = step->n_seg > 1
                 ? lt_fused_run_multi(step->seg, step->n_seg, in, out, &ctx)
                 : lt_fused_run(step->fused, in, out, &ctx);
            break;
        case LT_STEP_REDUCE:
            st = lt_reduce_run(step->op, &step->plan, step->fused, in,
                               step->n_out > 1 ? out + 1 : NULL, out, &ctx);
            break;
        case LT_STEP_GEMM_EPI: {
            int nm = step->op == LT_OP_addmm ? 3 : 2;
            st = lt_kernel_matmul_epi(step->op, &step->attrs, in, nm, step->fused,
                                      in + nm, out, &ctx);
            break;
        }
        default:
            st = step->fn(step->op, &step->attrs, in, step->n_in, out, &ctx);
            break;
        }
        if (prof) lt_profile_step(step, lt_now_ns() - t0);
        if (st == LT_OK && p->check_finite && step->node >= 0) {
            const lt_node *nd = step_node(step, args);
            st = lt_finite_check(step, nd ? (lt_op)nd->op : step->op, in, out);
        }
        if (st != LT_OK) break;
    }
    lt_par_hold(&ctx, 0);
    free(views);
    free(slots);
    if (st != LT_OK) {
        int failed = s < p->n_steps ? s : p->n_steps - 1;
        if (args->failed_node && failed >= 0) *args->failed_node = p->steps[failed].node;
        st = with_where(st, p, failed, args, core);
        abstain_from(p, failed + 1, NULL);
    }
    return st;
}
