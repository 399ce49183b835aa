/* tests/c/test_fuzz_regress.c — focused tests for what libFuzzer found in
 * the C API (tests/fuzz/fuzz_trace.c; the inputs themselves are replayed
 * from tests/fuzz/corpus/ by the fuzz/replay test). Each test names the
 * finding: bad input must give an lt_status with a clear message, integer
 * arithmetic wraps like PyTorch's, float->int conversions saturate. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"

static int setup(void **st)
{
    (void)st;
    lt_shutdown();
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    unsetenv("LAZYTPU_USE_BF16");
    unsetenv("LAZYTPU_HBM_BYTES");
    assert_int_equal(lt_init(), LT_OK);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    lt_shutdown();
    return 0;
}

#define EXPECT_IN(msg, needle)                                             \
    do {                                                                   \
        if (!strstr((msg), (needle)))                                      \
            fail_msg("expected \"%s\" in: %s", (needle), (msg));           \
    } while (0)

static lt_tensor *host(const void *d, lt_dtype dt, int nd, const int64_t *dims)
{
    lt_shape s = lt_shape_make(nd, dims);
    lt_tensor *t = NULL;
    lt_status st = lt_tensor_from_host(0, d, dt, &s, &t);
    if (st != LT_OK) fail_msg("%s", lt_last_error());
    return t;
}

static void read_i64(lt_tensor *t, int64_t *out)
{
    lt_status st = lt_tensor_to_host(t, out, LT_I64);
    if (st != LT_OK) fail_msg("%s", lt_last_error());
}

/* from_host with a shape whose element count overflows int64 (UBSan:
 * signed overflow in lt_shape_numel), or whose non-zero dims do although
 * another dim is 0. */
static void test_from_host_shape_too_large(void **state)
{
    lt_tensor *t = NULL;
    float one = 1;
    lt_shape s = lt_shape_make(2, (int64_t[]){(int64_t)1 << 62, 7});
    assert_int_equal(lt_tensor_from_host(0, &one, LT_F32, &s, &t), LT_ERR_SHAPE);
    EXPECT_IN(lt_last_error(), "from_host: shape [4611686018427387904, 7] is too large");
    assert_null(t);
    s = lt_shape_make(3, (int64_t[]){0, (int64_t)1 << 40, (int64_t)1 << 40});
    assert_int_equal(lt_tensor_from_host(0, NULL, LT_F32, &s, &t), LT_ERR_SHAPE);
    s = lt_shape_make(3, (int64_t[]){0, (int64_t)1 << 20, 3});   /* empty, fine */
    assert_int_equal(lt_tensor_from_host(0, NULL, LT_F32, &s, &t), LT_OK);
    lt_tensor_release(t);
}

/* Shape rules with user attributes that overflow: every one fails with a
 * message (or, for slice, clamps) instead of computing garbage sizes. */
