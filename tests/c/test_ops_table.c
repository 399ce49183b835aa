/* tests/c/test_ops_table.c — the op table's columns (lazy/ops.def read through
 * lazy/ops.c): consistency of every row, the properties the passes read
 * (cost, checks, ident, input counts, SPMD rule class, kernel map) on the
 * ops whose behaviour other tests rely on, and the input-count errors of
 * lt_trace. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "lazytpu.h"
#include "ops.h"
#include "shape.h"
#include "spmd.h"
#include "kernels/kernel.h"

static int elementwise(lt_op op)
{
    lt_op_kind k = lt_op_kind_of(op);
    return k == LT_KIND_UNARY || k == LT_KIND_BINARY || k == LT_KIND_TERNARY;
}

/* Every row: names round-trip, elementwise rows are fused EW ops of the
 * kind's arity, every op the compiler does not run itself has a kernel,
 * and identities sit on binary ops or reductions only. */
static void test_rows_consistent(void **st)
{
    (void)st;
    for (int i = 0; i < LT_NUM_OPS; i++) {
        lt_op op = (lt_op)i;
        const char *name = lt_op_name(op);
        assert_int_equal(lt_op_from_name(name), i);
        assert_non_null(lt_op_shape_rule(op));
        lt_op_kind k = lt_op_kind_of(op);
        if (elementwise(op)) {
            int want = k == LT_KIND_UNARY ? 1 : k == LT_KIND_BINARY ? 2 : 3;
            if (lt_op_arity(op) != want)
                fail_msg("%s: arity %d for its kind", name, lt_op_arity(op));
            if (lt_spmd_rule_of(op) != LT_SPMD_EW)
                fail_msg("%s: elementwise with spmd rule %s", name,
                         lt_spmd_rule_name(lt_spmd_rule_of(op)));
            assert_null(lt_kernel_for(op));
        } else if (k != LT_KIND_LEAF && k != LT_KIND_REDUCE) {
            if (!lt_kernel_for(op))
                fail_msg("%s: no kernel", name);
        }
        if (lt_op_cheap(op) && !elementwise(op))
            fail_msg("%s: cheap but not elementwise", name);
        lt_op_ident id = lt_op_ident_of(op);
        if (id != LT_IDENT_none && k != LT_KIND_BINARY && k != LT_KIND_REDUCE)
            fail_msg("%s: an identity on a %d-kind op", name, (int)k);
        if ((id == LT_IDENT_zero_r || id == LT_IDENT_one_r) && k != LT_KIND_BINARY)
            fail_msg("%s: a right identity on a non-binary op", name);
        if (lt_op_checks_of(op) == LT_CHECKS_divisor && k != LT_KIND_BINARY)
            fail_msg("%s: divisor check on a non-binary op", name);
    }
    assert_string_equal(lt_op_name((lt_op)LT_NUM_OPS), "?");
    assert_int_equal(lt_op_arity((lt_op)LT_NUM_OPS), 0);
    assert_null(lt_kernel_for((lt_op)LT_NUM_OPS));
    assert_null(lt_op_shape_rule((lt_op)LT_NUM_OPS));
    assert_int_equal(lt_spmd_rule_of((lt_op)LT_NUM_OPS), LT_SPMD_OPAQUE);
    assert_int_equal(lt_op_cheap((lt_op)-1), 0);
}

/* The values the passes relied on when they were switches (fusion's
 * recompute set, CSE's identities, the reductions' accumulators, trace's
 * frame capture, the integer-division check, the SPMD overrides). */
