/*
 * lazy/trace.c — tracing: one call per op creates one IR node and one tensor.
 *
 * Hot path (about 1 us): validate, run the shape/dtype rules, allocate node +
 * tensor, bump the op's pre-resolved counter. No string formatting and no
 * other allocation unless an error is reported, except for the few ops whose
 * kernels check their input data at run time (indexing, losses: checks
 * `index` in lazy/ops.def): their node records the user's frame
 * (lt_caller_capture), so that an execution error can name the line that
 * traced the op. Everything that touches
 * tensor values runs under the core's live lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor.h"
#include "shape.h"
#include "ops.h"
#include "device.h"

#define LT_TRACE_INLINE_INPUTS 8

static _Atomic(lt_counter *) op_counters[LT_NUM_OPS];

/* lt_trace_keep_f32: this thread's f32 results stay f32 in bf16 mode */
static _Thread_local int keep_f32;

int lt_trace_keep_f32(int on)
{
    int prev = keep_f32;
    keep_f32 = on != 0;
    return prev;
}

/* The storage dtype of a traced result of logical dtype dt. */
static lt_dtype trace_storage(lt_dtype dt, lt_runtime *r)
{
    return lt_storage_dtype(dt, lt_rt_bf16(r) && !keep_f32);
}

static lt_counter *op_counter(lt_op op)
{
    lt_counter *c = atomic_load_explicit(&op_counters[op], memory_order_acquire);
    if (!c) {
        char name[64];
        snprintf(name, sizeof name, "lazytpu::%s", lt_op_name(op));
        c = lt_counter_get(name);
        atomic_store_explicit(&op_counters[op], c, memory_order_release);
    }
    return c;
}


lt_status lt_trace(lt_op op, lt_tensor *const *inputs, int n_inputs,
                   const lt_attrs *attrs, lt_tensor **out)
{
    if (!out) return lt_set_error(LT_ERR_ARG, "trace: NULL out");
    *out = NULL;
    if ((unsigned)op >= LT_NUM_OPS)
        return lt_set_error(LT_ERR_ARG, "trace: invalid op %d", (int)op);
    if (lt_op_kind_of(op) == LT_KIND_LEAF)
        return lt_set_error(LT_ERR_ARG, "%s: leaf ops are created by lt_tensor_from_host / lt_scalar",
                            lt_op_name(op));
    if (n_inputs < 0 || (n_inputs > 0 && !inputs))
        return lt_set_error(LT_ERR_ARG, "%s: bad input list", lt_op_name(op));
    lt_status st = lt_op_check_inputs(op, n_inputs);
    if (st != LT_OK) return st;
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i])
            return lt_set_error(LT_ERR_ARG, "%s: input %d is NULL", lt_op_name(op), i);
    if (n_inputs == 0)
        return lt_set_error(LT_ERR_ARG, "%s: needs inputs", lt_op_name(op));
    int core = inputs[0]->core;
    for (int i = 1; i < n_inputs; i++)
        if (inputs[i]->core != core)
            return lt_set_error(LT_ERR_DEVICE,
                                "%s: input 0 is on core %d but input %d is on core %d",
                                lt_op_name(op), core, i, inputs[i]->core);
    lt_runtime *r = lt_rt();
    if (!r) return LT_ERR_DEVICE;

    lt_attrs a;
    if (attrs) {
        if (attrs->n < 0 || attrs->n > LT_MAX_ATTRS)
            return lt_set_error(LT_ERR_ARG, "%s: invalid attribute count %d",
                                lt_op_name(op), attrs->n);
        a = *attrs;
    } else {
        memset(&a, 0, sizeof a);
    }

    lt_operand opd_inline[LT_TRACE_INLINE_INPUTS];
    lt_node *nin_inline[LT_TRACE_INLINE_INPUTS];
    lt_operand *opd = opd_inline;
    lt_node **nin = nin_inline;
    if (n_inputs > LT_TRACE_INLINE_INPUTS) {
        opd = malloc((size_t)n_inputs * sizeof *opd);
        nin = malloc((size_t)n_inputs * sizeof *nin);
        if (!opd || !nin) {
            free(opd);
            free(nin);
            return lt_set_error(LT_ERR_INTERNAL, "%s: out of host memory", lt_op_name(op));
        }
    }

    char *frame = lt_op_checks_of(op) == LT_CHECKS_index || r->check_finite
                  ? lt_caller_capture() : NULL;
    lt_core_live *L = lt_live(core);
    lt_tensor *t = NULL;
    int over = 0;
    pthread_mutex_lock(&L->mu);
    for (int i = 0; i < n_inputs; i++) {
        lt_node *v = inputs[i]->value;
        nin[i] = v;
        opd[i].shape = &v->shape;
        opd[i].dtype = inputs[i]->dtype;
        opd[i].wrapped = (v->flags & LT_NODE_WRAPPED) != 0;
    }
    lt_shape shape;
    lt_dtype dt;
    st = lt_infer(op, opd, n_inputs, &a, &shape, &dt);
    if (st == LT_OK) {
        lt_node *node = lt_node_new(op, nin, n_inputs, &a, &shape,
                                    trace_storage(dt, r), core, 0);
        if (!node) {
            st = LT_ERR_INTERNAL;
        } else {
            node->frame = frame;
            frame = NULL;
            t = lt_tensor_new_locked(node, dt, core);
            if (!t) {
                st = lt_set_error(LT_ERR_INTERNAL, "%s: out of host memory", lt_op_name(op));
                pthread_mutex_unlock(&L->mu);
                lt_node_release(node);
                pthread_mutex_lock(&L->mu);
            } else {
                over = ++L->traced > r->graph_limit;
            }
        }
    }
    pthread_mutex_unlock(&L->mu);
    free(frame);
    if (opd != opd_inline) {
        free(opd);
        free(nin);
    }
    if (st != LT_OK) return st;
    lt_counter_add(op_counter(op), 1);
    if (over) {
        lt_counter_add(lt_fe_metrics_get()->size_limit_sync, 1);
        int hooked = lt_caller_hook_run();   /* the user's frame for the notes */
        st = lt_sync_core(core, LT_SYNC_SIZE_LIMIT, 0);
        if (hooked) lt_set_caller(NULL);
        if (st != LT_OK) {
            lt_tensor_release(t);
            return st;
        }
    }
    *out = t;
    return LT_OK;
}

