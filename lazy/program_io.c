/*
 * lazy/program_io.c — program <-> bytes, graph signature (see program_io.h).
 *
 * Layout of a program record (all integers host order):
 *   program header   n_params, per param (scalar flag, dtype); n_outputs,
 *                    per output (shape, dtype, donor, alias, same);
 *                    consts; scratch bytes, kernel count, check_finite,
 *                    matmul precision
 *   steps            kind, op, attrs, kernel tag, in/out program views,
 *                    fused program (+ segments), reduce plan, hints, node
 * The struct sizes below are pinned: a field added to lt_program, lt_step,
 * lt_fused or lt_pview fails the build here until it is written and read.
 */
#include <stdlib.h>
#include <string.h>
#include "program_io.h"
#include "program.h"

#if defined(__x86_64__)
_Static_assert(sizeof(lt_program) == 128, "lt_program changed: update program_io.c");
_Static_assert(sizeof(lt_step) == 352, "lt_step changed: update program_io.c");
_Static_assert(sizeof(lt_fused) == 144, "lt_fused changed: update program_io.c");
_Static_assert(sizeof(lt_fused_ins) == 20, "lt_fused_ins changed: update program_io.c");
_Static_assert(sizeof(lt_pview) == 176, "lt_pview changed: update program_io.c");
_Static_assert(sizeof(lt_reduce_plan) == 56, "lt_reduce_plan changed: update program_io.c");
#endif

enum { FN_NONE = 0, FN_OP = 1, FN_VIEW = 2 };   /* kernel tags */
#define MAX_COUNT (1 << 28)                     /* sanity bound on any count */

/* ------------------------------------------------------------- writing */

void lt_bytes_put(lt_bytes *b, const void *data, size_t n)
{
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n) nc *= 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void w_i32(lt_bytes *b, int32_t v) { lt_bytes_put(b, &v, sizeof v); }
static void w_i64(lt_bytes *b, int64_t v) { lt_bytes_put(b, &v, sizeof v); }
static void w_u64(lt_bytes *b, uint64_t v) { lt_bytes_put(b, &v, sizeof v); }
static void w_f64(lt_bytes *b, double v) { lt_bytes_put(b, &v, sizeof v); }

static void w_shape(lt_bytes *b, const lt_shape *s)
{
    w_i32(b, s->ndim);
    for (int d = 0; d < LT_MAX_DIMS; d++) w_i64(b, s->dims[d]);
}

static void w_attrs(lt_bytes *b, const lt_attrs *a)
{
    w_i32(b, a->n);
    for (int k = 0; k < LT_MAX_ATTRS; k++) w_i64(b, a->i[k]);
    w_f64(b, a->f[0]);
    w_f64(b, a->f[1]);
}

static void w_pview(lt_bytes *b, const lt_pview *pv)
{
    w_i32(b, pv->base);
    w_i32(b, pv->index);
    w_i64(b, pv->byte_off);
    w_i32(b, (int32_t)pv->v.dtype);
    w_shape(b, &pv->v.shape);
    for (int d = 0; d < LT_MAX_DIMS; d++) w_i64(b, pv->v.strides[d]);
    w_i64(b, pv->v.offset);
}

static void w_fused(lt_bytes *b, const lt_fused *f)
{
    w_i32(b, (int32_t)f->ctype);
    w_shape(b, &f->shape);
    w_i32(b, f->n_in);
    w_i32(b, f->n_ins);
    for (int k = 0; k < f->n_ins; k++) {
        const lt_fused_ins *x = &f->ins[k];
        w_i32(b, x->op);
        w_i32(b, x->narrow);
        w_i32(b, x->direct);
        w_i32(b, x->dst);
        w_i32(b, x->a);
        w_i32(b, x->b);
        w_i32(b, x->c);
    }
    w_i32(b, f->n_regs);
    w_i32(b, f->n_out);
    for (int k = 0; k < f->n_out; k++) w_i32(b, f->out_val[k]);
    w_i32(b, f->result);
    w_i32(b, f->finished);
    w_i32(b, f->compute_bound);
}

