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
#include "../ops.h"
#include "par.h"

#pragma GCC diagnostic ignored "-Wtautological-compare"

/* l[j] += v[i + j] over the full groups of 8 of v[0..n) (lane j sums the
 * elements j mod 8, as reduce_tmpl.h's scalar loop does: the same sums in
 * the same order, vectorised, which GCC -O2 does not do for the f32 -> f64
 * conversion); returns the count consumed. */
typedef float lt_red_v4f __attribute__((vector_size(16)));
typedef double lt_red_v4d __attribute__((vector_size(32)));
static int sum8_f32(const float *v, int n, double *l)
{
    lt_red_v4d a = {l[0], l[1], l[2], l[3]}, b = {l[4], l[5], l[6], l[7]};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        lt_red_v4f x, y;
        memcpy(&x, v + i, sizeof x);
        memcpy(&y, v + i + 4, sizeof y);
        a += __builtin_convertvector(x, lt_red_v4d);
        b += __builtin_convertvector(y, lt_red_v4d);
    }
    for (int j = 0; j < 4; j++) {
        l[j] = a[j];
        l[j + 4] = b[j];
    }
    return i;
}
static int sum8_f64(const double *v, int n, double *l)
{
    lt_red_v4d a = {l[0], l[1], l[2], l[3]}, b = {l[4], l[5], l[6], l[7]};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        lt_red_v4d x, y;
        memcpy(&x, v + i, sizeof x);
        memcpy(&y, v + i + 4, sizeof y);
        a += x;
        b += y;
    }
    for (int j = 0; j < 4; j++) {
        l[j] = a[j];
        l[j + 4] = b[j];
    }
    return i;
}

#define VT float
#define AT double
#define S f32
#define SUM8 sum8_f32
#include "reduce_tmpl.h"
#undef VT
#undef AT
#undef S
#undef SUM8
#define VT double
#define AT double
#define S f64
#define SUM8 sum8_f64
#include "reduce_tmpl.h"
#undef VT
#undef AT
#undef S
#undef SUM8
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
    switch (lt_op_ident_of(op)) {   /* ops.def's ident column */
    case LT_IDENT_one:
        if (is_int) a.i = 1; else a.d = 1;
        break;
    case LT_IDENT_lowest:
        if (is_int) a.i = INT64_MIN; else a.d = -INFINITY;
        break;
    case LT_IDENT_highest:
        if (is_int) a.i = INT64_MAX; else a.d = INFINITY;
        break;
    default:   /* zero (sum, mean, any); arg-reductions start elsewhere */
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
    size_t es = lt_dtype_size(out->dtype);
    lt_fused_store_block(acc, is_int ? LT_I64 : LT_F64,
                         (char *)out->data + (size_t)(out->offset + o0) * es,
                         out->dtype, (int)n);
}

typedef union arg_val { float f; double d; int64_t i; } arg_val;

/* ---- parallel tasks: lt_par_for over tasks, register space per worker */

typedef struct red_job red_job;
typedef void (*red_task_fn)(const red_job *j, int64_t t, void *regs);
struct red_job {
    lt_op op;
    int is_int, is_max;
    lt_dtype ct;
    const lt_fused_bound *b;
    int64_t n_out, r;
    int64_t per;               /* inner_short: outputs per task */
    int64_t nc, clen;          /* inner / arg: chunks per output, length */
    int64_t K, W, ns, rlen, rpe; /* outer */
    acc_u *acc;                /* results / partials */
    arg_val *val;              /* arg: partial values */
    int64_t *idx;              /* arg: partial indices */
    red_task_fn fn;
    void **regs;
};

static void red_chunk(void *arg, int64_t t, int w)
{
    const red_job *j = arg;
    j->fn(j, t, j->regs[w]);
}

/* Runs j->fn for tasks [0, ntask) on up to nt workers; LT_ERR_OOM if the
 * register space cannot be allocated. */
