/*
 * lazy/kernels/reduce.c — reductions (sum/mean/prod/amax/amin/any/all) and
 * arg-reductions (argmax/argmin) over a fused producer evaluated block-wise.
 * See reduce.h for the iteration-space conventions.
 */
/* The register loops must vectorise; GCC 12 at -O2 only uses its "very
 * cheap" cost model, which rejects loops needing alias checks. */
#pragma GCC optimize("O3")
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "reduce.h"

#pragma GCC diagnostic ignored "-Wtautological-compare"

#define VT float
#define AT double
#define S f32
#include "reduce_tmpl.h"
#undef VT
#undef AT
#undef S
#define VT double
#define AT double
#define S f64
#include "reduce_tmpl.h"
#undef VT
#undef AT
#undef S
#define VT int64_t
#define AT int64_t
#define S i64
#include "reduce_tmpl.h"
#undef VT
#undef AT
#undef S

lt_status lt_reduce_plan_make(lt_op op, const lt_attrs *attrs,
                              const lt_shape *in, lt_reduce_plan *plan)
{
    int nd = in->ndim;
    uint64_t mask = 0;
    if (op == LT_OP_argmax || op == LT_OP_argmin) {
        int64_t d = attrs ? attrs->i[0] : -1;
        if (d < 0)
            mask = nd ? ((1ull << nd) - 1) : 0;
        else if (d >= nd && !(nd == 0 && d == 0))
            return lt_set_error(LT_ERR_ARG, "%s: dim %lld out of range for "
                                "%d dims", lt_op_name(op), (long long)d, nd);
        else
            mask = nd ? (1ull << d) : 0;
    } else {
        mask = attrs ? (uint64_t)attrs->i[0] : 0;
        if (nd < 64)
            mask &= (1ull << nd) - 1;
    }
    int innermost = -1;
    for (int k = nd - 1; k >= 0; k--)
        if (in->dims[k] != 1) {
            innermost = k;
            break;
        }
    int inner = (op == LT_OP_argmax || op == LT_OP_argmin) || innermost < 0 ||
                ((mask >> innermost) & 1);
    int n = 0;
    plan->n_out = 1;
    plan->r = 1;
    for (int pass = 0; pass < 2; pass++) {
        /* inner: kept first, then reduced; outer: reduced first */
        int want_reduced = inner ? pass : !pass;
        for (int k = 0; k < nd; k++) {
            int red = (mask >> k) & 1;
            if (red != want_reduced)
                continue;
            plan->perm[n++] = k;
            if (red)
                plan->r *= in->dims[k];
            else
                plan->n_out *= in->dims[k];
        }
    }
    plan->ndim = nd;
    plan->inner = inner;
    return LT_OK;
}

void lt_reduce_permute_view(const lt_reduce_plan *plan, lt_view *v)
{
    lt_view o = *v;
    /* views may be right-aligned broadcasts of fewer dims: expand first */
    int off = plan->ndim - v->shape.ndim;
    int64_t dims[LT_MAX_DIMS], strides[LT_MAX_DIMS];
    for (int k = 0; k < plan->ndim; k++) {
        if (k < off) {
            dims[k] = 1;
            strides[k] = 0;
        } else {
            dims[k] = v->shape.dims[k - off];
            strides[k] = v->strides[k - off];
        }
    }
    o.shape.ndim = plan->ndim;
    for (int k = 0; k < plan->ndim; k++) {
        o.shape.dims[k] = dims[plan->perm[k]];
        o.strides[k] = strides[plan->perm[k]];
    }
    *v = o;
}

/* ---- generic accumulator helpers (double or int64) ---- */
typedef union acc_u { double d; int64_t i; } acc_u;

static acc_u acc_init(lt_op op, int is_int)
{
    acc_u a;
    switch (op) {
    case LT_OP_prod: case LT_OP_all:
        if (is_int) a.i = 1; else a.d = 1;
        break;
    case LT_OP_amax:
        if (is_int) a.i = INT64_MIN; else a.d = -INFINITY;
        break;
    case LT_OP_amin:
        if (is_int) a.i = INT64_MAX; else a.d = INFINITY;
        break;
    default:
        if (is_int) a.i = 0; else a.d = 0;
    }
    return a;
}

static acc_u acc_comb(lt_op op, int is_int, acc_u a, acc_u b)
{
    if (is_int)
        a.i = acc_run_i64(op, a.i, &b.i, 1);
    else
        a.d = acc_run_f64(op, a.d, &b.d, 1);
    return a;
}

