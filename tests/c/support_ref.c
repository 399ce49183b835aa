/* tests/c/support_ref.c — naive reference evaluator (see support_ref.h):
 * dtypes, elementwise, reductions, matmul, norms, views, index, loss (conv
 * and pool: support_ref_nn.c). Obviously-correct loops over doubles;
 * nothing here is shared with lazy/. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support_ref_int.h"

/* ------------------------------------------------------------ basics */

static _Thread_local char ref_msg[512];

const char *ref_error(void) { return ref_msg; }

int ref_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ref_msg, sizeof ref_msg, fmt, ap);
    va_end(ap);
    return -1;
}

int64_t ref_numel(const lt_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

lt_shape ref_mkshape(int nd, const int64_t *d)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = nd;
    for (int i = 0; i < nd; i++) s.dims[i] = d[i];
    return s;
}

int ref_array_init(ref_array *a, lt_dtype dtype, const lt_shape *shape)
{
    memset(a, 0, sizeof *a);
    a->shape = *shape;
    a->dtype = dtype;
    int64_t n = ref_numel(shape);
    a->v = calloc((size_t)(n ? n : 1), sizeof(double));
    return a->v ? 0 : ref_fail("ref: out of memory");
}

void ref_array_free(ref_array *a)
{
    if (!a) return;
    free(a->v);
    a->v = NULL;
}

float ref_bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;      /* NaN */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    u &= 0xffff0000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

/* IEEE half rounding through frexp/ldexp (independent of the bit tricks in
 * base/f16.h): 11 significant bits, subnormals below 2^-14, inf past 65504. */
float ref_f16_round(float f)
{
    if (isnan(f) || isinf(f) || f == 0) return f;
    double a = fabs((double)f);
    int e;
    frexp(a, &e);                     /* a = m * 2^e, m in [0.5, 1) */
    int q = e - 11;                   /* quantum exponent for 11 bits */
    if (q < -24) q = -24;             /* subnormal quantum 2^-24 */
    double r = nearbyint(ldexp(a, -q));
    r = ldexp(r, q);
    if (r > 65504.0) r = INFINITY;
    return (float)(f < 0 ? -r : r);
}

/* The half bits of f (f already a half value: ref_f16_round). */
uint16_t ref_f16_bits(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (isnan(f)) return 0x7e00;
    if (isinf(f)) return sign | 0x7c00;
    if (a == 0) return sign;
    if (a < ldexp(1.0, -14))                         /* subnormal */
        return sign | (uint16_t)nearbyint(ldexp(a, 24));
    int e;
    double m = frexp(a, &e);                         /* a = m 2^e, m in [0.5, 1) */
    uint16_t exp = (uint16_t)(e - 1 + 15);
    uint16_t man = (uint16_t)nearbyint((m * 2 - 1) * 1024);
    return sign | (uint16_t)(exp << 10) | man;
}

/* wraps an integer-valued double into [lo, lo + span) */
static double wrap_int(double v, double span, double lo)
{
    if (isnan(v)) return 0;
    v = trunc(v);
    if (v >= 9.2233720368547758e18) v = 9.2233720368547758e18 - 1024;
    if (v <= -9.2233720368547758e18) v = -9.2233720368547758e18;
    double m = fmod(v - lo, span);
    if (m < 0) m += span;
    return m + lo;
}

double ref_round(double v, lt_dtype dt)
{
    switch (dt) {
    case LT_F32: return (double)(float)v;
    case LT_BF16: return (double)ref_bf16_round((float)v);
    case LT_F16: return (double)ref_f16_round((float)v);
    case LT_F64: return v;
    case LT_I64: return isnan(v) ? 0 : trunc(v);
    case LT_I32: return wrap_int(v, 4294967296.0, -2147483648.0);
    case LT_I16: return wrap_int(v, 65536.0, -32768.0);
    case LT_I8: return wrap_int(v, 256.0, -128.0);
    case LT_U8: return wrap_int(v, 256.0, 0.0);
    case LT_BOOL: return v != 0;
    default: return v;
    }
}

static void unravel(int64_t lin, const lt_shape *s, int64_t *idx)
{
    for (int d = s->ndim - 1; d >= 0; d--) {
        int64_t n = s->dims[d];
        idx[d] = n ? lin % n : 0;
        lin = n ? lin / n : 0;
    }
}

static int64_t ravel(const int64_t *idx, const lt_shape *s)
{
    int64_t lin = 0;
    for (int d = 0; d < s->ndim; d++) lin = lin * s->dims[d] + idx[d];
    return lin;
}

static int is_float(lt_dtype d)
{
    return d == LT_F32 || d == LT_BF16 || d == LT_F64 || d == LT_F16;
}

#define UNDEF ((lt_dtype)-1)

/* PyTorch's type promotion table (torch.promote_types) over the computed
 * dtypes, written out row by row. */
enum { P_B, P_U8, P_I8, P_I16, P_I32, P_I64, P_F16, P_BF16, P_F32, P_F64, P_N };
static int pidx(lt_dtype d)
{
    switch (d) {
    case LT_BOOL: return P_B; case LT_U8: return P_U8; case LT_I8: return P_I8;
    case LT_I16: return P_I16; case LT_I32: return P_I32; case LT_I64: return P_I64;
    case LT_F16: return P_F16; case LT_BF16: return P_BF16; case LT_F32: return P_F32;
    default: return P_F64;
    }
}
static const lt_dtype ptable[P_N][P_N] = {
    /*          b        u8      i8      i16     i32     i64     f16     bf16    f32     f64 */
    /* b   */ {LT_BOOL, LT_U8,  LT_I8,  LT_I16, LT_I32, LT_I64, LT_F16, LT_BF16, LT_F32, LT_F64},
    /* u8  */ {LT_U8,   LT_U8,  LT_I16, LT_I16, LT_I32, LT_I64, LT_F16, LT_BF16, LT_F32, LT_F64},
    /* i8  */ {LT_I8,   LT_I16, LT_I8,  LT_I16, LT_I32, LT_I64, LT_F16, LT_BF16, LT_F32, LT_F64},
    /* i16 */ {LT_I16,  LT_I16, LT_I16, LT_I16, LT_I32, LT_I64, LT_F16, LT_BF16, LT_F32, LT_F64},
    /* i32 */ {LT_I32,  LT_I32, LT_I32, LT_I32, LT_I32, LT_I64, LT_F16, LT_BF16, LT_F32, LT_F64},
    /* i64 */ {LT_I64,  LT_I64, LT_I64, LT_I64, LT_I64, LT_I64, LT_F16, LT_BF16, LT_F32, LT_F64},
    /* f16 */ {LT_F16,  LT_F16, LT_F16, LT_F16, LT_F16, LT_F16, LT_F16, LT_F32,  LT_F32, LT_F64},
    /* bf16*/ {LT_BF16, LT_BF16, LT_BF16, LT_BF16, LT_BF16, LT_BF16, LT_F32, LT_BF16, LT_F32, LT_F64},
    /* f32 */ {LT_F32,  LT_F32, LT_F32, LT_F32, LT_F32, LT_F32, LT_F32, LT_F32,  LT_F32, LT_F64},
    /* f64 */ {LT_F64,  LT_F64, LT_F64, LT_F64, LT_F64, LT_F64, LT_F64, LT_F64,  LT_F64, LT_F64},
};

