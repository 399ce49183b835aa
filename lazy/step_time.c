/*
 * lazy/step_time.c — step-boundary phase times under LAZYTPU_PROFILE (see
 * step_time.h). The per-core "last end" stamps are profile state only.
 */
#include <stdatomic.h>
#include "step_time.h"
#include "lazytpu.h"

#define LT_STEP_TIME_CORES 64

static const char *const names[LT_NUM_PHASES] = {
    "StepTime::trace", "StepTime::capture", "StepTime::program", "StepTime::buffers",
    "StepTime::submit", "StepTime::wake", "StepTime::execute", "StepTime::done",
    "StepTime::wait",
};
static _Atomic(lt_metric *) metrics[LT_NUM_PHASES];
static _Atomic int64_t last_end[LT_STEP_TIME_CORES];

void lt_step_time_add(lt_step_phase ph, int64_t ns)
{
    if ((unsigned)ph >= LT_NUM_PHASES) return;
    lt_metric *m = atomic_load_explicit(&metrics[ph], memory_order_acquire);
    if (!m) {
        m = lt_metric_get(names[ph], LT_UNIT_NS);   /* idempotent by name */
        atomic_store_explicit(&metrics[ph], m, memory_order_release);
    }
    lt_metric_add(m, (double)(ns > 0 ? ns : 0));
}

void lt_step_time_mark_end(int core, int64_t t)
{
    if (core < 0 || core >= LT_STEP_TIME_CORES) return;
    int64_t prev = atomic_load_explicit(&last_end[core], memory_order_relaxed);
    while (t > prev && !atomic_compare_exchange_weak(&last_end[core], &prev, t)) {}
}

void lt_step_time_trace(int core, int64_t t)
{
    if (core < 0 || core >= LT_STEP_TIME_CORES) return;
    int64_t prev = atomic_load_explicit(&last_end[core], memory_order_relaxed);
    if (prev > 0 && t > prev) lt_step_time_add(LT_PHASE_TRACE, t - prev);
}
