/* tests/c/test_spmd.c — shardings: validation, encoding, XLA text, forward
 * propagation by rule class, annotations in the graph key, shardings kept
 * across a sync. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <stdlib.h>
#include "lazytpu.h"
#include "lazytpu_spmd.h"
#include "spmd.h"
#include "tensor.h"
#include "graph.h"

static const int64_t MESH[2] = {4, 2};
static const int64_t IDS[8] = {0, 1, 2, 3, 4, 5, 6, 7};

static lt_sharding *sh(int ndim, const int64_t *axes)
{
    lt_sharding *s = NULL;
    assert_int_equal(lt_sharding_new(2, MESH, IDS, ndim, axes, "t.py:1 in f", &s), LT_OK);
    return s;
}

static lt_tensor *input(int64_t a, int64_t b)
{
    float *h = calloc((size_t)(a * b), sizeof *h);
    for (int64_t i = 0; i < a * b; i++) h[i] = (float)i;
    lt_shape s = lt_shape_make(2, (int64_t[]){a, b});
    lt_tensor *t;
    assert_int_equal(lt_tensor_from_host(0, h, LT_F32, &s, &t), LT_OK);
    free(h);
    return t;
}

static char *text(lt_tensor *t)
{
    static char buf[256];
    lt_sharding *s = lt_tensor_sharding(t);
    if (!s) return strcpy(buf, "");
    lt_sharding_str(s, buf, sizeof buf);
    lt_sharding_release(s);
    return buf;
}

static int setup(void **st) { (void)st; return lt_init() == LT_OK ? 0 : -1; }
static int teardown(void **st) { (void)st; lt_shutdown(); return 0; }

static void test_validation_and_encoding(void **st)
{
    (void)st;
    lt_sharding *s = NULL;
    int64_t dup[2] = {1, 1}, far[2] = {3, 0}, gap[2] = {0x10, 0}, two[2] = {0x12, 0};
    assert_int_equal(lt_sharding_new(2, MESH, IDS, 2, dup, NULL, &s), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "splits two dims"));
    assert_int_equal(lt_sharding_new(2, MESH, IDS, 2, far, NULL, &s), LT_ERR_ARG);
    assert_int_equal(lt_sharding_new(2, MESH, IDS, 2, gap, NULL, &s), LT_ERR_ARG);
    int64_t rep[8] = {0, 1, 2, 3, 4, 5, 6, 6};
    int64_t ok[2] = {1, 0};
    assert_int_equal(lt_sharding_new(2, MESH, rep, 2, ok, NULL, &s), LT_ERR_ARG);
    assert_null(s);
    s = sh(2, two);       /* dim 0 over (y, x): y major */
    int64_t enc[32];
    int n = lt_sharding_encode(s, enc, 32);
    int64_t expect[] = {2, 4, 2, 8, 0, 1, 2, 3, 4, 5, 6, 7, 2, 0x12, 0};
    assert_int_equal(n, (int)(sizeof expect / sizeof expect[0]));
    assert_memory_equal(enc, expect, sizeof expect);
    char buf[128];
    /* tile assignment: mesh transposed to (y, x): 0,2,4,6,1,3,5,7 */
    assert_string_equal(lt_sharding_str(s, buf, sizeof buf), "{devices=[8,1]0,2,4,6,1,3,5,7}");
    lt_sharding_release(s);
    int64_t part[2] = {0, 1};
    s = sh(2, part);      /* dim 1 over x (4): y (2) replicates */
    assert_string_equal(lt_sharding_str(s, buf, sizeof buf),
                        "{devices=[1,4,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
    lt_sharding_release(s);
    int64_t none[2] = {0, 0};
    s = sh(2, none);
    assert_string_equal(lt_sharding_str(s, buf, sizeof buf), "{replicated}");
    lt_sharding_release(s);
}