static lt_status red_run(red_job *j, const lt_kernel_ctx *ctx, int nt,
                         int64_t ntask, size_t rb)
{
    if (nt > ntask)
        nt = (int)(ntask > 0 ? ntask : 1);
    if (nt < 1)
        nt = 1;
    void *regs[nt];
    int failed = 0;
    for (int w = 0; w < nt; w++)
        failed |= !(regs[w] = lt_fused_regs_alloc(rb));
    if (!failed) {
        j->regs = regs;
        lt_par_for(ctx, nt, ntask, red_chunk, j);
    }
    for (int w = 0; w < nt; w++)
        lt_fused_regs_free(regs[w]);
    return failed ? lt_set_error(LT_ERR_OOM, "reduce: out of host memory")
                  : LT_OK;
}

/* Inner reduction of short rows (r <= block / 4): one evaluation covers
 * `per` outputs. */
static void task_inner_short(const red_job *j, int64_t t, void *regs)
{
    int64_t r = j->r, o0 = t * j->per;
    int64_t cnt = j->n_out - o0 < j->per ? j->n_out - o0 : j->per;
    const char *v = lt_fused_eval(j->b, o0 * r, (int)(cnt * r), regs);
    size_t vs = j->ct == LT_F32 ? 4 : 8;
    for (int64_t q = 0; q < cnt; q++) {
        acc_u a = acc_init(j->op, j->is_int);
        const char *row = v + (size_t)(q * r) * vs;
        if (j->ct == LT_F32)
            a.d = acc_run_f32(j->op, a.d, (const float *)row, (int)r);
        else if (j->ct == LT_F64)
            a.d = acc_run_f64(j->op, a.d, (const double *)row, (int)r);
        else
            a.i = acc_run_i64(j->op, a.i, (const int64_t *)row, (int)r);
        j->acc[o0 + q] = a;
    }
}

/* Inner reduction: task t = output t / nc, chunk t % nc of its row. */
static void task_inner(const red_job *j, int64_t t, void *regs)
{
    int64_t o = t / j->nc, c = t % j->nc;
    int64_t s = c * j->clen, e = s + j->clen < j->r ? s + j->clen : j->r;
    acc_u a = acc_init(j->op, j->is_int);
    if (e > s)
        a = fold_range(j->op, j->b, j->ct, a, o * j->r + s, e - s, regs);
    j->acc[t] = a;
}

static lt_status run_inner(lt_op op, const lt_reduce_plan *pl,
                           const lt_fused_bound *b, lt_dtype ct,
                           const lt_view *out, const lt_kernel_ctx *ctx,
                           int nt, size_t rb)
{
    red_job j;
    memset(&j, 0, sizeof j);
    j.op = op;
    j.is_int = ct == LT_I64;
    j.ct = ct;
    j.b = b;
    j.n_out = pl->n_out;
    j.r = pl->r;
    int64_t n_out = pl->n_out, r = pl->r;
    if (r * n_out < 32768)
        nt = 1;
    if (r > 0 && r <= LT_FUSED_BLOCK / 4 && n_out > 1) {
        j.per = LT_FUSED_BLOCK / r;
        j.fn = task_inner_short;
        if (!(j.acc = malloc(n_out * sizeof *j.acc)))
            return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
        lt_status st = red_run(&j, ctx, nt, (n_out + j.per - 1) / j.per, rb);
        if (st == LT_OK)
            finish_store(op, j.is_int, j.acc, n_out, r, out, 0);
        free(j.acc);
        return st;
    }
    int64_t nblk = (r + LT_FUSED_BLOCK - 1) / LT_FUSED_BLOCK;
    j.nc = 1;
    if (n_out < nt && nblk > 1) {
        /* split rows: a few chunks per thread so a preempted thread's
         * share can be taken over */
        j.nc = (4 * nt + n_out - 1) / n_out;
        if (j.nc > nblk)
            j.nc = nblk;
    }
    j.clen = ((nblk + j.nc - 1) / j.nc) * LT_FUSED_BLOCK;
    int64_t ntask = n_out * j.nc;
    j.fn = task_inner;
    if (!(j.acc = malloc((ntask ? ntask : 1) * sizeof *j.acc)))
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    lt_status st = red_run(&j, ctx, nt, ntask, rb);
    if (st == LT_OK) {
        acc_u *part = j.acc;
        if (j.nc > 1)
            for (int64_t o = 0; o < n_out; o++) {
                acc_u a = part[o * j.nc];
                for (int64_t c = 1; c < j.nc; c++)
                    a = acc_comb(op, j.is_int, a, part[o * j.nc + c]);
                part[o] = a;
            }
        finish_store(op, j.is_int, part, n_out, r, out, 0);
    }
    free(j.acc);
    return st;
}

