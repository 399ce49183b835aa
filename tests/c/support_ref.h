/*
 * tests/c/support_ref.h — a naive reference evaluator for every computing op
 * of lazy/ops.def, written independently of lazy/ and lazy/kernels/ from
 * PyTorch's documented semantics. Values are doubles; results are rounded to
 * the output's logical dtype (f32, bf16 nearest-even, ints truncated, bool
 * x != 0) so tests compare like with like.
 *
 * Not covered (ref_eval returns -1): leaves (data, scalar), random ops and
 * collectives (tests check those by properties).
 */
#ifndef LT_SUPPORT_REF_H
#define LT_SUPPORT_REF_H

#include "lazytpu.h"

typedef struct ref_array {
    lt_shape shape;
    lt_dtype dtype;     /* logical dtype (what PyTorch sees) */
    int wrapped;        /* 1: a Python number, weak in promotion (0-dim) */
    double *v;          /* numel values, row-major; malloc'd, owned */
} ref_array;

/* Allocates a zeroed array of `shape`/`dtype` into *a (wrapped = 0).
 * Returns 0, or -1 on malloc failure. */
int ref_array_init(ref_array *a, lt_dtype dtype, const lt_shape *shape);
void ref_array_free(ref_array *a);      /* NULL-safe; frees a->v only */

/* Evaluates `op` (attrs may be NULL) on in[0..n_in). On success returns 0 and
 * fills *out (caller frees with ref_array_free); output shape and dtype come
 * from the reference's own reading of the op's rules. On an unsupported op
 * or inputs that do not fit the op returns -1 with ref_error() set. */
int ref_eval(lt_op op, const lt_attrs *attrs, const ref_array *in, int n_in,
             ref_array *out);
const char *ref_error(void);

/* PyTorch's result_type over the inputs: dimensioned tensors > 0-dim
 * tensors > wrapped numbers, a weaker tier counting only when it is of a
 * higher category (bool < integer < float); wrapped floats count as f32. */
lt_dtype ref_result_type(const ref_array *in, int n);
/* Rounds v to what dtype dt can hold (f32 / bf16 round to nearest even). */
double ref_round(double v, lt_dtype dt);
/* Independent f32 -> bf16 -> f32 rounding (nearest even, NaN kept). */
float ref_bf16_round(float f);
/* IEEE half: the nearest half value (ties to even), and its bits. */
float ref_f16_round(float f);
uint16_t ref_f16_bits(float f);

#endif