/* Evaluates [i0, i0+n) (n <= block) and folds into one accumulator. */
static acc_u fold_range(lt_op op, const lt_fused_bound *b, lt_dtype ct,
                        acc_u acc, int64_t i0, int64_t n, void *regs)
{
    while (n > 0) {
        int m = (int)(n < LT_FUSED_BLOCK ? n : LT_FUSED_BLOCK);
        const void *v = lt_fused_eval(b, i0, m, regs);
        if (ct == LT_F32)
            acc.d = acc_run_f32(op, acc.d, v, m);
        else if (ct == LT_F64)
            acc.d = acc_run_f64(op, acc.d, v, m);
        else
            acc.i = acc_run_i64(op, acc.i, v, m);
        i0 += m;
        n -= m;
    }
    return acc;
}

static void vec_fold(lt_op op, lt_dtype ct, acc_u *acc, const void *v, int n)
{
    /* acc_u is a union of two 8-byte types: reinterpret as a plain array */
    if (ct == LT_F32)
        acc_vec_f32(op, (double *)acc, v, n);
    else if (ct == LT_F64)
        acc_vec_f64(op, (double *)acc, v, n);
    else
        acc_vec_i64(op, (int64_t *)acc, v, n);
}

static void finish_store(lt_op op, int is_int, acc_u *acc, int64_t n,
                         int64_t r, const lt_view *out, int64_t o0)
{
    if (op == LT_OP_mean) {
        for (int64_t k = 0; k < n; k++) {
            double v = is_int ? (double)acc[k].i : acc[k].d;
            acc[k].d = v / (double)r;
        }
        is_int = 0;
    }
    size_t es = out->dtype == LT_BF16 ? 2 : out->dtype == LT_BOOL ? 1 :
                (out->dtype == LT_F32 || out->dtype == LT_I32) ? 4 : 8;
    lt_fused_store_block(acc, is_int ? LT_I64 : LT_F64,
                         (char *)out->data + (size_t)(out->offset + o0) * es,
                         out->dtype, (int)n);
}

/* Inner reduction of short rows (r <= block / 4): one evaluation covers
 * many outputs. */
static lt_status run_inner_short(lt_op op, const lt_reduce_plan *pl,
                                 const lt_fused_bound *b, lt_dtype ct,
                                 const lt_view *out, int nt, size_t rb)
{
    int is_int = ct == LT_I64;
    int64_t n_out = pl->n_out, r = pl->r;
    int64_t per = LT_FUSED_BLOCK / r;
    int64_t nchunk = (n_out + per - 1) / per;
    acc_u *res = malloc(n_out * sizeof *res);
    if (!res)
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    if (r * n_out < 32768)
        nt = 1;
    size_t vs = ct == LT_F32 ? 4 : 8;
    int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        void *regs = lt_fused_regs_alloc(rb);
        if (!regs) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < nchunk; t++) {
            if (!regs)
                continue;
            int64_t o0 = t * per, cnt = n_out - o0 < per ? n_out - o0 : per;
            const char *v = lt_fused_eval(b, o0 * r, (int)(cnt * r), regs);
            for (int64_t q = 0; q < cnt; q++) {
                acc_u a = acc_init(op, is_int);
                const char *row = v + (size_t)(q * r) * vs;
                if (ct == LT_F32)
                    a.d = acc_run_f32(op, a.d, (const float *)row, (int)r);
                else if (ct == LT_F64)
                    a.d = acc_run_f64(op, a.d, (const double *)row, (int)r);
                else
                    a.i = acc_run_i64(op, a.i, (const int64_t *)row, (int)r);
                res[o0 + q] = a;
            }
        }
        lt_fused_regs_free(regs);
    }
    if (!failed)
        finish_store(op, is_int, res, n_out, r, out, 0);
    free(res);
    if (failed)
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    return LT_OK;
}

