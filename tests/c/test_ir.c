/* tests/c/test_ir.c — node hashes and iterative release. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "lazytpu.h"
#include "ir.h"

static lt_shape SH2(int64_t a, int64_t b) { return lt_shape_make(2, (int64_t[]){a, b}); }

static lt_node *leaf(lt_shape s, lt_dtype dt)
{
    return lt_node_new_data(NULL, &s, dt, 0);
}

static lt_node *un(lt_op op, lt_node *x, const lt_attrs *a)
{
    return lt_node_new(op, &x, 1, a, &x->shape, (lt_dtype)x->dtype, 0, 0);
}

static void test_equal_structures_equal_hashes(void **st)
{
    (void)st;
    lt_node *a = leaf(SH2(2, 3), LT_F32), *b = leaf(SH2(2, 3), LT_F32);
    assert_true(a->hash == b->hash && a->dag_hash == b->dag_hash);
    lt_node *ea = un(LT_OP_exp, a, NULL), *eb = un(LT_OP_exp, b, NULL);
    assert_true(ea->hash == eb->hash);
    assert_true(ea->dag_hash == eb->dag_hash);
    assert_true(ea->struct_hash == eb->struct_hash);
    /* op matters; operand order matters for the DAG hash only */
    lt_node *la = un(LT_OP_log, a, NULL);
    assert_true(la->hash != ea->hash);
    lt_node *in1[2] = {ea, la}, *in2[2] = {la, ea};
    lt_node *s1 = lt_node_new(LT_OP_sub, in1, 2, NULL, &a->shape, LT_F32, 0, 0);
    lt_node *s2 = lt_node_new(LT_OP_sub, in2, 2, NULL, &a->shape, LT_F32, 0, 0);
    assert_true(s1->hash == s2->hash);
    assert_true(s1->dag_hash != s2->dag_hash);
    assert_true(s1->struct_hash != s2->struct_hash);
    lt_node *all[] = {a, b, ea, eb, la, s1, s2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_node_release(all[i]);
}

static void test_attrs_shapes_dtypes_differ(void **st)
{
    (void)st;
    lt_node *a = leaf(SH2(2, 3), LT_F32), *c = leaf(SH2(4, 3), LT_F32);
    lt_node *d = leaf(SH2(2, 3), LT_BF16);
    assert_true(a->hash != c->hash);
    assert_true(a->hash != d->hash);
    /* struct hash ignores shapes, not dtypes */
    assert_true(a->struct_hash == c->struct_hash);
    assert_true(a->struct_hash != d->struct_hash);
    lt_attrs k0 = {.n = 2, .i = {1, 0}}, k1 = {.n = 2, .i = {1, 1}}, k2 = {.n = 2, .i = {2, 0}};
    lt_shape r = lt_shape_make(1, (int64_t[]){3});
    lt_node *r0 = lt_node_new(LT_OP_sum, &a, 1, &k0, &r, LT_F32, 0, 0);
    lt_node *r1 = lt_node_new(LT_OP_sum, &a, 1, &k1, &r, LT_F32, 0, 0);
    lt_node *r2 = lt_node_new(LT_OP_sum, &a, 1, &k2, &r, LT_F32, 0, 0);
    assert_true(r0->hash != r1->hash && r0->hash != r2->hash && r1->hash != r2->hash);
    /* unused attr slots are not hashed */
    lt_attrs g = k0;
    g.i[5] = 12345;
    lt_node *rg = lt_node_new(LT_OP_sum, &a, 1, &g, &r, LT_F32, 0, 0);
    assert_true(rg->hash == r0->hash);
    assert_int_equal(rg->attrs.i[5], 0);
    /* dag hash of users differs with operand shapes */
    lt_node *ea = un(LT_OP_exp, a, NULL), *ec = un(LT_OP_exp, c, NULL);
    assert_true(ea->dag_hash != ec->dag_hash);
    assert_true(ea->struct_hash == ec->struct_hash);
    lt_node *all[] = {a, c, d, r0, r1, r2, rg, ea, ec};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_node_release(all[i]);
}

