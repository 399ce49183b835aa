/* tests/c/support_diff.c — harness of the differential tests (see
 * support_diff.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support_diff.h"

/* ------------------------------------------------------------ rng */

uint64_t dt_rng_state = 0x9e3779b97f4a7c15ull;

uint64_t dt_rng_u64(void)
{
    uint64_t z = (dt_rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
double dt_rng_unit(void) { return (double)(dt_rng_u64() >> 11) * 0x1p-53; }
double dt_rng_range(double lo, double hi) { return lo + (hi - lo) * dt_rng_unit(); }
int64_t dt_rng_int(int64_t lo, int64_t hi) { return lo + (int64_t)(dt_rng_u64() % (uint64_t)(hi - lo + 1)); }

/* ------------------------------------------------------------ stats */

const char *const dt_kind_names[] = {
    "leaf", "unary", "binary", "ternary", "reduce", "matmul", "conv", "pool",
    "norm", "movement", "scatter", "concat", "index", "loss", "random",
    "collective", "bitcast", "linalg", "barrier"};

dt_family dt_fam[NKINDS];
int dt_op_cases[LT_NUM_OPS];
static int dt_n_fail_printed;
int dt_bf16_mode;

const char *const dt_op_names[] = {
#define LT_OP(name, ...) #name,
#include "ops.def"
#undef LT_OP
};
const lt_op_kind dt_op_kind[] = {
#define LT_OP(name, in_min, in_max, kind, shape, dtype, kernel, spmd, cost, checks, ident, expr) kind,
#include "ops.def"
#undef LT_OP
};

/* --------------------------------------------------------- inputs */





int dt_is_fl(lt_dtype d) { return d == LT_F32 || d == LT_F64 || d == LT_BF16 || d == LT_F16; }

double dt_gen_value(int gen, lt_dtype dt, int64_t hi)
{
    int fl = dt_is_fl(dt);
    switch (gen) {
    case G_POS: return fl ? dt_rng_range(0.1, 3.0) : (double)dt_rng_int(1, 6);
    case G_UNIT: return fl ? dt_rng_range(-0.9, 0.9) : (double)dt_rng_int(0, 1);
    case G_NZ: {
        double v = fl ? dt_rng_range(0.3, 3.0) : (double)dt_rng_int(1, 6);
        return dt_rng_u64() & 1 ? v : -v;
    }
    case G_TIES: return (double)dt_rng_int(-2, 2) * (fl ? 0.5 : 1);
    case G_BOOL: return (double)(dt_rng_u64() & 1);
    case G_NEAR1: return fl ? dt_rng_range(0.6, 1.4) : (double)dt_rng_int(1, 2);
    case G_NAN: return dt_rng_int(0, 4) == 0 && fl ? NAN : dt_rng_range(-2, 2);
    case G_IDX: return (double)dt_rng_int(0, hi - 1);
    case G_POSINT: return (double)dt_rng_int(0, 3);
    default: return fl ? dt_rng_range(-2.0, 2.0) : (double)dt_rng_int(-6, 6);
    }
}

/* Value rounded to what the device stores for dt (bf16 mode: f32 -> bf16). */
double dt_store_round(double v, lt_dtype dt)
{
    if (dt == LT_BOOL) return v != 0;
    v = ref_round(v, dt);
    if (dt_bf16_mode && dt == LT_F32) v = ref_round(v, LT_BF16);
    return v;
}

void dt_host_write(void *buf, lt_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case LT_F32: ((float *)buf)[i] = (float)v; break;
    case LT_F64: ((double *)buf)[i] = v; break;
    case LT_BF16: {
        float f = ref_bf16_round((float)v);
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
        break;
    }
    case LT_F16: ((uint16_t *)buf)[i] = ref_f16_bits(ref_f16_round((float)v)); break;
    case LT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case LT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case LT_I16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case LT_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case LT_U8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    case LT_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
    default: break;
    }
}

size_t dt_dsize(lt_dtype dt)
{
    switch (dt) {
    case LT_F32: case LT_I32: return 4;
    case LT_F64: case LT_I64: return 8;
    case LT_BF16: case LT_F16: case LT_I16: return 2;
    default: return 1;
    }
}

int64_t dt_numel(const lt_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

void dt_shape_str(const lt_shape *s, char *buf, size_t cap)
{
    size_t p = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < s->ndim && p < cap; i++)
        p += (size_t)snprintf(buf + p, cap - p, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
    if (p < cap) snprintf(buf + p, cap - p, "]");
}

const char *dt_dtn(lt_dtype d)
{
    static const char *n[] = {"f32", "bf16", "f64", "i64", "i32", "bool", "u8", "i8", "i16", "f16"};
    return (unsigned)d < 10 ? n[d] : "?";
}

/* Input modes: how a tensor input reaches the op. */
const char *const dt_mode_names[] = {"data-inputs", "pending-inputs (copy)",
                                         "transposed-view-inputs", "strided-slice-inputs"};

/* Description of a case for failure messages. */
void dt_describe(char *buf, size_t cap, lt_op op, const lt_attrs *at,
                     const in_spec *sp, int n, int mode)
{
    size_t p = (size_t)snprintf(buf, cap, "%s(", dt_op_names[op]);
    for (int k = 0; k < n && p < cap; k++) {
        char sh[96];
        dt_shape_str(&sp[k].shape, sh, sizeof sh);
        if (sp[k].kind == K_WRAPPED)
            p += (size_t)snprintf(buf + p, cap - p, "%swrapped %s %g", k ? ", " : "",
                                  dt_dtn(sp[k].dt), sp[k].value);
        else
            p += (size_t)snprintf(buf + p, cap - p, "%s%s%s %s", k ? ", " : "",
                                  sp[k].kind == K_ZERODIM ? "0-dim " : "", dt_dtn(sp[k].dt), sh);
    }
    if (p < cap) p += (size_t)snprintf(buf + p, cap - p, ") attrs{");
    for (int k = 0; at && k < at->n && p < cap; k++)
        p += (size_t)snprintf(buf + p, cap - p, "%s%lld", k ? "," : "", (long long)at->i[k]);
    if (at && (at->f[0] != 0 || at->f[1] != 0) && p < cap)
        p += (size_t)snprintf(buf + p, cap - p, "; f=%g,%g", at->f[0], at->f[1]);
    if (p < cap)
        snprintf(buf + p, cap - p, "} mode=%s%s", dt_mode_names[mode],
                 dt_bf16_mode ? " bf16-mode" : "");
}

void dt_report_fail(const char *desc, const char *fmt, ...)
{
    if (dt_n_fail_printed++ >= 60) return;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", desc);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

/* Compares got vs want elementwise; 0 if equal within tol, else reports the
 * first mismatch. */
int dt_compare(const char *desc, const ref_array *want, const double *got,
                   tol_t tol)
{
    int64_t n = dt_numel(&want->shape);
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want->v[i];
        int ok;
        if (isnan(w) || isnan(g)) ok = isnan(w) && isnan(g);
        else if (isinf(w) || isinf(g)) ok = g == w;
        else ok = fabs(g - w) <= tol.atol + tol.rtol * fabs(w);
        if (!ok) {
            int64_t idx[LT_MAX_DIMS], lin = i;
            for (int d = want->shape.ndim - 1; d >= 0; d--) {
                idx[d] = lin % want->shape.dims[d];
                lin /= want->shape.dims[d];
            }
            char is[128] = "[";
            size_t p = 1;
            for (int d = 0; d < want->shape.ndim; d++)
                p += (size_t)snprintf(is + p, sizeof is - p, "%s%lld", d ? ", " : "", (long long)idx[d]);
            snprintf(is + p, sizeof is - p, "]");
            dt_report_fail(desc, "element %lld %s: got %.9g want %.9g (rtol %g atol %g)",
                        (long long)i, is, g, w, tol.rtol, tol.atol);
            return 1;
        }
    }
    return 0;
}

/* ----------------------------------------------------------- run a case */


void dt_dev_free(dev_in *d, int n)
{
    for (int k = 0; k < n; k++) {
        ref_array_free(&d[k].r);
        lt_tensor_release(d[k].t);
    }
}

/* Uploads `vals` (logical layout of shape s) so that the resulting tensor is
 * device data (M_DATA), a pending copy of it (M_PENDING), a permute of data
 * stored with the last two dims swapped (M_TRANSPOSED, ndim >= 2), or a
 * step-2 slice along dim 0 of a larger buffer holding sentinels in between
 * (M_STRIDED, ndim >= 1). Other ndims fall back to M_DATA. */
static lt_status dt_upload(const double *vals, lt_dtype dt, const lt_shape *s, int mode,
                        lt_tensor **out)
{
    int64_t n = dt_numel(s), idx[LT_MAX_DIMS];
    lt_shape bs = *s;
    lt_attrs at;
    memset(&at, 0, sizeof at);
    if (mode == M_TRANSPOSED && s->ndim >= 2) {
        bs.dims[s->ndim - 2] = s->dims[s->ndim - 1];
        bs.dims[s->ndim - 1] = s->dims[s->ndim - 2];
        at.n = s->ndim;
        for (int d = 0; d < s->ndim; d++) at.i[d] = d;
        at.i[s->ndim - 2] = s->ndim - 1;
        at.i[s->ndim - 1] = s->ndim - 2;
    } else if (mode == M_STRIDED && s->ndim >= 1) {
        bs.dims[0] = 2 * s->dims[0] + 1;
        at.n = 4;
        at.i[0] = 0;
        at.i[1] = 1;
        at.i[2] = bs.dims[0];
        at.i[3] = 2;
    } else if (mode != M_PENDING) {
        mode = M_DATA;
    }
    int64_t bn = dt_numel(&bs);
    void *buf = malloc(dt_dsize(dt) * (size_t)(bn ? bn : 1));
    for (int64_t i = 0; i < bn; i++) dt_host_write(buf, dt, i, 7);   /* sentinel */
    for (int64_t i = 0; i < n; i++) {
        int64_t lin = i;
        for (int d = s->ndim - 1; d >= 0; d--) {
            idx[d] = s->dims[d] ? lin % s->dims[d] : 0;
            lin = s->dims[d] ? lin / s->dims[d] : 0;
        }
        if (mode == M_TRANSPOSED) {
            int64_t t = idx[s->ndim - 2];
            idx[s->ndim - 2] = idx[s->ndim - 1];
            idx[s->ndim - 1] = t;
        } else if (mode == M_STRIDED) {
            idx[0] = 1 + 2 * idx[0];
        }
        int64_t b = 0;
        for (int d = 0; d < bs.ndim; d++) b = b * bs.dims[d] + idx[d];
        dt_host_write(buf, dt, b, vals[i]);
    }
    lt_tensor *base = NULL;
    lt_status st = lt_tensor_from_host(0, buf, dt, &bs, &base);
    free(buf);
    if (st != LT_OK || mode == M_DATA) {
        *out = base;
        return st;
    }
    lt_op op = mode == M_PENDING ? LT_OP_copy : mode == M_TRANSPOSED ? LT_OP_permute : LT_OP_slice;
    st = lt_trace1(op, base, mode == M_PENDING ? NULL : &at, out);
    lt_tensor_release(base);
    return st;
}

/* Materialises a spec: ref values and a device tensor (see dt_upload for the
 * modes). Returns 0 or -1 with a message. */
int dt_make_input(const in_spec *sp, int mode, dev_in *d, char *err, size_t cap)
{
    memset(d, 0, sizeof *d);
    if (ref_array_init(&d->r, sp->dt, &sp->shape)) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    d->r.wrapped = sp->kind == K_WRAPPED;
    int64_t n = dt_numel(&sp->shape);
    for (int64_t i = 0; i < n; i++) {
        double v = sp->kind != K_TENSOR ? sp->value
                 : sp->gen == G_VALS ? sp->vals[i] : dt_gen_value(sp->gen, sp->dt, sp->hi);
        d->r.v[i] = sp->kind == K_WRAPPED ? v : dt_store_round(v, sp->dt);
    }
    lt_status st;
    if (sp->kind == K_WRAPPED)
        st = lt_scalar(0, sp->value, sp->dt, 1, &d->t);
    else
        st = dt_upload(d->r.v, sp->dt, &sp->shape, mode, &d->t);
    if (st != LT_OK) {
        snprintf(err, cap, "input setup (%s) failed (%d): %s", dt_mode_names[mode], (int)st,
                 lt_last_error());
        return -1;
    }
    return 0;
}

/* Runs op on the specs through the API and the reference, compares. */
int dt_run_case(lt_op op, const lt_attrs *at, const in_spec *sp, int n,
                    tol_t tol, int mode)
{
    char desc[600], err[300];
    dt_describe(desc, sizeof desc, op, at, sp, n, mode);
    int k = dt_op_kind[op];
    dt_fam[k].cases++;
    dt_op_cases[op]++;
    dev_in d[8];
    int any_int = 0, any_bf16 = dt_bf16_mode;
    for (int i = 0; i < n; i++) {
        if (dt_make_input(&sp[i], mode, &d[i], err, sizeof err)) {
            dt_dev_free(d, i);
            dt_report_fail(desc, "%s", err);
            dt_fam[k].failed++;
            return 1;
        }
        if (!dt_is_fl(sp[i].dt) && sp[i].kind == K_TENSOR && sp[i].gen != G_IDX &&
            sp[i].gen != G_BOOL)
            any_int = 1;
        if (sp[i].dt == LT_BF16) any_bf16 = 1;
    }
    ref_array want, ins[8];
    for (int i = 0; i < n; i++) ins[i] = d[i].r;
    if (ref_eval(op, at, ins, n, &want)) {
        dt_report_fail(desc, "reference failed: %s (test bug)", ref_error());
        dt_dev_free(d, n);
        dt_fam[k].failed++;
        return 1;
    }
    if (want.dtype == LT_BF16 || (any_bf16 && dt_is_fl(want.dtype))) {
        if (tol.rtol < 1e-2) tol.rtol = 1e-2;
        if (tol.atol < 1e-2) tol.atol = 1e-2;
    }
    if (dt_bf16_mode && want.dtype == LT_F32)
        for (int64_t i = 0; i < dt_numel(&want.shape); i++) want.v[i] = ref_round(want.v[i], LT_BF16);
    lt_tensor *tin[8], *out = NULL;
    for (int i = 0; i < n; i++) tin[i] = d[i].t;
    int bad = 0;
    lt_status st = lt_trace(op, tin, n, at, &out);
    if (st != LT_OK) {
        if (st == LT_ERR_DTYPE && any_int) {
            dt_fam[k].refused++;
        } else {
            dt_report_fail(desc, "lt_trace failed (%d): %s", (int)st, lt_last_error());
            bad = 1;
        }
        goto done;
    }
    char s1[96], s2[96];
    if (!(lt_tensor_shape(out)->ndim == want.shape.ndim &&
          dt_numel(lt_tensor_shape(out)) == dt_numel(&want.shape) &&
          !memcmp(lt_tensor_shape(out)->dims, want.shape.dims,
                  sizeof(int64_t) * (size_t)want.shape.ndim))) {
        dt_shape_str(lt_tensor_shape(out), s1, sizeof s1);
        dt_shape_str(&want.shape, s2, sizeof s2);
        dt_report_fail(desc, "shape %s, want %s", s1, s2);
        bad = 1;
        goto done;
    }
    if (lt_tensor_dtype(out) != want.dtype) {
        dt_report_fail(desc, "dtype %s, want %s", dt_dtn(lt_tensor_dtype(out)), dt_dtn(want.dtype));
        bad = 1;
        goto done;
    }
    int64_t nn = dt_numel(&want.shape);
    double *got = malloc(sizeof(double) * (size_t)(nn ? nn : 1));
    st = lt_tensor_to_host(out, got, LT_F64);
    if (st != LT_OK) {
        dt_report_fail(desc, "lt_tensor_to_host failed (%d): %s", (int)st, lt_last_error());
        bad = 1;
    } else {
        if (!dt_is_fl(want.dtype)) tol.rtol = tol.atol = 0;
        bad = dt_compare(desc, &want, got, tol);
    }
    free(got);
done:
    lt_tensor_release(out);
    dt_dev_free(d, n);
    ref_array_free(&want);
    if (bad) dt_fam[k].failed++;
    return bad;
}

/* Runs a case in every input mode. */
void dt_run2(lt_op op, lt_attrs at, const in_spec *sp, int n, tol_t tol)
{
    for (int m = 0; m < N_MODES; m++) dt_run_case(op, &at, sp, n, tol, m);
}

int dt_read_tensor(lt_tensor *t, double **out)
{
    int64_t n = dt_numel(lt_tensor_shape(t));
    *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    return lt_tensor_to_host(t, *out, LT_F64) == LT_OK ? 0 : -1;
}

int dt_print_summary(void)
{
    int total_failed = 0;
    printf("%-11s %6s %6s %7s\n", "family", "cases", "failed", "refused");
    for (int k = 0; k < NKINDS; k++) {
        if (!dt_fam[k].cases) continue;
        printf("%-11s %6d %6d %7d\n", dt_kind_names[k], dt_fam[k].cases, dt_fam[k].failed, dt_fam[k].refused);
        total_failed += dt_fam[k].failed;
    }
    fflush(stdout);
    return total_failed;
}