static void test_properties_of_known_ops(void **st)
{
    (void)st;
    static const lt_op cheap[] = {
        LT_OP_neg, LT_OP_abs, LT_OP_relu, LT_OP_sign, LT_OP_copy, LT_OP_cast,
        LT_OP_logical_not, LT_OP_isnan, LT_OP_add, LT_OP_sub, LT_OP_mul, LT_OP_maximum,
        LT_OP_minimum, LT_OP_eq, LT_OP_ne, LT_OP_lt, LT_OP_le, LT_OP_gt, LT_OP_ge,
        LT_OP_logical_and, LT_OP_logical_or, LT_OP_logical_xor, LT_OP_where, LT_OP_clamp,
        LT_OP_lerp};
    for (size_t i = 0; i < sizeof cheap / sizeof *cheap; i++)
        if (!lt_op_cheap(cheap[i])) fail_msg("%s: not cheap", lt_op_name(cheap[i]));
    static const lt_op costly[] = {LT_OP_exp, LT_OP_div, LT_OP_gelu, LT_OP_opt_barrier,
                                   LT_OP_sum, LT_OP_mm, LT_OP_data};
    for (size_t i = 0; i < sizeof costly / sizeof *costly; i++)
        if (lt_op_cheap(costly[i])) fail_msg("%s: cheap", lt_op_name(costly[i]));

    int n_index = 0, n_div = 0;
    for (int i = 0; i < LT_NUM_OPS; i++) {
        n_index += lt_op_checks_of((lt_op)i) == LT_CHECKS_index;
        n_div += lt_op_checks_of((lt_op)i) == LT_CHECKS_divisor;
    }
    static const lt_op index_ops[] = {
        LT_OP_index_select, LT_OP_gather, LT_OP_scatter_add, LT_OP_scatter,
        LT_OP_scatter_reduce, LT_OP_embedding_backward, LT_OP_nll_loss,
        LT_OP_nll_loss_backward};
    for (size_t i = 0; i < sizeof index_ops / sizeof *index_ops; i++)
        assert_int_equal(lt_op_checks_of(index_ops[i]), LT_CHECKS_index);
    assert_int_equal(n_index, (int)(sizeof index_ops / sizeof *index_ops));
    assert_int_equal(lt_op_checks_of(LT_OP_floor_divide), LT_CHECKS_divisor);
    assert_int_equal(lt_op_checks_of(LT_OP_remainder), LT_CHECKS_divisor);
    assert_int_equal(lt_op_checks_of(LT_OP_fmod), LT_CHECKS_divisor);
    assert_int_equal(n_div, 3);
    assert_int_equal(lt_op_checks_of(LT_OP_div), LT_CHECKS_none);   /* true division: inf */

    assert_int_equal(lt_op_ident_of(LT_OP_add), LT_IDENT_zero);
    assert_int_equal(lt_op_ident_of(LT_OP_sub), LT_IDENT_zero_r);
    assert_int_equal(lt_op_ident_of(LT_OP_mul), LT_IDENT_one);
    assert_int_equal(lt_op_ident_of(LT_OP_div), LT_IDENT_one_r);
    assert_int_equal(lt_op_ident_of(LT_OP_pow), LT_IDENT_none);
    assert_int_equal(lt_op_ident_of(LT_OP_sum), LT_IDENT_zero);
    assert_int_equal(lt_op_ident_of(LT_OP_mean), LT_IDENT_zero);
    assert_int_equal(lt_op_ident_of(LT_OP_prod), LT_IDENT_one);
    assert_int_equal(lt_op_ident_of(LT_OP_all), LT_IDENT_one);
    assert_int_equal(lt_op_ident_of(LT_OP_any), LT_IDENT_zero);
    assert_int_equal(lt_op_ident_of(LT_OP_amax), LT_IDENT_lowest);
    assert_int_equal(lt_op_ident_of(LT_OP_amin), LT_IDENT_highest);

    /* rule classes other than the kind's natural one */
    static const lt_op opaque[] = {
        LT_OP_diagonal, LT_OP_as_strided, LT_OP_gather, LT_OP_scatter_add, LT_OP_scatter,
        LT_OP_scatter_reduce, LT_OP_arange, LT_OP_embedding_backward,
        LT_OP_conv2d_backward_weight, LT_OP_conv3d_backward_weight,
        LT_OP_max_pool2d_backward_idx, LT_OP_layer_norm_backward_affine, LT_OP_cat,
        LT_OP_nll_loss, LT_OP_rand_uniform, LT_OP_view_as_real, LT_OP_inv, LT_OP_slice_scatter};
    for (size_t i = 0; i < sizeof opaque / sizeof *opaque; i++)
        if (lt_spmd_rule_of(opaque[i]) != LT_SPMD_OPAQUE)
            fail_msg("%s: rule %s", lt_op_name(opaque[i]),
                     lt_spmd_rule_name(lt_spmd_rule_of(opaque[i])));
    assert_int_equal(lt_spmd_rule_of(LT_OP_index_select), LT_SPMD_GATHER);
    assert_int_equal(lt_spmd_rule_of(LT_OP_max_pool2d), LT_SPMD_CONV);
    assert_int_equal(lt_spmd_rule_of(LT_OP_cumsum), LT_SPMD_NORM);
    assert_int_equal(lt_spmd_rule_of(LT_OP_argmax), LT_SPMD_REDUCE);
    assert_int_equal(lt_spmd_rule_of(LT_OP_all_gather), LT_SPMD_COLLECTIVE);
    assert_int_equal(lt_spmd_rule_of(LT_OP_bmm), LT_SPMD_CONTRACT);
    assert_int_equal(lt_spmd_rule_of(LT_OP_permute), LT_SPMD_VIEW);

    /* the kernel map: one family per kernel column */
    assert_ptr_equal(lt_kernel_for(LT_OP_mm), lt_kernel_matmul);
    assert_ptr_equal(lt_kernel_for(LT_OP_layer_norm), lt_kernel_lnorm);
    assert_ptr_equal(lt_kernel_for(LT_OP_reshape), lt_kernel_view);
    assert_ptr_equal(lt_kernel_for(LT_OP_isin), lt_kernel_search);
    assert_null(lt_kernel_for(LT_OP_sum));
    assert_null(lt_kernel_for(LT_OP_argmax));
    assert_null(lt_kernel_for(LT_OP_data));
}