static void test_scalar_values(void **st)
{
    (void)st;
    lt_node *p1 = lt_node_new_scalar(0.01, LT_F32, 0, 0);
    lt_node *p2 = lt_node_new_scalar(0.02, LT_F32, 0, 0);
    lt_node *c0 = lt_node_new_scalar(0.0, LT_F32, 0, 0);
    lt_node *c1 = lt_node_new_scalar(1.0, LT_F32, 0, 0);
    lt_node *cm = lt_node_new_scalar(-1.0, LT_F32, 0, 0);
    lt_node *nz = lt_node_new_scalar(-0.0, LT_F32, 0, 0);
    lt_node *w = lt_node_new_scalar(0.01, LT_F64, 0, LT_NODE_WRAPPED);
    assert_false(p1->flags & LT_NODE_CONST);
    assert_true(c0->flags & LT_NODE_CONST);
    assert_true(c1->flags & LT_NODE_CONST);
    assert_true(cm->flags & LT_NODE_CONST);
    assert_true(p1->hash == p2->hash);          /* parameters: value not hashed */
    assert_true(c0->hash != c1->hash);          /* constants: value hashed */
    assert_true(c1->hash != cm->hash);
    assert_true(c0->hash != p1->hash);
    assert_true(c0->hash == nz->hash);          /* -0 == 0 */
    assert_true(w->hash != p1->hash);           /* flags and dtype */
    assert_true(p1->value == 0.01 && p2->value == 0.02);
    lt_shape s = lt_shape_make(0, NULL);
    lt_node *in1[2] = {p1, c1}, *in2[2] = {p2, c1}, *in3[2] = {c0, c1};
    lt_node *m1 = lt_node_new(LT_OP_mul, in1, 2, NULL, &s, LT_F32, 0, 0);
    lt_node *m2 = lt_node_new(LT_OP_mul, in2, 2, NULL, &s, LT_F32, 0, 0);
    lt_node *m3 = lt_node_new(LT_OP_mul, in3, 2, NULL, &s, LT_F32, 0, 0);
    assert_true(m1->dag_hash == m2->dag_hash);
    assert_true(m1->dag_hash != m3->dag_hash);
    lt_node *all[] = {p1, p2, c0, c1, cm, nz, w, m1, m2, m3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_node_release(all[i]);
}

static void test_refcounts_and_many_inputs(void **st)
{
    (void)st;
    lt_node *a = leaf(SH2(1, 1), LT_F32);
    lt_node *ins[5] = {a, a, a, a, a};
    lt_node *c = lt_node_new(LT_OP_cat, ins, 5, &(lt_attrs){.n = 1}, &a->shape, LT_F32, 0, 0);
    assert_int_equal(atomic_load(&a->refs), 6);
    assert_true(c->in != c->in_inline);
    lt_node *e = lt_node_retain(c);
    assert_int_equal(atomic_load(&c->refs), 2);
    lt_node_release(e);
    lt_node_release(c);
    assert_int_equal(atomic_load(&a->refs), 1);
    lt_node_release(a);
    lt_node_release(NULL);
    assert_null(lt_node_retain(NULL));
}

static void test_million_chain_release(void **st)
{
    (void)st;
    lt_node *x = leaf(SH2(2, 2), LT_F32);
    lt_node *first = lt_node_retain(x);
    for (int i = 0; i < 1000000; i++) {
        lt_node *y = un(LT_OP_neg, x, NULL);
        lt_node_release(x);
        x = y;
    }
    assert_int_equal(atomic_load(&first->refs), 2);
    lt_node_release(x);   /* frees 1,000,000 nodes without recursion */
    assert_int_equal(atomic_load(&first->refs), 1);
    lt_node_release(first);
}

static void test_hash_helpers(void **st)
{
    (void)st;
    assert_true(lt_hash_mix(1, 2) != lt_hash_mix(2, 1));
    assert_true(lt_hash_mix(0, 0) != 0);
    const char a[] = "abcdefghij", b[] = "abcdefghik";
    assert_true(lt_hash_bytes(0, a, 10) != lt_hash_bytes(0, b, 10));
    assert_true(lt_hash_bytes(0, a, 9) != lt_hash_bytes(0, a, 10));
    assert_true(lt_hash_bytes(7, a, 10) == lt_hash_bytes(7, a, 10));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_structures_equal_hashes),
        cmocka_unit_test(test_attrs_shapes_dtypes_differ),
        cmocka_unit_test(test_scalar_values),
        cmocka_unit_test(test_refcounts_and_many_inputs),
        cmocka_unit_test(test_million_chain_release),
        cmocka_unit_test(test_hash_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