static lt_status run_inner(lt_op op, const lt_reduce_plan *pl,
                           const lt_fused_bound *b, lt_dtype ct,
                           const lt_view *out, int nt, size_t rb)
{
    int is_int = ct == LT_I64;
    int64_t n_out = pl->n_out, r = pl->r;
    if (r > 0 && r <= LT_FUSED_BLOCK / 4 && n_out > 1)
        return run_inner_short(op, pl, b, ct, out, nt, rb);
    int64_t nblk = (r + LT_FUSED_BLOCK - 1) / LT_FUSED_BLOCK;
    int64_t nc = 1;
    if (n_out < nt && nblk > 1) {
        nc = (nt + n_out - 1) / n_out;
        if (nc > nblk)
            nc = nblk;
    }
    int64_t clen = ((nblk + nc - 1) / nc) * LT_FUSED_BLOCK;
    int64_t ntask = n_out * nc;
    acc_u *part = malloc((ntask ? ntask : 1) * sizeof *part);
    if (!part)
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    if (r * n_out < 32768)
        nt = 1;
    int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        void *regs = lt_fused_regs_alloc(rb);
        if (!regs) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < ntask; t++) {
            if (!regs)
                continue;
            int64_t o = t / nc, c = t % nc;
            int64_t s = c * clen, e = s + clen < r ? s + clen : r;
            acc_u a = acc_init(op, is_int);
            if (e > s)
                a = fold_range(op, b, ct, a, o * r + s, e - s, regs);
            part[t] = a;
        }
        lt_fused_regs_free(regs);
    }
    if (failed) {
        free(part);
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    }
    if (nc > 1)
        for (int64_t o = 0; o < n_out; o++) {
            acc_u a = part[o * nc];
            for (int64_t c = 1; c < nc; c++)
                a = acc_comb(op, is_int, a, part[o * nc + c]);
            part[o] = a;
        }
    finish_store(op, is_int, part, n_out, r, out, 0);
    free(part);
    return LT_OK;
}

static lt_status run_outer(lt_op op, const lt_reduce_plan *pl,
                           const lt_fused_bound *b, lt_dtype ct,
                           const lt_view *out, int nt, size_t rb)
{
    int is_int = ct == LT_I64;
    int64_t K = pl->n_out, r = pl->r;
    int64_t W = K < LT_FUSED_BLOCK ? K : LT_FUSED_BLOCK;
    int64_t nk = (K + W - 1) / W;
    int64_t rpe = K <= LT_FUSED_BLOCK ? LT_FUSED_BLOCK / K : 1;
    int64_t ns = 1;
    if (nk < nt && r > rpe) {
        ns = nt;
        int64_t max_s = (r + rpe - 1) / rpe;
        if (ns > max_s)
            ns = max_s;
    }
    int64_t rlen = (r + ns - 1) / ns;
    int64_t ntask = nk * ns;
    acc_u *part = malloc((size_t)(ntask * W) * sizeof *part);
    if (!part)
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    if (r * K < 32768)
        nt = 1;
    int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        void *regs = lt_fused_regs_alloc(rb);
        if (!regs) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < ntask; t++) {
            if (!regs)
                continue;
            int64_t kc = t / ns, s = t % ns;
            int64_t k0 = kc * W, w = K - k0 < W ? K - k0 : W;
            int64_t r0 = s * rlen, r1 = r0 + rlen < r ? r0 + rlen : r;
            acc_u *acc = part + t * W;
            acc_u ini = acc_init(op, is_int);
            for (int64_t q = 0; q < w; q++)
                acc[q] = ini;
            if (K <= LT_FUSED_BLOCK) {
                for (int64_t ri = r0; ri < r1; ri += rpe) {
                    int64_t nr = r1 - ri < rpe ? r1 - ri : rpe;
                    const char *v = lt_fused_eval(b, ri * K, (int)(nr * K), regs);
                    size_t vs = ct == LT_F32 ? 4 : 8;
                    for (int64_t q = 0; q < nr; q++)
                        vec_fold(op, ct, acc, v + (size_t)(q * K) * vs, (int)K);
                }
            } else {
                for (int64_t ri = r0; ri < r1; ri++)
                    vec_fold(op, ct, acc, lt_fused_eval(b, ri * K + k0, (int)w, regs),
                             (int)w);
            }
        }
        lt_fused_regs_free(regs);
    }
    if (failed) {
        free(part);
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    }
    for (int64_t kc = 0; kc < nk; kc++) {
        int64_t k0 = kc * W, w = K - k0 < W ? K - k0 : W;
        acc_u *dst = part + kc * ns * W;
        for (int64_t s = 1; s < ns; s++)
            for (int64_t q = 0; q < w; q++)
                dst[q] = acc_comb(op, is_int, dst[q], part[(kc * ns + s) * W + q]);
        finish_store(op, is_int, dst, w, r, out, k0);
    }
    free(part);
    return LT_OK;
}