static lt_dtype promote2(lt_dtype a, lt_dtype b)
{
    if (a == UNDEF) return b;
    if (b == UNDEF) return a;
    return ptable[pidx(a)][pidx(b)];
}


static lt_dtype combine(lt_dtype higher, lt_dtype lower)
{
    if (higher == UNDEF) return lower;
    if (lower == UNDEF) return higher;
    if (is_float(higher)) return higher;
    if (higher == LT_BOOL || is_float(lower)) return promote2(higher, lower);
    return higher;
}

lt_dtype ref_result_type(const ref_array *in, int n)
{
    lt_dtype dim = UNDEF, zero = UNDEF, wrapped = UNDEF;
    for (int i = 0; i < n; i++) {
        lt_dtype d = in[i].dtype;
        if (in[i].wrapped) {
            if (is_float(d)) d = LT_F32;
            wrapped = promote2(wrapped, d);
        } else if (in[i].shape.ndim == 0) {
            zero = promote2(zero, d);
        } else {
            dim = promote2(dim, d);
        }
    }
    lt_dtype r = combine(dim, combine(zero, wrapped));
    return r == UNDEF ? LT_F32 : r;
}

/* ---------------------------------------------------- op table readings */

enum { RDT_LEAF, RDT_PROMOTE, RDT_FLOAT, RDT_BOOL, RDT_I64, RDT_SUM,
       RDT_FIRST, RDT_WHERE, RDT_ATTR, RDT_RAND, RDT_REAL, RDT_COMPLEX };

static const int dt_rule[] = {
#define LT_OP(name, in_min, in_max, kind, shape, dtype, kernel, spmd, cost, checks, ident, expr) RDT_##dtype,
#include "ops.def"
#undef LT_OP
};

static const int op_arity[] = {
#define LT_OP(name, in_min, in_max, kind, shape, dtype, kernel, spmd, cost, checks, ident, expr) \
    (in_min == in_max ? in_min : -1),
#include "ops.def"
#undef LT_OP
};

static const lt_op_kind op_kind[] = {
#define LT_OP(name, in_min, in_max, kind, shape, dtype, kernel, spmd, cost, checks, ident, expr) kind,
#include "ops.def"
#undef LT_OP
};

static const char *const op_names[] = {
#define LT_OP(name, ...) #name,
#include "ops.def"
#undef LT_OP
};

static lt_dtype to_float(lt_dtype d) { return is_float(d) ? d : LT_F32; }

/* Output dtype of op by the dtype column. */
static lt_dtype out_dtype(lt_op op, const lt_attrs *at, const ref_array *in,
                          int n)
{
    switch (dt_rule[op]) {
    case RDT_PROMOTE: return ref_result_type(in, n);
    case RDT_FLOAT: return to_float(ref_result_type(in, n));
    case RDT_BOOL: return LT_BOOL;
    case RDT_I64: return LT_I64;
    case RDT_SUM: {
        lt_dtype d = ref_result_type(in, n);
        return is_float(d) ? d : LT_I64;
    }
    case RDT_FIRST: return in[0].dtype;
    case RDT_WHERE: return ref_result_type(in + 1, 2);
    case RDT_ATTR:
    case RDT_RAND: return (lt_dtype)at->i[0];
    default: return in[0].dtype;
    }
}

/* --------------------------------------------------------- elementwise */

/* The helpers the expr column uses, written here from PyTorch semantics. */
#define T double
/* bitwise: two's complement of the truncated values */
#define LT_BITAND(a, b) ((double)(llround(trunc(a)) & llround(trunc(b))))
#define LT_BITOR(a, b) ((double)(llround(trunc(a)) | llround(trunc(b))))
#define LT_BITXOR(a, b) ((double)(llround(trunc(a)) ^ llround(trunc(b))))
#define LT_BITNOT(a) ((double)(-1 - llround(trunc(a))))
#define LT_FLOOR(a) floor(a)
#define LT_CEIL(a) ceil(a)
#define LT_ROUND(a) nearbyint(a)                 /* half to even */
#define LT_TRUNC(a) trunc(a)
#define LT_POW(a, b) pow(a, b)
#define LT_MAXIMUM(a, b) (isnan(a) || isnan(b) ? NAN : ((a) > (b) ? (a) : (b)))
#define LT_MINIMUM(a, b) (isnan(a) || isnan(b) ? NAN : ((a) < (b) ? (a) : (b)))
#define LT_REMAINDER(a, b) ref_py_mod(a, b)
#define LT_FMOD(a, b) fmod(a, b)
#define LT_FLOORDIV(a, b) floor((a) / (b))
#define LT_CLAMP(a, lo, hi) (isnan(a) ? (a) : fmin(fmax(a, lo), hi))

#define LT_ERFINV(a) ref_erfinv(a)

