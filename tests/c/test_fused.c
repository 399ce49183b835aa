/* tests/c/test_fused.c — the fused elementwise interpreter on its own:
 * broadcasting, scalars, bf16 storage rounding, explicit bf16 casts
 * (rounded in the register), int/bool compute types, NaN propagation,
 * integer division by zero, and speed vs separate passes;
 * vmath.h's f32 exp/log/tanh/erf against double libm; parallel argmax /
 * argmin over a flattened input. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "fused.h"
#include "reduce.h"
#include "vmath.h"
#include "par.h"
#include <stdatomic.h>

static lt_view V(void *data, lt_dtype dt, int nd, const int64_t *dims)
{
    lt_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dt;
    v.shape = lt_shape_make(nd, dims);
    lt_contiguous_strides(&v.shape, v.strides);
    return v;
}

static const lt_kernel_ctx CTX = {0, 2};

static void test_broadcast(void **state)
{
    float a[3] = {1, 2, 3}, b[4] = {10, 20, 30, 40}, out[12];
    int64_t d31[2] = {3, 1}, d14[2] = {1, 4}, d34[2] = {3, 4};
    lt_view in[2] = {V(a, LT_F32, 2, d31), V(b, LT_F32, 2, d14)};
    lt_view o = V(out, LT_F32, 2, d34);
    lt_shape s = lt_shape_make(2, d34);
    lt_fused *f = lt_fused_new(LT_F32, &s, 2);
    int x = lt_fused_load(f, 0), y = lt_fused_load(f, 1);
    int m = lt_fused_op(f, LT_OP_mul, LT_F32, x, y, -1);
    int r = lt_fused_op(f, LT_OP_sub, LT_F32, m, x, -1);
    lt_fused_store(f, r);
    assert_int_equal(lt_fused_finish(f), LT_OK);
    assert_int_equal(lt_fused_run(f, in, &o, &CTX), LT_OK);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            assert_float_equal(out[i * 4 + j], a[i] * b[j] - a[i], 0);
    /* a transposed (strided) input and a 1-d right-aligned broadcast */
    float t[12];
    for (int i = 0; i < 12; i++) t[i] = (float)i;
    int64_t d43[2] = {4, 3}, d4[1] = {4};
    lt_view tv = V(t, LT_F32, 2, d43);   /* view [3,4] with strides (1,3) */
    tv.shape = s;
    tv.strides[0] = 1;
    tv.strides[1] = 3;
    lt_view in2[2] = {tv, V(b, LT_F32, 1, d4)};
    assert_int_equal(lt_fused_run(f, in2, &o, &CTX), LT_OK);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            assert_float_equal(out[i * 4 + j], t[j * 3 + i] * b[j] - t[j * 3 + i], 0);
    lt_fused_free(f);
}

static void test_scalar_and_bf16(void **state)
{
    enum { N = 3000 };
    uint16_t *x = malloc(N * 2), *out = malloc(N * 2);
    for (int i = 0; i < N; i++) x[i] = lt_f32_to_bf16((float)i * 0.37f - 100);
    double lr = 0.1;   /* scalar parameter: f64 0-dim, stride 0 */
    int64_t dn[1] = {N};
    lt_view in[2] = {V(x, LT_BF16, 1, dn), V(&lr, LT_F64, 0, NULL)};
    lt_view o = V(out, LT_BF16, 1, dn);
    lt_shape s = lt_shape_make(1, dn);
    lt_fused *f = lt_fused_new(LT_F32, &s, 2);
    int a = lt_fused_load(f, 0), b = lt_fused_load(f, 1);
    /* (x * lr) + x : the intermediate stays f32 (not rounded to bf16) */
    int m = lt_fused_op(f, LT_OP_mul, LT_BF16, a, b, -1);
    int r = lt_fused_op(f, LT_OP_add, LT_BF16, m, a, -1);
    lt_fused_store(f, r);
    assert_int_equal(lt_fused_finish(f), LT_OK);
    assert_int_equal(lt_fused_run(f, in, &o, &CTX), LT_OK);
    for (int i = 0; i < N; i++) {
        float xv = lt_bf16_to_f32(x[i]);
        float want = xv * (float)lr + xv;        /* math in f32 */
        assert_int_equal(out[i], lt_f32_to_bf16(want));  /* one rounding */
    }
    lt_fused_free(f);
    free(x);
    free(out);
}

/* An explicit cast to bf16 inside a fused group rounds to nearest even in
 * the register (XLA's convert), though the group computes in f32/f64 and the
 * output is f32: x -> bf16 -> f32, * 1. Expected values by hand (ties go to
 * the even mantissa) and from dtype.c's converter. */