static void test_shape_rules_with_extreme_attributes(void **state)
{
    float xv[16];
    for (int i = 0; i < 16; i++) xv[i] = (float)i;
    lt_tensor *x = host(xv, LT_F32, 4, (int64_t[]){1, 1, 4, 4}), *o = NULL;
    lt_tensor *x1 = host(xv, LT_F32, 1, (int64_t[]){1});
    lt_attrs a;

    /* expand to 2^40 x 2^40 elements */
    a = (lt_attrs){.n = 2, .i = {(int64_t)1 << 40, (int64_t)1 << 40}};
    assert_int_equal(lt_trace1(LT_OP_expand, x1, &a, &o), LT_ERR_SHAPE);
    EXPECT_IN(lt_last_error(), "too large");
    /* reshape whose sizes multiply past int64 */
    a = (lt_attrs){.n = 3, .i = {(int64_t)1 << 40, (int64_t)1 << 40, 0}};
    assert_int_equal(lt_trace1(LT_OP_reshape, x, &a, &o), LT_ERR_SHAPE);
    /* slice with the largest step: one element, no overflow */
    a = (lt_attrs){.n = 4, .i = {3, 1, 4, INT64_MAX}};
    assert_int_equal(lt_trace1(LT_OP_slice, x, &a, &o), LT_OK);
    assert_int_equal(lt_tensor_shape(o)->dims[3], 1);
    float got[4];
    assert_int_equal(lt_tensor_to_host(o, got, LT_F32), LT_OK);
    assert_true(got[0] == 1 && got[1] == 5 && got[2] == 9 && got[3] == 13);
    lt_tensor_release(o);
    /* a size-1 dim may have any stride (UBSan: stride * step overflowed
     * when the view was folded) */
    a = (lt_attrs){.n = 6, .i = {2, 1, 2, INT64_MAX, 2, 3}};
    assert_int_equal(lt_trace1(LT_OP_as_strided, x, &a, &o), LT_OK);
    lt_tensor *o2;
    assert_int_equal(lt_trace2(LT_OP_add, o, o, NULL, &o2), LT_OK);
    float two[2];
    assert_int_equal(lt_tensor_to_host(o2, two, LT_F32), LT_OK);
    assert_true(two[0] == 6 && two[1] == 10);
    lt_tensor_release(o);
    lt_tensor_release(o2);
    /* conv with padding / dilation at the int64 limits */
    float wv[4] = {1, 1, 1, 1};
    lt_tensor *w = host(wv, LT_F32, 4, (int64_t[]){1, 1, 2, 2});
    a = (lt_attrs){.n = 7, .i = {1, 1, INT64_MAX, 0, 1, 1, 1}};
    assert_int_equal(lt_trace2(LT_OP_conv2d, x, w, &a, &o), LT_ERR_SHAPE);
    a = (lt_attrs){.n = 7, .i = {1, 1, 0, 0, INT64_MAX, 1, 1}};
    assert_int_equal(lt_trace2(LT_OP_conv2d, x, w, &a, &o), LT_ERR_SHAPE);
    a = (lt_attrs){.n = 7, .i = {1, 1, 0, 0, 1, 1, INT64_MAX}};     /* groups */
    assert_int_equal(lt_trace2(LT_OP_conv2d, x, w, &a, &o), LT_ERR_SHAPE);
    /* pooling with an enormous kernel / dilation */
    a = (lt_attrs){.n = 9, .i = {INT64_MAX, 2, 1, 1, 0, 0, 1, 1, 0}};
    assert_int_equal(lt_trace1(LT_OP_max_pool2d, x, &a, &o), LT_ERR_SHAPE);
    a = (lt_attrs){.n = 9, .i = {2, 2, 1, 1, 0, 0, INT64_MAX, 1, 1}};
    assert_int_equal(lt_trace1(LT_OP_max_pool2d, x, &a, &o), LT_ERR_SHAPE);
    /* as_strided reaching past int64 */
    a = (lt_attrs){.n = 6, .i = {2, 3, 3, INT64_MAX, 1, 0}};
    assert_int_equal(lt_trace1(LT_OP_as_strided, x, &a, &o), LT_ERR_SHAPE);
    lt_tensor_release(w);
    lt_tensor_release(x);
    lt_tensor_release(x1);
}

/* Integer tensor arithmetic wraps (UBSan: signed overflow in the fused
 * interpreter): INT64_MAX + INT64_MAX == -2, as in PyTorch. */
static void test_integer_arithmetic_wraps(void **state)
{
    int64_t big[2] = {INT64_MAX, INT64_MIN};
    lt_tensor *a = host(big, LT_I64, 1, (int64_t[]){2}), *s, *m, *n;
    assert_int_equal(lt_trace2(LT_OP_add, a, a, NULL, &s), LT_OK);
    assert_int_equal(lt_trace2(LT_OP_mul, a, a, NULL, &m), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_neg, a, NULL, &n), LT_OK);
    int64_t r[2];
    read_i64(s, r);
    assert_true(r[0] == -2 && r[1] == 0);
    read_i64(m, r);
    assert_true(r[0] == 1 && r[1] == 0);
    read_i64(n, r);
    assert_true(r[0] == INT64_MIN + 1 && r[1] == INT64_MIN);
    lt_tensor_release(a); lt_tensor_release(s);
    lt_tensor_release(m); lt_tensor_release(n);
}

