/*
 * lazytpu.h — the whole public C API of lazytpu.
 *
 * Overview
 * --------
 * lazytpu is a lazy tensor engine. Operations on device tensors are not run
 * when called: each one creates an immutable IR node (output shape and dtype
 * inferred at once, hashes computed at creation) and returns a tensor handle
 * holding that pending value. At a step boundary (lt_sync / lt_sync_core) the
 * pending graph is captured, keyed by structure + shapes + dtypes, looked up in
 * a bounded LRU compile cache, compiled on a miss (DCE, CSE, elementwise and
 * reduction fusion, buffer planning) and executed asynchronously on a simulated
 * core: a worker thread with an OpenMP thread budget and a device-memory budget.
 *
 * A C program can use lazytpu without Python:
 *
 *     lt_init();
 *     lt_shape s = lt_shape_make(2, (int64_t[]){2, 3});
 *     lt_tensor *x, *y, *z;
 *     lt_tensor_from_host(0, host, LT_F32, &s, &x);
 *     lt_trace1(LT_OP_exp, x, NULL, &y);           // pending, nothing computed
 *     lt_trace2(LT_OP_add, x, y, NULL, &z);         // pending
 *     lt_tensor_to_host(z, out, LT_F32);            // syncs, compiles, runs, waits
 *     lt_tensor_release(x); lt_tensor_release(y); lt_tensor_release(z);
 *     lt_shutdown();
 *
 * Conventions
 * -----------
 * - Functions that can fail on user input return lt_status; on failure the
 *   thread-local lt_last_error() names the op, shapes and dtypes involved.
 *   Nothing aborts on user input; assert() guards internal invariants only.
 * - Errors found while a program runs (an index out of range, a class id
 *   past the classes, a failed collective) are asynchronous. The rules
 *   (docs/errors.md):
 *   1. A failed program poisons exactly the tensors it computes (all
 *      outputs of that sync's graph on that core); their buffers are never
 *      valid. Its inputs, other programs' tensors and other cores are not
 *      affected; the core keeps running later programs.
 *   2. Reading a poisoned tensor (lt_tensor_to_host) returns the error,
 *      every time, with the same message: the kernel's message then
 *      " [in op(dtype[shape], ...) -> dtype[shape] traced at <frame>;
 *      program synced at <frame> (<cause>); core C; rank R of N]" (the
 *      traced-at frame for ops that check their input data, see
 *      lt_set_caller_hook; the rank under a world of several processes).
 *   3. Nothing else returns it: reads of other tensors, tracing, graph cuts
 *      and lt_sync of other tensors never report another program's error.
 *   4. An error that no read has returned ("unclaimed") is reported once, by
 *      the first of: lt_wait; lt_sync_core with wait=1; lt_sync_core with
 *      wait=0 and a step cause, when it waits for that program to bound the
 *      pipeline (LAZYTPU_MAX_INFLIGHT programs later on that core);
 *      lt_limit_inflight when it waits for that program. Several
 *      errors in one report: the first, with "(+N more failed programs on
 *      core C)". Afterwards no wait reports it again (reads still do).
 *   5. A program that reads a poisoned tensor fails without running: "<op>:
 *      input k (dtype[shape]) was poisoned by an earlier error: <original
 *      message>" (quoting the original error once, however long the chain),
 *      with the original's lt_status.
 *   Collectives of a failed program still take part, as failures, so every
 *   rank gets "<op>: rank R could not take part: <R's error>" at once
 *   instead of waiting for rank R.
 * - Handles are reference counted. Every function returning a handle through
 *   an out-pointer gives the caller one reference, released with *_release.
 * - The op set is the table lazy/ops.def: one line per op gives its enum
 *   (LT_OP_<name>), name, arity, kind, shape and dtype rules, kernel, SPMD
 *   rule class and the properties the compiler reads (lazy/ops.h).
 *   The table is internal; the build generates the enum's header from it.
 * - Only the functions declared LT_API here and in lazytpu_spmd.h are
 *   exported by liblazytpu.so; everything else is built hidden
 *   (-fvisibility=hidden).
 */
#ifndef LAZYTPU_H
#define LAZYTPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The public API: exported from liblazytpu.so, which is built with
 * -fvisibility=hidden (nothing else is exported). */
#ifndef LT_API
#if defined(__GNUC__) || defined(__clang__)
#define LT_API __attribute__((visibility("default")))
#else
#define LT_API
#endif
#endif

/* ------------------------------------------------------------------ errors */

