/*
 * lazy/kernels/fused.c — the fused elementwise interpreter: program builder,
 * register allocation, view binding and the block executor (the per-type
 * bodies come from fused_tmpl.h).
 */
/* The register loops must vectorise; GCC 12 at -O2 only uses its "very
 * cheap" cost model, which rejects loops needing alias checks. */
#pragma GCC optimize("O3")
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>
#include "fused.h"
#include "ew_expr.h"
#include "vmath.h"
#include "par.h"
#include "f16.h"
#include "../ops.h"
/* The expressions of ops.def name <tgmath.h> functions. For the f32
 * compute type, exp/log/log1p/tanh/erf resolve to vmath.h's vectorisable
 * versions (libm's are scalar calls without -ffast-math); other types keep
 * libm (a self-reference inside a macro is the real function). */
#undef exp
#undef log
#undef log1p
#undef tanh
#undef erf
#define exp(x) _Generic((x), float: lt_vexpf, default: exp)(x)
#define log(x) _Generic((x), float: lt_vlogf, default: log)(x)
#define log1p(x) _Generic((x), float: lt_vlog1pf, default: log1p)(x)
#define tanh(x) _Generic((x), float: lt_vtanhf, default: tanh)(x)
#define erf(x) _Generic((x), float: lt_verff, default: erf)(x)

/* Float -> integer like lt_convert: truncation toward zero, NaN -> 0,
 * saturating (a plain C cast of NaN or of an out-of-range value is
 * undefined behaviour). */
static inline int64_t lt_fz_f2i(double d)
{
    if (d != d) return 0;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
}

/* ---- a bound load: coalesced strided view ---- */
enum { LT_FL_CONTIG, LT_FL_BCAST, LT_FL_STRIDED, LT_FL_GENERAL };
typedef struct lt_fload {
    const char *base;       /* data + offset * esize */
    const void *block;      /* LT_FL_BCAST: LT_FUSED_BLOCK copies of the
                               value in the compute type (filled at bind) */
    lt_dtype dtype;
    size_t esize;
    int kind;
    int ndim;
    int64_t dims[LT_MAX_DIMS], strides[LT_MAX_DIMS];
} lt_fload;

#define T float
#define S f32
#define T_IS_INT 0
#define T_DT LT_F32
#define T_FAST_GELU 1
#include "fused_tmpl.h"
#undef T_FAST_GELU
#undef T
#undef S
#undef T_IS_INT
#undef T_DT
#define T double
#define S f64
#define T_IS_INT 0
#define T_DT LT_F64
#define T_FAST_GELU 0
#include "fused_tmpl.h"
#undef T_FAST_GELU
#undef T
#undef S
#undef T_IS_INT
#undef T_DT
#define T int64_t
#define S i64
#define T_IS_INT 1
#define T_DT LT_I64
#define T_FAST_GELU 0
#include "fused_tmpl.h"
#undef T_FAST_GELU
#undef T
#undef S
#undef T_IS_INT
#undef T_DT

static size_t esize_of(lt_dtype dt)
{
    size_t n = lt_dtype_size(dt);
    return n ? n : 1;
}

static size_t ctype_size(lt_dtype ct) { return ct == LT_F32 ? 4 : 8; }

lt_dtype lt_fused_ctype(const lt_dtype *dts, int n)
{
    int f64 = 0, fl = 0;
    for (int i = 0; i < n; i++) {
        if (dts[i] == LT_F64)
            f64 = 1;
        else if (dts[i] == LT_F32 || dts[i] == LT_BF16 || dts[i] == LT_F16)
            fl = 1;
    }
    return f64 ? LT_F64 : fl ? LT_F32 : LT_I64;
}

/* ------------------------------------------------------------- builder */

lt_fused *lt_fused_new(lt_dtype ctype, const lt_shape *shape, int n_in)
{
    lt_fused *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->ctype = ctype;
    f->shape = *shape;
    f->n_in = n_in;
    f->result = -1;
    return f;
}

