/*
 * tests/c/test_barrier.c — the optimization barrier in the compiler
 * (opt_barrier: lazy/compile_view.c, compile_plan.c): its value is input 0's,
 * read in place (no copy, no buffer of its own), also as a graph output, under
 * a view and through another barrier; computation on it runs only after every
 * input of the barrier exists (activation checkpointing's recomputation waits
 * for the incoming gradient instead of running during the forward), and it
 * is never merged with the same computation on its input.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "program.h"

#include "support_compile.h"

static void fill(float *x, int n, float a, float b)
{
    for (int i = 0; i < n; i++)
        x[i] = a + b * (float)((i * 7919) % 101) / 101.0f;
}

static void near(const float *got, const double *want, int n, double rtol)
{
    for (int i = 0; i < n; i++) {
        double tol = rtol * (fabs(want[i]) + 1e-6) + 1e-6;
        if (!(fabs((double)got[i] - want[i]) <= tol))
            fail_msg("element %d: got %.9g want %.9g", i, got[i], want[i]);
    }
}

static lt_node *fence_leaf(void)
{
    int64_t k[3] = {7, 8, 9};
    return P(LT_I64, S(1, 3), k);
}

/* barrier(e, int64 fence) read twice and as an output: e's buffer only */
static void test_value_in_place(void **state)
{
    enum { NX = 1000 };
    float x[NX];
    double want[NX], want2[NX];
    fill(x, NX, -1, 2);
    for (int i = 0; i < NX; i++) {
        want[i] = exp((double)x[i]);
        want2[i] = want[i] * want[i];
    }
    lt_shape s = S(1, NX);
    lt_node *e = N(LT_OP_exp, LT_F32, s, NULL, 1, P(LT_F32, s, x));
    lt_node *b = N(LT_OP_opt_barrier, LT_F32, s, NULL, 2, e, fence_leaf());
    lt_node *sq = N(LT_OP_mul, LT_F32, s, NULL, 2, lt_node_retain(b), lt_node_retain(b));
    run_out r = run(&sq, 1, 0);
    near(r.out[0]->data, want2, NX, 1e-6);
    /* exp's store, then the product reading it: no copy kernel, one buffer */
    assert_int_equal(lt_program_n_kernels(r.p), 2);
    assert_int_equal(lt_program_scratch_bytes(r.p), (NX * 4 + 63) / 64 * 64);
    run_free(&r);

    /* the barrier's value as a graph output is exp's buffer, written once */
    lt_node *roots[2] = {b, N(LT_OP_exp, LT_F32, s, NULL, 1, lt_node_retain(b))};
    r = run(roots, 2, 0);
    near(r.out[0]->data, want, NX, 1e-6);
    assert_int_equal(lt_program_n_kernels(r.p), 2);
    assert_int_equal(lt_program_scratch_bytes(r.p), 0);
    run_free(&r);
}

/* over a parameter (an alias of it as output), under a permute, through a
 * second barrier whose value is the first's */
static void test_views_and_nesting(void **state)
{
    enum { R = 4, C = 6 };
    float x[R * C];
    double want[R * C], wantt[R * C];
    fill(x, R * C, -3, 6);
    lt_node *p = P(LT_F32, S(2, R, C), x);
    lt_node *b = N(LT_OP_opt_barrier, LT_F32, S(2, R, C), NULL, 2, p, fence_leaf());
    lt_node *e = N(LT_OP_exp, LT_F32, S(2, R, C), NULL, 1, lt_node_retain(b));
    lt_node *b2 = N(LT_OP_opt_barrier, LT_F32, S(2, R, C), NULL, 2, lt_node_retain(b),
                    lt_node_retain(e));
    lt_attrs perm = A(2, 1, 0);
    lt_node *t = N(LT_OP_permute, LT_F32, S(2, C, R), &perm, 1, b2);
    lt_node *tt = N(LT_OP_add, LT_F32, S(2, C, R), NULL, 2, lt_node_retain(t), t);
    lt_node *roots[3] = {b, tt, e};
    run_out r = run(roots, 3, 0);
    for (int i = 0; i < R * C; i++)
        want[i] = x[i];
    for (int i = 0; i < C; i++)
        for (int j = 0; j < R; j++)
            wantt[i * R + j] = 2.0 * x[j * C + i];
    near(r.out[0]->data, want, R * C, 0);
    near(r.out[1]->data, wantt, R * C, 1e-6);
    assert_int_equal(lt_program_output_alias(r.p, 0), 0);
    run_free(&r);
}

static int position(const lt_graph *g, const lt_node *n)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i] == n)
            return i;
    fail_msg("node not in the graph");
    return -1;
}

/* The checkpoint pattern: h = x w0 is kept, f = sum(tanh(h)) is the
 * forward's loss, g = y * f the gradient arriving at the block; the
 * recomputation mm(h', w) of h' = barrier(h, g) runs after the loss, not
 * as soon as h exists (it would be, ahead of the loss: its graph position
 * comes first without the fence), and the result is right. */