static void test_propagation_by_rule(void **st)
{
    (void)st;
    lt_tensor *x = input(8, 6), *w = input(6, 4);
    int64_t xa[2] = {1, 0}, wa[2] = {0, 2};
    lt_sharding *sx = sh(2, xa), *sw = sh(2, wa);
    assert_int_equal(lt_tensor_set_sharding(x, sx), LT_OK);
    assert_int_equal(lt_tensor_set_sharding(w, sw), LT_OK);
    char sxt[128];
    lt_sharding_str(sx, sxt, sizeof sxt);
    lt_tensor *e, *m, *r, *p, *sm;
    assert_int_equal(lt_trace1(LT_OP_exp, x, NULL, &e), LT_OK);          /* ew */
    assert_string_equal(text(e), sxt);
    assert_int_equal(lt_trace2(LT_OP_mm, e, w, NULL, &m), LT_OK);        /* contract */
    assert_string_equal(text(m), "{devices=[4,2]0,1,2,3,4,5,6,7}");
    lt_attrs ra = {.n = 2, .i = {1 << 1, 0}};
    assert_int_equal(lt_trace1(LT_OP_sum, m, &ra, &r), LT_OK);           /* reduce dim 1 */
    assert_string_equal(text(r), "{devices=[4,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
    lt_attrs pa = {.n = 2, .i = {1, 0}};
    assert_int_equal(lt_trace1(LT_OP_permute, m, &pa, &p), LT_OK);       /* view */
    assert_string_equal(text(p), "{devices=[2,4]0,2,4,6,1,3,5,7}");
    lt_attrs na = {.n = 1, .i = {1}};
    assert_int_equal(lt_trace1(LT_OP_softmax, m, &na, &sm), LT_OK);      /* norm over dim 1 */
    assert_string_equal(text(sm), "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
    /* a sync keeps the roots' shardings on their data */
    lt_tensor *roots[2] = {m, sm};
    assert_int_equal(lt_sync(roots, 2, LT_SYNC_EXPLICIT, 1), LT_OK);
    assert_false(lt_tensor_is_pending(m));
    assert_string_equal(text(m), "{devices=[4,2]0,1,2,3,4,5,6,7}");
    float out[32];
    assert_int_equal(lt_tensor_to_host(sm, out, LT_F32), LT_OK);
    float rowsum = 0;
    for (int j = 0; j < 4; j++) rowsum += out[j];
    assert_true(rowsum > 0.999f && rowsum < 1.001f);
    /* clearing */
    assert_int_equal(lt_tensor_set_sharding(m, NULL), LT_OK);
    assert_string_equal(text(m), "");
    /* rank mismatch */
    int64_t one[1] = {1};
    lt_sharding *s1 = sh(1, one);
    assert_int_equal(lt_tensor_set_sharding(m, s1), LT_ERR_SHAPE);
    assert_non_null(strstr(lt_last_error(), "[8, 4]"));
    lt_sharding_release(s1);
    lt_sharding_release(sx);
    lt_sharding_release(sw);
    lt_tensor *all[] = {x, w, e, m, r, p, sm};
    for (int i = 0; i < 7; i++) lt_tensor_release(all[i]);
}

static uint64_t key_of(lt_tensor *t)
{
    lt_graph g;
    lt_node *v = lt_tensor_value(t);
    assert_int_equal(lt_graph_capture(&v, 1, &g), LT_OK);
    uint64_t k = g.key;
    lt_graph_free(&g);
    lt_node_release(v);
    return k;
}

static void test_annotation_in_graph_key(void **st)
{
    (void)st;
    lt_tensor *x = input(8, 2), *a, *b;
    assert_int_equal(lt_trace1(LT_OP_exp, x, NULL, &a), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_neg, a, NULL, &b), LT_OK);
    uint64_t k0 = key_of(b);
    int64_t ax[2] = {1, 0};
    lt_sharding *s = sh(2, ax);
    assert_int_equal(lt_tensor_set_sharding(a, s), LT_OK);
    lt_tensor *b2;
    assert_int_equal(lt_trace1(LT_OP_neg, a, NULL, &b2), LT_OK);
    uint64_t k1 = key_of(b2);
    assert_true(k0 != k1);
    /* the same annotation from another sharding object: same key */
    lt_tensor *a3, *b3;
    assert_int_equal(lt_trace1(LT_OP_exp, x, NULL, &a3), LT_OK);
    lt_sharding *s2 = sh(2, ax);
    assert_int_equal(lt_tensor_set_sharding(a3, s2), LT_OK);
    assert_int_equal(lt_trace1(LT_OP_neg, a3, NULL, &b3), LT_OK);
    assert_true(key_of(b3) == k1);
    lt_sharding_release(s);
    lt_sharding_release(s2);
    lt_tensor *all[] = {x, a, b, b2, a3, b3};
    for (int i = 0; i < 6; i++) lt_tensor_release(all[i]);
}

/* mm then a full sum: data parallel gives one all-reduce (the partial sum
 * out); a weight split on N over the batch's axis adds its all-gather. */
static void test_plan(void **st)
{
    (void)st;
    int64_t xa[2] = {1, 0}, wn[2] = {0, 1};
    for (int fsdp = 0; fsdp < 2; fsdp++) {
        lt_tensor *x = input(8, 6), *w = input(6, 4), *m, *r;
        lt_sharding *sx = sh(2, xa), *sw = sh(2, wn);
        assert_int_equal(lt_tensor_set_sharding(x, sx), LT_OK);
        if (fsdp) assert_int_equal(lt_tensor_set_sharding(w, sw), LT_OK);
        assert_int_equal(lt_trace2(LT_OP_mm, x, w, NULL, &m), LT_OK);
        lt_attrs ra = {.n = 2, .i = {3, 0}};
        assert_int_equal(lt_trace1(LT_OP_sum, m, &ra, &r), LT_OK);
        lt_graph g;
        lt_node *v = lt_tensor_value(r);
        assert_int_equal(lt_graph_capture(&v, 1, &g), LT_OK);
        lt_spmd_plan_out res;
        assert_int_equal(lt_spmd_plan(&g, &res, 0), LT_OK);
        assert_int_equal(res.n_sharded, fsdp ? 3 : 2);   /* x, m (+ w) */
        assert_int_equal(res.n_collectives, fsdp ? 2 : 1);
        assert_int_equal(res.n_replicated, 0);
        /* x split 4 ways: 48 of 192 bytes; w whole (96) */
        assert_true(res.param_bytes == 48 + (fsdp ? 24 : 96));
        assert_true(res.param_bytes_unpartitioned == 192 + 96);
        assert_true(res.peak_bytes < res.peak_bytes_unpartitioned);
        assert_int_equal(res.n_outputs, 1);
        lt_spmd_plan_free(&res);
        lt_graph_free(&g);
        lt_node_release(v);
        lt_sharding_release(sx);
        lt_sharding_release(sw);
        lt_tensor *all[] = {x, w, m, r};
        for (int i = 0; i < 4; i++) lt_tensor_release(all[i]);
    }
}

static void test_rule_table(void **st)
{
    (void)st;
    assert_int_equal(lt_spmd_rule_of(LT_OP_add), LT_SPMD_EW);
    assert_int_equal(lt_spmd_rule_of(LT_OP_addmm), LT_SPMD_CONTRACT);
    assert_int_equal(lt_spmd_rule_of(LT_OP_layer_norm), LT_SPMD_NORM);
    assert_int_equal(lt_spmd_rule_of(LT_OP_reshape), LT_SPMD_VIEW);
    assert_int_equal(lt_spmd_rule_of(LT_OP_as_strided), LT_SPMD_OPAQUE);   /* override */
    assert_int_equal(lt_spmd_rule_of(LT_OP_index_select), LT_SPMD_GATHER);
    assert_int_equal(lt_spmd_rule_of(LT_OP_nll_loss), LT_SPMD_OPAQUE);
    assert_string_equal(lt_spmd_rule_name(LT_SPMD_CONTRACT), "contract");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation_and_encoding),
        cmocka_unit_test(test_propagation_by_rule),
        cmocka_unit_test(test_annotation_in_graph_key),
        cmocka_unit_test(test_plan),
        cmocka_unit_test(test_rule_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
