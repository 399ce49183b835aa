/*
 * lazy/kernels/fused.h — the fused elementwise interpreter.
 *
 * A fused program (lt_fused) is a small register program over the linear
 * index of an iteration shape: LOAD instructions read input views (strided,
 * broadcast, any storage dtype) into registers converted to the compute type
 * (float, double or int64_t); op instructions apply an ops.def expression
 * register-wise; after each op the value is narrowed to the node's dtype
 * (bool -> 0/1, int in a float group -> trunc, f32 in an f64 group ->
 * rounded; bf16 intermediates stay f32 as on a TPU, except an explicit
 * cast op to bf16, which rounds to nearest even in the register, like
 * XLA's convert). Stores convert to the
 * output dtype. Execution walks blocks of at most LT_FUSED_BLOCK elements
 * (whole-kernel runs: 256, which measured fastest), so every register is a
 * small array that stays in L1 and each op is a vectorisable loop; f32
 * exp/log/tanh/erf (and so sigmoid, silu, gelu) use vmath.h's vectorisable
 * versions. Broadcast inputs are spread into a block once per run (at
 * bind), contiguous inputs of the compute type are read in place, and an
 * op stored to an output of the compute type writes there directly. Whole
 * kernels run on the core's helper threads (par.h).
 *
 * Building: lt_fused_new, then lt_fused_load / lt_fused_op (values are SSA
 * ids), lt_fused_store / lt_fused_set_result, and lt_fused_finish (register
 * allocation by liveness). Running: lt_fused_run for a whole elementwise
 * kernel; lt_fused_bind + lt_fused_eval for callers (reductions) that consume
 * blocks of the result value themselves.
 */
#ifndef LT_FUSED_H
#define LT_FUSED_H

#include "kernel.h"

#define LT_FUSED_BLOCK 1024
#define LT_FUSED_LOAD 0xFFFF        /* instruction op code of a load */
/* Elements per block of a whole-kernel run: registers of 256 elements
 * (1 KiB for f32) packed next to each other measured ~1.5x faster than
 * LT_FUSED_BLOCK (L1 set conflicts). */
#ifndef LT_FUSED_RUN_BLOCK
#define LT_FUSED_RUN_BLOCK 256
#endif

typedef struct lt_fused_ins {
    uint16_t op;        /* lt_op or LT_FUSED_LOAD */
    uint8_t narrow;     /* node dtype (lt_dtype) for post-op narrowing */
    uint8_t direct;     /* after finish: 1 + output written straight by
                           this op when its dtype is the compute type */
    int32_t dst;        /* SSA value before finish, register after */
    int32_t a, b, c;    /* operands (-1 none); LOAD: a = input index */
} lt_fused_ins;

typedef struct lt_fused {
    lt_dtype ctype;     /* LT_F32, LT_F64 or LT_I64 */
    lt_shape shape;     /* iteration shape (inputs are views of this shape) */
    int n_in;           /* input views */
    int n_ins, cap_ins;
    lt_fused_ins *ins;
    int n_regs;         /* after finish */
    int n_out, cap_out;
    int32_t *out_val;   /* value (register after finish) stored to out[k] */
    int32_t result;     /* value handed to lt_fused_eval's caller, -1 none */
    int finished;
    int compute_bound;  /* after finish: holds gelu / gelu_backward, whose
                           math outlasts the memory traffic (no software
                           prefetch of its contiguous loads) */
} lt_fused;

/* Compute type of a node: f64 if any of dts is f64, else f32 if any is a
 * float (f32/bf16), else i64. */
lt_dtype lt_fused_ctype(const lt_dtype *dts, int n);

/* New empty program. NULL on malloc failure. Free with lt_fused_free. */
lt_fused *lt_fused_new(lt_dtype ctype, const lt_shape *shape, int n_in);
void lt_fused_free(lt_fused *f);
/* Deep copy (NULL on malloc failure). */
lt_fused *lt_fused_clone(const lt_fused *f);
/* Appends a load of input view `input`; returns its value id (-1 on OOM). */
int lt_fused_load(lt_fused *f, int input);
/* Appends op (an elementwise ops.def op) on values a, b, c (-1 unused);
 * node_dtype drives narrowing. Returns the value id (-1 on OOM). */
int lt_fused_op(lt_fused *f, lt_op op, lt_dtype node_dtype, int a, int b,
                int c);
