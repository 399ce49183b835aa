/*
 * lazy/kernels/index.c — index_select, gather, scatter_add, scatter,
 * scatter_reduce, embedding_backward, arange.
 *
 * Every index is validated before anything is read or written: an index
 * outside [0, size) (negative included) returns LT_ERR_ARG naming the op,
 * the index, the dim and its size. scatter_add and embedding_backward are
 * deterministic: each output element is owned by one thread and accumulated
 * in index order, whatever the thread count.
 */
#ifdef _OPENMP
#include <omp.h>
#endif
#include "kutil.h"

/* A 0-dim view as 1-D of size 1 (stride 0). */
static lt_view as_1d(const lt_view *v)
{
    lt_view r = *v;
    if (r.shape.ndim == 0) {
        r.shape.ndim = 1;
        r.shape.dims[0] = 1;
        r.strides[0] = 0;
    }
    return r;
}

/* Offsets of the multi-index of row-major `linear` over shape s in the views
 * a and b (b may be NULL), skipping dim `skip` (-1 none). */
static void unravel2(int64_t linear, const lt_shape *s, int skip, const lt_view *a,
                     int64_t *oa, const lt_view *b, int64_t *ob)
{
    int64_t x = a ? a->offset : 0, y = b ? b->offset : 0;
    for (int d = s->ndim - 1; d >= 0; d--) {
        if (d == skip) continue;
        int64_t c = linear % s->dims[d];
        linear /= s->dims[d];
        if (a) x += c * a->strides[d];
        if (b) y += c * b->strides[d];
    }
    *oa = x;
    if (ob) *ob = y;
}

/* Scans the index view; returns LT_OK or the first bad index as LT_ERR_ARG. */
static lt_status check_indices(const char *op, const lt_view *idx, int64_t size, int64_t dim,
                               int nt)
{
    int64_t n = kt_numel(&idx->shape);
    int bad = 0;
    #pragma omp parallel for num_threads(nt) reduction(| : bad) if (n > 65536)
    for (int64_t k = 0; k < n; k++) {
        int64_t v = kt_load_i(idx->data, idx->dtype, kt_view_offset(idx, k));
        bad |= v < 0 || v >= size;
    }
    if (!bad) return LT_OK;
    for (int64_t k = 0; k < n; k++) {
        int64_t v = kt_load_i(idx->data, idx->dtype, kt_view_offset(idx, k));
        if (v < 0 || v >= size)
            return lt_set_error(LT_ERR_ARG, "%s: index %lld is out of range for dimension %lld of size %lld",
                                op, (long long)v, (long long)dim, (long long)size);
    }
    return LT_OK;
}

static lt_status index_select(int64_t d, const lt_view *src0, const lt_view *idx,
                              const lt_view *out, int nt)
{
    lt_view src = as_1d(src0);
    if (d < 0 || d >= src.shape.ndim || idx->shape.ndim > 1)
        return lt_set_error(LT_ERR_ARG, "index_select: dim %lld / %d-D index for a %d-D source",
                            (long long)d, idx->shape.ndim, src0->shape.ndim);
    lt_status st = check_indices("index_select", idx, src.shape.dims[d], d, nt);
    if (st != LT_OK) return st;
    int64_t n = kt_numel(&idx->shape);
    lt_shape os = src.shape;
    os.dims[d] = n;
    lt_view o = kt_contig_view(kt_ptr(out), out->dtype, &os);
    int64_t istr = idx->shape.ndim ? idx->strides[0] : 0;
    int many = n >= 4 * nt;
    #pragma omp parallel for num_threads(nt) schedule(static) if (many && nt > 1)
    for (int64_t j = 0; j < n; j++) {
        int64_t k = kt_load_i(idx->data, idx->dtype, idx->offset + j * istr);
        lt_view s = src, r = o;
        s.shape.dims[d] = 1;
        s.offset += k * src.strides[d];
        r.shape.dims[d] = 1;
        r.offset = j * o.strides[d];
        lt_kutil_copy(&s, &r, many ? 1 : nt);
    }
    return LT_OK;
}