static lt_status run_arg(lt_op op, const lt_reduce_plan *pl,
                         const lt_fused_bound *b, lt_dtype ct,
                         const lt_view *out, int nt, size_t rb)
{
    int64_t n_out = pl->n_out, r = pl->r;
    int64_t *res = malloc((n_out ? n_out : 1) * sizeof *res);
    if (!res)
        return lt_set_error(LT_ERR_OOM, "argreduce: out of host memory");
    if (n_out * r < 32768 || n_out < 2)
        nt = 1;
    int is_max = op == LT_OP_argmax;
    int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        void *regs = lt_fused_regs_alloc(rb);
        if (!regs) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t o = 0; o < n_out; o++) {
            if (!regs)
                continue;
            float bf = 0; double bd = 0; int64_t bi64 = 0;
            int64_t bi = -1;
            for (int64_t s = 0; s < r; s += LT_FUSED_BLOCK) {
                int m = (int)(r - s < LT_FUSED_BLOCK ? r - s : LT_FUSED_BLOCK);
                const void *v = lt_fused_eval(b, o * r + s, m, regs);
                if (ct == LT_F32)
                    arg_run_f32(is_max, &bf, &bi, v, m, s);
                else if (ct == LT_F64)
                    arg_run_f64(is_max, &bd, &bi, v, m, s);
                else
                    arg_run_i64(is_max, &bi64, &bi, v, m, s);
            }
            res[o] = bi < 0 ? 0 : bi;
        }
        lt_fused_regs_free(regs);
    }
    if (!failed)
        lt_fused_store_block(res, LT_I64, (char *)out->data +
                             (size_t)out->offset * (out->dtype == LT_I32 ? 4 : 8),
                             out->dtype, (int)n_out);
    free(res);
    if (failed)
        return lt_set_error(LT_ERR_OOM, "argreduce: out of host memory");
    return LT_OK;
}

lt_status lt_reduce_run(lt_op op, const lt_reduce_plan *plan,
                        const lt_fused *prod, const lt_view *in,
                        const lt_view *stores, const lt_view *out,
                        const lt_kernel_ctx *ctx)
{
    if (plan->n_out == 0)
        return LT_OK;
    lt_fused_bound *b = lt_fused_bind(prod, in, stores);
    if (!b)
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    int nt = ctx && ctx->nthreads > 0 ? ctx->nthreads : 1;
    size_t rb = lt_fused_regs_bytes(prod);
    lt_status st;
    if (op == LT_OP_argmax || op == LT_OP_argmin)
        st = run_arg(op, plan, b, prod->ctype, out, nt, rb);
    else if (plan->inner)
        st = run_inner(op, plan, b, prod->ctype, out, nt, rb);
    else
        st = run_outer(op, plan, b, prod->ctype, out, nt, rb);
    lt_fused_unbind(b);
    return st;
}

/* Unfused reduction of view in[0] into out: a one-load producer. */
static lt_status reduce_view(lt_op op, const lt_attrs *attrs,
                             const lt_view *in, const lt_view *out,
                             const lt_kernel_ctx *ctx)
{
    lt_reduce_plan plan;
    lt_status st = lt_reduce_plan_make(op, attrs, &in->shape, &plan);
    if (st != LT_OK)
        return st;
    lt_view v = *in;
    lt_reduce_permute_view(&plan, &v);
    lt_dtype dt = in->dtype;
    lt_fused *f = lt_fused_new(lt_fused_ctype(&dt, 1), &v.shape, 1);
    if (!f)
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    int x = lt_fused_load(f, 0);
    lt_fused_set_result(f, x);
    st = x < 0 ? lt_set_error(LT_ERR_OOM, "reduce: out of host memory")
               : lt_fused_finish(f);
    if (st == LT_OK)
        st = lt_reduce_run(op, &plan, f, &v, NULL, out, ctx);
    lt_fused_free(f);
    return st;
}

lt_status lt_kernel_reduce(lt_op op, const lt_attrs *attrs, const lt_view *in,
                           int n_in, const lt_view *out,
                           const lt_kernel_ctx *ctx)
{
    return reduce_view(op, attrs, in, out, ctx);
}

lt_status lt_kernel_argreduce(lt_op op, const lt_attrs *attrs,
                              const lt_view *in, int n_in, const lt_view *out,
                              const lt_kernel_ctx *ctx)
{
    return reduce_view(op, attrs, in, out, ctx);
}