/* erfinv by bisection of erf on [-6, 6] (erf is 1 in double past 5.93) */
static double ref_erfinv(double y)
{
    if (isnan(y) || fabs(y) > 1) return NAN;
    if (fabs(y) == 1) return copysign(INFINITY, y);
    double lo = -6, hi = 6;
    for (int i = 0; i < 200; i++) {
        double mid = (lo + hi) / 2;
        if (erf(mid) < y) lo = mid;
        else hi = mid;
    }
    return (lo + hi) / 2;
}

static double ref_py_mod(double a, double b)
{
    double m = fmod(a, b);
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    return m;
}

static double ew_eval(lt_op op, double a, double b, double c)
{
    (void)b;
    (void)c;
    switch (op) {
#define LT_OP(name, in_min, in_max, kind, shape, dtype, kernel, spmd, cost, checks, ident, expr) \
    case LT_OP_##name: return (double)(expr);
#include "ops.def"
#undef LT_OP
    default: return NAN;
    }
}

#undef T

/* Broadcast shape of n arrays (right-aligned); -1 if incompatible. */
static int broadcast(const ref_array *in, int n, lt_shape *out)
{
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (in[i].shape.ndim > nd) nd = in[i].shape.ndim;
    memset(out, 0, sizeof *out);
    out->ndim = nd;
    for (int d = 0; d < nd; d++) out->dims[d] = 1;
    for (int i = 0; i < n; i++) {
        const lt_shape *s = &in[i].shape;
        for (int k = 0; k < s->ndim; k++) {
            int d = nd - s->ndim + k;
            int64_t x = s->dims[k];
            if (x == out->dims[d] || x == 1) continue;
            if (out->dims[d] == 1) out->dims[d] = x;
            else return -1;
        }
    }
    return 0;
}

/* Linear index into `s` (broadcast into out shape `o`) for out index idx. */
static int64_t bidx(const lt_shape *s, const lt_shape *o, const int64_t *idx)
{
    int64_t lin = 0;
    for (int k = 0; k < s->ndim; k++) {
        int d = o->ndim - s->ndim + k;
        lin = lin * s->dims[k] + (s->dims[k] == 1 ? 0 : idx[d]);
    }
    return lin;
}

static int eval_ew(lt_op op, const lt_attrs *at, const ref_array *in, int n,
                   ref_array *out)
{
    lt_shape os;
    if (broadcast(in, n, &os)) return ref_fail("ref %s: shapes do not broadcast", op_names[op]);
    lt_dtype od = out_dtype(op, at, in, n);
    /* compute type: inputs are converted to it before the math */
    lt_dtype ct;
    if (op == LT_OP_where) ct = ref_result_type(in + 1, 2);
    else if (op == LT_OP_cast || op == LT_OP_copy) ct = in[0].dtype;
    else ct = ref_result_type(in, n);
    if (dt_rule[op] == RDT_FLOAT) ct = to_float(ct);
    if (ref_array_init(out, od, &os)) return -1;
    int64_t idx[LT_MAX_DIMS], N = ref_numel(&os);
    for (int64_t i = 0; i < N; i++) {
        unravel(i, &os, idx);
        double x[3] = {0, 0, 0};
        for (int k = 0; k < n; k++) {
            x[k] = in[k].v[bidx(&in[k].shape, &os, idx)];
            if (!(op == LT_OP_where && k == 0)) x[k] = ref_round(x[k], ct);
        }
        out->v[i] = ref_round(ew_eval(op, x[0], x[1], x[2]), od);
    }
    return 0;
}

/* ---------------------------------------------------------- reductions */

static int eval_reduce(lt_op op, const lt_attrs *at, const ref_array *in,
                       ref_array *out)
{
    const lt_shape *s = &in->shape;
    int64_t mask = at->i[0], keep = at->i[1];
    if (mask >> s->ndim) return ref_fail("ref %s: mask 0x%llx beyond ndim %d", op_names[op],
                                     (long long)mask, s->ndim);
    lt_shape os;
    memset(&os, 0, sizeof os);
    for (int d = 0; d < s->ndim; d++) {
        if (mask >> d & 1) {
            if (keep) os.dims[os.ndim++] = 1;
        } else {
            os.dims[os.ndim++] = s->dims[d];
        }
    }
    lt_dtype od = out_dtype(op, at, in, 1);
    if (ref_array_init(out, od, &os)) return -1;
    int64_t NO = ref_numel(&os), NI = ref_numel(s), cnt = NO ? NI / NO : 0;
    double init = 0;
    if (op == LT_OP_prod || op == LT_OP_all) init = 1;
    if (op == LT_OP_amax) init = -INFINITY;
    if (op == LT_OP_amin) init = INFINITY;
    for (int64_t i = 0; i < NO; i++) out->v[i] = init;
    int64_t idx[LT_MAX_DIMS], oidx[LT_MAX_DIMS];
    for (int64_t i = 0; i < NI; i++) {
        unravel(i, s, idx);
        int k = 0;
        for (int d = 0; d < s->ndim; d++) {
            if (mask >> d & 1) {
                if (keep) oidx[k++] = 0;
            } else {
                oidx[k++] = idx[d];
            }
        }
        double *o = &out->v[ravel(oidx, &os)];
        double x = in->v[i];
        switch (op) {
        case LT_OP_sum: case LT_OP_mean: *o += x; break;
        case LT_OP_prod: *o *= x; break;
        case LT_OP_amax: if (isnan(x) || x > *o) *o = isnan(*o) ? *o : x; break;
        case LT_OP_amin: if (isnan(x) || x < *o) *o = isnan(*o) ? *o : x; break;
        case LT_OP_any: *o = *o || x != 0; break;
        case LT_OP_all: *o = *o && x != 0; break;
        default: return ref_fail("ref: not a reduction");
        }
    }
    for (int64_t i = 0; i < NO; i++) {
        if (op == LT_OP_mean) out->v[i] /= (double)cnt;
        out->v[i] = ref_round(out->v[i], od);
    }
    return 0;
}