static void test_bf16_cast_rounds(void **state)
{
    enum { N = 2000 };
    float *x = malloc(N * sizeof *x), *out = malloc(N * sizeof *out);
    const float hand_in[6] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                              1.0f + 0x1p-8f + 0x1p-20f, -2.0f - 0x1p-7f - 0x1p-9f,
                              3.14159265f, 65504.7f};
    const float hand_out[6] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f,
                               -2.0f - 0x1p-6f, 3.140625f, 65536.0f};
    for (int i = 0; i < N; i++)
        x[i] = i < 6 ? hand_in[i] : (float)i * 0.01234567f - 7.3f;
    x[6] = NAN;
    x[7] = INFINITY;
    int64_t dn[1] = {N};
    double one = 1.0;
    for (int ct = 0; ct < 2; ct++) {       /* f32 group, then an f64 group */
        lt_dtype cty = ct ? LT_F64 : LT_F32;
        lt_view in[2] = {V(x, LT_F32, 1, dn), V(&one, LT_F64, 0, NULL)};
        lt_view o = V(out, LT_F32, 1, dn);
        lt_shape s = lt_shape_make(1, dn);
        lt_fused *f = lt_fused_new(cty, &s, 2);
        int a = lt_fused_load(f, 0), k = lt_fused_load(f, 1);
        int h = lt_fused_op(f, LT_OP_cast, LT_BF16, a, -1, -1);
        int g = lt_fused_op(f, LT_OP_cast, LT_F32, h, -1, -1);
        int r = lt_fused_op(f, LT_OP_mul, LT_F32, g, k, -1);
        lt_fused_store(f, r);
        assert_int_equal(lt_fused_finish(f), LT_OK);
        memset(out, 0, N * sizeof *out);
        assert_int_equal(lt_fused_run(f, in, &o, &CTX), LT_OK);
        for (int i = 0; i < 6; i++)
            assert_float_equal(out[i], hand_out[i], 0);
        assert_true(isnan(out[6]));
        assert_true(isinf(out[7]) && out[7] > 0);
        for (int i = 8; i < N; i++)
            assert_float_equal(out[i], lt_bf16_to_f32(lt_f32_to_bf16(x[i])), 0);
        lt_fused_free(f);
    }
    /* a bf16 node that is not a cast keeps f32 precision in the register */
    lt_view in1[1] = {V(x, LT_F32, 1, dn)};
    lt_view o1 = V(out, LT_F32, 1, dn);
    lt_shape s1 = lt_shape_make(1, dn);
    lt_fused *f1 = lt_fused_new(LT_F32, &s1, 1);
    int a1 = lt_fused_load(f1, 0);
    int n1 = lt_fused_op(f1, LT_OP_neg, LT_BF16, a1, -1, -1);
    lt_fused_store(f1, n1);
    assert_int_equal(lt_fused_finish(f1), LT_OK);
    assert_int_equal(lt_fused_run(f1, in1, &o1, &CTX), LT_OK);
    assert_float_equal(out[0], -(1.0f + 0x1p-8f), 0);
    lt_fused_free(f1);
    free(x);
    free(out);
}

static void test_int_bool_types(void **state)
{
    int64_t a[6] = {7, -7, 7, -7, 5, INT64_MIN}, b[6] = {2, 2, -2, 0, 0, -1};
    int64_t d6[1] = {6};
    lt_shape s = lt_shape_make(1, d6);
    int64_t fd[6], rem[6], fm[6];
    uint8_t gt[6];
    lt_view in[2] = {V(a, LT_I64, 1, d6), V(b, LT_I64, 1, d6)};
    lt_view o[4] = {V(fd, LT_I64, 1, d6), V(rem, LT_I64, 1, d6), V(fm, LT_I64, 1, d6),
                    V(gt, LT_BOOL, 1, d6)};
    lt_fused *f = lt_fused_new(LT_I64, &s, 2);
    int x = lt_fused_load(f, 0), y = lt_fused_load(f, 1);
    lt_fused_store(f, lt_fused_op(f, LT_OP_floor_divide, LT_I64, x, y, -1));
    lt_fused_store(f, lt_fused_op(f, LT_OP_remainder, LT_I64, x, y, -1));
    lt_fused_store(f, lt_fused_op(f, LT_OP_fmod, LT_I64, x, y, -1));
    lt_fused_store(f, lt_fused_op(f, LT_OP_gt, LT_BOOL, x, y, -1));
    assert_int_equal(lt_fused_finish(f), LT_OK);
    /* no SIGFPE: the zero divisors give 0 and the run reports eager's
     * ZeroDivisionError for the first integer division that met one */
    assert_int_equal(lt_fused_run(f, in, o, &CTX), LT_ERR_VALUE);
    assert_non_null(strstr(lt_last_error(), "ZeroDivisionError: floor_divide"));
    int64_t wfd[6] = {3, -4, -4, 0, 0, INT64_MIN}, wrem[6] = {1, 1, -1, 0, 0, 0};
    int64_t wfm[6] = {1, -1, 1, 0, 0, 0};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(fd[i], wfd[i]);
        assert_int_equal(rem[i], wrem[i]);
        assert_int_equal(fm[i], wfm[i]);
        assert_int_equal(gt[i], a[i] > b[i]);
    }
    lt_fused_free(f);

    /* bool inputs in a float group; an int node in a float group truncates;
     * a bool node narrows to 0/1 */
    uint8_t m[4] = {1, 0, 1, 0};
    float v[4] = {2.7f, -2.7f, 0.5f, 3.0f}, out[4];
    int64_t d4[1] = {4};
    lt_shape s4 = lt_shape_make(1, d4);
    lt_view in2[2] = {V(m, LT_BOOL, 1, d4), V(v, LT_F32, 1, d4)};
    lt_view o2 = V(out, LT_F32, 1, d4);
    f = lt_fused_new(LT_F32, &s4, 2);
    x = lt_fused_load(f, 0);
    y = lt_fused_load(f, 1);
    int c = lt_fused_op(f, LT_OP_cast, LT_I64, y, -1, -1);        /* trunc */
    int nz = lt_fused_op(f, LT_OP_cast, LT_BOOL, y, -1, -1);      /* != 0 */
    int w = lt_fused_op(f, LT_OP_where, LT_F32, x, c, y);
    int r = lt_fused_op(f, LT_OP_add, LT_F32, w, nz, -1);
    lt_fused_store(f, r);
    assert_int_equal(lt_fused_finish(f), LT_OK);
    assert_int_equal(lt_fused_run(f, in2, &o2, &CTX), LT_OK);
    float want[4] = {2 + 1, -2.7f + 1, 0 + 1, 3 + 1};
    for (int i = 0; i < 4; i++)
        assert_float_equal(out[i], want[i], 1e-6);
    lt_fused_free(f);
}