static lt_status w_step(lt_bytes *b, const lt_step *s)
{
    int tag = !s->fn ? FN_NONE
              : s->fn == lt_kernel_for(s->op) ? FN_OP
              : s->fn == lt_kernel_view ? FN_VIEW : -1;
    if (tag < 0)
        return lt_set_error(LT_ERR_STATE, "program_io: step of op %d runs a kernel the "
                            "cache format cannot name", (int)s->op);
    w_i32(b, s->kind);
    w_i32(b, (int32_t)s->op);
    w_attrs(b, &s->attrs);
    w_i32(b, tag);
    w_i32(b, s->n_in);
    for (int k = 0; k < s->n_in; k++) w_pview(b, &s->in[k]);
    w_i32(b, s->n_out);
    for (int k = 0; k < s->n_out; k++) w_pview(b, &s->out[k]);
    w_i32(b, s->fused != NULL);
    if (s->fused) w_fused(b, s->fused);
    for (int d = 0; d < LT_MAX_DIMS; d++) w_i32(b, s->plan.perm[d]);
    w_i32(b, s->plan.ndim);
    w_i32(b, s->plan.inner);
    w_i64(b, s->plan.n_out);
    w_i64(b, s->plan.r);
    w_i32(b, s->hint != NULL);
    for (int k = 0; s->hint && k < s->n_out; k++) w_i32(b, s->hint[k]);
    w_i32(b, s->node);
    w_i32(b, s->n_seg);
    for (int k = 1; k < s->n_seg; k++) w_fused(b, s->seg[k]);
    return LT_OK;
}

lt_status lt_program_write(const lt_program *p, lt_bytes *b)
{
    w_i32(b, p->n_params);
    for (int j = 0; j < p->n_params; j++) {
        w_i32(b, p->param_scalar[j]);
        w_i32(b, p->param_dtype[j]);
    }
    w_i32(b, p->n_outputs);
    for (int k = 0; k < p->n_outputs; k++) {
        w_shape(b, &p->out_shape[k]);
        w_i32(b, p->out_dtype[k]);
        w_i32(b, p->out_donor[k]);
        w_i32(b, p->out_alias[k]);
        w_i32(b, p->out_same ? p->out_same[k] : -1);
    }
    w_i32(b, p->n_consts);
    for (int k = 0; k < p->n_consts; k++) w_u64(b, p->consts[k]);
    w_u64(b, (uint64_t)p->scratch_bytes);
    w_i32(b, p->n_kernels);
    w_i32(b, p->check_finite);
    w_i32(b, p->mm_precision);
    w_i32(b, p->n_steps);
    for (int k = 0; k < p->n_steps; k++) {
        lt_status st = w_step(b, &p->steps[k]);
        if (st != LT_OK) return st;
    }
    return b->oom ? lt_set_error(LT_ERR_OOM, "program_io: out of host memory") : LT_OK;
}

/* ------------------------------------------------------------- reading */

typedef struct rd {
    const uint8_t *p;
    size_t n, at;
    int bad;
} rd;

static void r_raw(rd *r, void *out, size_t n)
{
    if (r->bad || n > r->n - r->at) {
        r->bad = 1;
        memset(out, 0, n);
        return;
    }
    memcpy(out, r->p + r->at, n);
    r->at += n;
}

static int32_t r_i32(rd *r) { int32_t v; r_raw(r, &v, sizeof v); return v; }
static int64_t r_i64(rd *r) { int64_t v; r_raw(r, &v, sizeof v); return v; }
static uint64_t r_u64(rd *r) { uint64_t v; r_raw(r, &v, sizeof v); return v; }
static double r_f64(rd *r) { double v; r_raw(r, &v, sizeof v); return v; }

/* A count in [lo, MAX_COUNT) that the remaining bytes can hold at `each`
 * bytes per item; else marks r bad and returns lo. */
static int r_count(rd *r, int lo, size_t each)
{
    int32_t v = r_i32(r);
    if (r->bad || v < lo || v >= MAX_COUNT || (size_t)v * each > r->n - r->at) {
        r->bad = 1;
        return lo;
    }
    return v;
}

static void r_check(rd *r, int ok) { if (!ok) r->bad = 1; }

static void r_shape(rd *r, lt_shape *s)
{
    s->ndim = r_i32(r);
    for (int d = 0; d < LT_MAX_DIMS; d++) s->dims[d] = r_i64(r);
    r_check(r, s->ndim >= 0 && s->ndim <= LT_MAX_DIMS);
    for (int d = 0; d < s->ndim && !r->bad; d++) r_check(r, s->dims[d] >= 0);
}