/* Float -> integer conversions inside programs saturate, NaN -> 0 (UBSan:
 * float-cast-overflow in the fused store, in scalar parameter slots and for
 * float math on integer tensors). */
static void test_float_to_int_saturates(void **state)
{
    float fv[4] = {NAN, 1e30f, -1e30f, 2.75f};
    lt_tensor *f = host(fv, LT_F32, 1, (int64_t[]){4}), *c;
    lt_attrs to_i64 = {.n = 1, .i = {LT_I64}};
    assert_int_equal(lt_trace1(LT_OP_cast, f, &to_i64, &c), LT_OK);
    int64_t r[4];
    read_i64(c, r);
    assert_true(r[0] == 0 && r[1] == INT64_MAX && r[2] == INT64_MIN && r[3] == 2);
    lt_tensor_release(c);
    /* an i64 0-dim tensor holding INT64_MAX is a scalar parameter (slot) */
    int64_t zero[2] = {0, -1};
    lt_tensor *z = host(zero, LT_I64, 1, (int64_t[]){2}), *k, *sum;
    assert_int_equal(lt_scalar(0, 9.3e18, LT_I64, 0, &k), LT_OK);
    assert_int_equal(lt_trace2(LT_OP_add, z, k, NULL, &sum), LT_OK);
    read_i64(sum, r);
    assert_true(r[0] == INT64_MAX && r[1] == INT64_MAX - 1);
    /* float math on integers (silu_backward computes exp) */
    int64_t iv[2] = {INT64_MAX, -3};
    lt_tensor *i = host(iv, LT_I64, 1, (int64_t[]){2}), *sb;
    assert_int_equal(lt_trace2(LT_OP_silu_backward, i, i, NULL, &sb), LT_OK);
    read_i64(sb, r);
    assert_true(r[0] == INT64_MAX);
    lt_tensor_release(f); lt_tensor_release(z); lt_tensor_release(k);
    lt_tensor_release(sum); lt_tensor_release(i); lt_tensor_release(sb);
}

/* Integer reductions wrap too (UBSan: signed overflow in reduce_tmpl.h). */
static void test_integer_reductions_wrap(void **state)
{
    int64_t v[2] = {INT64_MAX, 2};
    lt_tensor *a = host(v, LT_I64, 1, (int64_t[]){2}), *s, *p;
    lt_attrs all = {.n = 2, .i = {1, 0}};
    assert_int_equal(lt_trace1(LT_OP_sum, a, &all, &s), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_prod, a, &all, &p), LT_OK);
    int64_t r;
    read_i64(s, &r);
    assert_true(r == INT64_MIN + 1);
    read_i64(p, &r);
    assert_true(r == -2);
    lt_tensor_release(a); lt_tensor_release(s); lt_tensor_release(p);
}

/* all_reduce of integers with a scale that does not fit (NaN, 1e30): the
 * scaled value saturates (UBSan: float-cast-overflow in spawn/reduce.c). */
static void test_integer_all_reduce_scale_saturates(void **state)
{
    int64_t v[3] = {5, -5, 0};
    lt_tensor *a = host(v, LT_I64, 1, (int64_t[]){3}), *o;
    int64_t r[3];
    lt_attrs at = {.n = 1, .i = {LT_REDUCE_SUM}, .f = {1e30}};
    assert_int_equal(lt_trace1(LT_OP_all_reduce, a, &at, &o), LT_OK);
    read_i64(o, r);
    assert_true(r[0] == INT64_MAX && r[1] == INT64_MIN && r[2] == 0);
    lt_tensor_release(o);
    at.f[0] = NAN;
    assert_int_equal(lt_trace1(LT_OP_all_reduce, a, &at, &o), LT_OK);
    read_i64(o, r);
    assert_true(r[0] == 0 && r[1] == 0 && r[2] == 0);
    lt_tensor_release(o);
    int32_t w[2] = {3, -3};
    lt_tensor *b = host(w, LT_I32, 1, (int64_t[]){2});
    at.f[0] = 1e10;
    assert_int_equal(lt_trace1(LT_OP_all_reduce, b, &at, &o), LT_OK);
    int32_t q[2];
    assert_int_equal(lt_tensor_to_host(o, q, LT_I32), LT_OK);
    assert_true(q[0] == INT32_MAX && q[1] == INT32_MIN);
    lt_tensor_release(o); lt_tensor_release(b); lt_tensor_release(a);
}