static void test_nan_propagation(void **state)
{
    float a[5] = {NAN, 1, 2, -1, 5}, b[5] = {0, NAN, 1, 0, 7};
    float lo = 0, hi = 4;
    float mx[5], mn[5], cl[5], rd[5];
    int64_t d5[1] = {5};
    lt_shape s = lt_shape_make(1, d5);
    lt_view in[4] = {V(a, LT_F32, 1, d5), V(b, LT_F32, 1, d5), V(&lo, LT_F32, 0, NULL),
                     V(&hi, LT_F32, 0, NULL)};
    lt_view o[4] = {V(mx, LT_F32, 1, d5), V(mn, LT_F32, 1, d5), V(cl, LT_F32, 1, d5),
                    V(rd, LT_F32, 1, d5)};
    lt_fused *f = lt_fused_new(LT_F32, &s, 4);
    int x = lt_fused_load(f, 0), y = lt_fused_load(f, 1);
    int l = lt_fused_load(f, 2), h = lt_fused_load(f, 3);
    lt_fused_store(f, lt_fused_op(f, LT_OP_maximum, LT_F32, x, y, -1));
    lt_fused_store(f, lt_fused_op(f, LT_OP_minimum, LT_F32, x, y, -1));
    lt_fused_store(f, lt_fused_op(f, LT_OP_clamp, LT_F32, x, l, h));
    int half = lt_fused_op(f, LT_OP_mul, LT_F32, x, y, -1);
    lt_fused_store(f, lt_fused_op(f, LT_OP_round, LT_F32, half, -1, -1));
    assert_int_equal(lt_fused_finish(f), LT_OK);
    assert_int_equal(lt_fused_run(f, in, o, &CTX), LT_OK);
    assert_true(isnan(mx[0]) && isnan(mx[1]) && isnan(mn[0]) && isnan(mn[1]));
    assert_float_equal(mx[2], 2, 0);
    assert_float_equal(mn[4], 5, 0);
    assert_true(isnan(cl[0]));
    assert_float_equal(cl[3], 0, 0);
    assert_float_equal(cl[4], 4, 0);
    assert_float_equal(rd[2], 2, 0);     /* round(2) */
    assert_float_equal(rd[4], 35, 0);
    lt_fused_free(f);
    /* half to even */
    float hv[4] = {0.5f, 1.5f, 2.5f, -0.5f}, ho[4];
    int64_t d4[1] = {4};
    lt_shape s4 = lt_shape_make(1, d4);
    lt_view hin = V(hv, LT_F32, 1, d4), hout = V(ho, LT_F32, 1, d4);
    f = lt_fused_new(LT_F32, &s4, 1);
    lt_fused_store(f, lt_fused_op(f, LT_OP_round, LT_F32, lt_fused_load(f, 0), -1, -1));
    assert_int_equal(lt_fused_finish(f), LT_OK);
    assert_int_equal(lt_fused_run(f, &hin, &hout, &CTX), LT_OK);
    assert_float_equal(ho[0], 0, 0);
    assert_float_equal(ho[1], 2, 0);
    assert_float_equal(ho[2], 2, 0);
    assert_float_equal(ho[3], 0, 0);
    lt_fused_free(f);
}

static void test_inplace_donated(void **state)
{
    /* out[0] is the input buffer itself (donation): o0 = x * 2, o1 = o0 + x
     * must still read the old x for o1 */
    enum { N = 5000 };
    float *x = malloc(N * 4), *o1 = malloc(N * 4), *orig = malloc(N * 4);
    for (int i = 0; i < N; i++) orig[i] = x[i] = (float)i - 7;
    int64_t dn[1] = {N};
    lt_shape s = lt_shape_make(1, dn);
    float two = 2;
    lt_view in[2] = {V(x, LT_F32, 1, dn), V(&two, LT_F32, 0, NULL)};
    lt_view o[2] = {V(x, LT_F32, 1, dn), V(o1, LT_F32, 1, dn)};
    lt_fused *f = lt_fused_new(LT_F32, &s, 2);
    int a = lt_fused_load(f, 0), b = lt_fused_load(f, 1);
    int m = lt_fused_op(f, LT_OP_mul, LT_F32, a, b, -1);
    lt_fused_store(f, m);
    lt_fused_store(f, lt_fused_op(f, LT_OP_add, LT_F32, m, a, -1));
    assert_int_equal(lt_fused_finish(f), LT_OK);
    assert_int_equal(lt_fused_run(f, in, o, &CTX), LT_OK);
    for (int i = 0; i < N; i++) {
        assert_float_equal(x[i], orig[i] * 2, 0);
        assert_float_equal(o1[i], orig[i] * 3, 0);
    }
    lt_fused_free(f);
    free(x); free(o1); free(orig);
}