static lt_status gather(int64_t d, const lt_view *src0, const lt_view *idx0, const lt_view *out,
                        int nt)
{
    lt_view src = as_1d(src0), idx = as_1d(idx0);
    int nd = idx.shape.ndim;
    if (d < 0 || d >= nd || src.shape.ndim != nd)
        return lt_set_error(LT_ERR_ARG, "gather: dim %lld with a %d-D index and a %d-D source",
                            (long long)d, idx0->shape.ndim, src0->shape.ndim);
    for (int k = 0; k < nd; k++)
        if (k != d && idx.shape.dims[k] > src.shape.dims[k])
            return lt_set_error(LT_ERR_SHAPE, "gather: index size %lld exceeds source size %lld in dim %d",
                                (long long)idx.shape.dims[k], (long long)src.shape.dims[k], k);
    lt_status st = check_indices("gather", &idx, src.shape.dims[d], d, nt);
    if (st != LT_OK) return st;
    int64_t n = kt_numel(&idx.shape);
    void *o = kt_ptr(out);
    #pragma omp parallel for num_threads(nt) schedule(static) if (n > 32768)
    for (int64_t p = 0; p < n; p++) {
        int64_t oi, os_;
        unravel2(p, &idx.shape, -1, &idx, &oi, &src, &os_);
        int64_t k = kt_load_i(idx.data, idx.dtype, oi);
        /* unravel2 placed the index's own coordinate along d: replace it */
        int64_t c = p;
        for (int dd = nd - 1; dd > d; dd--) c /= idx.shape.dims[dd];
        c %= idx.shape.dims[d];
        os_ += (k - c) * src.strides[d];
        kt_cvt(src.data, src.dtype, os_, o, out->dtype, p);
    }
    return LT_OK;
}

/* How scatter_add combines: SC_* (scatter_reduce's reduce attribute + 1). */
enum { SC_REPLACE = -1, SC_SUM = 0, SC_PROD = 1, SC_AMAX = 2, SC_AMIN = 3 };

/* o (float) combined with v; NaN propagates for amax / amin as eager's. */
static inline double combine_f(int mode, double o, double v)
{
    switch (mode) {
    case SC_PROD: return o * v;
    case SC_AMAX: return v != v || o != o ? (v != v ? v : o) : (v > o ? v : o);
    case SC_AMIN: return v != v || o != o ? (v != v ? v : o) : (v < o ? v : o);
    default: return o + v;
    }
}

static inline int64_t combine_i(int mode, int64_t o, int64_t v)
{
    switch (mode) {
    case SC_PROD: return (int64_t)((uint64_t)o * (uint64_t)v);   /* wraps like eager */
    case SC_AMAX: return v > o ? v : o;
    case SC_AMIN: return v < o ? v : o;
    default: return (int64_t)((uint64_t)o + (uint64_t)v);
    }
}

