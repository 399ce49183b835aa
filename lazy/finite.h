/*
 * lazy/finite.h — LAZYTPU_CHECK_FINITE: the opt-in search for the first op
 * of a step that produced a NaN or an Inf (like torch.autograd's anomaly
 * detection, for the forward and backward values of a device program).
 *
 * When the variable is set at lt_init: every traced node records the user's
 * frame (trace.c), programs are compiled without fusion so that every op's
 * value is materialised (compile_fuse.c), and after each step the executor
 * calls lt_finite_check on the step's outputs (exec.c). The first step whose
 * float output holds a NaN/Inf fails the program with LT_ERR_VALUE; the
 * executor appends the op, its operand shapes/dtypes and the traced line.
 * Slow (no fusion, a scan of every value): a debugging aid.
 */
#ifndef LT_FINITE_H
#define LT_FINITE_H

#include "program.h"

/* LT_OK if every float output view of `step` is finite, else LT_ERR_VALUE
 * with the message "LAZYTPU_CHECK_FINITE: <op> produced NaN|Inf (element i
 * of <dtype><shape>)", plus a note when an input of the step already held a
 * non-finite value (it came into the program as data). Integer and bool
 * outputs are not scanned. `op` names the step (its node's op: a fused
 * step holds one op when fusion is off); `out`/`in` are its bound views. */
lt_status lt_finite_check(const lt_step *step, lt_op op, const lt_view *in,
                          const lt_view *out);

#endif