typedef enum lt_status {
    LT_OK = 0,
    LT_ERR_ARG,        /* bad argument (null, out of range, wrong attr) */
    LT_ERR_SHAPE,      /* shapes do not fit the op */
    LT_ERR_DTYPE,      /* dtype not supported by the op / bad promotion */
    LT_ERR_OOM,        /* device memory budget (LAZYTPU_HBM_BYTES) exceeded */
    LT_ERR_DEVICE,     /* bad core index, mixing cores, core failed */
    LT_ERR_COLLECTIVE, /* collective participants disagree or peer died */
    LT_ERR_INTERNAL,   /* a bug in lazytpu: please report */
    LT_ERR_VALUE,      /* a value in a tensor's data the op cannot take, found
                          when the program runs: an integer division by zero
                          (eager's ZeroDivisionError), a NaN/Inf under
                          LAZYTPU_CHECK_FINITE (docs/errors.md) */
    LT_ERR_STATE       /* refused in the current state: something would
                          execute while lt_set_no_execution is in effect */
} lt_status;

/* Message of the last failing call on this thread ("" if none). The pointer
 * stays valid until the next failing call on the same thread. */
LT_API const char *lt_last_error(void);

/* Sets the thread's last error (printf-style) and returns `st`. Used by all
 * modules and by the shim to report errors in the same format. */