static void test_recompute_waits_for_fence(void **state)
{
    enum { R = 64, C = 32 };
    float *x = malloc(R * C * 4), *y = malloc(R * C * 4), *w = malloc(C * C * 4);
    float *w0 = malloc(C * C * 4);
    double *hv = malloc(R * C * sizeof(double));
    double *want = malloc(R * C * sizeof(double));
    fill(x, R * C, -1, 1);
    fill(y, R * C, -0.5, 1);
    fill(w, C * C, -0.1, 0.2);
    fill(w0, C * C, -0.2, 0.3);
    lt_shape s = S(2, R, C);
    lt_node *h = N(LT_OP_mm, LT_F32, s, NULL, 2, P(LT_F32, s, x), P(LT_F32, S(2, C, C), w0));
    lt_node *a = N(LT_OP_tanh, LT_F32, s, NULL, 1, lt_node_retain(h));
    lt_node *f = N(LT_OP_sum, LT_F32, S(0), &(lt_attrs){.n = 2, .i = {3, 0}}, 1, a);
    lt_node *g = N(LT_OP_mul, LT_F32, s, NULL, 2, P(LT_F32, s, y), lt_node_retain(f));
    lt_node *hb = N(LT_OP_opt_barrier, LT_F32, s, NULL, 2, h, lt_node_retain(g));
    lt_node *r = N(LT_OP_mm, LT_F32, s, NULL, 2, hb, P(LT_F32, S(2, C, C), w));
    /* r first: its position precedes the loss's unless the fence puts g's
     * chain before it */
    lt_node *roots[3] = {r, f, g};   /* run() releases them */

    lt_graph gr;
    assert_int_equal(lt_graph_capture(roots, 3, &gr), LT_OK);
    lt_program *p;
    assert_int_equal(lt_compile(&gr, &p), LT_OK);
    int pf = position(&gr, f), pr = position(&gr, r), s_sum = -1, s_mm = -1;
    for (int k = 0; k < p->n_steps; k++) {
        if (p->steps[k].node == pf)
            s_sum = k;
        if (p->steps[k].op == LT_OP_mm && p->steps[k].node >= pr)
            s_mm = k;   /* the recomputation (or its GEMM epilogue step) */
    }
    assert_true(s_sum >= 0 && s_mm >= 0);
    assert_true(s_mm > s_sum);
    lt_program_release(p);
    lt_graph_free(&gr);

    run_out ro = run(roots, 3, 0);
    double fs = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            double acc = 0;
            for (int k = 0; k < C; k++)
                acc += (double)x[i * C + k] * w0[k * C + j];
            hv[i * C + j] = acc;
            fs += tanh(acc);
        }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            double acc = 0;
            for (int k = 0; k < C; k++)
                acc += hv[i * C + k] * w[k * C + j];
            want[i * C + j] = acc;
        }
    near(ro.out[0]->data, want, R * C, 1e-4);
    double wf = fs;
    near(ro.out[1]->data, &wf, 1, 1e-4);
    run_free(&ro);
    free(x);
    free(y);
    free(w);
    free(w0);
    free(hv);
    free(want);
}

/* Traced: input 0's shape, dtype and value whatever the fence's; a barrier
 * of one tensor, twice over the same input, computes the same. */
static void test_trace_rules(void **state)
{
    float x[6] = {1, 2, 3, 4, 5, 6};
    lt_tensor *t, *k, *out;
    assert_int_equal(lt_tensor_from_host(0, x, LT_F32, &(lt_shape){.ndim = 2, .dims = {2, 3}}, &t),
                     LT_OK);
    int64_t kv[3] = {1, 2, 3};
    assert_int_equal(lt_tensor_from_host(0, kv, LT_I64, &(lt_shape){.ndim = 1, .dims = {3}}, &k),
                     LT_OK);
    lt_tensor *in[2] = {t, k};
    assert_int_equal(lt_trace(LT_OP_opt_barrier, in, 2, NULL, &out), LT_OK);
    assert_int_equal(lt_tensor_dtype(out), LT_F32);
    assert_int_equal(lt_tensor_shape(out)->ndim, 2);
    assert_int_equal(lt_tensor_shape(out)->dims[1], 3);
    float got[6];
    assert_int_equal(lt_tensor_to_host(out, got, LT_F32), LT_OK);
    assert_memory_equal(got, x, sizeof x);
    lt_tensor_release(out);
    lt_tensor_release(t);
    lt_tensor_release(k);

    lt_shape s = S(1, 3);
    float v[3] = {1, 2, 3};
    lt_node *pv = P(LT_F32, s, v);
    lt_node *b1 = N(LT_OP_opt_barrier, LT_F32, s, NULL, 1, lt_node_retain(pv));
    lt_node *b2 = N(LT_OP_opt_barrier, LT_F32, s, NULL, 1, pv);
    lt_node *e1 = N(LT_OP_exp, LT_F32, s, NULL, 1, b1);
    lt_node *e2 = N(LT_OP_exp, LT_F32, s, NULL, 1, b2);
    lt_node *sum = N(LT_OP_add, LT_F32, s, NULL, 2, e1, e2);
    run_out r = run(&sum, 1, 0);
    double want[3];
    for (int i = 0; i < 3; i++)
        want[i] = 2 * exp((double)v[i]);
    near(r.out[0]->data, want, 3, 1e-6);
    run_free(&r);
}

static int setup(void **state)
{
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    return lt_devices_init() == LT_OK ? 0 : -1;
}

static int teardown(void **state)
{
    lt_devices_shutdown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_in_place),
        cmocka_unit_test(test_views_and_nesting),
        cmocka_unit_test(test_recompute_waits_for_fence),
        cmocka_unit_test(test_trace_rules),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