/* ulp distance of got from the double-precision reference w (as f32) */
static double ulp_err(float got, double w)
{
    float wf = (float)w;
    double u = nextafterf(fabsf(wf), INFINITY) - fabsf(wf);
    return fabs((double)got - w) / u;
}

static void test_vmath_accuracy(void **state)
{
    /* a sweep over the whole float range (every 4099th bit pattern) and
     * dense sweeps of the interesting intervals */
    double worst[5] = {0, 0, 0, 0, 0};
    const double lim[5] = {2, 2, 3, 4, 4};   /* exp, log, tanh, erf, log1p */
    for (int pass = 0; pass < 2; pass++) {
        int64_t n = pass == 0 ? ((int64_t)1 << 32) / 4099 : 400000;
        for (int64_t k = 0; k < n; k++) {
            float x;
            if (pass == 0) {
                uint32_t u = (uint32_t)(k * 4099);
                memcpy(&x, &u, 4);
                if (x != x)
                    continue;
            } else {
                x = -10.0f + 20.0f * (float)k / (float)n;
            }
            float g[5] = {lt_vexpf(x), lt_vlogf(x), lt_vtanhf(x), lt_verff(x),
                          lt_vlog1pf(x)};
            double w[5] = {exp(x), log(x), tanh(x), erf(x), log1p(x)};
            for (int f = 0; f < 5; f++) {
                if (isnan(w[f])) {
                    if (!isnan(g[f]))
                        fail_msg("f%d(%a) = %g, want NaN", f, x, g[f]);
                    continue;
                }
                if (isinf((float)w[f])) {
                    if (g[f] != (float)w[f])
                        fail_msg("f%d(%a) = %g, want %g", f, x, g[f], w[f]);
                    continue;
                }
                double e = ulp_err(g[f], w[f]);
                if (e > worst[f])
                    worst[f] = e;
                if (e > lim[f])
                    fail_msg("f%d(%.9g) = %.9g, want %.9g (%.2f ulp)", f, x,
                             g[f], w[f], e);
            }
        }
    }
    print_message("vmath max ulp: exp %.2f log %.2f tanh %.2f erf %.2f "
                  "log1p %.2f\n", worst[0], worst[1], worst[2], worst[3],
                  worst[4]);
    assert_true(lt_vlog1pf(-1.0f) == -INFINITY && isnan(lt_vlog1pf(-2.0f)));
    assert_true(lt_vlog1pf(INFINITY) == INFINITY);
    assert_true(lt_vlog1pf(1e-30f) == 1e-30f);            /* tiny: exact */
    /* special values */
    assert_true(lt_vexpf(-INFINITY) == 0 && lt_vexpf(INFINITY) == INFINITY);
    assert_true(lt_vexpf(100.0f) == INFINITY && lt_vexpf(-110.0f) == 0);
    assert_true(lt_vexpf(-100.0f) > 0);                    /* subnormal */
    assert_true(lt_vlogf(0.0f) == -INFINITY && lt_vlogf(-0.0f) == -INFINITY);
    assert_true(isnan(lt_vlogf(-1.0f)) && isnan(lt_vlogf(-INFINITY)));
    assert_true(lt_vlogf(INFINITY) == INFINITY);
    assert_float_equal(lt_vlogf(1e-45f), log((double)1e-45f), 1e-5);  /* subnormal */
    assert_true(lt_vtanhf(INFINITY) == 1 && lt_vtanhf(-INFINITY) == -1);
    assert_true(lt_vtanhf(-0.0f) == 0 && signbit(lt_vtanhf(-0.0f)));
    assert_true(lt_verff(INFINITY) == 1 && lt_verff(-INFINITY) == -1);
    float nan = NAN;
    assert_true(isnan(lt_vexpf(nan)) && isnan(lt_vlogf(nan)) &&
                isnan(lt_vtanhf(nan)) && isnan(lt_verff(nan)));
}

/* exp/log/tanh/sigmoid/gelu/silu through the interpreter (the vmath
 * versions must be what runs, including special values) */
