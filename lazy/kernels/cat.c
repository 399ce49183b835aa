/*
 * lazy/kernels/cat.c — concatenation along attrs.i[0] of n_in >= 1 inputs
 * with any strides and dtypes, converted to out's dtype.
 *
 * Input k fills the region of out at [pos_k, pos_k + len_k) along dim. An
 * input may also come in another shape of the same size (compile_pattern.c
 * hands the cat the strided source of a reshape instead of materialising
 * the reshape first: the attention's per-head gradients [b, s, h, d] for a
 * region [b, s, h*d]); the region is then viewed in the input's shape
 * (lt_kutil_reshape_strides, row-major order kept).
 *
 * When every input (so viewed) shares out's leading dim and dim > 0, one
 * pass over blocks of that leading dim on the core's helpers writes each
 * block of out completely (every input's part) while it is in cache;
 * otherwise each input is copied in turn.
 */
#include "kutil.h"
#include "par.h"

typedef struct cat_job {
    const lt_view *src, *dst;   /* per input: source view, region of out */
    int n;
    int64_t per, n0;
} cat_job;

static lt_view rows_of(const lt_view *v, int64_t lo, int64_t hi)
{
    lt_view r = *v;
    r.shape.dims[0] = hi - lo;
    r.offset += lo * v->strides[0];
    return r;
}

static void cat_block(void *arg, int64_t ci, int w)
{
    const cat_job *j = arg;
    (void)w;
    int64_t lo = ci * j->per, hi = lo + j->per < j->n0 ? lo + j->per : j->n0;
    if (hi <= lo) return;
    for (int k = 0; k < j->n; k++) {
        lt_view s = rows_of(&j->src[k], lo, hi), d = rows_of(&j->dst[k], lo, hi);
        lt_kutil_copy(&s, &d, 1);
    }
}

/* cat into contiguous out. LT_ERR_SHAPE when an input does not fit out
 * (rank, sizes off the cat dim, or total size along it; an input of
 * another rank must have the region's size and a shape its strided region
 * can be viewed in). LT_ERR_OOM if scratch fails. */
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
    lt_view *buf = lt_kutil_alloc(2 * (size_t)n_in * sizeof *buf, "cat");
    if (!buf) return LT_ERR_OOM;
    lt_view *src = buf, *dst = buf + n_in;
    int n = 0, rows_ok = dim > 0;
    int64_t pos = 0;
    lt_status st = LT_OK;
    for (int k = 0; k < n_in && st == LT_OK; k++) {
        const lt_view *v = &in[k];
        /* PyTorch skips legacy empty 1-D inputs of size 0 */
        if (v->shape.ndim == 1 && v->shape.dims[0] == 0 && nd != 1) continue;
        lt_view r = o;
        r.offset = pos * o.strides[dim];
        int ok = v->shape.ndim == nd;
        for (int d = 0; ok && d < nd; d++)
            if (d != dim && v->shape.dims[d] != out->shape.dims[d]) ok = 0;
        int64_t len = 0;
        if (ok) {
            len = v->shape.dims[dim];
            ok = pos + len <= out->shape.dims[dim];
            r.shape.dims[dim] = len;
        } else {
            /* another shape of the region's size: len along dim follows */
            int64_t rest = out->shape.dims[dim] ? kt_numel(&out->shape) / out->shape.dims[dim] : 0;
            int64_t vn = kt_numel(&v->shape);
            len = rest ? vn / rest : 0;
            ok = rest > 0 && len * rest == vn && pos + len <= out->shape.dims[dim];
            if (ok) {
                r.shape.dims[dim] = len;
                lt_view rv = r;
                rv.shape = v->shape;
                ok = lt_kutil_reshape_strides(&r, &v->shape, rv.strides);
                r = rv;
            }
        }
        if (!ok) {
            char a[128], b[128];
            st = lt_set_error(LT_ERR_SHAPE, "cat: input %d of shape %s does not fit output %s along dim %lld",
                              k, lt_kutil_shape_str(&v->shape, a, sizeof a),
                              lt_kutil_shape_str(&out->shape, b, sizeof b), (long long)dim);
            break;
        }
        if (v->shape.ndim < 1 || v->shape.dims[0] != out->shape.dims[0]) rows_ok = 0;
        pos += len;
        src[n] = *v;
        dst[n] = r;
        n++;
    }
    if (st == LT_OK && pos != out->shape.dims[dim])
        st = lt_set_error(LT_ERR_SHAPE, "cat: inputs cover %lld of %lld along dim %lld",
                          (long long)pos, (long long)out->shape.dims[dim], (long long)dim);
    if (st == LT_OK && kt_numel(&out->shape) > 0) {
        int64_t n0 = out->shape.dims[0];
        int par = nt > 1 && kt_numel(&out->shape) >= 65536;
        if (rows_ok && n0 >= 2) {
            int64_t nch = par ? (int64_t)nt * 4 : 1;
            if (nch > n0) nch = n0;
            int64_t per = (n0 + nch - 1) / nch;
            cat_job j = {src, dst, n, per, n0};
            lt_par_for(ctx, par ? nt : 1, (n0 + per - 1) / per, cat_block, &j);
        } else {
            for (int k = 0; k < n; k++) lt_kutil_copy(&src[k], &dst[k], par ? nt : 1);
        }
    }
    free(buf);
    return st;
}