static lt_status scatter_add(int64_t d, const lt_view *base, const lt_view *idx0,
                             const lt_view *src0, const lt_view *out, int nt, int mode)
{
    lt_view idx = as_1d(idx0), src = as_1d(src0);
    lt_view o = kt_contig_view(kt_ptr(out), out->dtype, &out->shape);
    lt_view o1 = as_1d(&o);
    int nd = idx.shape.ndim;
    if (d < 0 || d >= nd || src.shape.ndim != nd || o1.shape.ndim != nd)
        return lt_set_error(LT_ERR_ARG, "scatter_add: dim %lld with a %d-D index, %d-D src, %d-D base",
                            (long long)d, idx0->shape.ndim, src0->shape.ndim, base->shape.ndim);
    for (int k = 0; k < nd; k++)
        if (idx.shape.dims[k] > src.shape.dims[k] || (k != d && idx.shape.dims[k] > o1.shape.dims[k]))
            return lt_set_error(LT_ERR_SHAPE, "scatter_add: index size %lld too large in dim %d",
                                (long long)idx.shape.dims[k], k);
    lt_status st = check_indices("scatter_add", &idx, o1.shape.dims[d], d, nt);
    if (st != LT_OK) return st;
    if (!(kt_ptr(base) == o.data && base->dtype == out->dtype && kt_is_contig(base)))
        lt_kutil_copy(base, &o, nt);
    int64_t n = kt_numel(&idx.shape);
    int64_t len = idx.shape.dims[d];
    if (n == 0) return LT_OK;
    int64_t lines = n / len;
    int isf = kt_is_float(out->dtype);
    /* one line = all positions along d with the other coordinates fixed: it
     * only touches the out line with the same coordinates, so lines are
     * independent and each is accumulated in index order */
    #pragma omp parallel for num_threads(nt) schedule(static) if (n > 32768)
    for (int64_t l = 0; l < lines; l++) {
        int64_t oi, os_, oo;
        unravel2(l, &idx.shape, (int)d, &idx, &oi, &src, &os_);
        unravel2(l, &idx.shape, (int)d, &o1, &oo, NULL, NULL);
        for (int64_t t = 0; t < len; t++) {
            int64_t k = kt_load_i(idx.data, idx.dtype, oi + t * idx.strides[d]);
            int64_t dst = oo + k * o1.strides[d], s = os_ + t * src.strides[d];
            if (mode == SC_REPLACE)
                kt_cvt(src.data, src.dtype, s, o1.data, out->dtype, dst);
            else if (isf)
                kt_store(o1.data, out->dtype, dst,
                         combine_f(mode, kt_load(o1.data, out->dtype, dst), kt_load(src.data, src.dtype, s)));
            else
                kt_store_i(o1.data, out->dtype, dst,
                           combine_i(mode, kt_load_i(o1.data, out->dtype, dst),
                                     kt_load_i(src.data, src.dtype, s)));
        }
    }
    return LT_OK;
}

static lt_status embedding_backward(const lt_attrs *at, const lt_view *grad,
                                    const lt_view *idx, const lt_view *out, int nt)
{
    int64_t nw = at->i[0], pad = at->n > 1 ? at->i[1] : -1;
    int64_t M = kt_numel(&idx->shape);
    int gd = grad->shape.ndim;
    int64_t D = gd ? grad->shape.dims[gd - 1] : 1;
    if (!kt_is_float(out->dtype) || !kt_is_float(grad->dtype))
        return lt_set_error(LT_ERR_DTYPE, "embedding_backward: grad %s -> %s not supported",
                            kt_dtname(grad->dtype), kt_dtname(out->dtype));
    if (gd != idx->shape.ndim + 1 || kt_numel(&grad->shape) != M * D ||
        out->shape.ndim != 2 || out->shape.dims[0] != nw || out->shape.dims[1] != D)
        return lt_set_error(LT_ERR_SHAPE, "embedding_backward: grad/index/output shapes disagree");
    lt_status st = check_indices("embedding_backward", idx, nw, 0, nt);
    if (st != LT_OK) return st;
    lt_dtype cdt = kt_compute_dt(out->dtype);
    void *go = NULL, *io = NULL, *yo = NULL;
    const void *g = lt_kutil_pack(grad, cdt, nt, &go);
    const int64_t *ix = g ? lt_kutil_pack(idx, LT_I64, nt, &io) : NULL;
    void *y = kt_ptr(out);
    if (out->dtype != cdt) y = yo = lt_kutil_alloc((size_t)(nw * D) * kt_dtsize(cdt), "embedding_backward");
    if (!g || !ix || !y) { free(go); free(io); free(yo); return LT_ERR_OOM; }
    memset(y, 0, (size_t)(nw * D) * kt_dtsize(cdt));
    int use = nw * D > 16384 && M * D > 16384 ? nt : 1;
    /* each thread owns a contiguous range of output rows and scans all indices */
    #pragma omp parallel num_threads(use) if (use > 1)
    {
        int t = 0, T = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        int64_t r0 = nw * t / T, r1 = nw * (t + 1) / T;
        for (int64_t m = 0; m < M; m++) {
            int64_t r = ix[m];
            if (r < r0 || r >= r1 || r == pad) continue;
            if (cdt == LT_F64) {
                double *yr = (double *)y + r * D;
                const double *gr = (const double *)g + m * D;
                for (int64_t j = 0; j < D; j++) yr[j] += gr[j];
            } else {
                float *yr = (float *)y + r * D;
                const float *gr = (const float *)g + m * D;
                for (int64_t j = 0; j < D; j++) yr[j] += gr[j];
            }
        }
    }
    if (yo) lt_kutil_unpack(yo, cdt, out, nt);
    free(go); free(io); free(yo);
    return LT_OK;
}

