/* tests/c/test_graph.c — capture: post-order, params, aliasing, outputs, keys. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "lazytpu.h"
#include "graph.h"
#include "device.h"

static lt_shape S(int64_t a, int64_t b) { return lt_shape_make(2, (int64_t[]){a, b}); }

static lt_node *data(lt_shape s)
{
    lt_buffer *b;
    assert_int_equal(lt_buffer_alloc(0, LT_F32, lt_shape_numel(&s), &b), LT_OK);
    return lt_node_new_data(b, &s, LT_F32, 0);
}
static lt_node *data_same_buf(lt_node *d)
{
    return lt_node_new_data(lt_buffer_retain(d->buf), &d->shape, LT_F32, 0);
}
static lt_node *u(lt_op op, lt_node *x)
{
    return lt_node_new(op, &x, 1, NULL, &x->shape, LT_F32, 0, 0);
}
static lt_node *bin(lt_op op, lt_node *x, lt_node *y)
{
    lt_node *in[2] = {x, y};
    return lt_node_new(op, in, 2, NULL, &x->shape, LT_F32, 0, 0);
}

static int setup(void **st) { (void)st; return lt_devices_init() == LT_OK ? 0 : -1; }

static void test_post_order(void **st)
{
    (void)st;
    lt_node *a = data(S(2, 3)), *b = data(S(2, 3));
    lt_node *e = u(LT_OP_exp, a), *s = bin(LT_OP_add, e, b), *m = bin(LT_OP_mul, s, e);
    lt_graph g;
    assert_int_equal(lt_graph_capture(&m, 1, &g), LT_OK);
    assert_int_equal(g.n_nodes, 5);
    lt_node *expect[5] = {a, e, b, s, m};
    for (int i = 0; i < 5; i++) assert_ptr_equal(g.nodes[i], expect[i]);
    int pos_s[2] = {1, 2}, pos_m[2] = {3, 1};
    assert_int_equal(g.in_off[3 + 1] - g.in_off[3], 2);
    for (int k = 0; k < 2; k++) assert_int_equal(g.in_pos[g.in_off[3] + k], pos_s[k]);
    for (int k = 0; k < 2; k++) assert_int_equal(g.in_pos[g.in_off[4] + k], pos_m[k]);
    assert_int_equal(g.in_pos[g.in_off[1]], 0);
    assert_int_equal(g.n_params, 2);
    assert_int_equal(g.param_pos[0], 0);
    assert_int_equal(g.param_pos[1], 2);
    assert_int_equal(g.param_alias[0], -1);
    assert_int_equal(g.param_alias[1], -1);
    assert_int_equal(g.n_outputs, 1);
    assert_int_equal(g.output_pos[0], 4);
    /* the graph holds a reference to each node */
    assert_int_equal(atomic_load(&m->refs), 2);
    lt_graph_free(&g);
    assert_int_equal(atomic_load(&m->refs), 1);
    lt_node *all[] = {a, b, e, s, m};
    for (int i = 0; i < 5; i++) lt_node_release(all[i]);
}

static void test_outputs_and_dups(void **st)
{
    (void)st;
    lt_node *a = data(S(2, 3));
    lt_node *e = u(LT_OP_exp, a), *l = u(LT_OP_log, e);
    lt_node *roots[3] = {l, e, l};
    lt_graph g, g2;
    assert_int_equal(lt_graph_capture(roots, 3, &g), LT_OK);
    assert_int_equal(g.n_outputs, 2);
    assert_int_equal(g.root_out[0], 0);
    assert_int_equal(g.root_out[1], 1);
    assert_int_equal(g.root_out[2], 0);
    assert_int_equal(g.output_pos[0], 2);
    assert_int_equal(g.output_pos[1], 1);
    lt_node *roots2[2] = {e, l};
    assert_int_equal(lt_graph_capture(roots2, 2, &g2), LT_OK);
    assert_true(g.key != g2.key);           /* output order is part of the key */
    lt_graph_free(&g);
    lt_graph_free(&g2);
    /* a data root is an output and a param */
    assert_int_equal(lt_graph_capture(&a, 1, &g), LT_OK);
    assert_int_equal(g.n_nodes, 1);
    assert_int_equal(g.n_params, 1);
    assert_int_equal(g.output_pos[0], 0);
    lt_graph_free(&g);
    lt_node_release(a); lt_node_release(e); lt_node_release(l);
}

static void test_param_aliasing(void **st)
{
    (void)st;
    lt_node *a = data(S(2, 3)), *a2 = data_same_buf(a), *b = data(S(2, 3));
    lt_node *x = bin(LT_OP_add, a, a2), *y = bin(LT_OP_add, a, b);
    lt_graph gx, gy;
    assert_int_equal(lt_graph_capture(&x, 1, &gx), LT_OK);
    assert_int_equal(lt_graph_capture(&y, 1, &gy), LT_OK);
    assert_int_equal(gx.n_params, 2);
    assert_int_equal(gx.param_alias[0], -1);
    assert_int_equal(gx.param_alias[1], 0);
    assert_int_equal(gy.param_alias[1], -1);
    assert_true(gx.key != gy.key);
    assert_true(gx.struct_key != gy.struct_key);
    lt_graph_free(&gx); lt_graph_free(&gy);
    lt_node *all[] = {a, a2, b, x, y};
    for (int i = 0; i < 5; i++) lt_node_release(all[i]);
}

