/*
 * lazy/exec.c — lt_program_run: resolves program views against the
 * execution's buffers and runs the steps in order on the calling thread
 * (the core's worker) with the core's OpenMP budget.
 */
#include <stdlib.h>
#include <string.h>
#include "program.h"

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

lt_status lt_program_run(const lt_program *p, const lt_exec_args *args,
                         int core)
{
    if (args->n_params != p->n_params || args->n_outputs != p->n_outputs)
        return lt_set_error(LT_ERR_INTERNAL, "run: program has %d params / "
                            "%d outputs, got %d / %d", p->n_params,
                            p->n_outputs, args->n_params, args->n_outputs);
    if (p->scratch_bytes && (!args->scratch ||
                             args->scratch->bytes < p->scratch_bytes))
        return lt_set_error(LT_ERR_INTERNAL, "run: scratch of %zu bytes "
                            "needed", p->scratch_bytes);
    int np = p->n_params;
    uint64_t *slots = calloc(np ? np : 1, sizeof *slots);
    if (!slots)
        return lt_set_error(LT_ERR_OOM, "run: out of host memory");
    for (int j = 0; j < np; j++)
        if (p->param_scalar[j])
            lt_slot_store(&slots[j], args->param_values ? args->param_values[j]
                          : 0.0, (lt_dtype)p->param_dtype[j]);
    lt_kernel_ctx ctx = {core, lt_core_omp_threads(core)};
    int cap = 0;
    lt_view *views = NULL;
    lt_status st = LT_OK;
    for (int s = 0; s < p->n_steps && st == LT_OK; s++) {
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
        switch (step->kind) {
        case LT_STEP_FUSED:
            st = lt_fused_run(step->fused, in, out, &ctx);
            break;
        case LT_STEP_REDUCE:
            st = lt_reduce_run(step->op, &step->plan, step->fused, in,
                               step->n_out > 1 ? out + 1 : NULL, out, &ctx);
            break;
        default:
            st = step->fn(step->op, &step->attrs, in, step->n_in, out, &ctx);
            break;
        }
    }
    free(views);
    free(slots);
    return st;
}