LT_API lt_status lt_set_error(lt_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ dtypes */

typedef enum lt_dtype {
    LT_F32 = 0,
    LT_BF16,
    LT_F64,
    LT_I64,
    LT_I32,
    LT_BOOL,
    LT_U8,
    LT_I8,
    LT_I16,
    LT_F16,
    LT_C64,     /* complex64: (re, im) f32 pairs; movement, casts, bitcasts */
    /* storage-only dtypes: held, transferred, moved and concatenated, never
     * computed (the op rules refuse them; the shim runs such ops on the CPU
     * fallback) */
    LT_C128,
    LT_C32,
    LT_U16,
    LT_U32,
    LT_U64,
    LT_NUM_DTYPES
} lt_dtype;

/* Bytes per element; 0 for an invalid dtype. */
LT_API size_t lt_dtype_size(lt_dtype dt);
/* "f32", "bf16", "f64", "i64", "i32", "bool", "u8", "i8", "i16", "f16",
 * "c64", "c128", "c32", "u16", "u32", "u64"; "?" for an invalid dtype. */
LT_API const char *lt_dtype_name(lt_dtype dt);
/* f32, bf16, f64, f16 (not complex: like torch's is_floating_point). */
LT_API int lt_dtype_is_float(lt_dtype dt);
LT_API int lt_dtype_is_complex(lt_dtype dt);
/* u8, i8, i16, i32, i64 (and the storage-only u16, u32, u64); not bool. */
LT_API int lt_dtype_is_int(lt_dtype dt);
/* 1 for dtypes that are only stored (c128, c32, u16, u32, u64). */
LT_API int lt_dtype_is_storage_only(lt_dtype dt);
/* PyTorch's promote_types of two tensor dtypes (bool < ints < floats <
 * complex; u8 + i8 -> i16; bf16 + f16 -> f32; f64 + c64 -> c128);
 * LT_NUM_DTYPES when PyTorch has no promotion (u16/u32/u64 with others). */
LT_API lt_dtype lt_dtype_promote(lt_dtype a, lt_dtype b);

/* bf16 conversion, round to nearest even; NaN stays NaN. */
LT_API uint16_t lt_f32_to_bf16(float f);
LT_API float lt_bf16_to_f32(uint16_t h);
/* IEEE half conversion, round to nearest even; NaN stays NaN. */
LT_API uint16_t lt_f32_to_f16(float f);
LT_API float lt_f16_to_f32(uint16_t h);
/* Converts n elements between dtypes (any pair). Float->int truncates toward
 * zero (saturating to int64, then wrapping to narrower ints like a C cast of
 * the int64), anything->bool is (x != 0); complex->real keeps the real part,
 * real->complex has imaginary part 0. */
LT_API void lt_convert(const void *src, lt_dtype src_dt, void *dst, lt_dtype dst_dt,
                       size_t n);

/* ------------------------------------------------------------------ shapes */

#define LT_MAX_DIMS 8

typedef struct lt_shape {
    int ndim;                      /* 0 = scalar */
    int64_t dims[LT_MAX_DIMS];
} lt_shape;

LT_API lt_shape lt_shape_make(int ndim, const int64_t *dims);
LT_API int64_t lt_shape_numel(const lt_shape *s);
LT_API int lt_shape_equal(const lt_shape *a, const lt_shape *b);
/* Writes "[2, 3]" into buf (always NUL-terminated); returns buf. */
LT_API char *lt_shape_str(const lt_shape *s, char *buf, size_t cap);

/* -------------------------------------------------------------------- ops */

typedef enum lt_op_kind {
    LT_KIND_LEAF,       /* device data, scalar parameter/constant */
    LT_KIND_UNARY,      /* elementwise, fusable */
    LT_KIND_BINARY,     /* elementwise with broadcasting, fusable */
    LT_KIND_TERNARY,    /* elementwise with broadcasting, fusable */
    LT_KIND_REDUCE,     /* reduction over a dim set; fusable with producers */
    LT_KIND_MATMUL,     /* BLAS */
    LT_KIND_CONV,       /* im2col + BLAS */
    LT_KIND_POOL,
    LT_KIND_NORM,       /* row-wise softmax-like kernels */
    LT_KIND_MOVEMENT,   /* views: folded into strided loads */
    LT_KIND_SCATTER,    /* base with a strided region overwritten */
    LT_KIND_CONCAT,
    LT_KIND_INDEX,
    LT_KIND_LOSS,
    LT_KIND_RANDOM,
    LT_KIND_COLLECTIVE,
    LT_KIND_BITCAST,    /* same bytes, another dtype (complex <-> real pairs) */
    LT_KIND_LINALG,     /* matrix decompositions over the last two dims (f64 inside) */
    LT_KIND_BARRIER     /* optimization barrier: the value of input 0, available only
                           once every input is (a scheduling fence; never merged) */
} lt_op_kind;

/* enum lt_op { LT_OP_<name>, ..., LT_NUM_OPS }: one value per line of the op
 * table, in table order. lazytpu_ops.h is generated by the build (into
 * <build>/include) from lazy/ops.def, which stays internal. */
#include "lazytpu_ops.h"

LT_API const char *lt_op_name(lt_op op);       /* "add"; "?" if invalid */
LT_API int lt_op_arity(lt_op op);              /* -1 = variadic */
LT_API lt_op_kind lt_op_kind_of(lt_op op);
/* Op by name, or -1. */
LT_API int lt_op_from_name(const char *name);

/* Attributes of a node. Meaning per op is documented in lazy/ops.def. */
#define LT_MAX_ATTRS 24
typedef struct lt_attrs {
    int n;                         /* used entries of i[] */
    int64_t i[LT_MAX_ATTRS];
    double f[2];
} lt_attrs;

/* Reduction kinds for collectives (attr i[0] of all_reduce etc). */
typedef enum lt_reduce_type {
    LT_REDUCE_SUM = 0, LT_REDUCE_MUL, LT_REDUCE_MIN, LT_REDUCE_MAX,
    LT_REDUCE_AND, LT_REDUCE_OR
} lt_reduce_type;

/* --------------------------------------------------------------- lifecycle */

/* Initialises the library once (idempotent, thread-safe): reads the env vars
 * (LAZYTPU_HBM_BYTES, LAZYTPU_COMPILE_CACHE_SIZE, LAZYTPU_GRAPH_LIMIT,
 * LAZYTPU_NUM_CORES), creates the cores. LAZYTPU_USE_BF16 / XLA_USE_BF16 are
 * read later, when the first device value is made (see lt_bf16_mode). */
LT_API lt_status lt_init(void);
/* Waits for all cores, stops their threads and frees everything; tensors still
 * alive afterwards must only be released. */
LT_API void lt_shutdown(void);

LT_API int lt_num_cores(void);
/* 1 when float32 is stored on the device as bf16 (LAZYTPU_USE_BF16 /
 * XLA_USE_BF16). The mode is decided once, at the first device value or the
 * first call of this function, whichever comes first (torch_xla reads
 * XLA_USE_BF16 at its first device tensor too), and holds until lt_shutdown. */
LT_API int lt_bf16_mode(void);
/* In bf16 mode, on the calling thread: on != 0 makes the ops traced from now
 * on store their float32 results as float32 (not bf16), the storage of an
 * op kept in f32 (lazytpu.amp.keep_f32); the caller rounds the kept region's
 * results back to bf16 storage with a cast. No effect outside bf16 mode or on
 * other threads (autograd's backward threads included). Returns the previous
 * setting. */
LT_API int lt_trace_keep_f32(int on);

/* How f32 matrix products are multiplied: mm, bmm, addmm, the convolutions
 * and their gradients whose operands are not both bf16. A TPU's MXU
 * multiplies bf16: at XLA's precision levels an f32 product is split into
 * bf16 passes (XLA's BF16_BF16_F32, _X3, _X6 dot algorithms; f32
 * accumulation, passes summed in XLA's order: lazy/kernels/mxu.c).
 * LT_MATMUL_F32 is plain f32 arithmetic (XLA:CPU; lazytpu's default). The
 * value is the number of bf16 passes. */
typedef enum lt_matmul_precision {
    LT_MATMUL_F32 = 0,
    LT_MATMUL_DEFAULT = 1,     /* operands rounded to bf16: ~8 mantissa bits */
    LT_MATMUL_HIGH = 3,        /* bf16x3: ~14 bits */
    LT_MATMUL_HIGHEST = 6      /* bf16x6: ~22 bits */
} lt_matmul_precision;
/* Sets the level for the graphs synced from now on (process-wide; a graph
 * holding products takes the level in its key, so a switch compiles anew).
 * The initial level is LAZYTPU_MATMUL_PRECISION's (f32, default, high,
 * highest), read by lt_init; f32 when unset. LT_ERR_ARG for another value. */
LT_API lt_status lt_set_matmul_precision(lt_matmul_precision p);
/* The current level (initialises the library if needed: LT_MATMUL_F32 when
 * that fails). */
LT_API lt_matmul_precision lt_get_matmul_precision(void);
/* "f32", "default", "high", "highest"; NULL for another value. */
LT_API const char *lt_matmul_precision_name(lt_matmul_precision p);
/* The level named s (the names above); LT_ERR_ARG naming s otherwise. */
LT_API lt_status lt_matmul_precision_parse(const char *s, lt_matmul_precision *out);

/* Device memory of one core, in bytes: held by live device buffers now, the
 * most ever held at once, and the budget (LAZYTPU_HBM_BYTES); and the number
 * of live device buffers. Freed buffers kept for reuse
 * (LAZYTPU_BUFFER_CACHE_BYTES) are not counted. */
typedef struct lt_memory_info {
    int64_t bytes_in_use;
    int64_t peak_bytes_in_use;
    int64_t bytes_limit;
    int64_t buffers_in_use;
} lt_memory_info;
/* Fills *out for `core`; LT_ERR_DEVICE for a core index out of range,
 * LT_ERR_ARG for a null out. Initialises the library if needed. */
LT_API lt_status lt_memory_info_get(int core, lt_memory_info *out);

/* ---------------------------------------------------------------- tensors */

typedef struct lt_tensor lt_tensor;

/* Copies host data (contiguous, row-major, `dtype`) to a new device tensor on
 * `core`. In bf16 mode f32 data is stored as bf16 and still reports f32.
 * Counted in TransferToDeviceTime / InboundData. Fails with LT_ERR_SHAPE for
 * a negative size or a shape of more than 2^56 elements (counting the
 * non-zero dims only, so [0, 2^40, 2^40] is refused too), LT_ERR_DTYPE,
 * LT_ERR_DEVICE (core), LT_ERR_OOM (budget); creates nothing then. */
LT_API lt_status lt_tensor_from_host(int core, const void *data, lt_dtype dtype,
                                     const lt_shape *shape, lt_tensor **out);
/* Copies the tensor's value into host memory as `dst_dtype` (contiguous).
 * Syncs the tensor first if its value is pending (cause LT_SYNC_VALUE_READ)
 * and waits until it is ready. Counted in TransferFromDeviceTime.
 * Fails with the error of the program that computed the value if that
 * program failed (the tensor is poisoned), on every call, and that error
 * is then never reported by a wait (Conventions, rules 2 and 4); errors of
 * other programs are never returned here. */
LT_API lt_status lt_tensor_to_host(lt_tensor *t, void *dst, lt_dtype dst_dtype);

LT_API lt_tensor *lt_tensor_retain(lt_tensor *t);  /* returns t; NULL-safe */
LT_API void lt_tensor_release(lt_tensor *t);       /* NULL-safe */

LT_API const lt_shape *lt_tensor_shape(const lt_tensor *t);
/* Logical dtype (what PyTorch sees). */
LT_API lt_dtype lt_tensor_dtype(const lt_tensor *t);
/* Dtype as stored on the device (bf16 for f32 in bf16 mode). */
LT_API lt_dtype lt_tensor_storage_dtype(const lt_tensor *t);
LT_API int lt_tensor_core(const lt_tensor *t);
/* 1 while the value is an unexecuted IR node. */
LT_API int lt_tensor_is_pending(const lt_tensor *t);
/* Replaces dst's value by src's (same core; shapes may differ). This is how
 * in-place updates land: dst keeps its identity, the value is a new node.
 * dst keeps its SPMD sharding (lt_tensor_keep_sharding's rule): the new
 * value is then an annotated copy of src's. LT_ERR_OOM when that copy fails
 * (dst unchanged). */
LT_API lt_status lt_tensor_assign(lt_tensor *dst, lt_tensor *src);
/* A new tensor (*out, caller releases) holding t's value: nothing is traced
 * and a value that is data stays data (a clone or detach of a computed
 * tensor adds no node to the next graph). An assign to either tensor later
 * leaves the other as it was. LT_ERR_ARG for NULL, LT_ERR_OOM. */
LT_API lt_status lt_tensor_share(lt_tensor *t, lt_tensor **out);
/* Number of live tensors on a core (for leak checks and tests). */
LT_API int64_t lt_live_tensors(int core);
/* Ops traced on `core` since its last step boundary (a sync of the core's
 * live tensors resets it; a graph cut at LAZYTPU_GRAPH_LIMIT too): the size
 * of the graph the next boundary will capture, before dead code is dropped.
 * 0 for a core out of range. Thread-safe. */
LT_API int64_t lt_pending_ops(int core);

/* ---------------------------------------------------------------- tracing */

/* Traces `op` on `inputs` (all on one core) with `attrs` (NULL = none) and
 * returns a new pending tensor. Shape/dtype rules are checked at once: on a
 * mismatch returns LT_ERR_SHAPE/LT_ERR_DTYPE/LT_ERR_ARG with a message naming
 * the op, the input shapes and dtypes, and creates nothing. Any attribute
 * value is accepted as input (no overflow); an output of more than 2^56
 * elements is LT_ERR_SHAPE. Integer arithmetic wraps (two's complement, as
 * in PyTorch); float -> integer conversions truncate, saturate, NaN -> 0. */
LT_API lt_status lt_trace(lt_op op, lt_tensor *const *inputs, int n_inputs,
                          const lt_attrs *attrs, lt_tensor **out);
LT_API lt_status lt_trace1(lt_op op, lt_tensor *a, const lt_attrs *attrs,
                           lt_tensor **out);
LT_API lt_status lt_trace2(lt_op op, lt_tensor *a, lt_tensor *b,
                           const lt_attrs *attrs, lt_tensor **out);
LT_API lt_status lt_trace3(lt_op op, lt_tensor *a, lt_tensor *b, lt_tensor *c,
                           const lt_attrs *attrs, lt_tensor **out);

/* A 0-dim scalar on `core`. A "wrapped number" (Python scalar) does not
 * promote tensor dtypes: f32 tensor + 2.5 stays f32. Values other than 0, 1
 * and -1 are graph parameters, so a changing learning rate never recompiles;
 * 0 and +-1 are baked in as constants. `dtype` must be LT_F64, LT_I64 or
 * LT_BOOL for wrapped numbers; with wrapped=0 it is an ordinary 0-dim tensor. */
LT_API lt_status lt_scalar(int core, double value, lt_dtype dtype, int wrapped,
                           lt_tensor **out);

/* ------------------------------------------------------------------- sync */

typedef enum lt_sync_cause {
    LT_SYNC_MARK_STEP = 0,
    LT_SYNC_OPTIMIZER_STEP,
    LT_SYNC_LOADER_STEP,
    LT_SYNC_VALUE_READ,
    LT_SYNC_SIZE_LIMIT,
    LT_SYNC_EXPLICIT,
    LT_SYNC_DYNAMIC_SHAPE,     /* an op whose output shape depends on values
                                  (nonzero, boolean masks) read them */
    LT_NUM_SYNC_CAUSES
} lt_sync_cause;

LT_API const char *lt_sync_cause_name(lt_sync_cause c); /* "mark_step", ... */

/* Executes the pending values of `tensors` (one graph per core involved).
 * Returns once the program is queued; with wait=1 also waits for it. After
 * the call every listed tensor refers to a device buffer (maybe not ready
 * yet: reading waits). Errors in making the program (OOM, ...) are reported
 * here, synchronously. With wait=1 a listed tensor's poison is returned
 * like a read's (claimed); errors of other programs never are. */
LT_API lt_status lt_sync(lt_tensor *const *tensors, int n, lt_sync_cause cause,
                         int wait);
/* Syncs every live pending tensor of `core` (mark_step); counts MarkStep when
 * cause is LT_SYNC_MARK_STEP. A step boundary reports unclaimed execution
 * errors of the core's programs once (Conventions, rule 4): with wait=1 all
 * up to its own program; with wait=0 those at least LAZYTPU_MAX_INFLIGHT
 * programs older than its own (the ones it waits for), so step N's error
 * surfaces at the latest at step N + LAZYTPU_MAX_INFLIGHT. Causes
 * LT_SYNC_SIZE_LIMIT and LT_SYNC_VALUE_READ report nothing. */
LT_API lt_status lt_sync_core(int core, lt_sync_cause cause, int wait);
/* Waits until all programs queued on `core` (-1: all cores) have finished.
 * Returns the first unclaimed execution error of that core (-1: of the
 * first core that has one; the next call reports the next core's), with
 * "(+N more failed programs on core C)" when there are several, and claims
 * them: each error is reported once (Conventions, rule 4). */
LT_API lt_status lt_wait(int core);
/* Back-pressure between step boundaries (lazytpu's loaders and framework
 * integrations call it after each asynchronous step): records the last
 * program queued on `core` as the end of a step and waits until at most
 * `depth` - 1 earlier steps' programs are queued or running besides it (the
 * core runs step N while the host traces step N+1 with depth 2). depth <= 0
 * means LAZYTPU_MAX_INFLIGHT. Reports an unclaimed execution error of the
 * programs it waited for (Conventions, rule 4) like a step boundary. Without
 * it a host that traces faster than its core runs queues steps without
 * limit, each holding its output buffers. LT_ERR_DEVICE for a bad core. */
LT_API lt_status lt_limit_inflight(int core, int depth);
/* Eager-op scope of the calling thread (torch_xla's eager mode): while on
 * (on != 0), programs this thread queues are counted as eager operations,
 * not in the ExecuteTime metric (torch_xla 2.9 counts an eager op's run in
 * EagerOpExecuteTime only, which its caller records). Returns the previous
 * setting. Never fails. */
LT_API int lt_set_eager_op_scope(int on);

/* Execution guard, for code that must trace as one graph (a step function
 * compiled with full_graph=True: torch_xla.compile, lazytpu.compile_step).
 * While an owner is set, nothing may execute: a sync that has a graph to run
 * (a value read of a pending value, an op whose output shape depends on
 * values, the cut at LAZYTPU_GRAPH_LIMIT, a step boundary, an explicit sync),
 * a recorded graph run on data inputs (lt_replay_run) and the shim's CPU
 * fallback fail with LT_ERR_STATE (lt_execution_check's message) and change
 * nothing. Reading a value that is already data is allowed. Process-wide,
 * not per thread (backward is traced on the autograd engine's thread), like
 * torch_xla's allow_execution. `owner` names the region in messages
 * ("torch_xla.compile(step_fn, full_graph=True)"); it is copied. NULL lifts
 * the guard. */
LT_API void lt_set_no_execution(const char *owner);
/* A malloc'd copy of the owner while the guard is set (caller frees), NULL
 * when it is not. */
LT_API char *lt_no_execution(void);
/* LT_OK while execution is allowed. While the guard is set: sets the
 * thread's error to "<owner>: <what> (at <frame>); nothing may execute while
 * the function is traced ..." and returns LT_ERR_STATE. `what` says what
 * would have run ("aten::nonzero has no lazytpu kernel and would run on the
 * CPU"); the frame is lt_set_caller's, else the caller hook's (left out when
 * unknown). */
LT_API lt_status lt_execution_check(const char *what);
/* The graphs synced so far, process-wide: every sync that has a graph to run
 * (any cause, any thread, any core) gets the next number (1, 2, ...) and its
 * graph key is kept (the last 256). Returns the number of the latest; writes
 * the keys of those numbered after `since`, oldest first, to keys[0..cap)
 * (the latest ones if there are more than cap, or than 256 are kept) and
 * their count to *n (n may be NULL). */
LT_API uint64_t lt_synced_graphs(uint64_t since, uint64_t *keys, int cap, int *n);

/* Thread-local description of the user's code that caused what follows
 * ("train.py:42 in step"), recorded on rare events (compiles, value reads,
 * fallbacks, the sync that queues a program: named in its execution errors)
 * and by lt_trace for ops that check their input data. NULL clears. The
 * string is copied. */
LT_API void lt_set_caller(const char *frame);
/* Registers fn, called on the tracing thread when the library needs the
 * user's frame and none is set (lt_set_caller): just before a sync that the
 * library starts by itself (a graph cut at LAZYTPU_GRAPH_LIMIT), and when
 * tracing an op whose kernel checks its input data at run time
 * (index_select, gather, scatter_add, embedding_backward, nll_loss,
 * nll_loss_backward: the node keeps the frame for "traced at" in execution
 * errors). fn describes the user's code with lt_set_caller; the library
 * clears the frame again afterwards. Never called for other ops. NULL
 * unregisters. */
LT_API void lt_set_caller_hook(void (*fn)(void));

/* -------------------------------------------------------- recorded graphs */

/* A recorded program: a whole graph handed over at once (the
 * torch.compile(backend="lazytpu") path, lazy/replay.c) compiled once and
 * then run on new inputs without tracing any op. Refcounted. */
typedef struct lt_replay lt_replay;

/* Syncs the pending tensors among inputs[0..n_in) (one graph, cause
 * explicit, no wait; counted in CompiledGraphInputSync), so that a graph
 * traced on them next sees them as parameters. All on one core (else
 * LT_ERR_ARG). LT_OK when none is pending. */
LT_API lt_status lt_replay_sync_inputs(lt_tensor *const *inputs, int n_in);
/* Records the computation that made outputs[0..n_out) from inputs[0..n_in):
 * the caller traced it once on the inputs while their values were data
 * (lt_replay_sync_inputs). Captures the graph reaching the outputs, compiles
 * it through the compile cache (CachedCompile / UncachedCompile,
 * CompileTime) and keeps, per program parameter, the input feeding it or a
 * constant the graph made (a scalar, a device buffer kept alive by the
 * recording). Nothing runs and the tensors are not changed. *out gets one
 * reference (lt_replay_release). Fails with LT_ERR_ARG and a message
 * starting "not replayable:" when the graph cannot be replayed (a random
 * op, whose per-call seed would be frozen; an input still pending; tensors
 * on several cores): the caller then keeps tracing lazily. */
LT_API lt_status lt_replay_record(lt_tensor *const *inputs, int n_in,
                                  lt_tensor *const *outputs, int n_out, lt_replay **out);
/* Runs r on new inputs (same count, shapes, dtypes and core as recorded,
 * else LT_ERR_ARG / LT_ERR_SHAPE naming the input) and writes
 * lt_replay_n_outputs(r) new tensors (one reference each) into outputs.
 * When every input's value is data: input buffers are bound, never donated;
 * one program is queued on the core (bounded like a step by
 * LAZYTPU_MAX_INFLIGHT, without reporting other programs' errors); the
 * outputs are data, ready when it finishes (reads wait; a failed program
 * poisons them, Conventions rule 1). When an input is still pending: the
 * recorded graph is rebuilt as IR on the inputs' values ("splice",
 * CompiledGraphSplice), nothing runs, the outputs are pending and run with
 * the rest of the step at its boundary (one program, a cache hit). Either
 * way no op goes through lt_trace (no lazytpu::<op> counts). Counted in
 * CompiledGraphRun and CompiledGraphHostTime. On failure no output is
 * created. */
LT_API lt_status lt_replay_run(lt_replay *r, lt_tensor *const *inputs, int n_in,
                               lt_tensor **outputs);
LT_API int lt_replay_n_outputs(const lt_replay *r);   /* 0 for NULL */
LT_API int lt_replay_n_nodes(const lt_replay *r);     /* nodes of the recorded graph */
LT_API uint64_t lt_replay_key(const lt_replay *r);    /* graph key (compile cache) */
LT_API lt_replay *lt_replay_retain(lt_replay *r);     /* NULL-safe, returns r */
LT_API void lt_replay_release(lt_replay *r);          /* NULL-safe */

/* ---------------------------------------------------------------- metrics */

/* Counters (monotonic int64) and timed/valued metrics (sample rings).
 * Names are interned on first use; all functions are thread-safe. */
typedef struct lt_counter lt_counter;
typedef struct lt_metric lt_metric;

LT_API lt_counter *lt_counter_get(const char *name);   /* creates if absent */
LT_API void lt_counter_add(lt_counter *c, int64_t delta);
LT_API void lt_counter_inc_name(const char *name, int64_t delta);
LT_API int64_t lt_counter_value(const char *name);     /* 0 if absent */

typedef enum lt_metric_unit {
    LT_UNIT_NS = 0,    /* reported as 02m57s694ms418.595us */
    LT_UNIT_BYTES,     /* reported base 1024: 1.50MB */
    LT_UNIT_COUNT      /* plain number */
} lt_metric_unit;

LT_API lt_metric *lt_metric_get(const char *name, lt_metric_unit unit);
LT_API void lt_metric_add(lt_metric *m, double value);
/* Monotonic clock in ns. */
LT_API int64_t lt_now_ns(void);

/* Free-form analysis lines appended after the metrics in the report (e.g.
 * recompilation causes); kept in a bounded ring. */
LT_API void lt_metrics_note(const char *section, const char *line);

/* The torch_xla-format text report / a JSON dump. malloc'd; caller frees. */
LT_API char *lt_metrics_report(void);
LT_API char *lt_metrics_json(void);
/* Newline-separated names; malloc'd; caller frees. */
LT_API char *lt_counter_names(void);
LT_API char *lt_metric_names(void);
/* Metric data: total samples, accumulator; returns 0 if the metric exists. */
LT_API int lt_metric_data(const char *name, int64_t *total_samples,
                          double *accumulator);
/* The newest min(kept, cap) samples of a metric, oldest first: values and
 * their times (lt_now_ns clock) into the caller's arrays (either may be
 * NULL). Returns the count, -1 if the metric is unknown. */
LT_API int lt_metric_samples(const char *name, double *vals, int64_t *ts_ns, int cap);
/* Resets every counter and metric to zero (names stay known). */
LT_API void lt_metrics_clear_all(void);
/* Resets only the counters / only the metrics (the analysis notes stay). */
LT_API void lt_metrics_clear_counters(void);
LT_API void lt_metrics_clear_metrics(void);

/* -------------------------------------------------------------- diagnosis */

/* Records one CPU fallback call of `aten_op` ("aten::nonzero") that took
 * `ns` nanoseconds (<= 0: unknown), called from `frame` ("train.py:57 in
 * step"; NULL/"" if unknown). Keeps per op: calls, total time, first 3
 * distinct frames. Strings are copied. Thread-safe; never fails. The shim
 * calls it once per fallback (it also counts aten::<op> itself). */
LT_API void lt_fallback_record(const char *aten_op, int64_t ns, const char *frame);
/* The "fallback" analysis section: "== fallback ==" then, per op by call
 * count, "aten::nonzero: 12 calls, 003ms200.000us total, first at
 * train.py:57 in step" and a "  hint: ..." line when a native alternative
 * exists. "" when nothing fell back. malloc'd; caller frees. */
LT_API char *lt_fallback_report(void);
/* The "== host reads ==" section of the report (malloc'd, "" when no device
 * value was read on the host): per user line, reads, reads per step, how
 * many had to run the graph and the time the host waited. */
LT_API char *lt_host_read_report(void);
/* The report's first line: "lazytpu: f32 matrix products at matmul
 * precision 'default' (1 bf16 pass, as a TPU at XLA DEFAULT)" for the
 * current level (lt_matmul_precision). malloc'd; caller frees. */
LT_API char *lt_matmul_precision_report(void);

/* 1 when LAZYTPU_DEBUG=1 or PT_XLA_DEBUG=1 (read by lt_init) or
 * lt_debug_set(>0) is in effect: each step boundary then checks the last 4
 * steps (after a warm-up of 2) and prints one "lazytpu: warning: ..." line
 * per problem to stderr (recompiles, value reads, new CPU fallbacks, input
 * waits). */
LT_API int lt_debug_enabled(void);
/* 0 = off, 1 = warnings to stderr, 2 = warnings collected only (quiet). */
LT_API void lt_debug_set(int mode);
/* Warning lines emitted since the last call ("" if none), newline-
 * terminated. malloc'd; caller frees. */
LT_API char *lt_diagnose_take_warnings(void);

/* The graph that syncing `t[0..n)` would run, as text: a header line
 * "graph <key> struct <key>: N nodes, P params, O outputs" then one line
 * per node in post-order, "%5 = add(%3, %4) f32[64, 256]", with
 * "  # param j" / "  # output k" marks. Tensors whose value is already data
 * appear as params. Nothing is executed. malloc'd (caller frees); NULL on
 * error (lt_last_error). */
LT_API char *lt_graph_text(lt_tensor *const *t, int n);
/* Same graph in Graphviz DOT ("digraph G { ... }"). */
LT_API char *lt_graph_dot(lt_tensor *const *t, int n);

/* Trace events (Chrome/Perfetto JSON) for LAZYTPU_TRACE=<file.json>.
 * Records one complete event "name" of category "cat" that started at
 * start_ns (lt_now_ns clock) and lasted dur_ns, on thread `tid`: a core
 * index (>= 0) or LT_TRACE_TID_HOST / _LOADER. Strings are copied. No-op
 * (cheap) when tracing is off. Thread-safe; never fails (events are dropped
 * past an internal bound, counted in TraceEventsDropped). */
#define LT_TRACE_TID_HOST (-1)
#define LT_TRACE_TID_LOADER (-2)
LT_API void lt_trace_event(const char *name, const char *cat, int64_t start_ns,
                           int64_t dur_ns, int tid);
/* 1 when trace events are being recorded. */
LT_API int lt_trace_enabled(void);
/* Writes the buffered events; the file is valid JSON after every flush.
 * Also run by lt_shutdown and at exit. */
LT_API void lt_trace_flush(void);

/* Capture sessions (torch_xla's profiler: start_trace / stop_trace and
 * trace(service, logdir, duration_ms)). lt_trace_capture_start begins
 * keeping in memory every trace event that starts from now on (the events
 * LAZYTPU_TRACE writes, whether or not it is set: compile, execute on each
 * core, sync, transfers, fallbacks, the user's spans). Returns LT_OK, or
 * LT_ERR_STATE ("Profile has already been started. Only one profile may be
 * run at a time.") while a session runs. Process-wide, thread-safe. */
LT_API lt_status lt_trace_capture_start(void);
/* 1 while a capture session runs. */
LT_API int lt_trace_capture_active(void);
/* Ends the session and writes its events under `logdir` (directories made
 * as needed), where TensorBoard's profile plugin finds a run:
 * <logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb, an
 * XSpace protobuf (one plane "/host:CPU", one line per thread: "host",
 * "loader", "core K"; events named as in the trace, with their category as
 * a stat "cat"), and <host>.trace.json.gz, the same events as gzipped
 * Chrome trace JSON. The run directory's path is copied into run_dir
 * (capacity n; may be NULL). logdir NULL drops the events (nothing
 * written). Returns LT_ERR_STATE ("No profile started") without a session;
 * LT_ERR_ARG naming the path and the system's reason when a directory or
 * file cannot be written (the session has ended all the same). */
LT_API lt_status lt_trace_capture_stop(const char *logdir, char *run_dir, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* LAZYTPU_H */