void lt_fused_free(lt_fused *f)
{
    if (!f)
        return;
    free(f->ins);
    free(f->out_val);
    free(f);
}

lt_fused *lt_fused_clone(const lt_fused *f)
{
    lt_fused *g = malloc(sizeof *g);
    if (!g)
        return NULL;
    *g = *f;
    g->ins = malloc((f->n_ins ? f->n_ins : 1) * sizeof *g->ins);
    g->out_val = malloc((f->n_out ? f->n_out : 1) * sizeof *g->out_val);
    if (!g->ins || !g->out_val) {
        lt_fused_free(g);
        return NULL;
    }
    memcpy(g->ins, f->ins, f->n_ins * sizeof *g->ins);
    memcpy(g->out_val, f->out_val, f->n_out * sizeof *g->out_val);
    g->cap_ins = f->n_ins;
    g->cap_out = f->n_out;
    return g;
}

static int push_ins(lt_fused *f, lt_fused_ins ins)
{
    if (f->n_ins == f->cap_ins) {
        int nc = f->cap_ins ? 2 * f->cap_ins : 16;
        lt_fused_ins *ni = realloc(f->ins, nc * sizeof *ni);
        if (!ni)
            return -1;
        f->ins = ni;
        f->cap_ins = nc;
    }
    ins.dst = f->n_ins;
    f->ins[f->n_ins] = ins;
    return f->n_ins++;
}

int lt_fused_load(lt_fused *f, int input)
{
    lt_fused_ins i = {LT_FUSED_LOAD, 0xff, 0, 0, input, -1, -1};
    return push_ins(f, i);
}

int lt_fused_op(lt_fused *f, lt_op op, lt_dtype node_dtype, int a, int b,
                int c)
{
    lt_dtype nar = 0xff;
    int narrow_int = node_dtype == LT_I32 || node_dtype == LT_I16 ||
                     node_dtype == LT_I8 || node_dtype == LT_U8;
    if (node_dtype == LT_BOOL)
        nar = LT_BOOL;
    else if ((node_dtype == LT_I64 || narrow_int) && f->ctype != LT_I64)
        nar = node_dtype;
    else if (narrow_int)
        nar = node_dtype;
    else if (node_dtype == LT_F16 && f->ctype != LT_I64)
        nar = LT_F16;       /* half values are rounded after every op, like eager */
    else if (node_dtype == LT_F32 && f->ctype == LT_F64)
        nar = LT_F32;
    else if (node_dtype == LT_BF16 && op == LT_OP_cast && f->ctype != LT_I64)
        nar = LT_BF16;      /* an explicit cast to bf16 changes the value */
    lt_fused_ins i = {(uint16_t)op, (uint8_t)nar, 0, 0, a, b, c};
    return push_ins(f, i);
}

int lt_fused_store(lt_fused *f, int value)
{
    if (f->n_out == f->cap_out) {
        int nc = f->cap_out ? 2 * f->cap_out : 4;
        int32_t *no = realloc(f->out_val, nc * sizeof *no);
        if (!no)
            return -1;
        f->out_val = no;
        f->cap_out = nc;
    }
    f->out_val[f->n_out] = value;
    return f->n_out++;
}

void lt_fused_set_result(lt_fused *f, int value) { f->result = value; }

/* Linear-scan register allocation: a value's register is freed after its
 * last use (stores and the result count as uses at the end). */