static int eval_argreduce(lt_op op, const lt_attrs *at, const ref_array *in,
                          ref_array *out)
{
    const lt_shape *s = &in->shape;
    int64_t dim = at->i[0], keep = at->i[1];
    lt_shape os;
    memset(&os, 0, sizeof os);
    lt_shape view = *s;            /* the shape reduced along `rd` */
    int rd;
    if (dim < 0) {
        int64_t n = ref_numel(s);
        view = ref_mkshape(1, &n);
        rd = 0;
        if (keep) {
            os.ndim = s->ndim;
            for (int d = 0; d < s->ndim; d++) os.dims[d] = 1;
        }
    } else {
        if (dim >= s->ndim && !(s->ndim == 0 && dim == 0))
            return ref_fail("ref %s: dim %lld out of range", op_names[op], (long long)dim);
        if (s->ndim == 0) {
            int64_t one = 1;
            view = ref_mkshape(1, &one);
            rd = 0;
        } else {
            rd = (int)dim;
            for (int d = 0; d < s->ndim; d++)
                if (d != rd) os.dims[os.ndim++] = s->dims[d];
                else if (keep) os.dims[os.ndim++] = 1;
        }
    }
    if (ref_array_init(out, LT_I64, &os)) return -1;
    int64_t L = view.dims[rd], inner = 1, outer = 1;
    for (int d = rd + 1; d < view.ndim; d++) inner *= view.dims[d];
    for (int d = 0; d < rd; d++) outer *= view.dims[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t q = 0; q < inner; q++) {
            int64_t best = 0;
            double bv = in->v[o * L * inner + q];
            for (int64_t k = 1; k < L; k++) {
                double x = in->v[(o * L + k) * inner + q];
                if (isnan(bv)) break;
                int better = op == LT_OP_argmax ? (x > bv) : (x < bv);
                if (better || isnan(x)) {
                    best = k;
                    bv = x;
                }
            }
            out->v[o * inner + q] = (double)best;
        }
    return 0;
}

/* -------------------------------------------------------------- matmul */

static int eval_matmul(lt_op op, const ref_array *in, ref_array *out)
{
    const double *bias = NULL;
    if (op == LT_OP_addmm) {        /* (bias, a, b): mm plus the bias per row */
        bias = in[0].v;
        in++;
        op = LT_OP_mm;
    }
    const lt_shape *a = &in[0].shape, *b = &in[1].shape;
    int64_t B = 1, M, K, N;
    if (op == LT_OP_mm) {
        if (a->ndim != 2 || b->ndim != 2 || a->dims[1] != b->dims[0])
            return ref_fail("ref mm: bad shapes");
        M = a->dims[0]; K = a->dims[1]; N = b->dims[1];
        int64_t d[2] = {M, N};
        lt_shape os = ref_mkshape(2, d);
        if (ref_array_init(out, ref_result_type(in, 2), &os)) return -1;
    } else {
        if (a->ndim != 3 || b->ndim != 3 || a->dims[0] != b->dims[0] ||
            a->dims[2] != b->dims[1])
            return ref_fail("ref bmm: bad shapes");
        B = a->dims[0]; M = a->dims[1]; K = a->dims[2]; N = b->dims[2];
        int64_t d[3] = {B, M, N};
        lt_shape os = ref_mkshape(3, d);
        if (ref_array_init(out, ref_result_type(in, 2), &os)) return -1;
    }
    for (int64_t z = 0; z < B; z++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = bias ? bias[j] : 0;
                for (int64_t k = 0; k < K; k++)
                    acc += in[0].v[(z * M + i) * K + k] * in[1].v[(z * K + k) * N + j];
                out->v[(z * M + i) * N + j] = ref_round(acc, out->dtype);
            }
    return 0;
}

/* --------------------------------------------------------------- norms */

static int eval_norm(lt_op op, const lt_attrs *at, const ref_array *in,
                     ref_array *out)
{
    const lt_shape *s = &in[0].shape;
    int64_t dim = at->i[0];
    if (s->ndim == 0 ? dim != 0 : (dim < 0 || dim >= s->ndim))
        return ref_fail("ref %s: bad dim %lld", op_names[op], (long long)dim);
    int scan = op == LT_OP_cumsum || op == LT_OP_cumprod;
    lt_dtype od = out_dtype(op, at, in, op == LT_OP_softmax || op == LT_OP_log_softmax || scan ? 1 : 2);
    if (ref_array_init(out, od, s)) return -1;
    int64_t L = s->ndim ? s->dims[dim] : 1, inner = 1, outer = 1;
    for (int d = (int)dim + 1; d < s->ndim; d++) inner *= s->dims[d];
    for (int d = 0; d < dim; d++) outer *= s->dims[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t q = 0; q < inner; q++) {
#define AT(k) ((o * L + (k)) * inner + q)
            if (op == LT_OP_softmax || op == LT_OP_log_softmax) {
                double mx = -INFINITY, sum = 0;
                for (int64_t k = 0; k < L; k++) mx = fmax(mx, in[0].v[AT(k)]);
                for (int64_t k = 0; k < L; k++) sum += exp(in[0].v[AT(k)] - mx);
                for (int64_t k = 0; k < L; k++) {
                    double z = in[0].v[AT(k)] - mx;
                    out->v[AT(k)] = op == LT_OP_softmax ? exp(z) / sum : z - log(sum);
                }
            } else if (op == LT_OP_argsort) {
                /* insertion sort: stable; NaN above every number */
                int desc = at->n > 1 && at->i[1];
                int64_t *ix = malloc((size_t)(L ? L : 1) * sizeof *ix);
                if (!ix) return ref_fail("ref argsort: out of memory");
                for (int64_t k = 0; k < L; k++) {
                    double v = in[0].v[AT(k)];
                    int64_t j = k;
                    while (j > 0) {
                        double u = in[0].v[AT(ix[j - 1])];
                        int before = isnan(v) || isnan(u)
                                         ? (desc ? isnan(v) && !isnan(u) : !isnan(v) && isnan(u))
                                         : (desc ? v > u : v < u);
                        if (!before) break;
                        ix[j] = ix[j - 1];
                        j--;
                    }
                    ix[j] = k;
                }
                for (int64_t k = 0; k < L; k++) out->v[AT(k)] = (double)ix[k];
                free(ix);
            } else if (op == LT_OP_cummax_indices) {
                /* eager's cummax_cummin_helper: NaN or >= (<=) the best moves it */
                int mn = at->n > 1 && at->i[1];
                double best = L ? in[0].v[AT(0)] : 0;
                int64_t bi = 0;
                for (int64_t k = 0; k < L; k++) {
                    double v = in[0].v[AT(k)];
                    if (isnan(v) || (!isnan(best) && (mn ? v <= best : v >= best))) {
                        best = v;
                        bi = k;
                    }
                    out->v[AT(k)] = (double)bi;
                }
            } else if (op == LT_OP_cumsum || op == LT_OP_cumprod) {
                double acc = op == LT_OP_cumsum ? 0 : 1;
                for (int64_t k = 0; k < L; k++) {
                    double v = in[0].v[AT(k)];
                    if (od != LT_I64) v = ref_round(v, od == LT_BF16 ? LT_F32 : od);
                    acc = op == LT_OP_cumsum ? acc + v : acc * v;
                    if (od == LT_F32 || od == LT_BF16) acc = (float)acc;
                    out->v[AT(k)] = acc;
                }
            } else if (op == LT_OP_softmax_backward) {
                double dot = 0;
                for (int64_t k = 0; k < L; k++) dot += in[0].v[AT(k)] * in[1].v[AT(k)];
                for (int64_t k = 0; k < L; k++)
                    out->v[AT(k)] = in[1].v[AT(k)] * (in[0].v[AT(k)] - dot);
            } else {
                double sum = 0;
                for (int64_t k = 0; k < L; k++) sum += in[0].v[AT(k)];
                for (int64_t k = 0; k < L; k++)
                    out->v[AT(k)] = in[0].v[AT(k)] - exp(in[1].v[AT(k)]) * sum;
            }
#undef AT
        }
    for (int64_t i = 0; i < ref_numel(s); i++) out->v[i] = ref_round(out->v[i], od);
    return 0;
}

