/*
 * lazy/shape_int.h — helpers shared by the files of the shape rules
 * (shape.c: dtypes and the general rules; shape_conv.c: convolution and
 * pooling). Internal to lazy/: not part of shape.h's contract.
 */
#ifndef LT_SHAPE_INT_H
#define LT_SHAPE_INT_H

#include <stdint.h>
#include "shape.h"

/* Sets and returns error st with "op: [2, 3] (f32), [4] (f32): <msg>" (the
 * operands are left out when n == 0). */
__attribute__((format(printf, 5, 6)))
lt_status lt_shape_fail(lt_status st, lt_op op, const lt_operand *in, int n,
                        const char *fmt, ...);

/* LT_ERR_ARG "needs k attributes (what), got n" when a->n < k, else LT_OK. */
lt_status lt_shape_need_attrs(lt_op op, const lt_operand *in, int n,
                              const lt_attrs *a, int k, const char *what);

#define TRY(x) do { lt_status st_ = (x); if (st_ != LT_OK) return st_; } while (0)

/* Attribute arithmetic is done in 128 bits (attributes come from the user
 * and may be anything); results are clamped back to int64 (a clamped size
 * then fails lt_shape_fits). */
typedef __int128 i128;
static inline int64_t clamp64(i128 v)
{
    return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
}

#endif
