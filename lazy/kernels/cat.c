/*
 * lazy/kernels/cat.c — concatenation along attrs.i[0] of n_in >= 1 inputs
 * with any strides and dtypes, converted to out's dtype.
 */
#include "kutil.h"

/* cat into contiguous out. LT_ERR_SHAPE when an input does not fit out
 * (rank, sizes off the cat dim, or total size along it). */
lt_status lt_kernel_cat(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                        const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    int nd = out->shape.ndim;
    int64_t dim = attrs && attrs->n > 0 ? attrs->i[0] : 0;
    if (dim < 0) dim += nd;
    if (n_in < 1 || nd == 0 || dim < 0 || dim >= nd)
        return lt_set_error(LT_ERR_ARG, "cat: %d inputs, dim %lld for a %d-D output", n_in,
                            (long long)(attrs ? attrs->i[0] : 0), nd);
    lt_view o = kt_contig_view(kt_ptr(out), out->dtype, &out->shape);
    int64_t pos = 0;
    for (int k = 0; k < n_in; k++) {
        const lt_view *v = &in[k];
        /* PyTorch skips legacy empty 1-D inputs of size 0 */
        if (v->shape.ndim == 1 && v->shape.dims[0] == 0 && nd != 1) continue;
        int ok = v->shape.ndim == nd && pos + v->shape.dims[dim] <= out->shape.dims[dim];
        for (int d = 0; ok && d < nd; d++)
            if (d != dim && v->shape.dims[d] != out->shape.dims[d]) ok = 0;
        if (!ok) {
            char a[128], b[128];
            return lt_set_error(LT_ERR_SHAPE, "cat: input %d of shape %s does not fit output %s along dim %lld",
                                k, lt_kutil_shape_str(&v->shape, a, sizeof a),
                                lt_kutil_shape_str(&out->shape, b, sizeof b), (long long)dim);
        }
        lt_view r = o;
        r.shape.dims[dim] = v->shape.dims[dim];
        r.offset = pos * o.strides[dim];
        lt_kutil_copy(v, &r, nt);
        pos += v->shape.dims[dim];
    }
    if (pos != out->shape.dims[dim])
        return lt_set_error(LT_ERR_SHAPE, "cat: inputs cover %lld of %lld along dim %lld",
                            (long long)pos, (long long)out->shape.dims[dim], (long long)dim);
    return LT_OK;
}