/* ------------------------------------------------------ views, scatters */

/* For a view op over base shape bs: the view's shape and, for each view
 * element, the base linear index (map, malloc'd). */
static int view_map(lt_op op, const lt_attrs *at, const lt_shape *bs,
                    lt_shape *vs, int64_t **map_out)
{
    const int64_t *a = at->i;
    int64_t bstr[LT_MAX_DIMS];
    int64_t st = 1;
    for (int d = bs->ndim - 1; d >= 0; d--) {
        bstr[d] = st;
        st *= bs->dims[d];
    }
    int64_t vstr[LT_MAX_DIMS], off = 0;   /* view = strided window of base */
    memset(vs, 0, sizeof *vs);
    switch (op) {
    case LT_OP_reshape: {
        vs->ndim = at->n;
        int64_t known = 1, neg = -1;
        for (int d = 0; d < at->n; d++) {
            if (a[d] < 0) neg = d;
            else known *= a[d];
            vs->dims[d] = a[d];
        }
        if (neg >= 0) vs->dims[neg] = known ? ref_numel(bs) / known : 0;
        if (ref_numel(vs) != ref_numel(bs)) return ref_fail("ref reshape: numel differs");
        st = 1;
        for (int d = vs->ndim - 1; d >= 0; d--) {
            vstr[d] = st;
            st *= vs->dims[d];
        }
        break;
    }
    case LT_OP_permute: {
        if (at->n != bs->ndim) return ref_fail("ref permute: %d dims for ndim %d", at->n, bs->ndim);
        vs->ndim = at->n;
        int seen = 0;
        for (int d = 0; d < at->n; d++) {
            if (a[d] < 0 || a[d] >= bs->ndim || (seen >> a[d] & 1))
                return ref_fail("ref permute: bad perm");
            seen |= 1 << a[d];
            vs->dims[d] = bs->dims[a[d]];
            vstr[d] = bstr[a[d]];
        }
        break;
    }
    case LT_OP_expand: {
        if (at->n < bs->ndim) return ref_fail("ref expand: fewer dims");
        vs->ndim = at->n;
        int lead = at->n - bs->ndim;
        for (int d = 0; d < at->n; d++) {
            int bd = d - lead;
            int64_t want = a[d];
            if (bd < 0) {
                if (want < 0) return ref_fail("ref expand: -1 on a new dim");
                vs->dims[d] = want;
                vstr[d] = 0;
            } else {
                int64_t have = bs->dims[bd];
                if (want < 0) want = have;
                if (have != want && have != 1) return ref_fail("ref expand: %lld -> %lld",
                                                           (long long)have, (long long)want);
                vs->dims[d] = want;
                vstr[d] = have == want ? bstr[bd] : 0;
            }
        }
        break;
    }
    case LT_OP_slice: case LT_OP_slice_scatter: {
        int64_t dim = a[0], s0 = a[1], e = a[2], step = a[3] ? a[3] : 1;
        if (dim < 0 || dim >= bs->ndim) return ref_fail("ref slice: bad dim");
        int64_t n = bs->dims[dim];
        if (s0 < 0) s0 += n;
        if (e < 0) e += n;
        if (s0 < 0) s0 = 0;
        if (e > n) e = n;
        if (s0 > n) s0 = n;
        *vs = *bs;
        vs->dims[dim] = e > s0 ? (e - s0 + step - 1) / step : 0;
        for (int d = 0; d < bs->ndim; d++) vstr[d] = bstr[d];
        vstr[dim] = bstr[dim] * step;
        off = s0 * bstr[dim];
        break;
    }
    case LT_OP_select: case LT_OP_select_scatter: {
        int64_t dim = a[0], ix = a[1];
        if (dim < 0 || dim >= bs->ndim) return ref_fail("ref select: bad dim");
        if (ix < 0) ix += bs->dims[dim];
        if (ix < 0 || ix >= bs->dims[dim]) return ref_fail("ref select: index out of range");
        for (int d = 0; d < bs->ndim; d++)
            if (d != dim) {
                vstr[vs->ndim] = bstr[d];
                vs->dims[vs->ndim++] = bs->dims[d];
            }
        off = ix * bstr[dim];
        break;
    }
    case LT_OP_diagonal: case LT_OP_diagonal_scatter: {
        int64_t offs = a[0], d1 = a[1], d2 = a[2];
        if (d1 < 0 || d2 < 0 || d1 >= bs->ndim || d2 >= bs->ndim || d1 == d2)
            return ref_fail("ref diagonal: bad dims");
        for (int d = 0; d < bs->ndim; d++)
            if (d != d1 && d != d2) {
                vstr[vs->ndim] = bstr[d];
                vs->dims[vs->ndim++] = bs->dims[d];
            }
        int64_t len;
        if (offs >= 0) {
            len = bs->dims[d1] < bs->dims[d2] - offs ? bs->dims[d1] : bs->dims[d2] - offs;
            off = offs * bstr[d2];
        } else {
            len = bs->dims[d1] + offs < bs->dims[d2] ? bs->dims[d1] + offs : bs->dims[d2];
            off = -offs * bstr[d1];
        }
        if (len < 0) len = 0;
        if (len == 0) off = 0;
        vstr[vs->ndim] = bstr[d1] + bstr[d2];
        vs->dims[vs->ndim++] = len;
        break;
    }
    case LT_OP_as_strided: case LT_OP_as_strided_scatter: {
        int nd = (int)a[0];
        if (nd < 0 || nd > LT_MAX_DIMS || at->n < 2 + 2 * nd) return ref_fail("ref as_strided: attrs");
        vs->ndim = nd;
        for (int d = 0; d < nd; d++) {
            vs->dims[d] = a[1 + d];
            vstr[d] = a[1 + nd + d];
        }
        off = a[1 + 2 * nd];
        break;
    }
    default:
        return ref_fail("ref: %s is not a view", op_names[op]);
    }
    int64_t n = ref_numel(vs), idx[LT_MAX_DIMS], bn = ref_numel(bs);
    int64_t *map = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!map) return ref_fail("ref: out of memory");
    for (int64_t i = 0; i < n; i++) {
        unravel(i, vs, idx);
        int64_t lin = off;
        for (int d = 0; d < vs->ndim; d++) lin += idx[d] * vstr[d];
        if (lin < 0 || lin >= bn) {
            free(map);
            return ref_fail("ref %s: view reaches outside the base", op_names[op]);
        }
        map[i] = lin;
    }
    *map_out = map;
    return 0;
}

