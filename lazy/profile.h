/*
 * lazy/profile.h — LAZYTPU_PROFILE=1: device time of every program step
 * (kernel, fused group, reduction) recorded per op as the metric
 * "KernelTime::<name>", and the "== kernel profile ==" table of the
 * metrics report (per op: calls, total, per program run, share).
 * Off (the default) it costs one predictable branch per step.
 */
#ifndef LT_PROFILE_H
#define LT_PROFILE_H

#include <stdint.h>
#include "program.h"

/* 1 when LAZYTPU_PROFILE is set to a non-zero value (read once). */
int lt_profile_on(void);

/* Records ns of device time for step (name from its kind and op). */
void lt_profile_step(const lt_step *step, int64_t ns);

#endif