lt_status lt_trace1(lt_op op, lt_tensor *a, const lt_attrs *attrs,
                    lt_tensor **out)
{
    lt_tensor *in[1] = {a};
    return lt_trace(op, in, 1, attrs, out);
}

lt_status lt_trace2(lt_op op, lt_tensor *a, lt_tensor *b,
                    const lt_attrs *attrs, lt_tensor **out)
{
    lt_tensor *in[2] = {a, b};
    return lt_trace(op, in, 2, attrs, out);
}

lt_status lt_trace3(lt_op op, lt_tensor *a, lt_tensor *b, lt_tensor *c,
                    const lt_attrs *attrs, lt_tensor **out)
{
    lt_tensor *in[3] = {a, b, c};
    return lt_trace(op, in, 3, attrs, out);
}

lt_status lt_scalar(int core, double value, lt_dtype dtype, int wrapped,
                    lt_tensor **out)
{
    if (!out) return lt_set_error(LT_ERR_ARG, "scalar: NULL out");
    *out = NULL;
    lt_runtime *r = lt_rt();
    if (!r) return LT_ERR_DEVICE;
    if (!lt_core_valid(core))
        return lt_set_error(LT_ERR_DEVICE, "scalar: invalid core %d (have %d cores)",
                            core, r->n_cores);
    if ((unsigned)dtype >= LT_NUM_DTYPES)
        return lt_set_error(LT_ERR_DTYPE, "scalar: invalid dtype %d", (int)dtype);
    if (lt_dtype_is_complex(dtype) || lt_dtype_is_storage_only(dtype))
        return lt_set_error(LT_ERR_DTYPE, "scalar: %s scalars are not computed on the device",
                            lt_dtype_name(dtype));
    if (wrapped && dtype != LT_F64 && dtype != LT_I64 && dtype != LT_BOOL)
        return lt_set_error(LT_ERR_DTYPE,
                            "scalar: a wrapped number must be f64, i64 or bool, got %s",
                            lt_dtype_name(dtype));
    /* The value as the dtype holds it (2.7 as i64 is 2, 300 as u8 is 44):
     * converted to the dtype and back */
    double v = value;
    if (dtype != LT_F64) {
        uint64_t slot = 0;
        lt_convert(&value, LT_F64, &slot, dtype, 1);
        lt_convert(&slot, dtype, &v, LT_F64, 1);
    }
    lt_node *n = lt_node_new_scalar(v, trace_storage(dtype, r), core,
                                    wrapped ? LT_NODE_WRAPPED : 0);
    if (!n) return LT_ERR_INTERNAL;
    lt_live_lock(core);
    lt_tensor *t = lt_tensor_new_locked(n, dtype, core);
    lt_live_unlock(core);
    if (!t) {
        lt_node_release(n);
        return lt_set_error(LT_ERR_INTERNAL, "scalar: out of host memory");
    }
    *out = t;
    return LT_OK;
}