static int eval_view(lt_op op, const lt_attrs *at, const ref_array *in,
                     ref_array *out)
{
    lt_shape vs;
    int64_t *map;
    if (view_map(op, at, &in[0].shape, &vs, &map)) return -1;
    if (ref_array_init(out, in[0].dtype, &vs)) {
        free(map);
        return -1;
    }
    for (int64_t i = 0; i < ref_numel(&vs); i++) out->v[i] = in[0].v[map[i]];
    free(map);
    return 0;
}

static int eval_scatter(lt_op op, const lt_attrs *at, const ref_array *in,
                        ref_array *out)
{
    lt_shape vs;
    int64_t *map;
    if (view_map(op, at, &in[0].shape, &vs, &map)) return -1;
    if (!(ref_numel(&vs) == ref_numel(&in[1].shape) && vs.ndim == in[1].shape.ndim &&
          !memcmp(vs.dims, in[1].shape.dims, sizeof(int64_t) * (size_t)vs.ndim))) {
        free(map);
        return ref_fail("ref %s: src shape does not match the view", op_names[op]);
    }
    lt_dtype od = ref_result_type(in, 2);
    if (ref_array_init(out, od, &in[0].shape)) {
        free(map);
        return -1;
    }
    for (int64_t i = 0; i < ref_numel(&in[0].shape); i++) out->v[i] = ref_round(in[0].v[i], od);
    for (int64_t i = 0; i < ref_numel(&vs); i++) out->v[map[i]] = ref_round(in[1].v[i], od);
    free(map);
    return 0;
}

/* ----------------------------------------------------------------- cat */

static int eval_cat(const lt_attrs *at, const ref_array *in, int n,
                    ref_array *out)
{
    if (n < 1) return ref_fail("ref cat: no inputs");
    int64_t dim = at->i[0];
    const lt_shape *s0 = &in[0].shape;
    if (dim < 0 || dim >= s0->ndim) return ref_fail("ref cat: bad dim");
    lt_shape os = *s0;
    os.dims[dim] = 0;
    for (int k = 0; k < n; k++) {
        if (in[k].shape.ndim != s0->ndim) return ref_fail("ref cat: ndim differs");
        for (int d = 0; d < s0->ndim; d++)
            if (d != dim && in[k].shape.dims[d] != s0->dims[d])
                return ref_fail("ref cat: dim %d differs", d);
        os.dims[dim] += in[k].shape.dims[dim];
    }
    lt_dtype od = ref_result_type(in, n);
    if (ref_array_init(out, od, &os)) return -1;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; d++) outer *= os.dims[d];
    for (int d = (int)dim + 1; d < os.ndim; d++) inner *= os.dims[d];
    int64_t at_dim = 0;
    for (int k = 0; k < n; k++) {
        int64_t L = in[k].shape.dims[dim];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t l = 0; l < L; l++)
                for (int64_t q = 0; q < inner; q++)
                    out->v[(o * os.dims[dim] + at_dim + l) * inner + q] =
                        ref_round(in[k].v[(o * L + l) * inner + q], od);
        at_dim += L;
    }
    return 0;
}

/* --------------------------------------------------------------- index */