/* Outer reduction: task t = column chunk t / ns (W outputs), reduced-range
 * slice t % ns; partials of W accumulators per task. */
static void task_outer(const red_job *j, int64_t t, void *regs)
{
    int64_t K = j->K, W = j->W;
    int64_t kc = t / j->ns, s = t % j->ns;
    int64_t k0 = kc * W, w = K - k0 < W ? K - k0 : W;
    int64_t r0 = s * j->rlen, r1 = r0 + j->rlen < j->r ? r0 + j->rlen : j->r;
    acc_u *acc = j->acc + t * W;
    acc_u ini = acc_init(j->op, j->is_int);
    for (int64_t q = 0; q < w; q++)
        acc[q] = ini;
    size_t vs = j->ct == LT_F32 ? 4 : 8;
    if (K <= LT_FUSED_BLOCK) {
        for (int64_t ri = r0; ri < r1; ri += j->rpe) {
            int64_t nr = r1 - ri < j->rpe ? r1 - ri : j->rpe;
            const char *v = lt_fused_eval(j->b, ri * K, (int)(nr * K), regs);
            for (int64_t q = 0; q < nr; q++)
                vec_fold(j->op, j->ct, acc, v + (size_t)(q * K) * vs, (int)K);
        }
    } else {
        for (int64_t ri = r0; ri < r1; ri++)
            vec_fold(j->op, j->ct, acc,
                     lt_fused_eval(j->b, ri * K + k0, (int)w, regs), (int)w);
    }
}

static lt_status run_outer(lt_op op, const lt_reduce_plan *pl,
                           const lt_fused_bound *b, lt_dtype ct,
                           const lt_view *out, const lt_kernel_ctx *ctx,
                           int nt, size_t rb)
{
    red_job j;
    memset(&j, 0, sizeof j);
    j.op = op;
    j.is_int = ct == LT_I64;
    j.ct = ct;
    j.b = b;
    j.r = pl->r;
    int64_t K = pl->n_out, r = pl->r;
    if (r * K < 32768)
        nt = 1;
    j.K = K;
    j.W = K < LT_FUSED_BLOCK ? K : LT_FUSED_BLOCK;
    int64_t nk = (K + j.W - 1) / j.W;
    j.rpe = K <= LT_FUSED_BLOCK ? LT_FUSED_BLOCK / K : 1;
    j.ns = 1;
    if (nk < 4 * nt && r > j.rpe) {
        j.ns = (4 * nt + nk - 1) / nk;
        int64_t max_s = (r + j.rpe - 1) / j.rpe;
        if (j.ns > max_s)
            j.ns = max_s;
    }
    /* slices of whole evaluation blocks (rpe rows each) */
    j.rlen = ((r + j.ns - 1) / j.ns + j.rpe - 1) / j.rpe * j.rpe;
    if (j.rlen < 1)
        j.rlen = 1;
    j.ns = r > 0 ? (r + j.rlen - 1) / j.rlen : 1;   /* r = 0: init only */
    int64_t ntask = nk * j.ns;
    j.fn = task_outer;
    if (!(j.acc = malloc((size_t)(ntask * j.W) * sizeof *j.acc)))
        return lt_set_error(LT_ERR_OOM, "reduce: out of host memory");
    lt_status st = red_run(&j, ctx, nt, ntask, rb);
    if (st == LT_OK)
        for (int64_t kc = 0; kc < nk; kc++) {
            int64_t k0 = kc * j.W, w = K - k0 < j.W ? K - k0 : j.W;
            acc_u *dst = j.acc + kc * j.ns * j.W;
            for (int64_t s = 1; s < j.ns; s++)
                for (int64_t q = 0; q < w; q++)
                    dst[q] = acc_comb(op, j.is_int, dst[q],
                                      j.acc[(kc * j.ns + s) * j.W + q]);
            finish_store(op, j.is_int, dst, w, r, out, k0);
        }
    free(j.acc);
    return st;
}

/* Arg-reductions. Each output's r positions may be split into nc chunks
 * (when there are fewer outputs than threads, e.g. argmax over the
 * flattened tensor); chunk partials (value, first index of the extreme)
 * are merged in chunk order with the same rule as the scan itself, so the
 * result is the sequential one: first index wins on ties, the first NaN is
 * the extreme for argmax and argmin alike. */
