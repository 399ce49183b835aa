/* tests/c/test_value_errors.c — errors found in the values of a running
 * program (LT_ERR_VALUE, docs/errors.md): an integer floor_divide /
 * remainder / fmod by a zero in device data (eager's ZeroDivisionError),
 * elementwise and inside a fused reduction; and LAZYTPU_CHECK_FINITE=1,
 * which fails a program at the first op that produces a NaN/Inf, naming
 * the op, its shapes/dtypes and the frame that traced it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"
#include "device.h"

static void reinit(int check_finite)
{
    lt_shutdown();
    unsetenv("LAZYTPU_HBM_BYTES");
    unsetenv("LAZYTPU_USE_BF16");
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    if (check_finite) setenv("LAZYTPU_CHECK_FINITE", "1", 1);
    else unsetenv("LAZYTPU_CHECK_FINITE");
    assert_int_equal(lt_init(), LT_OK);
    lt_set_caller(NULL);
}

static int setup(void **st) { (void)st; reinit(0); return 0; }
static int setup_finite(void **st) { (void)st; reinit(1); return 0; }
static int teardown(void **st)
{
    (void)st;
    lt_set_caller(NULL);
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
    assert_int_equal(lt_core_bytes_in_use(0), 0);
    lt_shutdown();
    unsetenv("LAZYTPU_CHECK_FINITE");
    return 0;
}

#define EXPECT_IN(msg, needle)                                             \
    do {                                                                   \
        if (!strstr((msg), (needle)))                                      \
            fail_msg("expected \"%s\" in: %s", (needle), (msg));           \
    } while (0)

static lt_tensor *host(const void *d, lt_dtype dt, int64_t n)
{
    lt_shape s = lt_shape_make(1, &n);
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(0, d, dt, &s, &t), LT_OK);
    return t;
}

static lt_tensor *op1(lt_op op, lt_tensor *a, const lt_attrs *at)
{
    lt_tensor *o;
    if (lt_trace1(op, a, at, &o) != LT_OK) fail_msg("%s", lt_last_error());
    return o;
}

static lt_tensor *op2(lt_op op, lt_tensor *a, lt_tensor *b)
{
    lt_tensor *o;
    if (lt_trace2(op, a, b, NULL, &o) != LT_OK) fail_msg("%s", lt_last_error());
    return o;
}

/* ------------------------------------------------------- zero division */

static void test_integer_division_by_a_device_zero(void **state)
{
    (void)state;
    const lt_op ops[] = {LT_OP_floor_divide, LT_OP_remainder, LT_OP_fmod};
    int64_t a[4] = {7, -7, 5, 9}, b[4] = {2, 3, 0, 4}, out[4];
    for (int k = 0; k < 3; k++) {
        lt_tensor *A = host(a, LT_I64, 4), *B = host(b, LT_I64, 4);
        lt_tensor *q = op2(ops[k], A, B);
        lt_tensor *w = op2(LT_OP_add, q, A);       /* fused with it */
        assert_int_equal(lt_tensor_to_host(w, out, LT_I64), LT_ERR_VALUE);
        const char *m = lt_last_error();
        assert_true(strncmp(m, "ZeroDivisionError: ", 19) == 0);
        EXPECT_IN(m, lt_op_name(ops[k]));
        EXPECT_IN(m, "integer division by zero");
        EXPECT_IN(m, "i64[4]");
        /* the same error on every read, nothing else affected */
        assert_int_equal(lt_tensor_to_host(q, out, LT_I64), LT_ERR_VALUE);
        int64_t ok[4];
        assert_int_equal(lt_tensor_to_host(A, ok, LT_I64), LT_OK);
        lt_tensor_release(A);
        lt_tensor_release(B);
        lt_tensor_release(q);
        lt_tensor_release(w);
    }
    /* no zero: the values */
    int64_t b2[4] = {2, 3, -2, 4};
    lt_tensor *A = host(a, LT_I64, 4), *B = host(b2, LT_I64, 4);
    lt_tensor *q = op2(LT_OP_floor_divide, A, B);
    assert_int_equal(lt_tensor_to_host(q, out, LT_I64), LT_OK);
    assert_true(out[0] == 3 && out[1] == -3 && out[2] == -3 && out[3] == 2);
    lt_tensor_release(A);
    lt_tensor_release(B);
    lt_tensor_release(q);
}

static void test_division_by_zero_inside_a_reduction(void **state)
{
    (void)state;
    int64_t a[3] = {1, 2, 3}, b[3] = {1, 0, 1}, out;
    lt_tensor *A = host(a, LT_I64, 3), *B = host(b, LT_I64, 3);
    lt_tensor *q = op2(LT_OP_remainder, A, B);
    lt_attrs at = {.n = 2, .i = {1, 0}};
    lt_tensor *s = op1(LT_OP_sum, q, &at);       /* the reduce absorbs q */
    lt_tensor_release(q);                          /* only the sum is a root */
    assert_int_equal(lt_tensor_to_host(s, &out, LT_I64), LT_ERR_VALUE);
    EXPECT_IN(lt_last_error(), "ZeroDivisionError: remainder");
    lt_tensor_release(A);
    lt_tensor_release(B);
    lt_tensor_release(s);
}

