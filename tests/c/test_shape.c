/* tests/c/test_shape.c — shape/dtype rules and their error messages. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <stdlib.h>
#include "lazytpu.h"
#include "shape.h"

#define SH(...) lt_shape_make(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

static lt_shape S0;

/* Runs op on 1-4 operands; returns status, fills out. */
static lt_status run(lt_op op, int n, const lt_shape *sh, const lt_dtype *dt,
                     const int64_t *ia, int na, lt_shape *out, lt_dtype *odt)
{
    lt_operand o[4];
    for (int i = 0; i < n; i++) { o[i].shape = &sh[i]; o[i].dtype = dt[i]; o[i].wrapped = 0; }
    lt_attrs a;
    memset(&a, 0, sizeof a);
    a.n = na;
    for (int i = 0; i < na; i++) a.i[i] = ia[i];
    lt_shape tmp; lt_dtype tdt;
    return lt_infer(op, o, n, &a, out ? out : &tmp, odt ? odt : &tdt);
}

static void assert_shape(const lt_shape *s, int nd, const int64_t *d)
{
    assert_int_equal(s->ndim, nd);
    for (int i = 0; i < nd; i++) assert_int_equal(s->dims[i], d[i]);
}
#define ASSERT_SHAPE(s, ...) assert_shape(&(s), sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (int64_t[]){__VA_ARGS__})

static void assert_err_has(const char *needle)
{
    const char *e = lt_last_error();
    if (!strstr(e, needle)) fail_msg("error \"%s\" lacks \"%s\"", e, needle);
}