lt_status lt_fused_finish(lt_fused *f)
{
    if (f->finished)
        return LT_OK;
    int n = f->n_ins;
    int *last = malloc((n ? n : 1) * sizeof *last);
    int *reg = malloc((n ? n : 1) * sizeof *reg);
    int *free_regs = malloc((n ? n : 1) * sizeof *free_regs);
    if (!last || !reg || !free_regs) {
        free(last); free(reg); free(free_regs);
        return lt_set_error(LT_ERR_OOM, "fused: out of host memory");
    }
    for (int k = 0; k < n; k++)
        last[k] = k;
    for (int k = 0; k < n; k++) {
        lt_fused_ins *in = &f->ins[k];
        if (in->op == LT_FUSED_LOAD) {
            if (in->a < 0 || in->a >= f->n_in)
                goto bad;
            continue;
        }
        int ops[3] = {in->a, in->b, in->c};
        for (int j = 0; j < 3; j++) {
            if (ops[j] >= k || (j == 0 && ops[j] < 0))
                goto bad;
            if (ops[j] >= 0)
                last[ops[j]] = k;
        }
    }
    for (int k = 0; k < f->n_out; k++) {
        if (f->out_val[k] < 0 || f->out_val[k] >= n)
            goto bad;
        last[f->out_val[k]] = n;
    }
    if (f->result >= n)
        goto bad;
    if (f->result >= 0)
        last[f->result] = n;
    int n_free = 0, n_regs = 0;
    for (int k = 0; k < n; k++) {
        lt_fused_ins *in = &f->ins[k];
        /* operands whose last use is k can be freed before dst is chosen
         * (elementwise: dst may alias an operand) */
        if (in->op != LT_FUSED_LOAD) {
            int ops[3] = {in->a, in->b, in->c};
            for (int j = 0; j < 3; j++) {
                int v = ops[j];
                if (v < 0 || last[v] != k)
                    continue;
                int dup = 0;
                for (int q = 0; q < j; q++)
                    dup |= ops[q] == v;
                if (!dup)
                    free_regs[n_free++] = reg[v];
            }
            in->a = reg[in->a];
            if (in->b >= 0) in->b = reg[in->b];
            if (in->c >= 0) in->c = reg[in->c];
        }
        reg[k] = n_free ? free_regs[--n_free] : n_regs++;
        in->dst = reg[k];
        if (last[k] == k)            /* dead value: free at once */
            free_regs[n_free++] = reg[k];
    }
    for (int k = 0; k < f->n_out && k < 255; k++) {
        lt_fused_ins *in = &f->ins[f->out_val[k]];
        if (in->op != LT_FUSED_LOAD && in->direct == 0)
            in->direct = (uint8_t)(k + 1);
    }
    for (int k = 0; k < f->n_out; k++)
        f->out_val[k] = reg[f->out_val[k]];
    if (f->result >= 0)
        f->result = reg[f->result];
    f->n_regs = n_regs ? n_regs : 1;
    f->compute_bound = 0;
    for (int k = 0; k < n; k++)
        f->compute_bound |= f->ins[k].op == LT_OP_gelu ||
                            f->ins[k].op == LT_OP_gelu_backward;
    f->finished = 1;
    free(last); free(reg); free(free_regs);
    return LT_OK;
bad:
    free(last); free(reg); free(free_regs);
    return lt_set_error(LT_ERR_INTERNAL, "fused: malformed program");
}

/* ------------------------------------------------------------- binding */

/* Coalesces view v (shape == iteration shape) into a load descriptor. */
static void bind_load(lt_fload *l, const lt_view *v, const lt_shape *shape)
{
    l->dtype = v->dtype;
    l->esize = esize_of(v->dtype);
    l->base = (const char *)v->data + (ptrdiff_t)v->offset * (ptrdiff_t)l->esize;
    /* right-align the view's dims to the iteration shape */
    int off = shape->ndim - v->shape.ndim;
    int nd = 0;
    int allzero = 1;
    for (int k = 0; k < shape->ndim; k++) {
        int64_t d = shape->dims[k];
        int64_t s = 0;
        if (k >= off && v->shape.dims[k - off] != 1)
            s = v->strides[k - off];
        if (d == 1)
            continue;
        if (s != 0)
            allzero = 0;
        if (nd > 0 && l->strides[nd - 1] == s * d) {
            l->dims[nd - 1] *= d;
            l->strides[nd - 1] = s;
        } else {
            l->dims[nd] = d;
            l->strides[nd] = s;
            nd++;
        }
    }
    l->ndim = nd;
    if (nd == 0 || allzero)
        l->kind = LT_FL_BCAST;
    else if (nd == 1 && l->strides[0] == 1)
        l->kind = LT_FL_CONTIG;
    else if (nd == 1)
        l->kind = LT_FL_STRIDED;
    else
        l->kind = LT_FL_GENERAL;
}