static void arg_scan(int is_max, lt_dtype ct, arg_val *best, int64_t *bi,
                     const void *v, int m, int64_t base)
{
    if (ct == LT_F32)
        arg_run_f32(is_max, &best->f, bi, v, m, base);
    else if (ct == LT_F64)
        arg_run_f64(is_max, &best->d, bi, v, m, base);
    else
        arg_run_i64(is_max, &best->i, bi, v, m, base);
}

static void task_arg(const red_job *j, int64_t t, void *regs)
{
    int64_t o = t / j->nc, c = t % j->nc;
    int64_t s0 = c * j->clen, s1 = s0 + j->clen < j->r ? s0 + j->clen : j->r;
    arg_val bv;
    memset(&bv, 0, sizeof bv);
    int64_t bi = -1;
    for (int64_t s = s0; s < s1; s += LT_FUSED_BLOCK) {
        int m = (int)(s1 - s < LT_FUSED_BLOCK ? s1 - s : LT_FUSED_BLOCK);
        arg_scan(j->is_max, j->ct, &bv, &bi,
                 lt_fused_eval(j->b, o * j->r + s, m, regs), m, s);
    }
    j->val[t] = bv;
    j->idx[t] = bi;
}

static lt_status run_arg(lt_op op, const lt_reduce_plan *pl,
                         const lt_fused_bound *b, lt_dtype ct,
                         const lt_view *out, const lt_kernel_ctx *ctx,
                         int nt, size_t rb)
{
    red_job j;
    memset(&j, 0, sizeof j);
    j.op = op;
    j.is_max = op == LT_OP_argmax;
    j.ct = ct;
    j.b = b;
    j.n_out = pl->n_out;
    j.r = pl->r;
    int64_t n_out = pl->n_out, r = pl->r;
    if (n_out * r < 32768)
        nt = 1;
    int64_t nblk = (r + LT_FUSED_BLOCK - 1) / LT_FUSED_BLOCK;
    j.nc = 1;
    if (n_out < nt && nblk > 1) {
        j.nc = (4 * nt + n_out - 1) / n_out;
        if (j.nc > nblk)
            j.nc = nblk;
    }
    j.clen = ((nblk + j.nc - 1) / j.nc) * LT_FUSED_BLOCK;
    int64_t ntask = n_out * j.nc;
    j.fn = task_arg;
    j.idx = malloc((ntask ? ntask : 1) * sizeof *j.idx);
    j.val = malloc((ntask ? ntask : 1) * sizeof *j.val);
    if (!j.idx || !j.val) {
        free(j.idx);
        free(j.val);
        return lt_set_error(LT_ERR_OOM, "argreduce: out of host memory");
    }
    lt_status st = red_run(&j, ctx, nt, ntask, rb);
    int64_t *res = j.idx;
    if (st == LT_OK && j.nc > 1)
        for (int64_t o = 0; o < n_out; o++) {
            arg_val bv = j.val[o * j.nc];
            int64_t bi = res[o * j.nc];
            for (int64_t c = 1; c < j.nc; c++) {
                int64_t ci = res[o * j.nc + c];
                if (ci < 0)
                    continue;
                /* one-element scan at the chunk's index: same rule */
                arg_val cv = j.val[o * j.nc + c];
                arg_scan(j.is_max, ct, &bv, &bi, &cv, 1, ci);
            }
            res[o] = bi;
        }
    if (st == LT_OK) {
        for (int64_t o = 0; o < n_out; o++)
            if (res[o] < 0)
                res[o] = 0;
        lt_fused_store_block(res, LT_I64, (char *)out->data +
                             (size_t)out->offset * lt_dtype_size(out->dtype),
                             out->dtype, (int)n_out);
    }
    free(j.idx);
    free(j.val);
    return st;
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
        st = run_arg(op, plan, b, prod->ctype, out, ctx, nt, rb);
    else if (plan->inner)
        st = run_inner(op, plan, b, prod->ctype, out, ctx, nt, rb);
    else
        st = run_outer(op, plan, b, prod->ctype, out, ctx, nt, rb);
    if (st == LT_OK)
        st = lt_fused_bound_status(b);
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
