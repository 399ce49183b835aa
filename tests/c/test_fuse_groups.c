/*
 * tests/c/test_fuse_groups.c — fusion must never make two steps wait on each
 * other. Regression: a loss-scale update (GradScaler) traced an f32 group
 * and an int group of 0-dim ops that read each other's members (the f32
 * group read `grow` from the int group, the int group read `ov` from the
 * f32 group): merging node by node looked acyclic, the steps were not
 * ("compile: step graph has a cycle").
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include "lazytpu.h"

static lt_tensor *scalar_data(double v, lt_dtype dt)
{
    lt_shape s = lt_shape_make(0, NULL);
    lt_tensor *t = NULL;
    if (dt == LT_I32) {
        int32_t x = (int32_t)v;
        assert_int_equal(lt_tensor_from_host(0, &x, dt, &s, &t), LT_OK);
    } else {
        float x = (float)v;
        assert_int_equal(lt_tensor_from_host(0, &x, dt, &s, &t), LT_OK);
    }
    return t;
}

static lt_tensor *k(double v, lt_dtype dt)
{
    lt_tensor *t = NULL;
    assert_int_equal(lt_scalar(0, v, dt, 0, &t), LT_OK);
    return t;
}

/* a Python number (weak in promotion) */
static lt_tensor *w(double v)
{
    lt_tensor *t = NULL;
    assert_int_equal(lt_scalar(0, v, LT_F64, 1, &t), LT_OK);
    return t;
}

static lt_tensor *op2(lt_op op, lt_tensor *a, lt_tensor *b)
{
    lt_tensor *t = NULL;
    assert_int_equal(lt_trace2(op, a, b, NULL, &t), LT_OK);
    return t;
}

static lt_tensor *op3(lt_op op, lt_tensor *a, lt_tensor *b, lt_tensor *c)
{
    lt_tensor *t = NULL;
    assert_int_equal(lt_trace3(op, a, b, c, NULL, &t), LT_OK);
    return t;
}

/* the update of torch.amp.GradScaler, as the shim traces it */
static void scale_update(double found_v, int gt_v, float *scale_out, int32_t *gt_out)
{
    lt_tensor *found = scalar_data(found_v, LT_F32), *gt = scalar_data(gt_v, LT_I32);
    lt_tensor *scale = scalar_data(65536.0, LT_F32);
    lt_tensor *zero = k(0, LT_I64), *one = k(1, LT_I32), *lim = k(3, LT_I32);
    lt_tensor *ov = op2(LT_OP_gt, found, zero);
    lt_tensor *cnt = op2(LT_OP_add, gt, one);
    lt_tensor *grow = op2(LT_OP_ge, cnt, lim);
    /* the int group first (as the shim's graph orders it), then the f32 one */
    lt_tensor *zi = k(0, LT_I32);
    lt_tensor *w2 = op3(LT_OP_where, grow, zi, cnt);
    lt_tensor *gt2 = op3(LT_OP_where, ov, zi, w2);
    lt_tensor *half = w(0.5), *two = w(2);
    lt_tensor *s_half = op2(LT_OP_mul, scale, half), *s_two = op2(LT_OP_mul, scale, two);
    lt_tensor *w1 = op3(LT_OP_where, grow, s_two, scale);
    lt_tensor *s2 = op3(LT_OP_where, ov, s_half, w1);
    lt_tensor *outs[2] = {gt2, s2};
    assert_int_equal(lt_sync(outs, 2, LT_SYNC_MARK_STEP, 1), LT_OK);
    assert_int_equal(lt_tensor_to_host(s2, scale_out, LT_F32), LT_OK);
    assert_int_equal(lt_tensor_to_host(gt2, gt_out, LT_I32), LT_OK);
    lt_tensor *all[] = {found, gt, scale, zero, one, lim, ov, cnt, grow, half, two,
                        s_half, s_two, w1, s2, zi, w2, gt2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) lt_tensor_release(all[i]);
}

static void test_cross_reading_groups_compile(void **st)
{
    (void)st;
    float s;
    int32_t g;
    scale_update(0.0, 0, &s, &g);       /* clean step: count up */
    assert_true(s == 65536.0f && g == 1);
    scale_update(0.0, 2, &s, &g);       /* third clean step: grow */
    assert_true(s == 131072.0f && g == 0);
    scale_update(1.0, 2, &s, &g);       /* overflow: back off, reset */
    assert_true(s == 32768.0f && g == 0);
    assert_int_equal(lt_wait(-1), LT_OK);
    assert_int_equal(lt_live_tensors(0), 0);
}

static int setup(void **st) { (void)st; return lt_init() == LT_OK ? 0 : -1; }
static int teardown(void **st) { (void)st; lt_shutdown(); return 0; }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cross_reading_groups_compile, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
