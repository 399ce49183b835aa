/*
 * lazy/tensor.c — tensor handles: creation from host data, reading back,
 * refcounting, value replacement, per-core live lists.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensor.h"
#include "host_reads.h"
#include "diagnose.h"
#include "shape.h"
#include "device.h"
#include "trace_events.h"
#include "spmd.h"

/* ------------------------------------------------------------ live lists */

lt_tensor *lt_tensor_new_locked(lt_node *value, lt_dtype logical, int core)
{
    lt_tensor *t = malloc(sizeof *t);
    if (!t) return NULL;
    atomic_init(&t->refs, 1);
    t->core = core;
    t->dtype = logical;
    t->value = value;
    t->shape = value->shape;
    t->storage = (lt_dtype)value->dtype;
    t->from_step = 0;
    lt_core_live *L = lt_live(core);
    t->next = L->head.next;
    t->prev = &L->head;
    L->head.next->prev = t;
    L->head.next = t;
    L->count++;
    lt_counter_add(lt_fe_metrics_get()->create_tensor, 1);
    return t;
}

lt_node *lt_tensor_value(lt_tensor *t)
{
    lt_live_lock(t->core);
    lt_node *v = lt_node_retain(t->value);
    lt_live_unlock(t->core);
    return v;
}

lt_tensor *lt_tensor_retain(lt_tensor *t)
{
    if (t) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    return t;
}

void lt_tensor_release(lt_tensor *t)
{
    if (!t) return;
    if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
    lt_core_live *L = lt_live(t->core);
    pthread_mutex_lock(&L->mu);
    t->prev->next = t->next;
    t->next->prev = t->prev;
    L->count--;
    lt_node *v = t->value;
    t->value = NULL;
    pthread_mutex_unlock(&L->mu);
    lt_node_release(v);
    lt_counter_add(lt_fe_metrics_get()->destroy_tensor, 1);
    free(t);
}

int64_t lt_live_tensors(int core)
{
    if (core < 0 || core >= LT_RT_MAX_CORES) return 0;
    lt_rt_once();
    lt_core_live *L = lt_live(core);
    pthread_mutex_lock(&L->mu);
    int64_t n = L->count;
    pthread_mutex_unlock(&L->mu);
    return n;
}

int64_t lt_pending_ops(int core)
{
    if (core < 0 || core >= LT_RT_MAX_CORES) return 0;
    lt_rt_once();
    lt_core_live *L = lt_live(core);
    pthread_mutex_lock(&L->mu);
    int64_t n = L->traced;
    pthread_mutex_unlock(&L->mu);
    return n;
}

/* --------------------------------------------------------------- accessors */

const lt_shape *lt_tensor_shape(const lt_tensor *t)
{
    return &t->shape;
}

lt_dtype lt_tensor_dtype(const lt_tensor *t) { return t->dtype; }

lt_dtype lt_tensor_storage_dtype(const lt_tensor *t)
{
    return t->storage;
}

int lt_tensor_core(const lt_tensor *t) { return t->core; }

int lt_tensor_is_pending(const lt_tensor *t)
{
    lt_tensor *m = (lt_tensor *)t;
    lt_live_lock(m->core);
    int p = lt_node_is_pending(m->value);
    lt_live_unlock(m->core);
    return p;
}

lt_status lt_tensor_assign(lt_tensor *dst, lt_tensor *src)
{
    if (!dst || !src)
        return lt_set_error(LT_ERR_ARG, "assign: NULL tensor");
    if (dst->core != src->core)
        return lt_set_error(LT_ERR_DEVICE,
                            "assign: destination is on core %d but source on core %d",
                            dst->core, src->core);
    if (dst == src) return LT_OK;
    lt_live_lock(dst->core);
    lt_node *old = dst->value;
    /* an in-place update keeps the tensor's sharding (lazytpu_spmd.h) */
    lt_sharding *keep = lt_spmd_kept_sharding(old, src->value);
    lt_node *v = keep ? lt_node_with_sharding(src->value, keep, 1) : lt_node_retain(src->value);
    if (!v) {
        lt_live_unlock(dst->core);
        return LT_ERR_OOM;
    }
    dst->value = v;
    dst->dtype = src->dtype;
    dst->shape = v->shape;
    dst->storage = (lt_dtype)v->dtype;
    lt_live_unlock(dst->core);
    lt_node_release(old);
    return LT_OK;
}

lt_status lt_tensor_share(lt_tensor *t, lt_tensor **out)
{
    if (!out) return lt_set_error(LT_ERR_ARG, "share: NULL out");
    *out = NULL;
    if (!t) return lt_set_error(LT_ERR_ARG, "share: NULL tensor");
    lt_live_lock(t->core);
    lt_tensor *n = lt_tensor_new_locked(lt_node_retain(t->value), t->dtype, t->core);
    lt_node *v = t->value;
    lt_live_unlock(t->core);
    if (!n) {
        lt_node_release(v);
        return lt_set_error(LT_ERR_OOM, "share: out of host memory");
    }
    *out = n;
    return LT_OK;
}

/* ----------------------------------------------------------- host transfer */

