/*
 * lazy/step_time.h — where the time of a step boundary goes, recorded with
 * LAZYTPU_PROFILE=1 as the metrics "StepTime::<phase>" (ns per sample;
 * bench/step_latency.py prints them per step). Off (the default) every
 * call site costs one predictable branch (lt_profile_on) and no clock read.
 *
 *   trace    host time from the end of the core's previous step boundary
 *            (its sync, or the wait after it) to the start of this sync
 *   capture  roots taken, graph captured and hashed
 *   program  compile cache lookup (or compile)
 *   buffers  parameters bound, outputs donated / allocated, output nodes
 *   submit   job queued, root tensors replaced
 *   wake     job queued -> an executor starts it (the core's worker, or a
 *            waiting caller running it inline: lazy/device.c)
 *   execute  the program runs (the "execute" trace event's span)
 *   done     the job finished -> a caller that slept waiting for it runs
 *   wait     a caller's wait for a job (lt_core_wait, lt_buffer_wait),
 *            when it had to wait
 */
#ifndef LT_STEP_TIME_H
#define LT_STEP_TIME_H

#include <stdint.h>

typedef enum lt_step_phase {
    LT_PHASE_TRACE, LT_PHASE_CAPTURE, LT_PHASE_PROGRAM, LT_PHASE_BUFFERS, LT_PHASE_SUBMIT,
    LT_PHASE_WAKE, LT_PHASE_EXECUTE, LT_PHASE_DONE, LT_PHASE_WAIT, LT_NUM_PHASES
} lt_step_phase;

/* Adds ns to the metric "StepTime::<phase>". Call only when lt_profile_on(). */
void lt_step_time_add(lt_step_phase ph, int64_t ns);
/* Records t (lt_now_ns) as the end of a step boundary on core (a sync's
 * end, a wait's end); the next lt_step_time_trace of core measures from
 * the latest such end. Invalid cores are ignored. */
void lt_step_time_mark_end(int core, int64_t t);
/* Adds the "trace" phase: t - the core's last marked end (nothing before
 * the first end). */
void lt_step_time_trace(int core, int64_t t);

#endif