static void test_transcendental_ops(void **state)
{
    enum { N = 70001 };
    float *x = malloc(N * 4), *o = malloc(N * 4);
    for (int i = 0; i < N; i++)
        x[i] = -30.0f + 60.0f * (float)i / N;
    x[0] = -INFINITY; x[1] = INFINITY; x[2] = NAN; x[3] = 0; x[4] = -5e-39f;
    int64_t dn[1] = {N};
    lt_shape s = lt_shape_make(1, dn);
    lt_op ops[] = {LT_OP_exp, LT_OP_log, LT_OP_tanh, LT_OP_sigmoid,
                   LT_OP_gelu, LT_OP_silu, LT_OP_erf, LT_OP_log1p};
    for (int k = 0; k < 8; k++) {
        lt_fused *f = lt_fused_new(LT_F32, &s, 1);
        lt_fused_store(f, lt_fused_op(f, ops[k], LT_F32, lt_fused_load(f, 0), -1, -1));
        assert_int_equal(lt_fused_finish(f), LT_OK);
        lt_view in = V(x, LT_F32, 1, dn), ov = V(o, LT_F32, 1, dn);
        assert_int_equal(lt_fused_run(f, &in, &ov, &CTX), LT_OK);
        for (int i = 0; i < N; i++) {
            double a = x[i], w;
            switch (ops[k]) {
            case LT_OP_exp: w = exp(a); break;
            case LT_OP_log: w = log(a); break;
            case LT_OP_tanh: w = tanh(a); break;
            case LT_OP_sigmoid: w = 1 / (1 + exp(-a)); break;
            case LT_OP_gelu: w = a * 0.5 * erfc(-a * M_SQRT1_2); break;
            case LT_OP_silu: w = a / (1 + exp(-a)); break;
            case LT_OP_log1p: w = log1p(a); break;
            default: w = erf(a); break;
            }
            if (isnan(w)) {
                if (!isnan(o[i]))
                    fail_msg("op %d x %g: got %g want NaN", k, a, o[i]);
            } else if (isinf((float)w) || w == 0) {
                if (o[i] != (float)w && !(fabs(w) < 1e-37 && fabs(o[i]) < 1e-37))
                    fail_msg("op %d x %g: got %g want %g", k, a, o[i], w);
            } else if (fabs(o[i] - w) > 2e-6 * fabs(w) + 1e-37 &&
                       !(ops[k] == LT_OP_gelu && fabs(o[i] - w) < 1e-6)) {
                fail_msg("op %d x %.9g: got %.9g want %.9g", k, a, o[i], w);
            }
        }
        lt_fused_free(f);
    }
    free(x); free(o);
}

/* gelu and gelu_backward (grad, x) through the interpreter's f32 path
 * (vmath.h lt_vphif): relative accuracy everywhere, also in the negative
 * tail where 1 + erf(x/sqrt2) in f32 has no digits left; special values;
 * an odd length (vector tails) and a strided x. */
static void test_gelu_ops(void **state)
{
    enum { N = 90001 };
    float *x = malloc(2 * N * 4), *g = malloc(N * 4), *o = malloc(N * 4);
    for (int i = 0; i < N; i++) {
        float v = -14.0f + 28.0f * (float)i / N;
        x[2 * i] = v;            /* strided view reads the even elements */
        x[2 * i + 1] = 1e30f;
        g[i] = 0.5f + (float)(i % 7) * 0.25f;
    }
    x[0] = -INFINITY; x[2] = INFINITY; x[4] = NAN; x[6] = 0; x[8] = -0.0f;
    x[10] = -5e-39f; x[12] = 1e-20f;
    int64_t dn[1] = {N}, s2[1] = {2};
    lt_shape s = lt_shape_make(1, dn);
    for (int bwd = 0; bwd < 2; bwd++) {
        lt_fused *f = lt_fused_new(LT_F32, &s, 2);
        int lx = lt_fused_load(f, 0), lg = lt_fused_load(f, 1);
        int v = bwd ? lt_fused_op(f, LT_OP_gelu_backward, LT_F32, lg, lx, -1)
                    : lt_fused_op(f, LT_OP_gelu, LT_F32, lx, -1, -1);
        lt_fused_store(f, v);
        assert_int_equal(lt_fused_finish(f), LT_OK);
        lt_view in[2] = {V(x, LT_F32, 1, dn), V(g, LT_F32, 1, dn)};
        in[0].strides[0] = s2[0];
        lt_view ov = V(o, LT_F32, 1, dn);
        assert_int_equal(lt_fused_run(f, in, &ov, &CTX), LT_OK);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double a = x[2 * i];
            double cdf = 0.5 * erfc(-a * M_SQRT1_2);
            double w = bwd ? g[i] * (cdf + a * 0.3989422804014327 * exp(-0.5 * a * a))
                           : a * cdf;
            if (isinf(a)) {
                w = bwd ? NAN : a > 0 ? a : NAN;   /* inf * 0 as in eager */
            }
            if (isnan(w)) {
                if (!isnan(o[i]))
                    fail_msg("bwd %d x %g: got %g want NaN", bwd, a, o[i]);
                continue;
            }
            if (isinf(w)) {
                if (o[i] != w)
                    fail_msg("bwd %d x %g: got %g want %g", bwd, a, o[i], w);
                continue;
            }
            if (fabs(w) < 1e-36) {
                if (fabs(o[i]) > 1e-36)
                    fail_msg("bwd %d x %g: got %g want %g", bwd, a, o[i], w);
                continue;
            }
            /* the backward's two terms cancel near x = -0.75: relative to
             * their magnitudes */
            double mag = bwd ? g[i] * (cdf + fabs(a) * 0.3989422804014327 *
                                       exp(-0.5 * a * a)) : fabs(w);
            double e = fabs(o[i] - w) / mag;
            if (e > worst)
                worst = e;
            if (e > 2e-6)
                fail_msg("bwd %d x %.9g: got %.9g want %.9g (rel %.2g)", bwd, a,
                         o[i], w, e);
        }
        print_message("gelu%s max rel err %.3g\n", bwd ? "_backward" : "", worst);
        assert_true(bwd || (o[3] == 0 && !signbit(o[3]) && signbit(o[4])));
        lt_fused_free(f);
    }
    free(x); free(g); free(o);
}