static lt_status arange(const lt_view *start, const lt_view *step, const lt_view *out, int nt)
{
    int64_t n = kt_numel(&out->shape);
    void *o = kt_ptr(out);
    if (!kt_is_float(out->dtype) && !kt_is_float(start->dtype) && !kt_is_float(step->dtype)) {
        int64_t a = kt_load_i(start->data, start->dtype, start->offset);
        int64_t s = kt_load_i(step->data, step->dtype, step->offset);
        #pragma omp parallel for num_threads(nt) if (n > 65536)
        for (int64_t k = 0; k < n; k++) kt_store_i(o, out->dtype, k, a + k * s);
    } else {
        double a = kt_load(start->data, start->dtype, start->offset);
        double s = kt_load(step->data, step->dtype, step->offset);
        #pragma omp parallel for num_threads(nt) if (n > 65536)
        for (int64_t k = 0; k < n; k++) kt_store(o, out->dtype, k, a + (double)k * s);
    }
    return LT_OK;
}

/* Indexing ops of ops.def into contiguous out. Index inputs must be i64/i32
 * (LT_ERR_DTYPE otherwise); bad indices give LT_ERR_ARG before any access. */
lt_status lt_kernel_index(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                          const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    int64_t d = attrs && attrs->n > 0 ? attrs->i[0] : 0;
    int need = op == LT_OP_scatter_add || op == LT_OP_scatter || op == LT_OP_scatter_reduce ? 3 : 2;
    if (n_in != need)
        return lt_set_error(LT_ERR_INTERNAL, "index kernel: op %d with %d inputs", (int)op, n_in);
    if (op != LT_OP_arange && !kt_is_index(in[1].dtype))
        return lt_kutil_dtype_error(op, in, n_in, out);
    switch (op) {
    case LT_OP_index_select: return index_select(d, &in[0], &in[1], out, nt);
    case LT_OP_gather: return gather(d, &in[0], &in[1], out, nt);
    case LT_OP_scatter_add: return scatter_add(d, &in[0], &in[1], &in[2], out, nt, SC_SUM);
    case LT_OP_scatter: return scatter_add(d, &in[0], &in[1], &in[2], out, nt, SC_REPLACE);
    case LT_OP_scatter_reduce: {
        int64_t r = attrs && attrs->n > 1 ? attrs->i[1] : -1;
        if (r < SC_SUM || r > SC_AMIN)
            return lt_set_error(LT_ERR_ARG, "scatter_reduce: bad reduce %lld", (long long)r);
        return scatter_add(d, &in[0], &in[1], &in[2], out, nt, (int)r);
    }
    case LT_OP_embedding_backward: return embedding_backward(attrs, &in[0], &in[1], out, nt);
    case LT_OP_arange: return arange(&in[0], &in[1], out, nt);
    default: return lt_set_error(LT_ERR_INTERNAL, "index kernel: unexpected op %d", (int)op);
    }
}
