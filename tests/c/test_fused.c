/* tests/c/test_fused.c — the fused elementwise interpreter on its own:
 * broadcasting, scalars, bf16 storage rounding, int/bool compute types, NaN
 * propagation, integer division by zero, and speed vs separate passes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fused.h"
#include "reduce.h"

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
    assert_int_equal(lt_fused_run(f, in, o, &CTX), LT_OK);   /* no SIGFPE */
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

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void test_chain_speed(void **state)
{
    enum { N = 1 << 22 };
    float *x = malloc((size_t)N * 4), *y = malloc((size_t)N * 4), *o = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 1000) * 0.001f;
        y[i] = 0.5f;
    }
    int64_t dn[1] = {N};
    lt_shape s = lt_shape_make(1, dn);
    lt_op ops[8] = {LT_OP_mul, LT_OP_add, LT_OP_sub, LT_OP_mul, LT_OP_add, LT_OP_mul,
                    LT_OP_sub, LT_OP_add};
    /* fused: one program of 8 ops */
    lt_fused *f = lt_fused_new(LT_F32, &s, 2);
    int a = lt_fused_load(f, 0), b = lt_fused_load(f, 1), v = a;
    for (int k = 0; k < 8; k++)
        v = lt_fused_op(f, ops[k], LT_F32, v, b, -1);
    lt_fused_store(f, v);
    assert_int_equal(lt_fused_finish(f), LT_OK);
    lt_view in[2] = {V(x, LT_F32, 1, dn), V(y, LT_F32, 1, dn)};
    lt_view ov = V(o, LT_F32, 1, dn);
    /* separate: 8 one-op programs through memory (what eager does) */
    lt_fused *g[8];
    for (int k = 0; k < 8; k++) {
        g[k] = lt_fused_new(LT_F32, &s, 2);
        int p = lt_fused_load(g[k], 0), q = lt_fused_load(g[k], 1);
        lt_fused_store(g[k], lt_fused_op(g[k], ops[k], LT_F32, p, q, -1));
        assert_int_equal(lt_fused_finish(g[k]), LT_OK);
    }
    double best_f = 1e9, best_s = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        lt_fused_run(f, in, &ov, &CTX);
        double t1 = now_s();
        lt_view si[2] = {V(x, LT_F32, 1, dn), V(y, LT_F32, 1, dn)};
        for (int k = 0; k < 8; k++) {
            lt_fused_run(g[k], si, &ov, &CTX);
            si[0] = ov;
        }
        double t2 = now_s();
        if (t1 - t0 < best_f) best_f = t1 - t0;
        if (t2 - t1 < best_s) best_s = t2 - t1;
    }
    print_message("8-op chain on 4M floats: fused %.2f ms, separate %.2f ms (%.2fx)\n",
                  best_f * 1e3, best_s * 1e3, best_f / best_s);
    /* both computed the same thing */
    float want = x[12345];
    for (int k = 0; k < 8; k++)
        want = ops[k] == LT_OP_mul ? want * 0.5f : ops[k] == LT_OP_add ? want + 0.5f : want - 0.5f;
    assert_float_equal(o[12345], want, 1e-6);
    assert_true(best_f < 0.5 * best_s);   /* lenient: machine is shared */
    lt_fused_free(f);
    for (int k = 0; k < 8; k++) lt_fused_free(g[k]);
    free(x); free(y); free(o);
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
        cmocka_unit_test(test_int_bool_types),
        cmocka_unit_test(test_nan_propagation),
        cmocka_unit_test(test_reduce_outer_small),
        cmocka_unit_test(test_inplace_donated),
        cmocka_unit_test(test_chain_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