struct lt_fused_bound {
    const lt_fused *f;
    const lt_view *out;     /* contiguous outputs or NULL */
    void *blocks;           /* storage of the loads' broadcast blocks */
    int stride;             /* elements between registers (max block) */
    uint8_t direct_ok[256]; /* output k may be written before the block ends
                               (no input reads its buffer, or only before
                               its op: inplace_direct_safe) */
    uint8_t done[256];      /* output k is written by its op directly */
    atomic_int fault;       /* op of an integer division by zero, 0 none */
    lt_fload loads[];
};

/* 1 if output k, whose buffer `data` is also read by loads (donation:
 * the same view, so the same index), may still be written by its op during
 * the block (p - lr * g straight into p): no load of that buffer runs
 * after that op, and no later op, later store or the result reads a
 * register that may point into the buffer (contiguous loads of the
 * compute type are read in place). */
static int inplace_direct_safe(const lt_fused *f, const lt_view *in,
                               const void *data, int k)
{
    int s = -1;
    for (int t = 0; t < f->n_ins && s < 0; t++)
        if (f->ins[t].direct == k + 1)
            s = t;
    if (s < 0 || f->n_regs <= 0)
        return 0;
    uint8_t alias[f->n_regs];
    memset(alias, 0, sizeof alias);
    for (int t = 0; t < f->n_ins; t++) {
        const lt_fused_ins *ins = &f->ins[t];
        if (ins->op == LT_FUSED_LOAD) {
            int al = in[ins->a].data == data;
            if (al && t > s)
                return 0;
            alias[ins->dst] = (uint8_t)al;
            continue;
        }
        if (t > s && (alias[ins->a] || (ins->b >= 0 && alias[ins->b]) ||
                      (ins->c >= 0 && alias[ins->c])))
            return 0;
        alias[ins->dst] = 0;
    }
    for (int k2 = 0; k2 < f->n_out; k2++)
        if (alias[f->out_val[k2]])
            return 0;
    return f->result < 0 || !alias[f->result];
}

lt_fused_bound *lt_fused_bind(const lt_fused *f, const lt_view *in,
                              const lt_view *out)
{
    lt_fused_bound *b = malloc(sizeof *b + (f->n_in ? f->n_in : 1) *
                               sizeof(lt_fload));
    if (!b)
        return NULL;
    b->f = f;
    b->out = out;
    b->blocks = NULL;
    b->stride = LT_FUSED_BLOCK;
    atomic_init(&b->fault, 0);
    int n_bc = 0;
    for (int k = 0; k < f->n_in; k++) {
        bind_load(&b->loads[k], &in[k], &f->shape);
        b->loads[k].block = NULL;
        n_bc += b->loads[k].kind == LT_FL_BCAST;
    }
    /* broadcast values (scalars, [1]-shaped views) are converted and
     * spread over a block once here instead of once per block and load */
    int64_t total = lt_shape_numel(&f->shape);
    int bn = total < LT_FUSED_BLOCK ? (int)total : LT_FUSED_BLOCK;
    size_t cs = ctype_size(f->ctype);
    /* spaced so that the parts a whole-kernel run uses (its first
     * LT_FUSED_RUN_BLOCK elements) fall on different L1 sets */
    size_t bstride = (size_t)(LT_FUSED_BLOCK + LT_FUSED_RUN_BLOCK + 16) * cs;
    if (n_bc > 0 && total >= 4 * LT_FUSED_RUN_BLOCK &&
        (b->blocks = aligned_alloc(64, (size_t)n_bc * bstride))) {
        char *p = b->blocks;
        for (int k = 0; k < f->n_in; k++) {
            lt_fload *l = &b->loads[k];
            if (l->kind != LT_FL_BCAST)
                continue;
            if (f->ctype == LT_F32)
                load_f32((float *)(void *)p, l, 0, bn);
            else if (f->ctype == LT_F64)
                load_f64((double *)(void *)p, l, 0, bn);
            else
                load_i64((int64_t *)(void *)p, l, 0, bn);
            l->block = p;
            p += bstride;
        }
    }
    memset(b->direct_ok, 0, sizeof b->direct_ok);
    for (int k = 0; out && k < f->n_out && k < 255; k++) {
        int ok = out[k].dtype == f->ctype, shared = 0;
        for (int q = 0; q < f->n_in && ok; q++)
            shared |= in[q].data == out[k].data;   /* donated: same buffer */
        if (ok && shared)
            ok = inplace_direct_safe(f, in, out[k].data, k);
        b->direct_ok[k] = (uint8_t)ok;
    }
    memset(b->done, 0, sizeof b->done);
    for (int k = 0; out && k < f->n_ins; k++) {
        int d = f->ins[k].direct;
        if (d && b->direct_ok[d - 1])
            b->done[d - 1] = 1;
    }
    return b;
}