lt_status lt_tensor_from_host(int core, const void *data, lt_dtype dtype,
                              const lt_shape *shape, lt_tensor **out)
{
    if (!out) return lt_set_error(LT_ERR_ARG, "from_host: NULL out");
    *out = NULL;
    lt_runtime *r = lt_rt();
    if (!r) return LT_ERR_DEVICE;
    if (!lt_core_valid(core))
        return lt_set_error(LT_ERR_DEVICE, "from_host: invalid core %d (have %d cores)",
                            core, r->n_cores);
    if ((unsigned)dtype >= LT_NUM_DTYPES)
        return lt_set_error(LT_ERR_DTYPE, "from_host: invalid dtype %d", (int)dtype);
    if (!shape || shape->ndim < 0 || shape->ndim > LT_MAX_DIMS)
        return lt_set_error(LT_ERR_SHAPE, "from_host: invalid shape");
    for (int d = 0; d < shape->ndim; d++)
        if (shape->dims[d] < 0) {
            char b[128];
            return lt_set_error(LT_ERR_SHAPE, "from_host: negative size in %s",
                                lt_shape_str(shape, b, sizeof b));
        }
    int64_t numel;
    if (!lt_shape_fits(shape, &numel)) {
        char b[128];
        return lt_set_error(LT_ERR_SHAPE, "from_host: shape %s is too large (more "
                            "than 2^56 elements)", lt_shape_str(shape, b, sizeof b));
    }
    if (numel > 0 && !data)
        return lt_set_error(LT_ERR_ARG, "from_host: NULL data for %lld elements",
                            (long long)numel);
    const lt_fe_metrics *m = lt_fe_metrics_get();
    int64_t t0 = lt_now_ns();
    lt_dtype sdt = lt_storage_dtype(dtype, lt_rt_bf16(r));
    lt_buffer *buf;
    lt_status st = lt_buffer_alloc(core, sdt, numel, &buf);
    if (st != LT_OK) return st;
    if (numel > 0) lt_convert(data, dtype, buf->data, sdt, (size_t)numel);
    lt_shape s = lt_shape_make(shape->ndim, shape->dims);
    lt_node *n = lt_node_new_data(buf, &s, sdt, core);
    if (!n) {
        lt_buffer_release(buf);
        return LT_ERR_INTERNAL;
    }
    lt_live_lock(core);
    lt_tensor *t = lt_tensor_new_locked(n, dtype, core);
    lt_live_unlock(core);
    if (!t) {
        lt_node_release(n);
        return lt_set_error(LT_ERR_INTERNAL, "from_host: out of host memory");
    }
    int64_t t1 = lt_now_ns();
    lt_metric_add(m->to_dev_time, (double)(t1 - t0));
    lt_metric_add(m->to_dev_bytes, (double)numel * (double)lt_dtype_size(dtype));
    if (lt_trace_enabled()) {
        char a[64];
        snprintf(a, sizeof a, "\"bytes\":%lld,\"core\":%d",
                 (long long)numel * (long long)lt_dtype_size(dtype), core);
        lt_trace_event_args("transfer_to_device", "transfer", t0, t1 - t0, LT_TRACE_TID_HOST, a);
    }
    *out = t;
    return LT_OK;
}

lt_status lt_tensor_to_host(lt_tensor *t, void *dst, lt_dtype dst_dtype)
{
    if (!t) return lt_set_error(LT_ERR_ARG, "to_host: NULL tensor");
    if ((unsigned)dst_dtype >= LT_NUM_DTYPES)
        return lt_set_error(LT_ERR_DTYPE, "to_host: invalid dtype %d", (int)dst_dtype);
    lt_node *v = lt_tensor_value(t);
    int64_t w0 = lt_now_ns(), wait_ns = 0;
    int synced = 0;
    if (lt_node_is_pending(v)) {
        lt_node_release(v);
        lt_status st = lt_sync(&t, 1, LT_SYNC_VALUE_READ, 0);
        if (st != LT_OK) return st;
        v = lt_tensor_value(t);
        synced = 1;
    }
    const lt_fe_metrics *m = lt_fe_metrics_get();
    int64_t t0 = 0;
    int64_t numel = lt_shape_numel(&v->shape);
    lt_status st = LT_OK;
    if (numel > 0 && !dst) {
        st = lt_set_error(LT_ERR_ARG, "to_host: NULL destination");
    } else if (v->op == LT_OP_scalar) {
        double d = v->value;
        t0 = lt_now_ns();
        lt_convert(&d, LT_F64, dst, dst_dtype, 1);
    } else if (v->op == LT_OP_data) {
        st = lt_buffer_wait(v->buf);   /* execution time is not transfer time */
        t0 = lt_now_ns();
        if (st == LT_OK && numel > 0)
            lt_convert(v->buf->data, (lt_dtype)v->dtype, dst, dst_dtype, (size_t)numel);
    } else {
        st = lt_set_error(LT_ERR_INTERNAL, "to_host: value still pending after sync");
    }
    if (st == LT_OK) {
        int64_t t1 = lt_now_ns();
        wait_ns = t0 - w0;
        lt_host_read_record(t->core, numel * (int64_t)lt_dtype_size((lt_dtype)v->dtype),
                            synced || wait_ns > 20000 ? wait_ns : 0, synced, lt_caller_frame());
        lt_metric_add(m->from_dev_time, (double)(t1 - t0));
        lt_metric_add(m->from_dev_bytes, (double)numel * (double)lt_dtype_size((lt_dtype)v->dtype));
        if (lt_trace_enabled()) {
            char a[64];
            snprintf(a, sizeof a, "\"bytes\":%lld,\"core\":%d",
                     (long long)numel * (long long)lt_dtype_size((lt_dtype)v->dtype), t->core);
            lt_trace_event_args("transfer_from_device", "transfer", t0, t1 - t0,
                                LT_TRACE_TID_HOST, a);
        }
    }
    lt_node_release(v);
    return st;
}