/* argmax of a block of only -inf (argmin: +inf): clang's simd max
 * reduction starts at -FLT_MAX, which no element equals; the search for
 * the first extreme then read past the block (ASan: heap-buffer-overflow
 * in arg_run). */
static void test_argmax_of_infinities(void **state)
{
    float v[600];
    for (int i = 0; i < 600; i++) v[i] = -INFINITY;
    lt_tensor *a = host(v, LT_F32, 1, (int64_t[]){600}), *am, *an, *bm;
    lt_attrs flat = {.n = 2, .i = {-1, 0}};
    assert_int_equal(lt_trace1(LT_OP_argmax, a, &flat, &am), LT_OK);
    int64_t r;
    read_i64(am, &r);
    assert_true(r == 0);
    for (int i = 0; i < 600; i++) v[i] = INFINITY;
    v[300] = -INFINITY;
    v[450] = -INFINITY;
    lt_tensor *b = host(v, LT_F32, 1, (int64_t[]){600});
    assert_int_equal(lt_trace1(LT_OP_argmin, b, &flat, &an), LT_OK);
    read_i64(an, &r);
    assert_true(r == 300);
    assert_int_equal(lt_trace1(LT_OP_argmax, b, &flat, &bm), LT_OK);
    read_i64(bm, &r);
    assert_true(r == 0);
    lt_tensor_release(a); lt_tensor_release(am); lt_tensor_release(b);
    lt_tensor_release(an); lt_tensor_release(bm);
}

/* exp(NaN) is NaN (UBSan: the vectorised exp converted NaN to int). */
static void test_exp_of_nan(void **state)
{
    float fv[3] = {NAN, -INFINITY, 0};
    lt_tensor *f = host(fv, LT_F32, 1, (int64_t[]){3}), *e;
    assert_int_equal(lt_trace1(LT_OP_exp, f, NULL, &e), LT_OK);
    float r[3];
    assert_int_equal(lt_tensor_to_host(e, r, LT_F32), LT_OK);
    assert_true(isnan(r[0]) && r[1] == 0 && r[2] == 1);
    lt_tensor_release(f);
    lt_tensor_release(e);
}

/* A program with no steps (every output is an input passed through):
 * compile_plan copied 0 steps from a NULL array (UBSan: nonnull). */
static void test_program_without_steps(void **state)
{
    float v[6] = {1, 2, 3, 4, 5, 6};
    lt_tensor *x = host(v, LT_F32, 2, (int64_t[]){2, 3}), *y;
    lt_attrs a = {.n = 1, .i = {6}};
    assert_int_equal(lt_trace1(LT_OP_reshape, x, &a, &y), LT_OK);
    assert_int_equal(lt_sync(&y, 1, LT_SYNC_EXPLICIT, 1), LT_OK);
    float r[6];
    assert_int_equal(lt_tensor_to_host(y, r, LT_F32), LT_OK);
    assert_memory_equal(r, v, sizeof v);
    lt_tensor_release(x);
    lt_tensor_release(y);
}

/* Fallback times given by the embedder accumulate saturating (UBSan:
 * signed overflow in the fallback table). */
static void test_fallback_time_saturates(void **state)
{
    lt_fallback_record("aten::fuzzop", INT64_MAX, "f.py:1 in g");
    lt_fallback_record("aten::fuzzop", INT64_MAX, NULL);
    char *rep = lt_fallback_report();
    EXPECT_IN(rep, "aten::fuzzop: 2 calls");
    free(rep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_from_host_shape_too_large, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shape_rules_with_extreme_attributes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_integer_arithmetic_wraps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_float_to_int_saturates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_integer_reductions_wrap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_integer_all_reduce_scale_saturates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_argmax_of_infinities, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exp_of_nan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_program_without_steps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fallback_time_saturates, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