lt_fused_bound *lt_fused_bind_run(const lt_fused *f, const lt_view *in,
                                  const lt_view *out)
{
    lt_fused_bound *b = lt_fused_bind(f, in, out);
    if (b)
        b->stride = LT_FUSED_RUN_BLOCK;
    return b;
}

void lt_fused_unbind(lt_fused_bound *b)
{
    if (b)
        free(b->blocks);
    free(b);
}

size_t lt_fused_regs_bytes(const lt_fused *f)
{
    return (size_t)f->n_regs * LT_FUSED_BLOCK * ctype_size(f->ctype);
}

void *lt_fused_regs_alloc(size_t bytes)
{
    char *p = aligned_alloc(4096, ((bytes + 4095) & ~(size_t)4095) + 4096);
    return p ? p + 2048 : NULL;
}

void lt_fused_regs_free(void *regs)
{
    if (regs)
        free((char *)regs - 2048);
}

void lt_fused_store_block(const void *src, lt_dtype ctype, void *dst,
                          lt_dtype dt, int n)
{
    if (ctype == LT_F32)
        store_f32(src, dst, dt, n);
    else if (ctype == LT_F64)
        store_f64(src, dst, dt, n);
    else
        store_i64(src, dst, dt, n);
}

const void *lt_fused_eval(const lt_fused_bound *b, int64_t i0, int n,
                          void *regs)
{
    const lt_fused *f = b->f;
    void *rp[f->n_regs];
    const uint8_t *dok = b->out ? b->direct_ok : NULL;
    int fault;
    if (f->ctype == LT_F32)
        fault = exec_f32(f, b->loads, b->out, dok, i0, n, b->stride, regs, (float **)rp);
    else if (f->ctype == LT_F64)
        fault = exec_f64(f, b->loads, b->out, dok, i0, n, b->stride, regs, (double **)rp);
    else
        fault = exec_i64(f, b->loads, b->out, dok, i0, n, b->stride, regs, (int64_t **)rp);
    if (fault) {      /* the first in program order wins */
        atomic_int *fp = (atomic_int *)&b->fault;
        int cur = 0;
        while (!atomic_compare_exchange_weak(fp, &cur, fault) &&
               (cur == 0 || cur > fault))
            ;
    }
    if (b->out) {
        for (int k = 0; k < f->n_out; k++) {
            if (k < 255 && b->done[k])
                continue;
            const lt_view *o = &b->out[k];
            lt_fused_store_block(rp[f->out_val[k]], f->ctype,
                                 (char *)o->data + (size_t)(o->offset + i0) *
                                 esize_of(o->dtype), o->dtype, n);
        }
    }
    if (f->result < 0)
        return NULL;
    return rp[f->result];
}