/* Sequential reference: first index of the extreme, first NaN wins. */
static int64_t ref_arg(const float *v, int64_t n, int is_max)
{
    int64_t bi = 0;
    for (int64_t i = 0; i < n; i++) {
        if (v[bi] != v[bi])
            break;
        if (v[i] != v[i] || (is_max ? v[i] > v[bi] : v[i] < v[bi]))
            bi = i;
    }
    return bi;
}

static void test_argreduce_flat_parallel(void **state)
{
    enum { N = 300007 };
    float *x = malloc(N * 4);
    int64_t dn[1] = {N};
    lt_attrs at;
    memset(&at, 0, sizeof at);
    at.n = 2;
    at.i[0] = -1;
    for (int c = 0; c < 7; c++) {
        for (int i = 0; i < N; i++)
            x[i] = c >= 5 ? -1.0f - (float)(i % 3)
                          : (float)(((int64_t)i * 7919) % 1000);  /* ties */
        if (c == 5) { x[100] = -0.0f; x[150000] = 0.0f; }  /* signed zeros */
        if (c == 6) { x[290000] = 0.0f; x[290001] = -0.0f; x[5] = -7; }
        if (c == 1) x[N - 5] = 5000;                       /* late max */
        if (c == 2) { x[200000] = NAN; x[250000] = NAN; }  /* first NaN */
        if (c == 3) x[N - 1] = NAN;
        if (c == 4) x[7] = -1;                             /* early min */
        for (int is_max = 0; is_max < 2; is_max++) {
            int64_t got = -7;
            lt_view in = V(x, LT_F32, 1, dn), ov = V(&got, LT_I64, 0, NULL);
            for (int nt = 1; nt <= 4; nt++) {
                lt_kernel_ctx ctx = {0, nt};
                assert_int_equal(lt_kernel_argreduce(is_max ? LT_OP_argmax : LT_OP_argmin,
                                                     &at, &in, 1, &ov, &ctx), LT_OK);
                assert_int_equal(got, ref_arg(x, N, is_max));
            }
        }
    }
    /* 2-D, flattened: a [3, N/3] view reduced to one index */
    int64_t d[2] = {3, N / 3};
    for (int i = 0; i < 3 * (N / 3); i++)
        x[i] = (float)((i * 31) % 977);
    int64_t got = -1;
    lt_view in = V(x, LT_F32, 2, d), ov = V(&got, LT_I64, 0, NULL);
    assert_int_equal(lt_kernel_argreduce(LT_OP_argmax, &at, &in, 1, &ov, &CTX), LT_OK);
    assert_int_equal(got, ref_arg(x, 3 * (N / 3), 1));
    free(x);
}

/* A big program with scalar (broadcast) inputs: the broadcast blocks are
 * prepared at bind time. */
static void test_broadcast_big(void **state)
{
    enum { N = 3 * 1024 * 7 + 5 };
    float *x = malloc(N * 4), *o = malloc(N * 4);
    double *od = malloc(N * 8);
    for (int i = 0; i < N; i++) x[i] = (float)(i % 97) - 40;
    int64_t dn[1] = {N}, d1[1] = {1};
    lt_shape s = lt_shape_make(1, dn);
    float sc = 1.5f, one[1] = {-2.0f};
    double dsc = 0.25;
    lt_view in[4] = {V(x, LT_F32, 1, dn), V(&sc, LT_F32, 0, NULL),
                     V(one, LT_F32, 1, d1), V(&dsc, LT_F64, 0, NULL)};
    lt_fused *f = lt_fused_new(LT_F32, &s, 3);
    int a = lt_fused_load(f, 0), b = lt_fused_load(f, 1), c = lt_fused_load(f, 2);
    int m = lt_fused_op(f, LT_OP_mul, LT_F32, a, b, -1);
    lt_fused_store(f, lt_fused_op(f, LT_OP_add, LT_F32, m, c, -1));
    assert_int_equal(lt_fused_finish(f), LT_OK);
    lt_view ov = V(o, LT_F32, 1, dn);
    assert_int_equal(lt_fused_run(f, in, &ov, &CTX), LT_OK);
    for (int i = 0; i < N; i++)
        assert_float_equal(o[i], x[i] * 1.5f - 2.0f, 0);
    lt_fused_free(f);
    /* f64 group with an f64 scalar */
    f = lt_fused_new(LT_F64, &s, 2);
    a = lt_fused_load(f, 0);
    b = lt_fused_load(f, 1);
    lt_fused_store(f, lt_fused_op(f, LT_OP_mul, LT_F64, a, b, -1));
    assert_int_equal(lt_fused_finish(f), LT_OK);
    lt_view in2[2] = {in[0], in[3]}, ov2 = V(od, LT_F64, 1, dn);
    assert_int_equal(lt_fused_run(f, in2, &ov2, &CTX), LT_OK);
    for (int i = 0; i < N; i++)
        assert_float_equal(od[i], x[i] * 0.25, 0);
    lt_fused_free(f);
    free(x); free(o); free(od);
}

