/*
 * lazy/kernels/view.c — strided views: materialising copy (lt_kernel_view),
 * slow element access and contiguity helpers. (The op -> kernel map is
 * lazy/ops.c, from ops.def's kernel column.)
 */
#include <string.h>
#include "kernel.h"
#include "kutil.h"
#include "fused.h"

static size_t esz(lt_dtype dt)
{
    size_t n = lt_dtype_size(dt);
    return n ? n : 1;
}

void lt_contiguous_strides(const lt_shape *s, int64_t *strides)
{
    int64_t acc = 1;
    for (int k = s->ndim - 1; k >= 0; k--) {
        strides[k] = acc;
        acc *= s->dims[k];
    }
}

int lt_view_is_contiguous(const lt_view *v)
{
    int64_t acc = 1;
    for (int k = v->shape.ndim - 1; k >= 0; k--) {
        if (v->shape.dims[k] != 1 && v->strides[k] != acc)
            return 0;
        acc *= v->shape.dims[k];
    }
    return 1;
}

double lt_view_get(const lt_view *v, int64_t linear)
{
    int64_t off = v->offset;
    for (int k = v->shape.ndim - 1; k >= 0; k--) {
        int64_t d = v->shape.dims[k];
        off += (linear % d) * v->strides[k];
        linear /= d;
    }
    const char *p = (const char *)v->data + (size_t)off * esz(v->dtype);
    switch (v->dtype) {
    case LT_F32: return *(const float *)p;
    case LT_F64: return *(const double *)p;
    case LT_I64: return (double)*(const int64_t *)p;
    case LT_I32: return *(const int32_t *)p;
    case LT_BOOL: return *(const uint8_t *)p;
    case LT_BF16: {
        uint32_t u = (uint32_t)*(const uint16_t *)p << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: return 0;
    }
}

/* Materialises in[0] (a strided view of out's shape, any dtype) into the
 * contiguous out, converting the dtype. Same-dtype contiguous input is a
 * memcpy; everything else runs a one-load fused program. */
lt_status lt_kernel_view(lt_op op, const lt_attrs *attrs, const lt_view *in,
                         int n_in, const lt_view *out,
                         const lt_kernel_ctx *ctx)
{
    if (n_in < 1)
        return lt_set_error(LT_ERR_INTERNAL, "view: no input");
    if (op == LT_OP_view_as_real || op == LT_OP_view_as_complex) {
        /* out's bytes seen with the input's dtype and shape */
        lt_view o;
        memset(&o, 0, sizeof o);
        o.data = out->data;
        o.dtype = in[0].dtype;
        o.shape = in[0].shape;
        o.offset = op == LT_OP_view_as_complex ? out->offset * 2 : out->offset / 2;
        lt_contiguous_strides(&o.shape, o.strides);
        lt_kutil_copy(&in[0], &o, ctx ? ctx->nthreads : 1);
        return LT_OK;
    }
    int64_t n = lt_shape_numel(&out->shape);
    if (in[0].dtype == out->dtype && lt_shape_equal(&in[0].shape, &out->shape)
        && lt_view_is_contiguous(&in[0])) {
        size_t es = esz(out->dtype);
        memcpy((char *)out->data + (size_t)out->offset * es,
               (const char *)in[0].data + (size_t)in[0].offset * es,
               (size_t)n * es);
        return LT_OK;
    }
    if (in[0].dtype == out->dtype && (lt_dtype_is_complex(out->dtype) ||
                                      lt_dtype_is_storage_only(out->dtype))) {
        lt_kutil_copy(&in[0], out, ctx ? ctx->nthreads : 1);   /* bytes, strided */
        return LT_OK;
    }
    lt_dtype dts[2] = {in[0].dtype, out->dtype};
    lt_fused *f = lt_fused_new(lt_fused_ctype(dts, 2), &out->shape, 1);
    if (!f)
        return lt_set_error(LT_ERR_OOM, "view: out of host memory");
    int v = lt_fused_load(f, 0);
    lt_status st = LT_OK;
    if (v < 0 || lt_fused_store(f, v) < 0)
        st = lt_set_error(LT_ERR_OOM, "view: out of host memory");
    if (st == LT_OK)
        st = lt_fused_finish(f);
    if (st == LT_OK)
        st = lt_fused_run(f, in, out, ctx);
    lt_fused_free(f);
    return st;
}