lt_fused_bound *lt_fused_bind_range(const lt_fused *f, const lt_view *in,
                                    const lt_view *out)
{
    lt_fused_bound *b = lt_fused_bind(f, in, out);
    if (b)
        b->stride = LT_FUSED_RUN_BLOCK;
    return b;
}

void lt_fused_eval_range(const lt_fused_bound *b, int64_t i0, int64_t n,
                         void *regs)
{
    for (int64_t i = i0, e = i0 + n; i < e; i += LT_FUSED_RUN_BLOCK)
        lt_fused_eval(b, i, (int)(e - i < LT_FUSED_RUN_BLOCK ? e - i :
                                  LT_FUSED_RUN_BLOCK), regs);
}

/* One lt_par_for chunk of a whole-kernel run: cblk blocks. */
typedef struct lt_fused_job {
    const lt_fused_bound *b;
    int64_t total, cblk;
    void **regs;                /* per worker */
} lt_fused_job;

static void fused_chunk(void *arg, int64_t c, int w)
{
    const lt_fused_job *j = arg;
    int64_t i = c * j->cblk * LT_FUSED_RUN_BLOCK;
    int64_t e = i + j->cblk * LT_FUSED_RUN_BLOCK;
    if (e > j->total)
        e = j->total;
    for (; i < e; i += LT_FUSED_RUN_BLOCK)
        lt_fused_eval(j->b, i, (int)(e - i < LT_FUSED_RUN_BLOCK ? e - i :
                                     LT_FUSED_RUN_BLOCK), j->regs[w]);
}

lt_status lt_fused_run(const lt_fused *f, const lt_view *in,
                       const lt_view *out, const lt_kernel_ctx *ctx)
{
    lt_fused_bound *b = lt_fused_bind_run(f, in, out);
    if (!b)
        return lt_set_error(LT_ERR_OOM, "fused: out of host memory");
    int64_t total = lt_shape_numel(&f->shape);
    int64_t nblk = (total + LT_FUSED_RUN_BLOCK - 1) / LT_FUSED_RUN_BLOCK;
    size_t rb = (size_t)f->n_regs * LT_FUSED_RUN_BLOCK * ctype_size(f->ctype);
    int nt = ctx && ctx->nthreads > 0 ? ctx->nthreads : 1;
    if (total < 32768)      /* a fork/join costs more than the work */
        nt = 1;
    if (nt > nblk)
        nt = (int)nblk;
    if (nt < 1)
        nt = 1;
    /* chunks of 4..64 blocks, ~16 per worker: small enough to balance
     * when a thread is preempted, large enough to make claiming free */
    int64_t cblk = nblk / ((int64_t)nt * 16);
    cblk = cblk < 4 ? 4 : cblk > 64 ? 64 : cblk;
    if (nt == 1)
        cblk = nblk > 0 ? nblk : 1;
    void *regs[nt];
    int failed = 0;
    for (int w = 0; w < nt; w++)
        failed |= !(regs[w] = lt_fused_regs_alloc(rb));
    if (!failed) {
        lt_fused_job j = {b, total, cblk, regs};
        lt_par_for(ctx, nt, (nblk + cblk - 1) / cblk, fused_chunk, &j);
    }
    for (int w = 0; w < nt; w++)
        lt_fused_regs_free(regs[w]);
    lt_status st = lt_fused_bound_status(b);
    lt_fused_unbind(b);
    if (failed)
        return lt_set_error(LT_ERR_OOM, "fused: cannot allocate %zu bytes of "
                            "registers", rb);
    return st;
}

lt_status lt_fused_bound_status(const lt_fused_bound *b)
{
    int op = atomic_load((atomic_int *)&b->fault);
    if (!op)
        return LT_OK;
    char sh[160];
    lt_shape_str(&b->f->shape, sh, sizeof sh);
    return lt_set_error(LT_ERR_VALUE, "ZeroDivisionError: %s: integer division "
                        "by zero (a divisor of the %s%s computation is 0)",
                        lt_op_name((lt_op)op), "i64", sh);
}