/* lt_par_run on a helper pool: every chunk runs exactly once, worker ids
 * stay below the requested count, and back-to-back jobs of different
 * sizes (some smaller than the worker count, some of one chunk) never see
 * a stale helper run a chunk of a finished job, with and without the
 * helpers held awake (lt_par_pool_hold, as while a program runs). More
 * workers than cores. */
typedef struct par_probe {
    _Atomic int *hits;
    int workers;
    _Atomic int bad;
    int64_t job;
    int64_t *seq[4];      /* per worker: the chunks it ran, in order */
    int64_t len[4];       /* (one writer per worker id) */
} par_probe;

static void par_probe_fn(void *arg, int64_t c, int w)
{
    par_probe *p = arg;
    if (w < 0 || w >= p->workers)
        atomic_store(&p->bad, 1);
    else if (w < 4 && p->seq[w])
        p->seq[w][p->len[w]++] = c;
    atomic_fetch_add(&p->hits[c], 1);
    if ((c + p->job) % 7 == 0)                 /* uneven chunk costs */
        for (volatile int k = 0; k < 2000; k++) {}
}

static void test_par_pool(void **state)
{
    lt_par_pool *pool = lt_par_pool_new();
    assert_non_null(pool);
    enum { MAXC = 3000 };
    _Atomic int *hits = malloc(MAXC * sizeof *hits);
    int64_t *seqs = malloc(4 * MAXC * sizeof *seqs);
    for (int64_t job = 0; job < 400; job++) {
        int64_t n = (job * 7919) % MAXC + 1;
        if (job % 5 == 0) n = job % 3 + 1;
        int workers = 1 + (int)(job % 4);
        for (int64_t c = 0; c < n; c++) atomic_store(&hits[c], 0);
        par_probe p = {hits, workers, 0, job, {seqs, seqs + MAXC, seqs + 2 * MAXC,
                                               seqs + 3 * MAXC}, {0}};
        if (job % 50 == 10) lt_par_pool_hold(pool, 1);   /* a "program" of 30 jobs */
        if (job % 50 == 40) lt_par_pool_hold(pool, 0);
        lt_par_run(pool, workers, n, par_probe_fn, &p);
        assert_int_equal(atomic_load(&p.bad), 0);
        for (int64_t c = 0; c < n; c++)
            if (atomic_load(&hits[c]) != 1)
                fail_msg("job %lld: chunk %lld ran %d times", (long long)job,
                         (long long)c, atomic_load(&hits[c]));
        /* the chunks split into one contiguous range per worker (as many as
         * ran: fewer helpers than asked shrink the count); a worker runs
         * its own range first, in order, and only then other ranges'
         * chunks (a late worker's, stolen): none of its own after a stolen
         * one, and each range's chunks in order whoever ran them */
        int used = 0;
        for (int w = 0; w < 4; w++)
            if (p.len[w]) used = w + 1;
        int ranges = workers < n ? workers : (int)n;
        for (int w = 0; w < used && ranges > 1; w++) {
            int64_t lo = n * w / ranges, hi = n * (w + 1) / ranges;
            int stolen = 0;
            for (int64_t i = 0; i < p.len[w]; i++) {
                int64_t c = p.seq[w][i];
                int own = c >= lo && c < hi;
                if (own && stolen)
                    fail_msg("job %lld: worker %d ran chunk %lld of its own range "
                             "[%lld, %lld) after stealing", (long long)job, w,
                             (long long)c, (long long)lo, (long long)hi);
                if (!own) stolen = 1;
                if (own && i > 0 && p.seq[w][i - 1] >= lo && p.seq[w][i - 1] < hi &&
                    p.seq[w][i - 1] >= c)
                    fail_msg("job %lld: worker %d ran its range out of order", (long long)job, w);
            }
        }
    }
    free(seqs);
    lt_par_pool_hold(pool, 1);      /* freed while held: helpers still join */
    lt_par_pool_free(pool);
    lt_par_pool_hold(NULL, 1);      /* NULL-safe */
    /* without a pool: OpenMP fallback, same contract */
    for (int64_t c = 0; c < 100; c++) atomic_store(&hits[c], 0);
    par_probe p = {hits, 3, 0, 1, {0}, {0}};
    lt_par_run(NULL, 3, 100, par_probe_fn, &p);
    for (int64_t c = 0; c < 100; c++) assert_int_equal(atomic_load(&hits[c]), 1);
    free(hits);
}

/* Back-to-back jobs alternating 2 and 64 chunks, 2-4 workers on a machine
 * with fewer cores: a helper preempted between reading a job's generation
 * and its fields, while that job finished without it, read the next job's
 * chunk count with the old generation's claims and ran chunks past the end
 * or twice (before the issuer voided the worker ids first: 6-13 bad jobs
 * in 2M, ~3 in this test's 1M). Every chunk of every job exactly once. */
typedef struct par_seq {
    _Atomic int hits[64];
    int64_t n;
    _Atomic int bad;
} par_seq;

static void par_seq_fn(void *arg, int64_t c, int w)
{
    (void)w;
    par_seq *j = arg;
    if (c < 0 || c >= j->n)
        atomic_store(&j->bad, 1);
    else
        atomic_fetch_add(&j->hits[c], 1);
}