static void test_broadcast(void **st)
{
    (void)st;
    lt_shape sh[3] = {SH(2, 1, 3), SH(4, 1), S0};
    lt_dtype dt[3] = {LT_F32, LT_F32, LT_F32};
    lt_shape out; lt_dtype odt;
    assert_int_equal(run(LT_OP_add, 2, sh, dt, NULL, 0, &out, &odt), LT_OK);
    ASSERT_SHAPE(out, 2, 4, 3);
    sh[2] = SH(3);
    assert_int_equal(run(LT_OP_where, 3, (lt_shape[]){SH(2, 1, 3), SH(4, 1), SH(3)},
                         (lt_dtype[]){LT_BOOL, LT_F32, LT_I64}, NULL, 0, &out, &odt), LT_OK);
    ASSERT_SHAPE(out, 2, 4, 3);
    assert_int_equal(odt, LT_F32);
    /* error message names op, shapes and dtypes */
    assert_int_equal(run(LT_OP_add, 2, (lt_shape[]){SH(2, 3), SH(4)}, dt, NULL, 0, NULL, NULL),
                     LT_ERR_SHAPE);
    assert_string_equal(lt_last_error(),
                        "add: shapes [2, 3] (f32) and [4] (f32) are not broadcastable");
    /* where with a non-bool condition */
    assert_int_equal(run(LT_OP_where, 3, (lt_shape[]){SH(3), SH(3), SH(3)},
                         (lt_dtype[]){LT_F32, LT_F32, LT_F32}, NULL, 0, NULL, NULL), LT_ERR_DTYPE);
    assert_err_has("where");
    /* zero-size broadcasting: 0 with 1 -> 0 */
    assert_int_equal(run(LT_OP_mul, 2, (lt_shape[]){SH(0, 3), SH(1, 3)}, dt, NULL, 0, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 0, 3);
}

static void test_dtype_rules(void **st)
{
    (void)st;
    lt_shape sh[2] = {SH(3), SH(3)};
    lt_dtype odt;
    run(LT_OP_div, 2, sh, (lt_dtype[]){LT_I64, LT_I32}, NULL, 0, NULL, &odt);
    assert_int_equal(odt, LT_F32);
    run(LT_OP_lt, 2, sh, (lt_dtype[]){LT_F32, LT_F32}, NULL, 0, NULL, &odt);
    assert_int_equal(odt, LT_BOOL);
    run(LT_OP_sum, 1, sh, (lt_dtype[]){LT_BOOL}, (int64_t[]){1, 0}, 2, NULL, &odt);
    assert_int_equal(odt, LT_I64);
    run(LT_OP_sum, 1, sh, (lt_dtype[]){LT_BF16}, (int64_t[]){1, 0}, 2, NULL, &odt);
    assert_int_equal(odt, LT_BF16);
    run(LT_OP_mean, 1, sh, (lt_dtype[]){LT_I32}, (int64_t[]){1, 0}, 2, NULL, &odt);
    assert_int_equal(odt, LT_F32);
    run(LT_OP_argmax, 1, sh, (lt_dtype[]){LT_F32}, (int64_t[]){0, 0}, 2, NULL, &odt);
    assert_int_equal(odt, LT_I64);
    assert_int_equal(run(LT_OP_cast, 1, sh, (lt_dtype[]){LT_F32}, (int64_t[]){LT_I32}, 1, NULL, &odt), LT_OK);
    assert_int_equal(odt, LT_I32);
    assert_int_equal(run(LT_OP_cast, 1, sh, (lt_dtype[]){LT_F32}, (int64_t[]){42}, 1, NULL, &odt),
                     LT_ERR_DTYPE);
    assert_int_equal(run(LT_OP_cast, 1, sh, (lt_dtype[]){LT_F32}, NULL, 0, NULL, &odt), LT_ERR_ARG);
    /* wrapped weak */
    lt_operand o[2] = {{&sh[0], LT_F32, 0}, {&S0, LT_F64, 1}};
    lt_attrs a = {0};
    lt_shape out;
    assert_int_equal(lt_infer(LT_OP_mul, o, 2, &a, &out, &odt), LT_OK);
    assert_int_equal(odt, LT_F32);
    /* arity */
    assert_int_equal(run(LT_OP_add, 1, sh, (lt_dtype[]){LT_F32}, NULL, 0, NULL, NULL), LT_ERR_ARG);
    assert_err_has("add");
}

static void test_reduce(void **st)
{
    (void)st;
    lt_shape sh[1] = {SH(2, 3, 4)};
    lt_dtype dt[1] = {LT_F32};
    lt_shape out;
    assert_int_equal(run(LT_OP_sum, 1, sh, dt, (int64_t[]){5, 0}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 3);
    assert_int_equal(run(LT_OP_sum, 1, sh, dt, (int64_t[]){5, 1}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 1, 3, 1);
    assert_int_equal(run(LT_OP_sum, 1, sh, dt, (int64_t[]){0, 0}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 3, 4);
    assert_int_equal(run(LT_OP_sum, 1, sh, dt, (int64_t[]){7, 0}, 2, &out, NULL), LT_OK);
    assert_int_equal(out.ndim, 0);
    assert_int_equal(run(LT_OP_sum, 1, sh, dt, (int64_t[]){8, 0}, 2, &out, NULL), LT_ERR_ARG);
    assert_err_has("sum: [2, 3, 4] (f32)");
    assert_int_equal(run(LT_OP_sum, 1, sh, dt, NULL, 0, &out, NULL), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_argmax, 1, sh, dt, (int64_t[]){1, 0}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 4);
    assert_int_equal(run(LT_OP_argmin, 1, sh, dt, (int64_t[]){-1, 0}, 2, &out, NULL), LT_OK);
    assert_int_equal(out.ndim, 0);
    assert_int_equal(run(LT_OP_argmax, 1, sh, dt, (int64_t[]){3, 0}, 2, &out, NULL), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_argmax, 1, (lt_shape[]){SH(2, 0)}, dt, (int64_t[]){1, 0}, 2, &out, NULL),
                     LT_ERR_SHAPE);
}

static void test_matmul(void **st)
{
    (void)st;
    lt_dtype ff[2] = {LT_F32, LT_F32};
    lt_shape out;
    assert_int_equal(run(LT_OP_mm, 2, (lt_shape[]){SH(2, 3), SH(3, 5)}, ff, NULL, 0, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 5);
    assert_int_equal(run(LT_OP_mm, 2, (lt_shape[]){SH(2, 3), SH(4, 5)}, ff, NULL, 0, &out, NULL),
                     LT_ERR_SHAPE);
    assert_string_equal(lt_last_error(),
                        "mm: [2, 3] (f32) x [4, 5] (f32): inner dimensions 3 and 4 differ");
    assert_int_equal(run(LT_OP_mm, 2, (lt_shape[]){SH(2, 3), SH(3, 5)},
                         (lt_dtype[]){LT_I64, LT_I64}, NULL, 0, &out, NULL), LT_ERR_DTYPE);
    assert_err_has("[2, 3] (i64)");
    assert_int_equal(run(LT_OP_mm, 2, (lt_shape[]){SH(2, 3, 1), SH(3, 5)}, ff, NULL, 0, &out, NULL),
                     LT_ERR_SHAPE);
    assert_int_equal(run(LT_OP_bmm, 2, (lt_shape[]){SH(7, 2, 3), SH(7, 3, 5)}, ff, NULL, 0, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 7, 2, 5);
    assert_int_equal(run(LT_OP_bmm, 2, (lt_shape[]){SH(7, 2, 3), SH(6, 3, 5)}, ff, NULL, 0, &out, NULL),
                     LT_ERR_SHAPE);
    assert_err_has("batch");
}

static void test_conv(void **st)
{
    (void)st;
    lt_dtype ff[2] = {LT_F32, LT_F32};
    lt_shape out;
    /* x [2,4,10,9], w [6,2,3,3], stride 2/1, pad 1/0, dil 1/2, groups 2 */
    int64_t at[9] = {2, 1, 1, 0, 1, 2, 2, 0, 0};
    assert_int_equal(run(LT_OP_conv2d, 2, (lt_shape[]){SH(2, 4, 10, 9), SH(6, 2, 3, 3)}, ff, at, 7, &out, NULL), LT_OK);
    /* H: (10+2-2-1)/2+1 = 5; W: (9+0-4-1)/1+1 = 5 */
    ASSERT_SHAPE(out, 2, 6, 5, 5);
    assert_int_equal(run(LT_OP_conv2d, 2, (lt_shape[]){SH(2, 5, 10, 9), SH(6, 2, 3, 3)}, ff, at, 7, &out, NULL),
                     LT_ERR_SHAPE);
    assert_err_has("channels");
    assert_int_equal(run(LT_OP_conv2d, 2, (lt_shape[]){SH(2, 4, 10, 9), SH(6, 2, 3, 3)}, ff, at, 6, &out, NULL),
                     LT_ERR_ARG);
    assert_int_equal(run(LT_OP_conv2d, 2, (lt_shape[]){SH(1, 4, 2, 2), SH(6, 2, 3, 3)}, ff,
                         (int64_t[]){1, 1, 0, 0, 1, 1, 2}, 7, &out, NULL), LT_ERR_SHAPE);
    /* backward input: grad [2,6,5,5] -> [2,4,10,9] */
    int64_t bi[9] = {2, 1, 1, 0, 1, 2, 2, 10, 9};
    assert_int_equal(run(LT_OP_conv2d_backward_input, 2, (lt_shape[]){SH(2, 6, 5, 5), SH(6, 2, 3, 3)}, ff, bi, 9, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 4, 10, 9);
    int64_t bw[9] = {2, 1, 1, 0, 1, 2, 2, 3, 3};
    assert_int_equal(run(LT_OP_conv2d_backward_weight, 2, (lt_shape[]){SH(2, 6, 5, 5), SH(2, 4, 10, 9)}, ff, bw, 9, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 6, 2, 3, 3);
    assert_int_equal(run(LT_OP_conv2d_backward_weight, 2, (lt_shape[]){SH(2, 6, 4, 5), SH(2, 4, 10, 9)}, ff, bw, 9, &out, NULL),
                     LT_ERR_SHAPE);
}

static void test_pool(void **st)
{
    (void)st;
    lt_dtype f[2] = {LT_F32, LT_F32};
    lt_shape out;
    /* max 3x3 s2 p1, ceil off: (7+2-2-1)/2+1 = 4 */
    int64_t mp[9] = {3, 3, 2, 2, 1, 1, 1, 1, 0};
    assert_int_equal(run(LT_OP_max_pool2d, 1, (lt_shape[]){SH(1, 2, 7, 7)}, f, mp, 9, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 1, 2, 4, 4);
    /* ceil_mode: k2 s2 on 5 -> ceil(3/2)+1 = 3 (last window starts at 4 < 5) */
    int64_t c1[9] = {2, 2, 2, 2, 0, 0, 1, 1, 1};
    assert_int_equal(run(LT_OP_max_pool2d, 1, (lt_shape[]){SH(1, 1, 5, 5)}, f, c1, 9, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 1, 1, 3, 3);
    /* ceil_mode drop (values from torch 1.13): k2 s2 p1 on 5 -> 3 (not 4: the
       4th window would start in the right padding); k2 s3 p1 on 7 -> 3 */
    int64_t c2[9] = {2, 2, 2, 2, 1, 1, 1, 1, 1};
    assert_int_equal(run(LT_OP_max_pool2d, 1, (lt_shape[]){SH(1, 1, 5, 5)}, f, c2, 9, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 1, 1, 3, 3);
    int64_t c3[9] = {2, 2, 3, 3, 1, 1, 1, 1, 1};
    assert_int_equal(run(LT_OP_max_pool2d, 1, (lt_shape[]){SH(1, 1, 7, 10)}, f, c3, 9, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 1, 1, 3, 4);
    /* avg pool layout: {kh,kw,sh,sw,ph,pw,ceil,count_include_pad,divisor} */
    int64_t ap[9] = {2, 2, 2, 2, 0, 0, 0, 1, 0};
    assert_int_equal(run(LT_OP_avg_pool2d, 1, (lt_shape[]){SH(3, 5, 5)}, f, ap, 9, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 3, 2, 2);
    int64_t bad[9] = {2, 2, 2, 2, 2, 0, 1, 1, 0};
    assert_int_equal(run(LT_OP_max_pool2d, 1, (lt_shape[]){SH(1, 1, 5, 5)}, f, bad, 9, &out, NULL), LT_ERR_ARG);
    assert_err_has("max_pool2d: [1, 1, 5, 5] (f32)");
    /* backward: grad must match the forward output */
    assert_int_equal(run(LT_OP_max_pool2d_backward, 2, (lt_shape[]){SH(1, 2, 4, 4), SH(1, 2, 7, 7)}, f, mp, 9, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 1, 2, 7, 7);
    assert_int_equal(run(LT_OP_max_pool2d_backward, 2, (lt_shape[]){SH(1, 2, 3, 4), SH(1, 2, 7, 7)}, f, mp, 9, &out, NULL), LT_ERR_SHAPE);
    assert_int_equal(run(LT_OP_adaptive_avg_pool2d, 1, (lt_shape[]){SH(2, 3, 7, 7)}, f, (int64_t[]){1, 1}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 3, 1, 1);
    assert_int_equal(run(LT_OP_adaptive_avg_pool2d_backward, 2, (lt_shape[]){SH(2, 3, 1, 1), SH(2, 3, 7, 7)}, f, NULL, 0, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 3, 7, 7);
}

static void test_movement(void **st)
{
    (void)st;
    lt_dtype f[1] = {LT_F32};
    lt_shape out;
    lt_shape x[1] = {SH(2, 3, 4)};
    assert_int_equal(run(LT_OP_reshape, 1, x, f, (int64_t[]){6, 4}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 6, 4);
    assert_int_equal(run(LT_OP_reshape, 1, x, f, (int64_t[]){-1, 8}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 3, 8);
    assert_int_equal(run(LT_OP_reshape, 1, x, f, (int64_t[]){5, 5}, 2, &out, NULL), LT_ERR_SHAPE);
    assert_err_has("reshape: [2, 3, 4] (f32)");
    assert_err_has("25");
    assert_int_equal(run(LT_OP_permute, 1, x, f, (int64_t[]){2, 0, 1}, 3, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 4, 2, 3);
    assert_int_equal(run(LT_OP_permute, 1, x, f, (int64_t[]){2, 2, 1}, 3, &out, NULL), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_permute, 1, x, f, (int64_t[]){1, 0}, 2, &out, NULL), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_expand, 1, (lt_shape[]){SH(3, 1)}, f, (int64_t[]){2, -1, 5}, 3, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 3, 5);
    assert_int_equal(run(LT_OP_expand, 1, (lt_shape[]){SH(3, 2)}, f, (int64_t[]){3, 5}, 2, &out, NULL), LT_ERR_SHAPE);
    assert_int_equal(run(LT_OP_expand, 1, (lt_shape[]){SH(3, 1)}, f, (int64_t[]){-1, 3, 5}, 3, &out, NULL), LT_ERR_ARG);
    /* slice clamps: [-100, 100) step 2 on 5 -> 3 */
    assert_int_equal(run(LT_OP_slice, 1, (lt_shape[]){SH(4, 5)}, f, (int64_t[]){1, -100, 100, 2}, 4, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 4, 3);
    assert_int_equal(run(LT_OP_slice, 1, (lt_shape[]){SH(4, 5)}, f, (int64_t[]){1, -2, 5, 1}, 4, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 4, 2);
    assert_int_equal(run(LT_OP_slice, 1, (lt_shape[]){SH(4, 5)}, f, (int64_t[]){1, 4, 2, 1}, 4, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 4, 0);
    assert_int_equal(run(LT_OP_slice, 1, (lt_shape[]){SH(4, 5)}, f, (int64_t[]){1, 0, 5, 0}, 4, &out, NULL), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_slice, 1, (lt_shape[]){SH(4, 5)}, f, (int64_t[]){1, 0, 5}, 3, &out, NULL), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_select, 1, x, f, (int64_t[]){1, 2}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 4);
    assert_int_equal(run(LT_OP_select, 1, x, f, (int64_t[]){1, 3}, 2, &out, NULL), LT_ERR_ARG);
    assert_err_has("index 3");
    assert_int_equal(run(LT_OP_diagonal, 1, x, f, (int64_t[]){1, 1, 2}, 3, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 3);   /* min(3, 4-1) = 3 */
    assert_int_equal(run(LT_OP_diagonal, 1, x, f, (int64_t[]){-2, 1, 2}, 3, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 1);   /* min(3-2, 4) = 1 */
    assert_int_equal(run(LT_OP_diagonal, 1, x, f, (int64_t[]){0, 1, 1}, 3, &out, NULL), LT_ERR_ARG);
    /* as_strided over 24 elements: sizes [3, 2] strides [8, 1] offset 6 -> max 6+16+1 = 23 ok */
    assert_int_equal(run(LT_OP_as_strided, 1, x, f, (int64_t[]){2, 3, 2, 8, 1, 6}, 6, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 3, 2);
    assert_int_equal(run(LT_OP_as_strided, 1, x, f, (int64_t[]){2, 3, 2, 8, 1, 7}, 6, &out, NULL), LT_ERR_SHAPE);
    assert_err_has("24");
    assert_int_equal(run(LT_OP_as_strided, 1, x, f, (int64_t[]){2, 3, 2, 8, 1}, 5, &out, NULL), LT_ERR_ARG);
}

static void test_scatter_cat_index(void **st)
{
    (void)st;
    lt_shape out;
    lt_dtype ff[3] = {LT_F32, LT_F32, LT_F32};
    assert_int_equal(run(LT_OP_slice_scatter, 2, (lt_shape[]){SH(4, 5), SH(4, 2)}, ff, (int64_t[]){1, 1, 5, 2}, 4, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 4, 5);
    assert_int_equal(run(LT_OP_slice_scatter, 2, (lt_shape[]){SH(4, 5), SH(4, 3)}, ff, (int64_t[]){1, 1, 5, 2}, 4, &out, NULL), LT_ERR_SHAPE);
    assert_err_has("[4, 2]");
    assert_int_equal(run(LT_OP_select_scatter, 2, (lt_shape[]){SH(4, 5), SH(4)}, ff, (int64_t[]){1, 0}, 2, &out, NULL), LT_OK);
    assert_int_equal(run(LT_OP_diagonal_scatter, 2, (lt_shape[]){SH(4, 5), SH(4)}, ff, (int64_t[]){0, 0, 1}, 3, &out, NULL), LT_OK);
    assert_int_equal(run(LT_OP_as_strided_scatter, 2, (lt_shape[]){SH(4, 5), SH(2, 2)}, ff, (int64_t[]){2, 2, 2, 5, 1, 0}, 6, &out, NULL), LT_OK);
    /* cat */
    assert_int_equal(run(LT_OP_cat, 3, (lt_shape[]){SH(2, 3), SH(2, 4), SH(0)}, ff, (int64_t[]){1}, 1, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 7);
    assert_int_equal(run(LT_OP_cat, 2, (lt_shape[]){SH(2, 3), SH(3, 4)}, ff, (int64_t[]){1}, 1, &out, NULL), LT_ERR_SHAPE);
    assert_err_has("cat: [2, 3] (f32), [3, 4] (f32)");
    assert_int_equal(run(LT_OP_cat, 1, (lt_shape[]){SH(2, 3)}, ff, (int64_t[]){0}, 1, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 3);
    /* index ops */
    lt_dtype fi[2] = {LT_F32, LT_I64};
    assert_int_equal(run(LT_OP_index_select, 2, (lt_shape[]){SH(5, 3), SH(7)}, fi, (int64_t[]){0}, 1, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 7, 3);
    assert_int_equal(run(LT_OP_index_select, 2, (lt_shape[]){SH(5, 3), SH(7)}, ff, (int64_t[]){0}, 1, &out, NULL), LT_ERR_DTYPE);
    assert_int_equal(run(LT_OP_gather, 2, (lt_shape[]){SH(5, 3), SH(5, 1)}, fi, (int64_t[]){1}, 1, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 5, 1);
    assert_int_equal(run(LT_OP_gather, 2, (lt_shape[]){SH(5, 3), SH(6, 1)}, fi, (int64_t[]){1}, 1, &out, NULL), LT_ERR_SHAPE);
    assert_int_equal(run(LT_OP_scatter_add, 3, (lt_shape[]){SH(5, 3), SH(5, 1), SH(5, 1)},
                         (lt_dtype[]){LT_F32, LT_I64, LT_F32}, (int64_t[]){1}, 1, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 5, 3);
    assert_int_equal(run(LT_OP_embedding_backward, 2, (lt_shape[]){SH(4, 6, 8), SH(4, 6)}, fi, (int64_t[]){100, -1}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 100, 8);
    lt_dtype adt;
    assert_int_equal(run(LT_OP_arange, 2, (lt_shape[]){S0, S0}, (lt_dtype[]){LT_I64, LT_I64}, (int64_t[]){LT_I64, 9}, 2, &out, &adt), LT_OK);
    ASSERT_SHAPE(out, 9);
    assert_int_equal(adt, LT_I64);
}

static void test_loss_rand_collective(void **st)
{
    (void)st;
    lt_shape out;
    lt_dtype fi[3] = {LT_F32, LT_I64, LT_F32};
    assert_int_equal(run(LT_OP_nll_loss, 2, (lt_shape[]){SH(8, 10), SH(8)}, fi, (int64_t[]){1, -100}, 2, &out, NULL), LT_OK);
    assert_int_equal(out.ndim, 0);
    assert_int_equal(run(LT_OP_nll_loss, 3, (lt_shape[]){SH(8, 10), SH(8), SH(10)}, fi, (int64_t[]){0, -100}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 8);
    assert_int_equal(run(LT_OP_nll_loss, 2, (lt_shape[]){SH(8, 10), SH(7)}, fi, (int64_t[]){1, -100}, 2, &out, NULL), LT_ERR_SHAPE);
    assert_int_equal(run(LT_OP_nll_loss, 2, (lt_shape[]){SH(8, 10), SH(8)}, (lt_dtype[]){LT_F32, LT_I32}, (int64_t[]){1, -100}, 2, &out, NULL), LT_ERR_DTYPE);
    assert_int_equal(run(LT_OP_nll_loss, 1, (lt_shape[]){SH(8, 10)}, fi, (int64_t[]){1, -100}, 2, &out, NULL), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_nll_loss_backward, 3, (lt_shape[]){S0, SH(8, 10), SH(8)},
                         (lt_dtype[]){LT_F32, LT_F32, LT_I64}, (int64_t[]){1, -100}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 8, 10);
    lt_dtype rdt;
    assert_int_equal(run(LT_OP_rand_uniform, 1, (lt_shape[]){S0}, (lt_dtype[]){LT_I64}, (int64_t[]){LT_F32, 2, 3, 4}, 4, &out, &rdt), LT_OK);
    ASSERT_SHAPE(out, 3, 4);
    assert_int_equal(rdt, LT_F32);
    assert_int_equal(run(LT_OP_rand_uniform, 1, (lt_shape[]){S0}, (lt_dtype[]){LT_I64}, (int64_t[]){LT_F32, 2, 3}, 3, &out, &rdt), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_rand_normal, 1, (lt_shape[]){S0}, (lt_dtype[]){LT_I64}, (int64_t[]){LT_I64, 1, 3}, 3, &out, &rdt), LT_ERR_DTYPE);
    /* an optional counter offset: an integer 0-dim tensor */
    assert_int_equal(run(LT_OP_rand_normal, 2, (lt_shape[]){S0, S0}, (lt_dtype[]){LT_I64, LT_I64}, (int64_t[]){LT_F64, 1, 3}, 3, &out, &rdt), LT_OK);
    ASSERT_SHAPE(out, 3);
    assert_int_equal(run(LT_OP_rand_uniform, 2, (lt_shape[]){S0, SH(2)}, (lt_dtype[]){LT_I64, LT_I64}, (int64_t[]){LT_F32, 1, 3}, 3, &out, &rdt), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_rand_uniform, 2, (lt_shape[]){S0, S0}, (lt_dtype[]){LT_I64, LT_F32}, (int64_t[]){LT_F32, 1, 3}, 3, &out, &rdt), LT_ERR_ARG);
    setenv("LAZYTPU_WORLD_SIZE", "4", 1);
    assert_int_equal(run(LT_OP_all_gather, 1, (lt_shape[]){SH(3, 5)}, fi, (int64_t[]){0}, 1, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 12, 5);
    assert_int_equal(run(LT_OP_reduce_scatter, 1, (lt_shape[]){SH(8, 5)}, fi, (int64_t[]){LT_REDUCE_SUM, 0}, 2, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 2, 5);
    assert_int_equal(run(LT_OP_reduce_scatter, 1, (lt_shape[]){SH(6, 5)}, fi, (int64_t[]){LT_REDUCE_SUM, 0}, 2, &out, NULL), LT_ERR_SHAPE);
    assert_err_has("world size 4");
    unsetenv("LAZYTPU_WORLD_SIZE");
    assert_int_equal(run(LT_OP_all_gather, 1, (lt_shape[]){SH(3, 5)}, fi, (int64_t[]){0}, 1, &out, NULL), LT_OK);
    ASSERT_SHAPE(out, 3, 5);
    assert_int_equal(run(LT_OP_softmax, 1, (lt_shape[]){SH(3, 5)}, fi, (int64_t[]){1}, 1, &out, NULL), LT_OK);
    assert_int_equal(run(LT_OP_softmax, 1, (lt_shape[]){SH(3, 5)}, fi, (int64_t[]){2}, 1, &out, NULL), LT_ERR_ARG);
    assert_int_equal(run(LT_OP_softmax, 1, (lt_shape[]){SH(3, 5)}, fi, NULL, 0, &out, NULL), LT_ERR_ARG);
}

static void test_every_op_has_rules(void **st)
{
    (void)st;
    for (int op = 0; op < LT_NUM_OPS; op++) assert_non_null(lt_op_shape_rule((lt_op)op));
    /* leaves are not traceable */
    assert_int_equal(run(LT_OP_data, 0, NULL, NULL, NULL, 0, NULL, NULL), LT_ERR_ARG);
}

int main(void)
{
    S0 = lt_shape_make(0, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_dtype_rules),
        cmocka_unit_test(test_reduce),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_movement),
        cmocka_unit_test(test_scatter_cat_index),
        cmocka_unit_test(test_loss_rand_collective),
        cmocka_unit_test(test_every_op_has_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