/* in_min / in_max: lt_trace refuses other input counts, naming the op. */
static void test_input_counts(void **st)
{
    (void)st;
    assert_int_equal(lt_op_arity(LT_OP_cat), -1);
    assert_int_equal(lt_op_arity(LT_OP_nll_loss), -1);
    assert_int_equal(lt_op_arity(LT_OP_where), 3);
    assert_int_equal(lt_op_check_inputs(LT_OP_cat, 1), LT_OK);
    assert_int_equal(lt_op_check_inputs(LT_OP_cat, 40), LT_OK);
    assert_int_equal(lt_op_check_inputs(LT_OP_nll_loss, 3), LT_OK);
    assert_int_equal(lt_op_check_inputs(LT_OP_layer_norm_backward, 5), LT_OK);

    assert_int_equal(lt_init(), LT_OK);
    lt_tensor *x;
    assert_int_equal(lt_scalar(0, 2.0, LT_F32, 0, &x), LT_OK);
    lt_tensor *in[5] = {x, x, x, x, x}, *out = NULL;
    assert_int_equal(lt_trace(LT_OP_add, in, 3, NULL, &out), LT_ERR_ARG);
    assert_string_equal(lt_last_error(), "add: takes 2 inputs, got 3");
    assert_int_equal(lt_trace(LT_OP_nll_loss, in, 4, NULL, &out), LT_ERR_ARG);
    assert_string_equal(lt_last_error(), "nll_loss: takes 2 or 3 inputs, got 4");
    assert_int_equal(lt_trace(LT_OP_nll_loss_backward, in, 2, NULL, &out), LT_ERR_ARG);
    assert_string_equal(lt_last_error(), "nll_loss_backward: takes 3 or 4 inputs, got 2");
    assert_int_equal(lt_trace(LT_OP_layer_norm, in, 4, NULL, &out), LT_ERR_ARG);
    assert_string_equal(lt_last_error(), "layer_norm: takes 1 to 3 inputs, got 4");
    assert_int_equal(lt_op_check_inputs(LT_OP_cat, 0), LT_ERR_ARG);
    assert_string_equal(lt_last_error(), "cat: needs at least 1 input, got 0");
    assert_null(out);
    lt_tensor_release(x);
    lt_shutdown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_consistent),
        cmocka_unit_test(test_properties_of_known_ops),
        cmocka_unit_test(test_input_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
