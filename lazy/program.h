/*
 * lazy/program.h — the compiled program (internal to compile*.c / exec.c).
 *
 * A program is a list of steps. Each step reads "program views" (lt_pview):
 * an lt_view whose data pointer is resolved at run time from a base
 * (parameter buffer, scalar-parameter slot, program constant, scratch arena
 * at a byte offset, or an output buffer). Steps are fused elementwise
 * programs, reductions over a fused producer, or library kernels.
 */
#ifndef LT_PROGRAM_H
#define LT_PROGRAM_H

#include <stdatomic.h>
#include "compile.h"
#include "kernels/kernel.h"
#include "kernels/fused.h"
#include "kernels/reduce.h"

enum lt_base {
    LT_BASE_PARAM = 0,  /* index = param (data) */
    LT_BASE_SLOT,       /* index = param (scalar value converted to v.dtype) */
    LT_BASE_CONST,      /* index = program constant */
    LT_BASE_SCRATCH,    /* byte_off into the scratch arena */
    LT_BASE_OUTPUT,     /* index = output */
    LT_BASE_BUF         /* compile time only: index = planned buffer id */
};

typedef struct lt_pview {
    uint8_t base;       /* enum lt_base */
    int32_t index;
    int64_t byte_off;
    lt_view v;          /* v.data is NULL in the program */
} lt_pview;

/* LT_STEP_GEMM_EPI: an mm / addmm (in[0..2 or 3), out[0]) whose fused
 * program runs on each block of the result right after the block's GEMM
 * (lt_kernel_matmul_epi): the program's inputs follow the GEMM's operands
 * in in[], its stores follow out[0] in out[]. */
enum lt_step_kind { LT_STEP_FUSED = 0, LT_STEP_REDUCE, LT_STEP_KERNEL, LT_STEP_GEMM_EPI };

typedef struct lt_step {
    int kind;
    lt_op op;
    lt_attrs attrs;
    lt_kernel_fn fn;          /* KERNEL */
    int n_in;
    lt_pview *in;
    int n_out;                /* FUSED: stores; REDUCE: [0] result, [1..] stores */
    lt_pview *out;
    lt_fused *fused;          /* FUSED, REDUCE, GEMM_EPI (owned) */
    lt_reduce_plan plan;      /* REDUCE */
    int32_t *hint;            /* FUSED: per out, preferred donor input or -1 */
    int32_t node;             /* graph position of the node the step computes
                                 (a fused group: its last member), -1 for an
                                 output copy; for error messages */
    int n_seg;                /* FUSED: 0 = one program; > 1 = horizontal
                                 fusion (compile_hfuse.c): segment k runs
                                 seg[k] (the same instructions, its own
                                 shape; seg[0] == fused) over in[k * n_in /
                                 n_seg ...] and out[k * n_out / n_seg ...] */
    lt_fused **seg;           /* owned array; seg[1..] owned too */
} lt_step;

/* Inputs [*lo, *hi) of the segment of step s that stores out[k]: all of
 * them unless s is a horizontal fusion. */
static inline void lt_step_seg_inputs(const lt_step *s, int k, int *lo, int *hi)
{
    *lo = 0;
    *hi = s->n_in;
    if (s->n_seg > 1) {
        int per_in = s->n_in / s->n_seg, per_out = s->n_out / s->n_seg;
        int seg = per_out > 0 ? k / per_out : 0;
        *lo = seg * per_in;
        *hi = *lo + per_in;
    }
}

struct lt_program {
    atomic_int refs;
    int n_params;
    uint8_t *param_scalar;    /* 1 = scalar parameter */
    uint8_t *param_dtype;     /* lt_dtype of the parameter node */
    int n_outputs;
    lt_shape *out_shape;
    uint8_t *out_dtype;
    int *out_donor;
    int *out_alias;
    int *out_same;            /* earlier output sharing k's buffer, or -1 */
    int n_consts;
    uint64_t *consts;         /* constant values stored in their dtype */
    int n_steps;
    lt_step *steps;
    size_t scratch_bytes;
    int n_kernels;
    int check_finite;         /* LAZYTPU_CHECK_FINITE at compile: unfused,
                                 each step's values scanned (finite.h) */
    int mm_precision;         /* the graph's lt_matmul_precision: handed to
                                 every kernel (lt_kernel_ctx) */
};

/* Frees a program's contents (not refcount-aware; used by release and on
 * compile failure). NULL-safe. */
void lt_program_destroy(lt_program *p);

/* Writes value converted to dt into an 8-byte slot. */
void lt_slot_store(uint64_t *slot, double value, lt_dtype dt);

#endif
