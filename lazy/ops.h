/*
 * lazy/ops.h — the op table (lazy/ops.def) as data: the columns every pass
 * asks about an op, read from one row per op (lazy/ops.c) instead of a
 * switch per pass.
 *
 * The enum, names, arity and kind are in include/lazytpu.h (lt_op_name,
 * lt_op_arity, lt_op_kind_of); the shape and dtype rules in shape.h
 * (lt_op_shape_rule, lt_op_dtype_rule); the kernel in kernels/kernel.h
 * (lt_kernel_for); the SPMD rule class in spmd.h (lt_spmd_rule_of). All of
 * them read the rows of lazy/ops.c.
 */
#ifndef LT_OPS_H
#define LT_OPS_H

#include "lazytpu.h"

/* ops.def's cost column: may the compiler recompute the op instead of
 * storing its value (fusion inlines a cheap broadcast group into each
 * consumer)? cheap = no transcendental, no division-like op. */
typedef enum lt_op_cost { LT_COST_cheap, LT_COST_costly } lt_op_cost;

/* ops.def's checks column: what the op's kernel checks in its input VALUES
 * at run time (every shape and dtype is checked when the op is traced).
 *   none     nothing: valid shapes never fail
 *   index    index / class ids in range (indexing, losses): the kernel step
 *            fails on a bad value, so the node records the user's line
 *   divisor  an integer divisor is not zero (ZeroDivisionError, as eager;
 *            checked by the fused interpreter) */
typedef enum lt_op_checks { LT_CHECKS_none, LT_CHECKS_index, LT_CHECKS_divisor } lt_op_checks;

/* ops.def's ident column: the op's identity element u.
 *   binary ops: x op u == x, so `x op u` folds to x (compile_cse.c); _r:
 *     only as the right operand (x - 0, x / 1), else either side.
 *   reductions: the accumulator's start (lazy/kernels/reduce.c); lowest /
 *     highest are -inf / +inf for floats, the type's limits for integers. */
typedef enum lt_op_ident {
    LT_IDENT_none, LT_IDENT_zero, LT_IDENT_zero_r, LT_IDENT_one, LT_IDENT_one_r,
    LT_IDENT_lowest, LT_IDENT_highest
} lt_op_ident;

/* Checks n inputs against op's in_min / in_max columns. LT_OK, or
 * LT_ERR_ARG with "<op>: takes N inputs, got n" (or the range). */
lt_status lt_op_check_inputs(lt_op op, int n);

/* The columns of op (an invalid op: costly, none, none). */
int lt_op_cheap(lt_op op);                 /* 1 if its cost is cheap */
lt_op_checks lt_op_checks_of(lt_op op);
lt_op_ident lt_op_ident_of(lt_op op);

#endif
