/*
 * lazy/kernels/loss.c — nll_loss and nll_loss_backward, PyTorch semantics.
 *
 * attrs i = {reduction (0 none, 1 mean, 2 sum), ignore_index}; optional
 * class weight[C] as the last input. mean divides by the sum of the weights
 * of the non-ignored targets (NaN when that is 0, as PyTorch). Targets
 * outside [0, C) that are not ignore_index return LT_ERR_ARG. Sums are
 * accumulated in double in sample order (deterministic).
 */
#include "kutil.h"

typedef struct nll_args {
    const lt_view *logp, *target, *weight;
    int64_t N, C;
    int64_t ls0, ls1;     /* logp strides (sample, class) */
    int64_t ts;           /* target stride */
    int reduction;
    int64_t ignore;
} nll_args;

static lt_status nll_init(const char *name, const lt_attrs *at, const lt_view *logp,
                          const lt_view *target, const lt_view *weight, nll_args *a)
{
    memset(a, 0, sizeof *a);
    a->logp = logp; a->target = target; a->weight = weight;
    a->reduction = at && at->n > 0 ? (int)at->i[0] : 1;
    a->ignore = at && at->n > 1 ? at->i[1] : -100;
    if (!kt_is_index(target->dtype) || !kt_is_float(logp->dtype) ||
        (weight && !kt_is_float(weight->dtype)))
        return lt_set_error(LT_ERR_DTYPE, "%s: logp %s, target %s%s%s not supported", name,
                            kt_dtname(logp->dtype), kt_dtname(target->dtype),
                            weight ? ", weight " : "", weight ? kt_dtname(weight->dtype) : "");
    if (logp->shape.ndim == 2 && target->shape.ndim == 1 &&
        target->shape.dims[0] == logp->shape.dims[0]) {
        a->N = logp->shape.dims[0]; a->C = logp->shape.dims[1];
        a->ls0 = logp->strides[0]; a->ls1 = logp->strides[1];
        a->ts = target->strides[0];
    } else if (logp->shape.ndim == 1 && target->shape.ndim == 0) {
        a->N = 1; a->C = logp->shape.dims[0];
        a->ls1 = logp->strides[0];
    } else {
        char b1[128], b2[128];
        return lt_set_error(LT_ERR_SHAPE, "%s: logp %s and target %s do not fit", name,
                            lt_kutil_shape_str(&logp->shape, b1, sizeof b1),
                            lt_kutil_shape_str(&target->shape, b2, sizeof b2));
    }
    if (weight && (weight->shape.ndim != 1 || weight->shape.dims[0] != a->C))
        return lt_set_error(LT_ERR_SHAPE, "%s: weight must have %lld elements", name, (long long)a->C);
    if (a->reduction < 0 || a->reduction > 2)
        return lt_set_error(LT_ERR_ARG, "%s: bad reduction %d", name, a->reduction);
    for (int64_t n = 0; n < a->N; n++) {
        int64_t t = kt_load_i(target->data, target->dtype, target->offset + n * a->ts);
        if (t != a->ignore && (t < 0 || t >= a->C))
            return lt_set_error(LT_ERR_ARG, "%s: target %lld is out of bounds for %lld classes", name,
                                (long long)t, (long long)a->C);
    }
    return LT_OK;
}

/* Target of sample n, and its weight (0 when ignored). */
static inline int64_t nll_target(const nll_args *a, int64_t n, double *w)
{
    int64_t t = kt_load_i(a->target->data, a->target->dtype, a->target->offset + n * a->ts);
    if (t == a->ignore) { *w = 0; return -1; }
    *w = a->weight ? kt_load(a->weight->data, a->weight->dtype,
                             a->weight->offset + t * a->weight->strides[0]) : 1.0;
    return t;
}