static void r_dtype(rd *r, uint8_t *out)
{
    int32_t v = r_i32(r);
    r_check(r, v >= 0 && v < LT_NUM_DTYPES);
    *out = (uint8_t)(v >= 0 && v < LT_NUM_DTYPES ? v : 0);
}

static void r_attrs(rd *r, lt_attrs *a)
{
    a->n = r_i32(r);
    r_check(r, a->n >= 0 && a->n <= LT_MAX_ATTRS);
    for (int k = 0; k < LT_MAX_ATTRS; k++) a->i[k] = r_i64(r);
    a->f[0] = r_f64(r);
    a->f[1] = r_f64(r);
}

/* The number of objects of base kind `base` a program view may index. */
typedef struct limits { int n_params, n_consts, n_outputs; size_t scratch; } limits;

static void r_pview(rd *r, const limits *L, lt_pview *pv)
{
    memset(pv, 0, sizeof *pv);
    int32_t base = r_i32(r);
    pv->index = r_i32(r);
    pv->byte_off = r_i64(r);
    uint8_t dt;
    r_dtype(r, &dt);
    pv->v.dtype = (lt_dtype)dt;
    r_shape(r, &pv->v.shape);
    for (int d = 0; d < LT_MAX_DIMS; d++) pv->v.strides[d] = r_i64(r);
    pv->v.offset = r_i64(r);
    pv->v.data = NULL;
    pv->base = (uint8_t)base;
    int ok = 0;
    switch (base) {
    case LT_BASE_PARAM: case LT_BASE_SLOT:
        ok = pv->index >= 0 && pv->index < L->n_params; break;
    case LT_BASE_CONST: ok = pv->index >= 0 && pv->index < L->n_consts; break;
    case LT_BASE_OUTPUT: ok = pv->index >= 0 && pv->index < L->n_outputs; break;
    case LT_BASE_SCRATCH:
        ok = pv->byte_off >= 0 && (size_t)pv->byte_off <= L->scratch; break;
    default: ok = 0;   /* LT_BASE_BUF exists at compile time only */
    }
    r_check(r, ok);
}

static lt_fused *r_fused(rd *r)
{
    lt_fused *f = calloc(1, sizeof *f);
    if (!f) {
        r->bad = 1;
        return NULL;
    }
    uint8_t ct;
    r_dtype(r, &ct);
    f->ctype = (lt_dtype)ct;
    r_check(r, ct == LT_F32 || ct == LT_F64 || ct == LT_I64);
    r_shape(r, &f->shape);
    f->n_in = r_count(r, 0, 0);
    f->n_ins = r_count(r, 0, 7 * sizeof(int32_t));
    f->cap_ins = f->n_ins;
    f->ins = malloc((f->n_ins ? f->n_ins : 1) * sizeof *f->ins);
    if (!f->ins) r->bad = 1;
    for (int k = 0; k < f->n_ins && !r->bad; k++) {
        lt_fused_ins *x = &f->ins[k];
        int32_t op = r_i32(r), narrow = r_i32(r), direct = r_i32(r);
        r_check(r, (op >= 0 && op < LT_NUM_OPS) || op == LT_FUSED_LOAD);
        r_check(r, ((narrow >= 0 && narrow < LT_NUM_DTYPES) || narrow == 0xff) &&
                   direct >= 0 && direct < 256);
        x->op = (uint16_t)op;
        x->narrow = (uint8_t)narrow;
        x->direct = (uint8_t)direct;
        x->dst = r_i32(r);
        x->a = r_i32(r);
        x->b = r_i32(r);
        x->c = r_i32(r);
    }
    f->n_regs = r_count(r, 0, 0);
    f->n_out = r_count(r, 0, sizeof(int32_t));
    f->cap_out = f->n_out;
    f->out_val = malloc((f->n_out ? f->n_out : 1) * sizeof *f->out_val);
    if (!f->out_val) r->bad = 1;
    for (int k = 0; k < f->n_out && !r->bad; k++) f->out_val[k] = r_i32(r);
    f->result = r_i32(r);
    f->finished = r_i32(r);
    f->compute_bound = r_i32(r);
    /* registers and load inputs in range (the interpreter trusts them) */
    r_check(r, f->finished == 1);
    for (int k = 0; k < f->n_ins && !r->bad; k++) {
        const lt_fused_ins *x = &f->ins[k];
        r_check(r, x->dst >= 0 && x->dst < f->n_regs);
        if (x->op == LT_FUSED_LOAD) {
            r_check(r, x->a >= 0 && x->a < f->n_in);
        } else {
            r_check(r, x->a >= -1 && x->a < f->n_regs && x->b >= -1 && x->b < f->n_regs &&
                       x->c >= -1 && x->c < f->n_regs);
        }
    }
    for (int k = 0; k < f->n_out && !r->bad; k++)
        r_check(r, f->out_val[k] >= 0 && f->out_val[k] < f->n_regs);
    r_check(r, f->result >= -1 && f->result < f->n_regs);
    return f;
}

