/*
 * lazy/profile.c — per-op device time (see profile.h). Metric names:
 * "KernelTime::<op>" for library kernels, "KernelTime::fused(<op>)" for a
 * fused elementwise group (op = the group's last computed op),
 * "KernelTime::hfused(<op>)" for several such groups of one program run as
 * one kernel (compile_hfuse.c),
 * "KernelTime::reduce(<op>)" for a reduction with its fused prologue,
 * "KernelTime::<mm op>+fused(<op>)" for a GEMM with its fused epilogue.
 * Metrics are looked up per sample (lock-free lookup in the registry);
 * names are bounded by the op table.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include "profile.h"
#include "kernels/fused.h"
#include "options.h"

int lt_profile_on(void)
{
    return (int)lt_opt_int(LT_OPT_PROFILE);        /* PROCESS: read once */
}

void lt_profile_step(const lt_step *step, int64_t ns)
{
    char name[96];
    const char *op = lt_op_name(step->op);
    const char *fop = NULL;
    if ((step->kind == LT_STEP_FUSED || step->kind == LT_STEP_GEMM_EPI) && step->fused)
        for (int k = step->fused->n_ins - 1; k >= 0; k--)
            if (step->fused->ins[k].op != LT_FUSED_LOAD) {
                fop = lt_op_name((lt_op)step->fused->ins[k].op);
                break;
            }
    if (step->kind == LT_STEP_FUSED)
        snprintf(name, sizeof name, "KernelTime::%s(%s)",
                 step->n_seg > 1 ? "hfused" : "fused", fop ? fop : op);
    else if (step->kind == LT_STEP_GEMM_EPI)
        snprintf(name, sizeof name, "KernelTime::%s+fused(%s)", op, fop ? fop : "?");
    else if (step->kind == LT_STEP_REDUCE)
        snprintf(name, sizeof name, "KernelTime::reduce(%s)", op);
    else
        snprintf(name, sizeof name, "KernelTime::%s", op);
    lt_metric_add(lt_metric_get(name, LT_UNIT_NS), (double)ns);
}
