/* tests/c/test_dtype.c — dtype promotion (incl. wrapped numbers and 0-dim
 * tiers), bf16 rounding corner cases, conversions, shape helpers, op table. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <float.h>
#include <string.h>
#include <stdlib.h>
#include "lazytpu.h"
#include "shape.h"

static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void test_sizes_names(void **st)
{
    (void)st;
    assert_int_equal(lt_dtype_size(LT_F32), 4);
    assert_int_equal(lt_dtype_size(LT_BF16), 2);
    assert_int_equal(lt_dtype_size(LT_F64), 8);
    assert_int_equal(lt_dtype_size(LT_I64), 8);
    assert_int_equal(lt_dtype_size(LT_I32), 4);
    assert_int_equal(lt_dtype_size(LT_BOOL), 1);
    assert_int_equal(lt_dtype_size(LT_NUM_DTYPES), 0);
    assert_string_equal(lt_dtype_name(LT_BF16), "bf16");
    assert_string_equal(lt_dtype_name((lt_dtype)99), "?");
    assert_true(lt_dtype_is_float(LT_BF16));
    assert_false(lt_dtype_is_float(LT_I64));
}

static void test_promote_table(void **st)
{
    (void)st;
    /* expected PyTorch promote_types, row/col order F32 BF16 F64 I64 I32 BOOL */
    static const lt_dtype E[6][6] = {
        /* F32 */ {LT_F32, LT_F32, LT_F64, LT_F32, LT_F32, LT_F32},
        /* BF16 */{LT_F32, LT_BF16, LT_F64, LT_BF16, LT_BF16, LT_BF16},
        /* F64 */ {LT_F64, LT_F64, LT_F64, LT_F64, LT_F64, LT_F64},
        /* I64 */ {LT_F32, LT_BF16, LT_F64, LT_I64, LT_I64, LT_I64},
        /* I32 */ {LT_F32, LT_BF16, LT_F64, LT_I64, LT_I32, LT_I32},
        /* BOOL */{LT_F32, LT_BF16, LT_F64, LT_I64, LT_I32, LT_BOOL},
    };
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 6; b++)
            assert_int_equal(lt_dtype_promote((lt_dtype)a, (lt_dtype)b), E[a][b]);
}

static lt_shape s0, s1;

static lt_dtype rt2(lt_dtype a, int ka, lt_dtype b, int kb)
{
    /* k: 0 = dimensioned tensor, 1 = zero-dim tensor, 2 = wrapped number */
    lt_operand o[2] = {
        {ka == 0 ? &s1 : &s0, a, ka == 2},
        {kb == 0 ? &s1 : &s0, b, kb == 2},
    };
    return lt_result_type(o, 2);
}

static void test_result_type_tiers(void **st)
{
    (void)st;
    s0 = lt_shape_make(0, NULL);
    s1 = lt_shape_make(1, (int64_t[]){3});
    /* wrapped numbers */
    assert_int_equal(rt2(LT_F32, 0, LT_F64, 2), LT_F32);   /* f32 + 2.5 */
    assert_int_equal(rt2(LT_BF16, 0, LT_F64, 2), LT_BF16);
    assert_int_equal(rt2(LT_I32, 0, LT_F64, 2), LT_F32);   /* int + 2.5: default dtype */
    assert_int_equal(rt2(LT_I64, 0, LT_F64, 2), LT_F32);
    assert_int_equal(rt2(LT_I32, 0, LT_I64, 2), LT_I32);   /* int32 + 3 */
    assert_int_equal(rt2(LT_BOOL, 0, LT_I64, 2), LT_I64);  /* bool + 3 */
    assert_int_equal(rt2(LT_BOOL, 0, LT_BOOL, 2), LT_BOOL);
    assert_int_equal(rt2(LT_F64, 0, LT_F64, 2), LT_F64);
    /* zero-dim tensors */
    assert_int_equal(rt2(LT_F32, 0, LT_F64, 1), LT_F32);
    assert_int_equal(rt2(LT_I32, 0, LT_F64, 1), LT_F64);
    assert_int_equal(rt2(LT_I32, 0, LT_I64, 1), LT_I32);
    assert_int_equal(rt2(LT_BOOL, 0, LT_I32, 1), LT_I32);
    assert_int_equal(rt2(LT_I64, 1, LT_F64, 2), LT_F32);
    assert_int_equal(rt2(LT_F64, 1, LT_F32, 1), LT_F64);
    assert_int_equal(rt2(LT_I32, 1, LT_I64, 2), LT_I32);
    /* dimensioned */
    assert_int_equal(rt2(LT_BF16, 0, LT_F32, 0), LT_F32);
    assert_int_equal(rt2(LT_I64, 0, LT_BF16, 0), LT_BF16);
    /* three tiers at once: i32 tensor, f64 zero-dim, wrapped float -> f64 */
    lt_operand o[3] = {{&s1, LT_I32, 0}, {&s0, LT_F64, 0}, {&s0, LT_F64, 1}};
    assert_int_equal(lt_result_type(o, 3), LT_F64);
    /* bool tensor, i32 zero-dim, wrapped float -> f32 */
    lt_operand q[3] = {{&s1, LT_BOOL, 0}, {&s0, LT_I32, 0}, {&s0, LT_F64, 1}};
    assert_int_equal(lt_result_type(q, 3), LT_F32);
}