static void r_step(rd *r, const limits *L, lt_step *s)
{
    s->kind = r_i32(r);
    r_check(r, s->kind >= LT_STEP_FUSED && s->kind <= LT_STEP_GEMM_EPI);
    int32_t op = r_i32(r);
    r_check(r, op >= 0 && op < LT_NUM_OPS);
    s->op = (lt_op)(op >= 0 && op < LT_NUM_OPS ? op : 0);
    r_attrs(r, &s->attrs);
    int tag = r_i32(r);
    s->fn = tag == FN_OP ? lt_kernel_for(s->op) : tag == FN_VIEW ? lt_kernel_view : NULL;
    r_check(r, tag == FN_NONE || tag == FN_VIEW || (tag == FN_OP && s->fn));
    s->n_in = r_count(r, 0, 4);
    s->in = malloc((s->n_in ? s->n_in : 1) * sizeof *s->in);
    if (!s->in) r->bad = 1;
    for (int k = 0; k < s->n_in && !r->bad; k++) r_pview(r, L, &s->in[k]);
    s->n_out = r_count(r, 0, 4);
    s->out = malloc((s->n_out ? s->n_out : 1) * sizeof *s->out);
    if (!s->out) r->bad = 1;
    for (int k = 0; k < s->n_out && !r->bad; k++) r_pview(r, L, &s->out[k]);
    if (!r->bad && r_i32(r)) s->fused = r_fused(r);
    for (int d = 0; d < LT_MAX_DIMS; d++) s->plan.perm[d] = r_i32(r);
    s->plan.ndim = r_i32(r);
    s->plan.inner = r_i32(r);
    s->plan.n_out = r_i64(r);
    s->plan.r = r_i64(r);
    r_check(r, s->plan.ndim >= 0 && s->plan.ndim <= LT_MAX_DIMS);
    for (int d = 0; d < s->plan.ndim && !r->bad; d++)
        r_check(r, s->plan.perm[d] >= 0 && s->plan.perm[d] < LT_MAX_DIMS);
    if (!r->bad && r_i32(r)) {
        s->hint = malloc((s->n_out ? s->n_out : 1) * sizeof *s->hint);
        if (!s->hint) r->bad = 1;
        for (int k = 0; k < s->n_out && !r->bad; k++) s->hint[k] = r_i32(r);
    }
    s->node = r_i32(r);
    int n_seg = r_count(r, 0, 0);
    r_check(r, (s->kind == LT_STEP_FUSED && s->fused) || n_seg <= 1);
    r_check(r, n_seg <= 1 || (s->n_in % n_seg == 0 && s->n_out % n_seg == 0));
    r_check(r, s->kind == LT_STEP_KERNEL || s->fused);
    if (s->kind == LT_STEP_FUSED && s->fused && n_seg <= 1)
        r_check(r, s->n_in == s->fused->n_in && s->n_out == s->fused->n_out);
    if (s->kind == LT_STEP_REDUCE && s->fused)
        r_check(r, s->n_in == s->fused->n_in && s->n_out == 1 + s->fused->n_out);
    if (r->bad || n_seg <= 1) {
        s->n_seg = r->bad ? 0 : n_seg;
        return;
    }
    s->seg = calloc((size_t)n_seg, sizeof *s->seg);
    if (!s->seg) {
        r->bad = 1;
        return;
    }
    s->n_seg = n_seg;
    s->seg[0] = s->fused;
    for (int k = 1; k < n_seg && !r->bad; k++) s->seg[k] = r_fused(r);
}

