/*
 * lazy/kernels/fused.c — the fused elementwise interpreter: program builder,
 * register allocation, view binding and the block executor (the per-type
 * bodies come from fused_tmpl.h).
 */
/* The register loops must vectorise; GCC 12 at -O2 only uses its "very
 * cheap" cost model, which rejects loops needing alias checks. */
#pragma GCC optimize("O3")
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>
#include "fused.h"
#include "ew_expr.h"

/* ---- bf16 helpers (bit-level, vectorisable) ---- */
static inline float lt_fz_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t lt_fz_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? nan : r);
}

/* ---- a bound load: coalesced strided view ---- */
enum { LT_FL_CONTIG, LT_FL_BCAST, LT_FL_STRIDED, LT_FL_GENERAL };
typedef struct lt_fload {
    const char *base;       /* data + offset * esize */
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
#include "fused_tmpl.h"
#undef T
#undef S
#undef T_IS_INT
#undef T_DT
#define T double
#define S f64
#define T_IS_INT 0
#define T_DT LT_F64
#include "fused_tmpl.h"
#undef T
#undef S
#undef T_IS_INT
#undef T_DT
#define T int64_t
#define S i64
#define T_IS_INT 1
#define T_DT LT_I64
#include "fused_tmpl.h"
#undef T
#undef S
#undef T_IS_INT
#undef T_DT

static size_t esize_of(lt_dtype dt)
{
    switch (dt) {
    case LT_F32: case LT_I32: return 4;
    case LT_BF16: return 2;
    case LT_F64: case LT_I64: return 8;
    default: return 1;
    }
}

static size_t ctype_size(lt_dtype ct) { return ct == LT_F32 ? 4 : 8; }

lt_dtype lt_fused_ctype(const lt_dtype *dts, int n)
{
    int f64 = 0, fl = 0;
    for (int i = 0; i < n; i++) {
        if (dts[i] == LT_F64)
            f64 = 1;
        else if (dts[i] == LT_F32 || dts[i] == LT_BF16)
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
    if (node_dtype == LT_BOOL)
        nar = LT_BOOL;
    else if ((node_dtype == LT_I64 || node_dtype == LT_I32) &&
             f->ctype != LT_I64)
        nar = node_dtype;
    else if (node_dtype == LT_I32)
        nar = LT_I32;
    else if (node_dtype == LT_F32 && f->ctype == LT_F64)
        nar = LT_F32;
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
    uint8_t direct_ok[256]; /* output k may be written before the block ends
                               (no input reads its buffer) */
    lt_fload loads[];
};

lt_fused_bound *lt_fused_bind(const lt_fused *f, const lt_view *in,
                              const lt_view *out)
{
    lt_fused_bound *b = malloc(sizeof *b + (f->n_in ? f->n_in : 1) *
                               sizeof(lt_fload));
    if (!b)
        return NULL;
    b->f = f;
    b->out = out;
    for (int k = 0; k < f->n_in; k++)
        bind_load(&b->loads[k], &in[k], &f->shape);
    memset(b->direct_ok, 0, sizeof b->direct_ok);
    for (int k = 0; out && k < f->n_out && k < 255; k++) {
        int ok = out[k].dtype == f->ctype;
        for (int q = 0; q < f->n_in && ok; q++)
            if (in[q].data == out[k].data)   /* donated: same buffer */
                ok = 0;
        b->direct_ok[k] = (uint8_t)ok;
    }
    return b;
}

void lt_fused_unbind(lt_fused_bound *b) { free(b); }

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
    if (f->ctype == LT_F32)
        exec_f32(f, b->loads, b->out, dok, i0, n, regs, (float **)rp);
    else if (f->ctype == LT_F64)
        exec_f64(f, b->loads, b->out, dok, i0, n, regs, (double **)rp);
    else
        exec_i64(f, b->loads, b->out, dok, i0, n, regs, (int64_t **)rp);
    if (b->out) {
        uint8_t done[256] = {0};
        for (int k = 0; k < f->n_ins; k++) {
            int d = f->ins[k].direct;
            if (d && dok[d - 1])
                done[d - 1] = 1;
        }
        for (int k = 0; k < f->n_out; k++) {
            if (k < 255 && done[k])
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

lt_status lt_fused_run(const lt_fused *f, const lt_view *in,
                       const lt_view *out, const lt_kernel_ctx *ctx)
{
    lt_fused_bound *b = lt_fused_bind(f, in, out);
    if (!b)
        return lt_set_error(LT_ERR_OOM, "fused: out of host memory");
    int64_t total = lt_shape_numel(&f->shape);
    int64_t nblk = (total + LT_FUSED_BLOCK - 1) / LT_FUSED_BLOCK;
    size_t rb = lt_fused_regs_bytes(f);
    int nt = ctx && ctx->nthreads > 0 ? ctx->nthreads : 1;
    if (nblk < 16)
        nt = 1;
    if (nt > nblk)
        nt = (int)nblk;
    int failed = 0;
    if (nt <= 1) {
        void *regs = lt_fused_regs_alloc(rb);
        if (!regs)
            failed = 1;
        else
            for (int64_t k = 0; k < nblk; k++) {
                int64_t i0 = k * LT_FUSED_BLOCK;
                int n = (int)(total - i0 < LT_FUSED_BLOCK ? total - i0 : LT_FUSED_BLOCK);
                lt_fused_eval(b, i0, n, regs);
            }
        lt_fused_regs_free(regs);
    } else {
#pragma omp parallel num_threads(nt)
        {
            void *regs = lt_fused_regs_alloc(rb);
            if (!regs) {
#pragma omp atomic write
                failed = 1;
            }
#pragma omp for schedule(static)
            for (int64_t k = 0; k < nblk; k++) {
                if (!regs)
                    continue;
                int64_t i0 = k * LT_FUSED_BLOCK;
                int n = (int)(total - i0 < LT_FUSED_BLOCK ? total - i0 : LT_FUSED_BLOCK);
                lt_fused_eval(b, i0, n, regs);
            }
            lt_fused_regs_free(regs);
        }
    }
    lt_fused_unbind(b);
    if (failed)
        return lt_set_error(LT_ERR_OOM, "fused: cannot allocate %zu bytes of "
                            "registers", rb);
    return LT_OK;
}