static void test_float_division_by_zero_is_not_an_error(void **state)
{
    (void)state;
    float a[2] = {1, -1}, b[2] = {0, 0}, out[2];
    lt_tensor *A = host(a, LT_F32, 2), *B = host(b, LT_F32, 2);
    lt_tensor *q = op2(LT_OP_floor_divide, A, B);
    assert_int_equal(lt_tensor_to_host(q, out, LT_F32), LT_OK);
    assert_true(isinf(out[0]) && isinf(out[1]));
    lt_tensor_release(A);
    lt_tensor_release(B);
    lt_tensor_release(q);
}

/* --------------------------------------------------- LAZYTPU_CHECK_FINITE */

static void test_check_finite_names_the_first_op(void **state)
{
    (void)state;
    float x[3] = {1, 0, 2}, out[3];
    lt_tensor *X = host(x, LT_F32, 3);
    lt_set_caller("model.py:3 in forward");
    lt_tensor *y = op2(LT_OP_mul, X, X);
    lt_set_caller("model.py:4 in forward");
    lt_tensor *z = op1(LT_OP_log, y, NULL);             /* -inf at element 1 */
    lt_set_caller("model.py:5 in forward");
    lt_tensor *w = op1(LT_OP_neg, z, NULL);             /* +inf: later */
    lt_set_caller("train.py:9 in main");
    assert_int_equal(lt_tensor_to_host(w, out, LT_F32), LT_ERR_VALUE);
    lt_set_caller(NULL);
    const char *m = lt_last_error();
    assert_true(strncmp(m, "LAZYTPU_CHECK_FINITE: log produced Inf (element 1 of f32[3])",
                        60) == 0);
    EXPECT_IN(m, "in log(f32[3]) -> f32[3] traced at model.py:4 in forward");
    EXPECT_IN(m, "program synced at train.py:9 in main");
    assert_null(strstr(m, "already held"));
    lt_tensor_release(X);
    lt_tensor_release(y);
    lt_tensor_release(z);
    lt_tensor_release(w);
    /* the core goes on */
    float one[2] = {1, 2}, o2[2];
    lt_tensor *A = host(one, LT_F32, 2);
    lt_tensor *B = op2(LT_OP_add, A, A);
    assert_int_equal(lt_tensor_to_host(B, o2, LT_F32), LT_OK);
    assert_true(o2[0] == 2 && o2[1] == 4);
    lt_tensor_release(A);
    lt_tensor_release(B);
}

static void test_check_finite_names_data_that_came_in(void **state)
{
    (void)state;
    float x[2] = {1, NAN}, out[2];
    lt_tensor *X = host(x, LT_F32, 2);
    lt_tensor *y = op2(LT_OP_add, X, X);
    assert_int_equal(lt_tensor_to_host(y, out, LT_F32), LT_ERR_VALUE);
    EXPECT_IN(lt_last_error(), "add produced NaN (element 1 of f32[2])");
    EXPECT_IN(lt_last_error(), "its input 0 already held a non-finite value");
    lt_tensor_release(X);
    lt_tensor_release(y);
}

static void test_check_finite_unread_reported_once_by_wait(void **state)
{
    (void)state;
    float x[2] = {-1, 4};
    lt_tensor *X = host(x, LT_F32, 2);
    lt_tensor *y = op1(LT_OP_sqrt, X, NULL);
    assert_int_equal(lt_sync_core(0, LT_SYNC_MARK_STEP, 1), LT_ERR_VALUE);
    EXPECT_IN(lt_last_error(), "sqrt produced NaN (element 0 of f32[2])");
    assert_int_equal(lt_wait(0), LT_OK);
    lt_tensor_release(X);
    lt_tensor_release(y);
}

static void test_check_finite_off_computes(void **state)
{
    (void)state;
    float x[2] = {0, 1}, out[2];
    lt_tensor *X = host(x, LT_F32, 2);
    lt_tensor *y = op1(LT_OP_log, X, NULL);
    assert_int_equal(lt_tensor_to_host(y, out, LT_F32), LT_OK);
    assert_true(isinf(out[0]) && out[1] == 0);
    lt_tensor_release(X);
    lt_tensor_release(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_integer_division_by_a_device_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(test_division_by_zero_inside_a_reduction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_float_division_by_zero_is_not_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_finite_off_computes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_finite_names_the_first_op, setup_finite, teardown),
        cmocka_unit_test_setup_teardown(test_check_finite_names_data_that_came_in, setup_finite,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_check_finite_unread_reported_once_by_wait,
                                        setup_finite, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
