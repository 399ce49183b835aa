/*
 * lazy/precision.c — the matmul precision level: how f32 matrix products
 * multiply (lt_matmul_precision in include/lazytpu.h).
 *
 * The level is a runtime setting like torch_xla's mat_mul_precision, but a
 * graph takes it when it is captured (lt_graph_capture: part of the key of
 * a graph holding products, so switching levels compiles anew) and the
 * program carries it to its kernels (lt_kernel_ctx.mm_precision): kernels
 * never read the setting. The arithmetic is lazy/kernels/mxu.c.
 */
#include <stdlib.h>
#include <string.h>
#include "tensor.h"
#include "registry.h"
#include "report.h"
#include "options.h"

static const struct {
    lt_matmul_precision p;
    const char *name;
    const char *what;
} levels[] = {
    {LT_MATMUL_F32, "f32", "full f32, as XLA:CPU"},
    {LT_MATMUL_DEFAULT, "default", "1 bf16 pass, as a TPU at XLA DEFAULT"},
    {LT_MATMUL_HIGH, "high", "3 bf16 passes, as a TPU at XLA HIGH"},
    {LT_MATMUL_HIGHEST, "highest", "6 bf16 passes, as a TPU at XLA HIGHEST"},
};
#define N_LEVELS ((int)(sizeof levels / sizeof levels[0]))

const char *lt_matmul_precision_name(lt_matmul_precision p)
{
    for (int i = 0; i < N_LEVELS; i++)
        if (levels[i].p == p) return levels[i].name;
    return NULL;
}

lt_status lt_matmul_precision_parse(const char *s, lt_matmul_precision *out)
{
    for (int i = 0; s && i < N_LEVELS; i++)
        if (strcmp(s, levels[i].name) == 0) {
            if (out) *out = levels[i].p;
            return LT_OK;
        }
    return lt_set_error(LT_ERR_ARG, "matmul precision '%s': expected f32, default, high or "
                        "highest", s ? s : "(null)");
}

lt_status lt_rt_precision_init(lt_runtime *r)
{
    /* the table's words are the level names (lt_options_load refused
     * another value) */
    lt_matmul_precision p = LT_MATMUL_F32;
    if (lt_matmul_precision_parse(lt_opt_str(LT_OPT_MATMUL_PRECISION), &p) != LT_OK)
        return LT_ERR_ARG;
    atomic_store(&r->mm_precision, (int)p);
    return LT_OK;
}

lt_matmul_precision lt_rt_matmul_precision(void)
{
    lt_runtime *r = lt_rt_peek();
    return r ? (lt_matmul_precision)atomic_load_explicit(&r->mm_precision, memory_order_relaxed)
             : LT_MATMUL_F32;
}

lt_status lt_set_matmul_precision(lt_matmul_precision p)
{
    if (!lt_matmul_precision_name(p))
        return lt_set_error(LT_ERR_ARG, "matmul precision %d: expected LT_MATMUL_F32, _DEFAULT, "
                            "_HIGH or _HIGHEST", (int)p);
    lt_runtime *r = lt_rt();
    if (!r) return LT_ERR_INTERNAL;
    atomic_store(&r->mm_precision, (int)p);
    return LT_OK;
}

lt_matmul_precision lt_get_matmul_precision(void)
{
    lt_runtime *r = lt_rt();
    return r ? (lt_matmul_precision)atomic_load(&r->mm_precision) : LT_MATMUL_F32;
}

char *lt_matmul_precision_report(void)
{
    lt_matmul_precision p = lt_rt_matmul_precision();
    const char *what = "?";
    for (int i = 0; i < N_LEVELS; i++)
        if (levels[i].p == p) what = levels[i].what;
    lt_sb sb = {0};
    lt_sb_printf(&sb, "lazytpu: f32 matrix products at matmul precision '%s' (%s)\n",
                 lt_matmul_precision_name(p) ? lt_matmul_precision_name(p) : "?", what);
    return lt_sb_take(&sb);
}

/* The report's first line, whether or not lt_init ran (metrics/report.h). */
__attribute__((constructor)) static void register_report_header(void)
{
    lt_report_section_add(LT_REPORT_HEAD, 0, lt_matmul_precision_report);
}