static int eval_index(lt_op op, const lt_attrs *at, const ref_array *in,
                      ref_array *out)
{
    int64_t dim = at->i[0], idx[LT_MAX_DIMS];
    if (op == LT_OP_arange) {
        int64_t n = at->i[1];
        lt_shape os = ref_mkshape(1, &n);
        lt_dtype od = (lt_dtype)at->i[0];
        if (ref_array_init(out, od, &os)) return -1;
        for (int64_t k = 0; k < n; k++)
            out->v[k] = ref_round(in[0].v[0] + (double)k * in[1].v[0], od);
        return 0;
    }
    if (op == LT_OP_isin) {   /* a linear scan of the test elements; NaN never matches */
        if (ref_array_init(out, LT_BOOL, &in[0].shape)) return -1;
        int64_t m = ref_numel(&in[1].shape);
        for (int64_t i = 0; i < ref_numel(&in[0].shape); i++) {
            int hit = 0;
            for (int64_t j = 0; j < m && !hit; j++) hit = in[0].v[i] == in[1].v[j];
            out->v[i] = (double)(hit != (at->n > 0 && at->i[0] != 0));
        }
        return 0;
    }
    if (op == LT_OP_embedding_backward) {
        const lt_shape *g = &in[0].shape, *ix = &in[1].shape;
        if (g->ndim != ix->ndim + 1) return ref_fail("ref embedding_backward: grad must be idx shape + [D]");
        int64_t D = g->dims[g->ndim - 1], NW = at->i[0], pad = at->i[1];
        int64_t d[2] = {NW, D};
        lt_shape os = ref_mkshape(2, d);
        if (ref_array_init(out, in[0].dtype, &os)) return -1;
        for (int64_t p = 0; p < ref_numel(ix); p++) {
            int64_t r = (int64_t)in[1].v[p];
            if (r == pad) continue;
            if (r < 0 || r >= NW) return ref_fail("ref embedding_backward: index %lld", (long long)r);
            for (int64_t k = 0; k < D; k++) out->v[r * D + k] += in[0].v[p * D + k];
        }
        for (int64_t i = 0; i < NW * D; i++) out->v[i] = ref_round(out->v[i], out->dtype);
        return 0;
    }
    const lt_shape *s = &in[0].shape;
    if (dim < 0 || dim >= (s->ndim ? s->ndim : 1)) return ref_fail("ref %s: bad dim", op_names[op]);
    int64_t L = s->ndim ? s->dims[dim] : 1;
    if (op == LT_OP_index_select) {
        lt_shape os = *s;
        int64_t ni = ref_numel(&in[1].shape);
        if (s->ndim) os.dims[dim] = ni;
        if (ref_array_init(out, in[0].dtype, &os)) return -1;
        for (int64_t i = 0; i < ref_numel(&os); i++) {
            unravel(i, &os, idx);
            int64_t r = (int64_t)in[1].v[s->ndim ? idx[dim] : 0];
            if (r < 0 || r >= L) return ref_fail("ref index_select: index %lld", (long long)r);
            if (s->ndim) idx[dim] = r;
            out->v[i] = in[0].v[ravel(idx, s)];
        }
        return 0;
    }
    const lt_shape *is = &in[1].shape;
    if (is->ndim != s->ndim) return ref_fail("ref %s: idx ndim differs", op_names[op]);
    if (op == LT_OP_gather) {
        if (ref_array_init(out, in[0].dtype, is)) return -1;
        for (int64_t i = 0; i < ref_numel(is); i++) {
            unravel(i, is, idx);
            int64_t r = (int64_t)in[1].v[i];
            if (r < 0 || r >= L) return ref_fail("ref gather: index %lld", (long long)r);
            if (s->ndim) idx[dim] = r;
            out->v[i] = in[0].v[ravel(idx, s)];
        }
        return 0;
    }
    /* scatter_add / scatter / scatter_reduce (base, idx, src) */
    if (ref_array_init(out, in[0].dtype, s)) return -1;
    memcpy(out->v, in[0].v, sizeof(double) * (size_t)ref_numel(s));
    for (int64_t i = 0; i < ref_numel(is); i++) {
        unravel(i, is, idx);
        int64_t r = (int64_t)in[1].v[i];
        if (r < 0 || r >= L) return ref_fail("ref scatter_add: index %lld", (long long)r);
        double sv = in[2].v[ravel(idx, &in[2].shape)];
        if (s->ndim) idx[dim] = r;
        double *o = &out->v[ravel(idx, s)];
        if (op == LT_OP_scatter) *o = sv;   /* last write wins */
        else if (op == LT_OP_scatter_add || at->i[1] == 0) *o += sv;
        else if (at->i[1] == 1) *o *= sv;
        else if (isnan(*o) || isnan(sv)) *o = NAN;
        else if (at->i[1] == 2) *o = sv > *o ? sv : *o;
        else *o = sv < *o ? sv : *o;
    }
    for (int64_t i = 0; i < ref_numel(s); i++) out->v[i] = ref_round(out->v[i], out->dtype);
    return 0;
}

/* ---------------------------------------------------------------- loss */

static int eval_loss(lt_op op, const lt_attrs *at, const ref_array *in, int n,
                     ref_array *out)
{
    int bwd = op == LT_OP_nll_loss_backward;
    const ref_array *lp = &in[bwd], *tg = &in[bwd + 1];
    const ref_array *wt = n > bwd + 2 ? &in[bwd + 2] : NULL;
    int64_t red = at->i[0], ign = at->i[1];
    if (lp->shape.ndim != 1 && lp->shape.ndim != 2) return ref_fail("ref nll: logp must be 1-d or 2-d");
    int64_t N = lp->shape.ndim == 2 ? lp->shape.dims[0] : 1;
    int64_t C = lp->shape.dims[lp->shape.ndim - 1];
    if (ref_numel(&tg->shape) != N) return ref_fail("ref nll: target size");
    double total_w = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = (int64_t)tg->v[i];
        if (t == ign) continue;
        if (t < 0 || t >= C) return ref_fail("ref nll: target %lld", (long long)t);
        total_w += wt ? wt->v[t] : 1.0;
    }
    lt_dtype od = in[0].dtype;
    if (!bwd) {
        lt_shape os;
        memset(&os, 0, sizeof os);
        if (red == 0 && lp->shape.ndim == 2) {
            os.ndim = 1;
            os.dims[0] = N;
        }
        if (ref_array_init(out, od, &os)) return -1;
        double acc = 0;
        for (int64_t i = 0; i < N; i++) {
            int64_t t = (int64_t)tg->v[i];
            double l = t == ign ? 0 : -(wt ? wt->v[t] : 1.0) * lp->v[i * C + t];
            if (red == 0) out->v[lp->shape.ndim == 2 ? i : 0] = ref_round(l, od);
            acc += l;
        }
        if (red == 1) out->v[0] = ref_round(acc / total_w, od);
        if (red == 2) out->v[0] = ref_round(acc, od);
        return 0;
    }
    if (ref_array_init(out, od, &lp->shape)) return -1;
    for (int64_t i = 0; i < N; i++) {
        int64_t t = (int64_t)tg->v[i];
        if (t == ign) continue;
        double g = red == 0 ? in[0].v[ref_numel(&in[0].shape) > 1 ? i : 0] : in[0].v[0];
        if (red == 1) g /= total_w;
        out->v[i * C + t] = ref_round(-(wt ? wt->v[t] : 1.0) * g, od);
    }
    return 0;
}

