/*
 * lazy/kernels/scatter.c — slice_scatter, select_scatter, diagonal_scatter,
 * as_strided_scatter: out = base (converted to out's dtype) with the region
 * the matching view op would select overwritten by src (any strides/dtype).
 */
#include "kutil.h"

/* Region of a contiguous tensor of shape s that `op` with attrs selects.
 * Fills r (shape, strides, offset relative to the tensor start). */
static lt_status scatter_region(lt_op op, const lt_attrs *at, const lt_shape *s, lt_view *r)
{
    int64_t st[LT_MAX_DIMS];
    int nd = s->ndim;
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) { st[d] = acc; acc *= s->dims[d]; }
    int64_t numel = acc;
    r->offset = 0;
    r->shape = *s;
    memcpy(r->strides, st, sizeof st);
    const char *name = "scatter";
    switch (op) {
    case LT_OP_slice_scatter: {
        name = "slice_scatter";
        int64_t d = at->i[0], start = at->i[1], end = at->i[2], step = at->n > 3 ? at->i[3] : 1;
        if (d < 0 || d >= nd || step <= 0) break;
        int64_t n = s->dims[d];
        if (start < 0) start += n;
        if (end < 0) end += n;
        start = start < 0 ? 0 : start > n ? n : start;
        end = end < start ? start : end > n ? n : end;
        r->shape.dims[d] = (end - start + step - 1) / step;
        r->strides[d] = st[d] * step;
        r->offset = start * st[d];
        return LT_OK;
    }
    case LT_OP_select_scatter: {
        name = "select_scatter";
        int64_t d = at->i[0], idx = at->i[1];
        if (d < 0 || d >= nd) break;
        if (idx < 0) idx += s->dims[d];
        if (idx < 0 || idx >= s->dims[d])
            return lt_set_error(LT_ERR_ARG, "select_scatter: index %lld is out of range for dimension %lld of size %lld",
                                (long long)at->i[1], (long long)d, (long long)s->dims[d]);
        r->offset = idx * st[d];
        int k = 0;
        for (int i = 0; i < nd; i++)
            if (i != d) { r->shape.dims[k] = s->dims[i]; r->strides[k] = st[i]; k++; }
        r->shape.ndim = nd - 1;
        return LT_OK;
    }
    case LT_OP_diagonal_scatter: {
        name = "diagonal_scatter";
        int64_t off = at->i[0], d1 = at->i[1], d2 = at->i[2];
        if (d1 < 0 || d1 >= nd || d2 < 0 || d2 >= nd || d1 == d2) break;
        int64_t n1 = s->dims[d1], n2 = s->dims[d2], len;
        if (off >= 0) { len = n1 < n2 - off ? n1 : n2 - off; r->offset = off * st[d2]; }
        else { len = n1 + off < n2 ? n1 + off : n2; r->offset = -off * st[d1]; }
        if (len <= 0) { len = 0; r->offset = 0; }
        int k = 0;
        for (int i = 0; i < nd; i++)
            if (i != d1 && i != d2) { r->shape.dims[k] = s->dims[i]; r->strides[k] = st[i]; k++; }
        r->shape.dims[k] = len;
        r->strides[k] = st[d1] + st[d2];
        r->shape.ndim = k + 1;
        return LT_OK;
    }
    case LT_OP_as_strided_scatter: {
        name = "as_strided_scatter";
        int64_t n = at->i[0];
        if (n < 0 || n > LT_MAX_DIMS || at->n < 2 * n + 2) break;
        r->shape.ndim = (int)n;
        int64_t lo = at->i[2 * n + 1], hi = lo;
        r->offset = lo;
        for (int i = 0; i < n; i++) {
            r->shape.dims[i] = at->i[1 + i];
            r->strides[i] = at->i[1 + n + i];
        }
        int empty = 0;
        for (int i = 0; i < n; i++) {
            if (r->shape.dims[i] == 0) empty = 1;
            int64_t ext = (r->shape.dims[i] - 1) * r->strides[i];
            if (ext < 0) lo += ext; else hi += ext;
        }
        if (!empty && (lo < 0 || hi >= numel))
            return lt_set_error(LT_ERR_ARG, "as_strided_scatter: region [%lld, %lld] exceeds the storage of %lld elements",
                                (long long)lo, (long long)hi, (long long)numel);
        return LT_OK;
    }
    default:
        return lt_set_error(LT_ERR_INTERNAL, "scatter kernel: unexpected op %d", (int)op);
    }
    return lt_set_error(LT_ERR_ARG, "%s: bad attributes for a %d-D base", name, nd);
}

/* out = base with the op's view region replaced by src (see file comment).
 * LT_ERR_ARG for attributes selecting outside base, LT_ERR_SHAPE when src's
 * shape differs from the region's. */
lt_status lt_kernel_scatter(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                            const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    if (n_in != 2)
        return lt_set_error(LT_ERR_INTERNAL, "scatter kernel: %d inputs", n_in);
    lt_view r;
    memset(&r, 0, sizeof r);
    lt_status st = scatter_region(op, attrs, &out->shape, &r);
    if (st != LT_OK) return st;
    int same = r.shape.ndim == in[1].shape.ndim;
    for (int d = 0; same && d < r.shape.ndim; d++) same = r.shape.dims[d] == in[1].shape.dims[d];
    if (!same) {
        char a[128], b[128];
        return lt_set_error(LT_ERR_SHAPE, "%s: src shape %s does not match the region shape %s",
                            op == LT_OP_slice_scatter ? "slice_scatter" :
                            op == LT_OP_select_scatter ? "select_scatter" :
                            op == LT_OP_diagonal_scatter ? "diagonal_scatter" : "as_strided_scatter",
                            lt_kutil_shape_str(&in[1].shape, a, sizeof a),
                            lt_kutil_shape_str(&r.shape, b, sizeof b));
    }
    lt_view o = kt_contig_view(kt_ptr(out), out->dtype, &out->shape);
    /* donated base buffer: already in place */
    if (!(kt_ptr(&in[0]) == o.data && in[0].dtype == out->dtype && kt_is_contig(&in[0])))
        lt_kutil_copy(&in[0], &o, nt);
    r.data = o.data;
    r.dtype = out->dtype;
    /* as_strided regions may overlap themselves: write serially, last wins */
    lt_kutil_copy(&in[1], &r, op == LT_OP_as_strided_scatter ? 1 : nt);
    return LT_OK;
}