static void test_par_pool_stale_helper(void **state)
{
    (void)state;
    lt_par_pool *pool = lt_par_pool_new();
    assert_non_null(pool);
    par_seq *j = malloc(sizeof *j);
    long bad = 0;
    for (long it = 0; it < 1000000; it++) {
        j->n = (it & 1) ? 64 : 2;
        for (int c = 0; c < 64; c++) atomic_store(&j->hits[c], 0);
        atomic_store(&j->bad, 0);
        lt_par_run(pool, (int)(it % 3) + 2, j->n, par_seq_fn, j);
        int b = atomic_load(&j->bad);
        for (int c = 0; c < 64; c++)
            if (atomic_load(&j->hits[c]) != (c < j->n)) b = 1;
        bad += b;
    }
    free(j);
    lt_par_pool_free(pool);
    if (bad)
        fail_msg("%ld of 1000000 jobs ran a chunk twice, not at all or out of range", bad);
}

/* An 8-op chain over 4M floats as one fused program equals the same 8 ops
 * run one program each through memory (what eager does). Its speed is a
 * benchmark: build/bench_core's "8-op chain" rows. */
static void test_chain_fused_equals_separate(void **state)
{
    (void)state;
    enum { N = 1 << 22 };
    float *x = malloc((size_t)N * 4), *y = malloc((size_t)N * 4);
    float *of = malloc((size_t)N * 4), *os = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 1000) * 0.001f;
        y[i] = 0.5f;
    }
    int64_t dn[1] = {N};
    lt_shape s = lt_shape_make(1, dn);
    lt_op ops[8] = {LT_OP_mul, LT_OP_add, LT_OP_sub, LT_OP_mul, LT_OP_add, LT_OP_mul,
                    LT_OP_sub, LT_OP_add};
    lt_fused *f = lt_fused_new(LT_F32, &s, 2);
    int a = lt_fused_load(f, 0), b = lt_fused_load(f, 1), v = a;
    for (int k = 0; k < 8; k++)
        v = lt_fused_op(f, ops[k], LT_F32, v, b, -1);
    lt_fused_store(f, v);
    assert_int_equal(lt_fused_finish(f), LT_OK);
    lt_view in[2] = {V(x, LT_F32, 1, dn), V(y, LT_F32, 1, dn)};
    lt_view ofv = V(of, LT_F32, 1, dn), osv = V(os, LT_F32, 1, dn);
    assert_int_equal(lt_fused_run(f, in, &ofv, &CTX), LT_OK);
    lt_view si[2] = {V(x, LT_F32, 1, dn), V(y, LT_F32, 1, dn)};
    for (int k = 0; k < 8; k++) {
        lt_fused *g = lt_fused_new(LT_F32, &s, 2);
        int p = lt_fused_load(g, 0), q = lt_fused_load(g, 1);
        lt_fused_store(g, lt_fused_op(g, ops[k], LT_F32, p, q, -1));
        assert_int_equal(lt_fused_finish(g), LT_OK);
        assert_int_equal(lt_fused_run(g, si, &osv, &CTX), LT_OK);
        si[0] = osv;
        lt_fused_free(g);
    }
    for (int i = 0; i < N; i += 4099) {
        float want = x[i];
        for (int k = 0; k < 8; k++)
            want = ops[k] == LT_OP_mul ? want * 0.5f : ops[k] == LT_OP_add ? want + 0.5f
                                                                          : want - 0.5f;
        assert_float_equal(of[i], want, 1e-6);
        assert_float_equal(os[i], want, 1e-6);
    }
    lt_fused_free(f);
    free(x); free(y); free(of); free(os);
}

static void test_reduce_outer_small(void **state)
{
    /* column sums of a tall [N, 3] matrix: outer strategy with short rows */
    enum { N = 20000, C = 3 };
    float *x = malloc(N * C * 4), out[C];
    for (int i = 0; i < N * C; i++) x[i] = (float)((i * 31) % 17) - 8.25f;
    int64_t d[2] = {N, C}, dc[1] = {C};
    lt_view in = V(x, LT_F32, 2, d), ov = V(out, LT_F32, 1, dc);
    lt_attrs at;
    memset(&at, 0, sizeof at);
    at.n = 2;
    at.i[0] = 1;
    assert_int_equal(lt_kernel_reduce(LT_OP_sum, &at, &in, 1, &ov, &CTX), LT_OK);
    for (int j = 0; j < C; j++) {
        double a = 0;
        for (int i = 0; i < N; i++) a += x[i * C + j];
        assert_true(fabs(out[j] - a) <= 1e-5 * fabs(a) + 1e-3);
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_scalar_and_bf16),
        cmocka_unit_test(test_bf16_cast_rounds),
        cmocka_unit_test(test_int_bool_types),
        cmocka_unit_test(test_nan_propagation),
        cmocka_unit_test(test_reduce_outer_small),
        cmocka_unit_test(test_inplace_donated),
        cmocka_unit_test(test_vmath_accuracy),
        cmocka_unit_test(test_transcendental_ops),
        cmocka_unit_test(test_gelu_ops),
        cmocka_unit_test(test_argreduce_flat_parallel),
        cmocka_unit_test(test_broadcast_big),
        cmocka_unit_test(test_par_pool),
        cmocka_unit_test(test_par_pool_stale_helper),
        cmocka_unit_test(test_chain_fused_equals_separate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