/* layer_norm family (lazy/kernels/layernorm.c), in double: x [R, D] with D
 * the last i[0] dims; eps f[0]. */
static int is_lnorm(lt_op op)
{
    return op == LT_OP_layer_norm || op == LT_OP_layer_norm_stats ||
           op == LT_OP_layer_norm_backward || op == LT_OP_layer_norm_backward_affine;
}

static int eval_lnorm(lt_op op, const lt_attrs *at, const ref_array *in, int n_in,
                      ref_array *out)
{
    int bwd = op == LT_OP_layer_norm_backward || op == LT_OP_layer_norm_backward_affine;
    const ref_array *x = &in[bwd ? 1 : 0];
    const lt_shape *s = &x->shape;
    int k = (int)at->i[0];
    if (at->n < 1 || k < 1 || k > s->ndim) return ref_fail("ref %s: bad attrs", op_names[op]);
    int64_t D = 1, R = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (d >= s->ndim - k) D *= s->dims[d];
        else R *= s->dims[d];
    }
    int has_w = (op == LT_OP_layer_norm || op == LT_OP_layer_norm_backward) && at->n > 1 && at->i[1];
    int has_b = op == LT_OP_layer_norm && at->n > 2 && at->i[2];
    int nx = bwd ? 4 : 1;
    if (n_in != nx + has_w + has_b) return ref_fail("ref %s: %d inputs", op_names[op], n_in);
    const double *w = has_w ? in[nx].v : NULL, *b = has_b ? in[nx + has_w].v : NULL;
    lt_dtype od = out_dtype(op, at, in, n_in);
    lt_shape os = *s;
    if (op == LT_OP_layer_norm_stats) {
        os.ndim = 1 + s->ndim - k;
        os.dims[0] = 2;
        for (int d = 0; d < s->ndim - k; d++) os.dims[1 + d] = s->dims[d];
    } else if (op == LT_OP_layer_norm_backward_affine) {
        os.ndim = 1 + k;
        os.dims[0] = 2;
        for (int d = 0; d < k; d++) os.dims[1 + d] = s->dims[s->ndim - k + d];
    }
    if (ref_array_init(out, od, &os)) return -1;
    for (int64_t i = 0; i < ref_numel(&os); i++) out->v[i] = 0;
    for (int64_t r = 0; r < R; r++) {
        const double *xr = x->v + r * D;
        double m, rs;
        if (bwd) {
            m = in[2].v[r];
            rs = in[3].v[r];
        } else {
            double sum = 0, v = 0;
            for (int64_t d = 0; d < D; d++) sum += xr[d];
            m = sum / (double)D;
            for (int64_t d = 0; d < D; d++) v += (xr[d] - m) * (xr[d] - m);
            rs = 1 / sqrt(v / (double)D + at->f[0]);
        }
        if (op == LT_OP_layer_norm_stats) {
            out->v[r] = m;
            out->v[R + r] = rs;
        } else if (op == LT_OP_layer_norm) {
            for (int64_t d = 0; d < D; d++)
                out->v[r * D + d] = (xr[d] - m) * rs * (w ? w[d] : 1) + (b ? b[d] : 0);
        } else {
            const double *g = in[0].v + r * D;
            if (op == LT_OP_layer_norm_backward_affine) {
                for (int64_t d = 0; d < D; d++) {
                    out->v[d] += g[d] * (xr[d] - m) * rs;
                    out->v[D + d] += g[d];
                }
                continue;
            }
            double m1 = 0, m2 = 0;
            for (int64_t d = 0; d < D; d++) {
                double gw = g[d] * (w ? w[d] : 1);
                m1 += gw;
                m2 += gw * (xr[d] - m) * rs;
            }
            m1 /= (double)D;
            m2 /= (double)D;
            for (int64_t d = 0; d < D; d++)
                out->v[r * D + d] = rs * (g[d] * (w ? w[d] : 1) - m1 - (xr[d] - m) * rs * m2);
        }
    }
    for (int64_t i = 0; i < ref_numel(&os); i++) out->v[i] = ref_round(out->v[i], od);
    return 0;
}

/* ---------------------------------------------------------------- main */

int ref_eval(lt_op op, const lt_attrs *attrs, const ref_array *in, int n_in,
             ref_array *out)
{
    static const lt_attrs none;
    const lt_attrs *at = attrs ? attrs : &none;
    memset(out, 0, sizeof *out);
    if ((int)op < 0 || op >= LT_NUM_OPS) return ref_fail("ref: bad op %d", (int)op);
    if (op_arity[op] >= 0 && n_in != op_arity[op])
        return ref_fail("ref %s: %d inputs, arity %d", op_names[op], n_in, op_arity[op]);
    if (is_lnorm(op)) return eval_lnorm(op, at, in, n_in, out);
    switch (op_kind[op]) {
    case LT_KIND_UNARY: case LT_KIND_BINARY: case LT_KIND_TERNARY:
        return eval_ew(op, at, in, n_in, out);
    case LT_KIND_REDUCE:
        if (op == LT_OP_argmax || op == LT_OP_argmin) return eval_argreduce(op, at, in, out);
        return eval_reduce(op, at, in, out);
    case LT_KIND_MATMUL: return eval_matmul(op, in, out);
    case LT_KIND_CONV: return ref_eval_conv(op, at, in, out);
    case LT_KIND_POOL: return ref_eval_pool(op, at, in, out);
    case LT_KIND_NORM: return eval_norm(op, at, in, out);
    case LT_KIND_MOVEMENT: return eval_view(op, at, in, out);
    case LT_KIND_SCATTER: return eval_scatter(op, at, in, out);
    case LT_KIND_CONCAT: return eval_cat(at, in, n_in, out);
    case LT_KIND_INDEX: return eval_index(op, at, in, out);
    case LT_KIND_LOSS: return eval_loss(op, at, in, n_in, out);
    default: return ref_fail("ref: %s is not covered (leaf/random/collective)", op_names[op]);
    }
}