/* exp(x) used twice (one node) vs two equal exp(x) nodes */
static void test_shared_vs_duplicated(void **st)
{
    (void)st;
    lt_node *x = data(S(4, 4));
    lt_node *e = u(LT_OP_exp, x);
    lt_node *shared = bin(LT_OP_add, e, e);
    lt_node *e1 = u(LT_OP_exp, x), *e2 = u(LT_OP_exp, x);
    lt_node *dup = bin(LT_OP_add, e1, e2);
    assert_true(shared->dag_hash == dup->dag_hash);   /* node DAG hashes agree ... */
    lt_graph gs, gd;
    assert_int_equal(lt_graph_capture(&shared, 1, &gs), LT_OK);
    assert_int_equal(lt_graph_capture(&dup, 1, &gd), LT_OK);
    assert_int_equal(gs.n_nodes, 3);
    assert_int_equal(gd.n_nodes, 4);
    assert_true(gs.key != gd.key);                    /* ... the graph keys do not */
    assert_true(gs.struct_key != gd.struct_key);
    /* the same structure rebuilt from fresh nodes and buffers: same key */
    lt_node *y = data(S(4, 4));
    lt_node *f = u(LT_OP_exp, y);
    lt_node *shared2 = bin(LT_OP_add, f, f);
    lt_graph g2;
    assert_int_equal(lt_graph_capture(&shared2, 1, &g2), LT_OK);
    assert_true(g2.key == gs.key);
    assert_true(g2.struct_key == gs.struct_key);
    /* other shapes: other key, same struct key */
    lt_node *z = data(S(8, 4));
    lt_node *h = u(LT_OP_exp, z);
    lt_node *shared3 = bin(LT_OP_add, h, h);
    lt_graph g3;
    assert_int_equal(lt_graph_capture(&shared3, 1, &g3), LT_OK);
    assert_true(g3.key != gs.key);
    assert_true(g3.struct_key == gs.struct_key);
    lt_graph_free(&gs); lt_graph_free(&gd); lt_graph_free(&g2); lt_graph_free(&g3);
    lt_node *all[] = {x, e, shared, e1, e2, dup, y, f, shared2, z, h, shared3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_node_release(all[i]);
}

static void test_scalars(void **st)
{
    (void)st;
    lt_node *x = data(S(2, 2));
    lt_node *p1 = lt_node_new_scalar(0.1, LT_F32, 0, 0), *p2 = lt_node_new_scalar(0.2, LT_F32, 0, 0);
    lt_node *one = lt_node_new_scalar(1.0, LT_F32, 0, 0);
    lt_node *m1 = bin(LT_OP_mul, x, p1), *m2 = bin(LT_OP_mul, x, p2), *m3 = bin(LT_OP_mul, x, one);
    lt_graph g1, g2, g3;
    assert_int_equal(lt_graph_capture(&m1, 1, &g1), LT_OK);
    assert_int_equal(lt_graph_capture(&m2, 1, &g2), LT_OK);
    assert_int_equal(lt_graph_capture(&m3, 1, &g3), LT_OK);
    assert_int_equal(g1.n_params, 2);         /* data + scalar parameter */
    assert_int_equal(g3.n_params, 1);         /* constant 1 is baked in */
    assert_true(g1.key == g2.key);
    assert_true(g1.key != g3.key);
    lt_graph_free(&g1); lt_graph_free(&g2); lt_graph_free(&g3);
    lt_node *all[] = {x, p1, p2, one, m1, m2, m3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_node_release(all[i]);
}

static void test_long_chain_and_errors(void **st)
{
    (void)st;
    lt_node *x = data(S(1, 1));
    lt_node *c = lt_node_retain(x);
    for (int i = 0; i < 200000; i++) {
        lt_node *y = u(LT_OP_neg, c);
        lt_node_release(c);
        c = y;
    }
    lt_graph g;
    assert_int_equal(lt_graph_capture(&c, 1, &g), LT_OK);
    assert_int_equal(g.n_nodes, 200001);
    assert_ptr_equal(g.nodes[0], x);
    assert_ptr_equal(g.nodes[200000], c);
    lt_graph_free(&g);
    lt_node_release(c);
    lt_node_release(x);
    /* roots on two cores */
    lt_shape s = S(1, 1);
    lt_node *a = lt_node_new_scalar(3, LT_F32, 0, 0), *b = lt_node_new_scalar(3, LT_F32, 1, 0);
    lt_node *r0 = u(LT_OP_neg, a);
    lt_node *r1 = lt_node_new(LT_OP_neg, &b, 1, NULL, &s, LT_F32, 1, 0);
    lt_node *roots[2] = {r0, r1};
    assert_int_equal(lt_graph_capture(roots, 2, &g), LT_ERR_DEVICE);
    assert_int_equal(lt_graph_capture(roots, 0, &g), LT_ERR_ARG);
    lt_node_release(a); lt_node_release(b); lt_node_release(r0); lt_node_release(r1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_order),
        cmocka_unit_test(test_outputs_and_dups),
        cmocka_unit_test(test_param_aliasing),
        cmocka_unit_test(test_shared_vs_duplicated),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_long_chain_and_errors),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