static void test_bf16_rne(void **st)
{
    (void)st;
    assert_int_equal(lt_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(lt_f32_to_bf16(-2.0f), 0xc000);
    /* exact ties: round to even */
    assert_int_equal(lt_f32_to_bf16(from_bits(0x3f808000)), 0x3f80);  /* even stays */
    assert_int_equal(lt_f32_to_bf16(from_bits(0x3f818000)), 0x3f82);  /* odd rounds up */
    assert_int_equal(lt_f32_to_bf16(from_bits(0xbf818000)), 0xbf82);
    /* just above / below a tie */
    assert_int_equal(lt_f32_to_bf16(from_bits(0x3f808001)), 0x3f81);
    assert_int_equal(lt_f32_to_bf16(from_bits(0x3f807fff)), 0x3f80);
    /* infinities and overflow */
    assert_int_equal(lt_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(lt_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(lt_f32_to_bf16(FLT_MAX), 0x7f80);
    assert_int_equal(lt_f32_to_bf16(from_bits(0x7f7f7fff)), 0x7f7f);
    /* NaN stays NaN, even when only the low payload bits are set */
    float n1 = lt_bf16_to_f32(lt_f32_to_bf16(NAN));
    float n2 = lt_bf16_to_f32(lt_f32_to_bf16(from_bits(0x7f800001)));
    float n3 = lt_bf16_to_f32(lt_f32_to_bf16(from_bits(0xff800001)));
    assert_true(isnan(n1));
    assert_true(isnan(n2));
    assert_true(isnan(n3));
    assert_true(signbit(n3));
    /* signed zero, subnormals */
    assert_int_equal(lt_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(lt_f32_to_bf16(from_bits(0x00018000)), 0x0002);
    assert_int_equal(lt_f32_to_bf16(from_bits(0x00008000)), 0x0000);
    /* round trip is exact for bf16 values */
    for (uint32_t h = 0; h < 0x10000; h += 7) {
        float f = lt_bf16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(lt_f32_to_bf16(f), h);
    }
    assert_int_equal(bits(lt_bf16_to_f32(0x3f80)), 0x3f800000);
}

/* Nearest-even bf16 by a different method: compare the two neighbours. */
static uint16_t bf16_ref(float f)
{
    uint32_t u = bits(f);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)lt_bf16_to_f32(lo) - (double)f);
    double dh = fabs((double)lt_bf16_to_f32(hi) - (double)f);
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

static void test_convert_fast_paths(void **st)
{
    (void)st;
    enum { N = 4099 };
    float *src = malloc(N * sizeof *src), *back = malloc(N * sizeof *back);
    uint16_t *h = malloc(N * sizeof *h);
    srand(7);
    for (int i = 0; i < N; i++)
        src[i] = ((float)rand() / RAND_MAX - 0.5f) * powf(2.0f, (float)(rand() % 40 - 20));
    src[0] = INFINITY; src[1] = NAN; src[2] = -0.0f;
    lt_convert(src, LT_F32, h, LT_BF16, N);
    for (int i = 3; i < N; i++) assert_int_equal(h[i], bf16_ref(src[i]));
    for (int i = 0; i < N; i++) assert_int_equal(h[i], lt_f32_to_bf16(src[i]));
    lt_convert(h, LT_BF16, back, LT_F32, N);
    for (int i = 3; i < N; i++) {
        assert_true(fabsf(back[i] - src[i]) <= fabsf(src[i]) * (1.0f / 256));
    }
    assert_true(isnan(back[1]));
    free(src); free(back); free(h);
}

static void test_convert_general(void **st)
{
    (void)st;
    double d[6] = {-2.7, 2.7, NAN, 0.0, 1e30, -0.5};
    int64_t i64[6];
    lt_convert(d, LT_F64, i64, LT_I64, 6);
    assert_int_equal(i64[0], -2);
    assert_int_equal(i64[1], 2);
    assert_int_equal(i64[2], 0);
    assert_int_equal(i64[3], 0);
    assert_true(i64[4] == INT64_MAX);
    assert_int_equal(i64[5], 0);
    uint8_t b[6];
    lt_convert(d, LT_F64, b, LT_BOOL, 6);
    assert_int_equal(b[0], 1); assert_int_equal(b[2], 1);
    assert_int_equal(b[3], 0); assert_int_equal(b[5], 1);
    int64_t big[2] = {(1LL << 53) + 1, -3};
    int64_t out[2];
    int32_t i32[2];
    lt_convert(big, LT_I64, out, LT_I64, 2);
    assert_true(out[0] == (1LL << 53) + 1);
    lt_convert(big + 1, LT_I64, i32, LT_I32, 1);
    assert_int_equal(i32[0], -3);
    float f[2];
    lt_convert(i32, LT_I32, f, LT_F32, 1);
    assert_true(f[0] == -3.0f);
    uint16_t hb[1];
    double x = 1.00390625;   /* 1 + 2^-8: tie in bf16 -> 1.0 */
    lt_convert(&x, LT_F64, hb, LT_BF16, 1);
    assert_int_equal(hb[0], 0x3f80);
}

static void test_shape_helpers_and_ops(void **st)
{
    (void)st;
    lt_shape s = lt_shape_make(2, (int64_t[]){2, 3});
    assert_int_equal(lt_shape_numel(&s), 6);
    char buf[64];
    assert_string_equal(lt_shape_str(&s, buf, sizeof buf), "[2, 3]");
    lt_shape z = lt_shape_make(0, NULL);
    assert_string_equal(lt_shape_str(&z, buf, sizeof buf), "[]");
    assert_int_equal(lt_shape_numel(&z), 1);
    char tiny[4];
    lt_shape_str(&s, tiny, sizeof tiny);
    assert_int_equal(strlen(tiny), 3);
    assert_false(lt_shape_equal(&s, &z));
    assert_string_equal(lt_op_name(LT_OP_add), "add");
    assert_int_equal(lt_op_from_name("matmul"), -1);
    assert_int_equal(lt_op_from_name("mm"), LT_OP_mm);
    assert_int_equal(lt_op_arity(LT_OP_cat), -1);
    assert_int_equal(lt_op_arity(LT_OP_where), 3);
    assert_int_equal(lt_op_kind_of(LT_OP_sum), LT_KIND_REDUCE);
    assert_string_equal(lt_op_name((lt_op)LT_NUM_OPS), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_names),
        cmocka_unit_test(test_promote_table),
        cmocka_unit_test(test_result_type_tiers),
        cmocka_unit_test(test_bf16_rne),
        cmocka_unit_test(test_convert_fast_paths),
        cmocka_unit_test(test_convert_general),
        cmocka_unit_test(test_shape_helpers_and_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