static lt_status nll_forward(const nll_args *a, const lt_view *out, int nt)
{
    void *o = kt_ptr(out);
    if (a->reduction == 0) {
        #pragma omp parallel for num_threads(nt) if (a->N > 65536)
        for (int64_t n = 0; n < a->N; n++) {
            double w;
            int64_t t = nll_target(a, n, &w);
            double v = t < 0 ? 0.0 : -w * kt_load(a->logp->data, a->logp->dtype,
                                                   a->logp->offset + n * a->ls0 + t * a->ls1);
            kt_store(o, out->dtype, n, v);
        }
        return LT_OK;
    }
    double s = 0, ws = 0;
    for (int64_t n = 0; n < a->N; n++) {
        double w;
        int64_t t = nll_target(a, n, &w);
        if (t < 0) continue;
        s -= w * kt_load(a->logp->data, a->logp->dtype, a->logp->offset + n * a->ls0 + t * a->ls1);
        ws += w;
    }
    kt_store(o, out->dtype, 0, a->reduction == 1 ? s / ws : s);
    return LT_OK;
}

static lt_status nll_backward(const nll_args *a, const lt_view *grad, const lt_view *out, int nt)
{
    void *o = kt_ptr(out);
    int64_t total = a->N * a->C;
    #pragma omp parallel for num_threads(nt) if (total > 65536)
    for (int64_t k = 0; k < total; k++) kt_store(o, out->dtype, k, 0.0);
    double scale = 1.0;
    if (a->reduction != 0) {
        scale = kt_load(grad->data, grad->dtype, grad->offset);
        if (a->reduction == 1) {
            double ws = 0, w;
            for (int64_t n = 0; n < a->N; n++) { nll_target(a, n, &w); ws += w; }
            scale /= ws;
        }
    }
    int64_t gs = grad->shape.ndim ? grad->strides[0] : 0;
    #pragma omp parallel for num_threads(nt) if (a->N > 65536)
    for (int64_t n = 0; n < a->N; n++) {
        double w;
        int64_t t = nll_target(a, n, &w);
        if (t < 0) continue;
        double g = a->reduction == 0 ? kt_load(grad->data, grad->dtype, grad->offset + n * gs) : scale;
        kt_store(o, out->dtype, n * a->C + t, -w * g);
    }
    return LT_OK;
}

/* nll_loss (logp, target [, weight]) and nll_loss_backward (grad, logp,
 * target [, weight]) into contiguous out. */
lt_status lt_kernel_loss(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                         const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    nll_args a;
    lt_status st;
    if (op == LT_OP_nll_loss) {
        if (n_in != 2 && n_in != 3)
            return lt_set_error(LT_ERR_ARG, "nll_loss: expected 2 or 3 inputs, got %d", n_in);
        st = nll_init("nll_loss", attrs, &in[0], &in[1], n_in == 3 ? &in[2] : NULL, &a);
        if (st != LT_OK) return st;
        if (!kt_is_float(out->dtype)) return lt_kutil_dtype_error(op, in, n_in, out);
        if (kt_numel(&out->shape) != (a.reduction == 0 ? a.N : 1))
            return lt_set_error(LT_ERR_SHAPE, "nll_loss: output has %lld elements",
                                (long long)kt_numel(&out->shape));
        return nll_forward(&a, out, nt);
    }
    if (op == LT_OP_nll_loss_backward) {
        if (n_in != 3 && n_in != 4)
            return lt_set_error(LT_ERR_ARG, "nll_loss_backward: expected 3 or 4 inputs, got %d", n_in);
        st = nll_init("nll_loss_backward", attrs, &in[1], &in[2], n_in == 4 ? &in[3] : NULL, &a);
        if (st != LT_OK) return st;
        if (!kt_is_float(out->dtype) || !kt_is_float(in[0].dtype))
            return lt_kutil_dtype_error(op, in, n_in, out);
        if (kt_numel(&in[0].shape) != (a.reduction == 0 ? a.N : 1) ||
            kt_numel(&out->shape) != a.N * a.C)
            return lt_set_error(LT_ERR_SHAPE, "nll_loss_backward: grad/output sizes do not fit");
        return nll_backward(&a, &in[0], out, nt);
    }
    return lt_set_error(LT_ERR_INTERNAL, "loss kernel: unexpected op %d", (int)op);
}
