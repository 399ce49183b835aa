/*
 * lazy/compile.h — graph -> program, and running a program.
 *
 * A program is independent of node pointers and parameter values: it refers
 * to parameters and outputs by index, so one compiled program serves every
 * graph with the same key. Compilation: dead code and common subexpressions
 * removed; movement ops folded into strided views of their source;
 * elementwise ops (with broadcasts and scalar parameters) fused into
 * single-pass kernels; reductions fused with their elementwise producers;
 * library kernels (matmul, conv, ...) left whole; intermediate buffers planned
 * by liveness into one scratch arena; outputs that overwrite a parameter of the
 * same shape/dtype may reuse ("donate") that parameter's buffer.
 */
#ifndef LT_COMPILE_H
#define LT_COMPILE_H

#include "graph.h"
#include "device.h"

typedef struct lt_program lt_program;

/* What the compiler is asked to do besides the graph (the runtime's
 * settings, passed in: compile_*.c read no global state). */
typedef struct lt_compile_opts {
    int check_finite;     /* LAZYTPU_CHECK_FINITE: no fusion, every step's
                             output scanned for NaN/Inf (lazy/finite.h) */
    int no_hfuse;         /* LAZYTPU_HFUSE=0: no horizontal fusion */
    int no_epilogue;      /* LAZYTPU_GEMM_EPILOGUE=0: no GEMM epilogues */
} lt_compile_opts;

/* Compiles g with options o (NULL: all zero). Caller owns 1 reference.
 * Errors: LT_ERR_* with message. */
lt_status lt_compile_with(const lt_graph *g, const lt_compile_opts *o, lt_program **out);
/* lt_compile_with the runtime's options (lt_rt_compile_opts; init.c). */
lt_status lt_compile(const lt_graph *g, lt_program **out);
/* The runtime's compile options (all zero before lt_init; init.c). */
lt_compile_opts lt_rt_compile_opts(void);
lt_program *lt_program_retain(lt_program *p);
void lt_program_release(lt_program *p);

int lt_program_n_params(const lt_program *p);
int lt_program_n_outputs(const lt_program *p);
/* Output shape/dtype (storage dtype) of output k. */
const lt_shape *lt_program_output_shape(const lt_program *p, int k);
lt_dtype lt_program_output_dtype(const lt_program *p, int k);
/* Param index whose buffer output k may be written into in place when the
 * caller holds that buffer exclusively, or -1. */
int lt_program_output_donor(const lt_program *p, int k);
/* If output k is just parameter j (a root that is already data, or a pure
 * reshape of it), returns j: the caller shares the buffer, no copy. Else -1. */
int lt_program_output_alias(const lt_program *p, int k);
/* If output k is the same value as an earlier output k0 < k (one node
 * reached twice, e.g. g and 0 + g), returns k0: the program writes only
 * k0's buffer and the caller passes that buffer as output k too (the
 * values are immutable, so sharing is safe). Else -1. */
int lt_program_output_same(const lt_program *p, int k);
/* Bytes of scratch the program needs for intermediates. */
size_t lt_program_scratch_bytes(const lt_program *p);
/* Kernel count after fusion (for tests/metrics). */
int lt_program_n_kernels(const lt_program *p);

/* Everything one execution needs. Buffers are owned references, released
 * (with the arrays) by lt_exec_args_free. */
typedef struct lt_exec_args {
    int n_params;
    lt_buffer **param_bufs;   /* data params (NULL for scalar params) */
    double *param_values;     /* scalar params */
    int n_outputs;
    lt_buffer **out_bufs;     /* allocated by the caller (or donated/aliased) */
    lt_buffer *scratch;       /* lt_program_scratch_bytes() bytes, or NULL */
    /* For error messages only (all optional): */
    lt_node *const *nodes;    /* the graph's nodes by position (borrowed) */
    int n_nodes;
    const char *sync_frame;   /* the user's code that started the sync */
    lt_sync_cause cause;
    int *failed_node;         /* out (optional): on failure, the position in
                                 nodes of the failing step's node, or -1 */
} lt_exec_args;

/* Releases the buffers args holds (params, outputs, scratch), frees its
 * arrays and zeroes it; the borrowed fields are left alone. Safe on a
 * zeroed or already-freed args. */
void lt_exec_args_free(lt_exec_args *args);

/* Runs p with args on the calling thread (the core's worker), using the
 * core's OpenMP budget. Returns LT_OK or an error whose message is the
 * failing kernel's, followed by lt_fault_where's " [in op(shapes) -> shape
 * traced at ...; program synced at ...; core C; rank R of N]".
 * A parameter buffer that is poisoned (lt_buffer.fault) and read by a step
 * fails the program before any step runs: "<op>: input k (f32[2]) was
 * poisoned by an earlier error: <original message>"; *cause (if non-NULL)
 * then receives a reference to that buffer's fault. After a failure the
 * program's remaining collective steps still take part in their
 * collectives, as failures (lt_collective_abstain), so that the other ranks
 * get an error naming this rank instead of waiting for it. */
lt_status lt_program_run(const lt_program *p, const lt_exec_args *args,
                         int core, struct lt_fault **cause);
/* Makes p's collective steps take part in their collectives as failures
 * (lt_collective_abstain with `reason`), for a program that fails before
 * it runs. */
void lt_program_abstain(const lt_program *p, const char *reason);

#endif