lt_program *lt_program_read(const uint8_t *data, size_t n)
{
    rd r = {data, n, 0, 0};
    lt_program *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    atomic_init(&p->refs, 1);
    p->n_params = r_count(&r, 0, 8);
    p->param_scalar = calloc(p->n_params ? p->n_params : 1, 1);
    p->param_dtype = calloc(p->n_params ? p->n_params : 1, 1);
    if (!p->param_scalar || !p->param_dtype) r.bad = 1;
    for (int j = 0; j < p->n_params && !r.bad; j++) {
        int32_t sc = r_i32(&r);
        r_check(&r, sc == 0 || sc == 1);
        p->param_scalar[j] = (uint8_t)sc;
        r_dtype(&r, &p->param_dtype[j]);
    }
    p->n_outputs = r_count(&r, 0, 16);
    int no = p->n_outputs ? p->n_outputs : 1;
    p->out_shape = calloc(no, sizeof *p->out_shape);
    p->out_dtype = calloc(no, 1);
    p->out_donor = malloc(no * sizeof(int));
    p->out_alias = malloc(no * sizeof(int));
    p->out_same = malloc(no * sizeof(int));
    if (!p->out_shape || !p->out_dtype || !p->out_donor || !p->out_alias || !p->out_same)
        r.bad = 1;
    for (int k = 0; k < p->n_outputs && !r.bad; k++) {
        r_shape(&r, &p->out_shape[k]);
        r_dtype(&r, &p->out_dtype[k]);
        p->out_donor[k] = r_i32(&r);
        p->out_alias[k] = r_i32(&r);
        p->out_same[k] = r_i32(&r);
        r_check(&r, p->out_donor[k] >= -1 && p->out_donor[k] < p->n_params &&
                    p->out_alias[k] >= -1 && p->out_alias[k] < p->n_params &&
                    p->out_same[k] >= -1 && p->out_same[k] < k);
    }
    p->n_consts = r_count(&r, 0, 8);
    p->consts = malloc((p->n_consts ? p->n_consts : 1) * sizeof *p->consts);
    if (!p->consts) r.bad = 1;
    for (int k = 0; k < p->n_consts && !r.bad; k++) p->consts[k] = r_u64(&r);
    p->scratch_bytes = (size_t)r_u64(&r);
    p->n_kernels = r_i32(&r);
    p->check_finite = r_i32(&r);
    p->mm_precision = r_i32(&r);
    r_check(&r, p->mm_precision == LT_MATMUL_F32 || p->mm_precision == LT_MATMUL_DEFAULT ||
                p->mm_precision == LT_MATMUL_HIGH || p->mm_precision == LT_MATMUL_HIGHEST);
    int ns = r_count(&r, 0, 8);
    p->steps = calloc(ns ? ns : 1, sizeof *p->steps);
    if (!p->steps) r.bad = 1;
    limits L = {p->n_params, p->n_consts, p->n_outputs, p->scratch_bytes};
    for (int k = 0; k < ns && !r.bad; k++) {
        p->n_steps = k + 1;     /* destroy frees what was read so far */
        r_step(&r, &L, &p->steps[k]);
    }
    if (r.bad || r.at != r.n) {
        lt_program_destroy(p);
        return NULL;
    }
    return p;
}

/* ----------------------------------------------------------- signature */

void lt_graph_signature(const lt_graph *g, lt_bytes *b)
{
    w_i32(b, g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) {
        const lt_node *n = g->nodes[i];
        w_u64(b, n->hash);
        w_i32(b, n->op);
        w_i32(b, n->dtype);
        w_i32(b, n->flags);
        w_i32(b, n->shape.ndim);
        for (int d = 0; d < n->shape.ndim; d++) w_i64(b, n->shape.dims[d]);
        w_i32(b, n->attrs.n);
        for (int k = 0; k < n->attrs.n; k++) w_i64(b, n->attrs.i[k]);
        w_f64(b, n->attrs.f[0]);
        w_f64(b, n->attrs.f[1]);
        w_f64(b, (n->flags & LT_NODE_CONST) ? n->value : 0.0);
        w_i32(b, g->in_off[i + 1] - g->in_off[i]);
        for (int e = g->in_off[i]; e < g->in_off[i + 1]; e++) w_i32(b, g->in_pos[e]);
    }
    w_i32(b, g->n_params);
    for (int j = 0; j < g->n_params; j++) {
        w_i32(b, g->param_pos[j]);
        w_i32(b, g->param_alias[j]);
    }
    w_i32(b, g->n_outputs);
    for (int o = 0; o < g->n_outputs; o++) w_i32(b, g->output_pos[o]);
    w_i32(b, g->mm_precision);
}