/* Stores value into out view k = the returned index (-1 on OOM). */
int lt_fused_store(lt_fused *f, int value);
void lt_fused_set_result(lt_fused *f, int value);
/* Allocates registers; after this the program is immutable and may be run
 * concurrently. Returns LT_OK or LT_ERR_INTERNAL on malformed programs. */
lt_status lt_fused_finish(lt_fused *f);

/* Runs a finished program over its whole shape: in[f->n_in] views of
 * f->shape, out[f->n_out] contiguous buffers of f->shape (any dtype). Uses
 * up to ctx->nthreads OpenMP threads. Returns LT_OK (or LT_ERR_OOM if the
 * register scratch cannot be allocated). */
lt_status lt_fused_run(const lt_fused *f, const lt_view *in,
                       const lt_view *out, const lt_kernel_ctx *ctx);

/* Runs n_seg finished programs (a horizontal fusion, lazy/compile_hfuse.c)
 * as one kernel: segment k is seg[k] over in[k * seg[k]->n_in ...] and
 * out[k * seg[k]->n_out ...] (segments laid out one after the other, as
 * lt_fused_run's arguments). The element count of all segments together
 * is split over up to ctx->nthreads workers in one helper-pool dispatch
 * when some segment alone would use threads (lazy/kernels/fused_multi.c). Segments must not write what another
 * reads. Returns LT_OK, LT_ERR_OOM, or the first segment's
 * lt_fused_bound_status error. */
lt_status lt_fused_run_multi(lt_fused *const *seg, int n_seg, const lt_view *in,
                             const lt_view *out, const lt_kernel_ctx *ctx);

/* ---- block evaluation for consumers (reductions) ---- */
typedef struct lt_fused_bound lt_fused_bound;
/* Prepares f for lt_fused_eval on views in[] (and optional contiguous outs,
 * stored during eval; NULL = no stores). Returns NULL on OOM. */
lt_fused_bound *lt_fused_bind(const lt_fused *f, const lt_view *in,
                              const lt_view *out);
/* lt_fused_bind for a whole-kernel run: registers are LT_FUSED_RUN_BLOCK
 * elements apart (regs of lt_fused_regs_bytes(f) / LT_FUSED_BLOCK *
 * LT_FUSED_RUN_BLOCK bytes; evals of at most LT_FUSED_RUN_BLOCK). */
lt_fused_bound *lt_fused_bind_run(const lt_fused *f, const lt_view *in,
                                  const lt_view *out);
void lt_fused_unbind(lt_fused_bound *b);
/* Bytes of register space one thread needs for lt_fused_eval. */
size_t lt_fused_regs_bytes(const lt_fused *f);
/* Allocates register space placed half a page off page alignment, so
 * register stores never 4K-alias with loads from (page-aligned) buffers.
 * NULL on failure. Free with lt_fused_regs_free. */
void *lt_fused_regs_alloc(size_t bytes);
void lt_fused_regs_free(void *regs);
/* Evaluates positions [i0, i0 + n) (n <= LT_FUSED_BLOCK) of the iteration
 * shape into regs (lt_fused_regs_bytes, 64-byte aligned), performs stores if
 * bound with outputs, and returns a pointer to the n values of f->result as
 * the compute type (float / double / int64_t). */
const void *lt_fused_eval(const lt_fused_bound *b, int64_t i0, int n,
                          void *regs);
/* After the evals of a bound program: LT_OK, or LT_ERR_VALUE (message set,
 * eager's "ZeroDivisionError" first) when an integer floor_divide,
 * remainder or fmod met a zero divisor. */
lt_status lt_fused_bound_status(const lt_fused_bound *b);

/* lt_fused_bind for lt_fused_eval_range: the blocks walked are those of a
 * whole-kernel run (LT_FUSED_RUN_BLOCK elements), outputs required. */
lt_fused_bound *lt_fused_bind_range(const lt_fused *f, const lt_view *in,
                                    const lt_view *out);
/* Evaluates positions [i0, i0 + n) of a program bound by
 * lt_fused_bind_range (stores only; regs as for lt_fused_eval), e.g. a
 * GEMM epilogue on the rows a worker has just computed. */
void lt_fused_eval_range(const lt_fused_bound *b, int64_t i0, int64_t n,
                         void *regs);

/* Converts n elements of compute type ctype to storage dtype dt at dst. */
void lt_fused_store_block(const void *src, lt_dtype ctype, void *dst,
                          lt_dtype dt, int n);

#endif
