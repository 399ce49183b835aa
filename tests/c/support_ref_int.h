/* tests/c/support_ref_int.h — helpers shared by the reference evaluator's
 * files (support_ref.c, support_ref_nn.c); internal to them. */
#ifndef LT_SUPPORT_REF_INT_H
#define LT_SUPPORT_REF_INT_H

#include "support_ref.h"

/* Sets ref_error() to the formatted message; returns -1. */
__attribute__((format(printf, 1, 2))) int ref_fail(const char *fmt, ...);
int64_t ref_numel(const lt_shape *s);
lt_shape ref_mkshape(int nd, const int64_t *d);

/* ref_eval for the LT_KIND_CONV and LT_KIND_POOL ops (support_ref_nn.c). */
int ref_eval_conv(lt_op op, const lt_attrs *at, const ref_array *in, ref_array *out);
int ref_eval_pool(lt_op op, const lt_attrs *at, const ref_array *in, ref_array *out);

#endif
