/*
 * spawn/reduce.h — the element-wise reductions of the collectives.
 */
#ifndef LT_SPAWN_REDUCE_H
#define LT_SPAWN_REDUCE_H

#include <stdint.h>
#include "lazytpu.h"

/* dst[i] = reduce(srcs[0][i], ..., srcs[nsrc-1][i]) * scale for i < n.
 * Semantics per dtype (see lt_world_all_reduce): bf16 accumulates in f32
 * and rounds to nearest even once; integer sum/mul wrap; integer and/or are
 * bitwise; float and/or and every bool op are logical (0/1); min/max
 * propagate NaN; scale is ignored for bool, truncates toward zero for
 * integers. dst may alias srcs[0] but no other source. Returns LT_ERR_ARG
 * for an unknown dtype or reduce type (no message set). */
lt_status lt_reduce_slots(void *dst, const void *const *srcs, int nsrc,
                          int64_t n, lt_dtype dt, int reduce, double scale);

/* Scales n elements in place (the world-of-1 path of all_reduce). */
void lt_reduce_scale(void *buf, int64_t n, lt_dtype dt, double scale);

/* Two-level reductions (hosts): the dtype partial results are kept in,
 * f32 for bf16 (rounded once at the end, as on one host), else dt itself. */
lt_dtype lt_reduce_acc_dtype(lt_dtype dt);
/* dst (n elements of lt_reduce_acc_dtype(dt)) = reduce of srcs (dt), no
 * scale. Same semantics otherwise; dst must not alias any source. */
lt_status lt_reduce_partial(void *dst, const void *const *srcs, int nsrc,
                            int64_t n, lt_dtype dt, int reduce);
/* dst (n elements of dt) = reduce of srcs (acc dtype) * scale, rounding
 * bf16 once. dst must not alias any source. */
lt_status lt_reduce_finish(void *dst, const void *const *srcs, int nsrc,
                           int64_t n, lt_dtype dt, int reduce, double scale);

#endif
