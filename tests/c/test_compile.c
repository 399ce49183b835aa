/* tests/c/test_compile.c — the compiler + executor on hand-built graphs:
 * CSE/DCE, fusion counts, reductions over fused producers, views folded
 * into consumers, donation, aliasing, scratch reuse; results checked against
 * plain loops. Also the device buffer cache. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"

#include "support_compile.h"

static void fill(float *x, int n, float a, float b)
{
    for (int i = 0; i < n; i++)
        x[i] = a + b * (float)((i * 7919) % 101) / 101.0f;
}

static void near(const float *got, const float *want, int n, double rtol)
{
    for (int i = 0; i < n; i++) {
        double tol = rtol * (fabs(want[i]) + 1e-6) + 1e-6;
        if (!(fabs((double)got[i] - want[i]) <= tol))
            fail_msg("element %d: got %.9g want %.9g", i, got[i], want[i]);
    }
}

/* ---- tests ---- */

static void test_cse_dce(void **state)
{
    enum { N0 = 64 };
    float x[N0], want[N0];
    fill(x, N0, -1, 2);
    lt_shape s = S(1, N0);
    /* duplicate subexpressions: exp(x) twice, tanh(exp(x)) twice */
    lt_node *xp = P(LT_F32, s, x);
    lt_node *e1 = N(LT_OP_exp, LT_F32, s, NULL, 1, lt_node_retain(xp));
    lt_node *e2 = N(LT_OP_exp, LT_F32, s, NULL, 1, lt_node_retain(xp));
    lt_node *t1 = N(LT_OP_tanh, LT_F32, s, NULL, 1, e1);
    lt_node *t2 = N(LT_OP_tanh, LT_F32, s, NULL, 1, e2);
    lt_node *m = N(LT_OP_mm, LT_F32, S(2, 1, 1), NULL, 2,
                   N(LT_OP_reshape, LT_F32, S(2, 1, N0), &(lt_attrs){.n = 2, .i = {1, N0}}, 1, t1),
                   N(LT_OP_reshape, LT_F32, S(2, N0, 1), &(lt_attrs){.n = 2, .i = {N0, 1}}, 1, t2));
    lt_node_release(xp);
    run_out r = run(&m, 1, 0);
    /* the duplicate exp/tanh chain is compiled once: exp+tanh (fused or
     * not) plus the matmul; never the two copies */
    lt_node *xp2 = P(LT_F32, s, x);
    lt_node *t3 = N(LT_OP_tanh, LT_F32, s, NULL, 1, N(LT_OP_exp, LT_F32, s, NULL, 1, xp2));
    lt_node *m2 = N(LT_OP_mm, LT_F32, S(2, 1, 1), NULL, 2,
                    N(LT_OP_reshape, LT_F32, S(2, 1, N0), &(lt_attrs){.n = 2, .i = {1, N0}}, 1, lt_node_retain(t3)),
                    N(LT_OP_reshape, LT_F32, S(2, N0, 1), &(lt_attrs){.n = 2, .i = {N0, 1}}, 1, t3));
    run_out r2 = run(&m2, 1, 0);
    assert_int_equal(lt_program_n_kernels(r.p), lt_program_n_kernels(r2.p));
    double acc = 0;
    for (int i = 0; i < N0; i++) {
        double t = tanh(exp((double)x[i]));
        acc += t * t;
    }
    want[0] = (float)acc;
    near(r.out[0]->data, want, 1, 1e-5);
    run_free(&r);
    run_free(&r2);
}

/* Algebraic identities: zero_grad's expand(0) + grad, x * 1, x - 0, x / 1
 * fold away (fewer kernels, no scratch); where the result's shape or dtype
 * differs from x's the op is kept. */
static void test_identities(void **state)
{
    enum { M = 8, K = 5, NN = 6 };
    float a[M * K], b[K * NN], w[M * NN], g[M * NN], want[M * NN];
    fill(a, M * K, -1, 2);
    fill(b, K * NN, 0.5f, 1);
    fill(w, M * NN, -3, 1);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < NN; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)a[i * K + k] * b[k * NN + j];
            g[i * NN + j] = (float)acc;
        }
    /* grad = expand(0) + mm(a, b); upd = w + grad * lr: the mm writes the
     * gradient output directly and runs the update as its epilogue
     * (compile_pattern.c): one step, no scratch */
    lt_node *gm = N(LT_OP_mm, LT_F32, S(2, M, NN), NULL, 2,
                    P(LT_F32, S(2, M, K), a), P(LT_F32, S(2, K, NN), b));
    lt_node *z = N(LT_OP_expand, LT_F32, S(2, M, NN), &(lt_attrs){.n = 2, .i = {M, NN}}, 1,
                   N(LT_OP_reshape, LT_F32, S(2, 1, 1), &(lt_attrs){.n = 2, .i = {1, 1}}, 1,
                     lt_node_new_scalar(0, LT_F32, 0, 0)));
    lt_node *grad = N(LT_OP_add, LT_F32, S(2, M, NN), NULL, 2, z, gm);
    lt_node *upd = N(LT_OP_add, LT_F32, S(2, M, NN), NULL, 2, P(LT_F32, S(2, M, NN), w),
                     N(LT_OP_mul, LT_F32, S(2, M, NN), NULL, 2, lt_node_retain(grad),
                       lt_node_new_scalar(-0.5, LT_F64, 0, LT_NODE_WRAPPED)));
    lt_node *roots[2] = {grad, upd};
    run_out r = run(roots, 2, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 1);
    assert_int_equal(lt_program_scratch_bytes(r.p), 0);
    near(r.out[0]->data, g, M * NN, 1e-5);
    for (int i = 0; i < M * NN; i++)
        want[i] = w[i] + g[i] * -0.5f;
    near(r.out[1]->data, want, M * NN, 1e-5);
    run_free(&r);

    /* g and expand(0) + g both outputs (autograd's gradient and the
     * accumulated p.grad): one mm, no copy; output 1 shares output 0's buffer */
    gm = N(LT_OP_mm, LT_F32, S(2, M, NN), NULL, 2,
           P(LT_F32, S(2, M, K), a), P(LT_F32, S(2, K, NN), b));
    z = N(LT_OP_expand, LT_F32, S(2, M, NN), &(lt_attrs){.n = 2, .i = {M, NN}}, 1,
          N(LT_OP_reshape, LT_F32, S(2, 1, 1), &(lt_attrs){.n = 2, .i = {1, 1}}, 1,
            lt_node_new_scalar(0, LT_F32, 0, 0)));
    roots[0] = lt_node_retain(gm);
    roots[1] = N(LT_OP_add, LT_F32, S(2, M, NN), NULL, 2, z, gm);
    r = run(roots, 2, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 1);
    assert_int_equal(lt_program_output_same(r.p, 1), 0);
    assert_true(r.out[0] == r.out[1]);
    near(r.out[1]->data, g, M * NN, 1e-5);
    run_free(&r);

    /* ((1 * x) - 0) / 1 with 1 broadcast from a constant: no kernel at all,
     * the output is the parameter itself */
    lt_node *one = N(LT_OP_expand, LT_F32, S(2, M, NN), &(lt_attrs){.n = 2, .i = {M, NN}}, 1,
                     N(LT_OP_reshape, LT_F32, S(2, 1, 1), &(lt_attrs){.n = 2, .i = {1, 1}}, 1,
                       lt_node_new_scalar(1, LT_F32, 0, 0)));
    lt_node *y = N(LT_OP_mul, LT_F32, S(2, M, NN), NULL, 2, one, P(LT_F32, S(2, M, NN), w));
    y = N(LT_OP_sub, LT_F32, S(2, M, NN), NULL, 2, y, lt_node_new_scalar(0, LT_F32, 0, 0));
    y = N(LT_OP_div, LT_F32, S(2, M, NN), NULL, 2, y, lt_node_new_scalar(1, LT_F32, 0, 0));
    r = run(&y, 1, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 0);
    assert_int_equal(lt_program_output_alias(r.p, 0), 0);
    near(r.out[0]->data, w, M * NN, 0);
    run_free(&r);

    /* kept: a broadcast (v[NN] + zeros[M, NN]), a dtype change
     * (i64 + f32 0 -> f32), 0 - x and 1 / x (not identities) */
    int64_t iv[NN];
    for (int j = 0; j < NN; j++)
        iv[j] = j * 3 - 7;
    lt_node *zb = N(LT_OP_expand, LT_F32, S(2, M, NN), &(lt_attrs){.n = 2, .i = {M, NN}}, 1,
                    N(LT_OP_reshape, LT_F32, S(2, 1, 1), &(lt_attrs){.n = 2, .i = {1, 1}}, 1,
                      lt_node_new_scalar(0, LT_F32, 0, 0)));
    lt_node *bc = N(LT_OP_add, LT_F32, S(2, M, NN), NULL, 2, P(LT_F32, S(1, NN), b), zb);
    lt_node *cv = N(LT_OP_add, LT_F32, S(1, NN), NULL, 2, P(LT_I64, S(1, NN), iv),
                    lt_node_new_scalar(0, LT_F32, 0, 0));
    lt_node *ns = N(LT_OP_sub, LT_F32, S(1, NN), NULL, 2, lt_node_new_scalar(0, LT_F32, 0, 0),
                    P(LT_F32, S(1, NN), b));
    lt_node *rc = N(LT_OP_div, LT_F32, S(1, NN), NULL, 2, lt_node_new_scalar(1, LT_F32, 0, 0),
                    P(LT_F32, S(1, NN), b));
    lt_node *kept[4] = {bc, cv, ns, rc};
    r = run(kept, 4, 0);
    for (int i = 0; i < M; i++)
        near((float *)r.out[0]->data + i * NN, b, NN, 0);
    float wc[NN], wn[NN], wr[NN];
    for (int j = 0; j < NN; j++) {
        wc[j] = (float)iv[j];
        wn[j] = -b[j];
        wr[j] = 1.0f / b[j];
    }
    assert_int_equal(lt_program_output_dtype(r.p, 1), LT_F32);
    near(r.out[1]->data, wc, NN, 0);
    near(r.out[2]->data, wn, NN, 0);
    near(r.out[3]->data, wr, NN, 1e-6);
    run_free(&r);
}

static void test_chain_one_kernel(void **state)
{
    enum { N0 = 5000 };
    float *x = malloc(N0 * 4), *y = malloc(N0 * 4), *want = malloc(N0 * 4);
    fill(x, N0, -2, 4);
    fill(y, N0, 0.5f, 1);
    lt_shape s = S(2, 50, 100);
    lt_node *a = P(LT_F32, s, x), *b = P(LT_F32, s, y);
    lt_node *v = N(LT_OP_mul, LT_F32, s, NULL, 2, lt_node_retain(a), lt_node_retain(b));
    v = N(LT_OP_add, LT_F32, s, NULL, 2, v, lt_node_retain(a));
    v = N(LT_OP_tanh, LT_F32, s, NULL, 1, v);
    v = N(LT_OP_mul, LT_F32, s, NULL, 2, v, lt_node_retain(b));
    v = N(LT_OP_relu, LT_F32, s, NULL, 1, v);
    v = N(LT_OP_sub, LT_F32, s, NULL, 2, v, lt_node_retain(a));
    v = N(LT_OP_abs, LT_F32, s, NULL, 1, v);
    v = N(LT_OP_sqrt, LT_F32, s, NULL, 1, v);
    lt_node_release(a);
    lt_node_release(b);
    run_out r = run(&v, 1, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 1);
    assert_int_equal(lt_program_scratch_bytes(r.p), 0);
    for (int i = 0; i < N0; i++) {
        float t = tanhf(x[i] * y[i] + x[i]) * y[i];
        t = t < 0 ? 0 : t;
        want[i] = sqrtf(fabsf(t - x[i]));
    }
    near(r.out[0]->data, want, N0, 1e-6);
    run_free(&r);
    free(x); free(y); free(want);
}

/* A small, cheap producer of a broadcast shape (t = b * 2 + 1 on [N]) used
 * only by x[M, N] * t is recomputed inside the consumer's kernel; it is
 * still materialised when it is also an output, when it is expensive
 * (exp), or when the consumer is too large for recomputation to pay. */
static void test_broadcast_producer(void **state)
{
    enum { M = 64, NB = 100, BIG = 2000 };
    float *x = malloc(BIG * NB * 4), *b = malloc(NB * 4), *want = malloc(BIG * NB * 4);
    fill(x, BIG * NB, -2, 4);
    fill(b, NB, -1, 2);
    for (int mode = 0; mode < 4; mode++) {
        int rows = mode == 3 ? BIG : M;
        lt_node *xp = P(LT_F32, S(2, rows, NB), x), *bp = P(LT_F32, S(1, NB), b);
        lt_node *two = lt_node_new_scalar(2.0, LT_F64, 0, LT_NODE_WRAPPED);
        lt_node *one = lt_node_new_scalar(1.0, LT_F64, 0, LT_NODE_WRAPPED | LT_NODE_CONST);
        lt_node *t = N(LT_OP_mul, LT_F32, S(1, NB), NULL, 2, bp, two);
        if (mode == 2) {
            t = N(LT_OP_exp, LT_F32, S(1, NB), NULL, 1, t);
            lt_node_release(one);
        } else {
            t = N(LT_OP_add, LT_F32, S(1, NB), NULL, 2, t, one);
        }
        lt_node *y = N(LT_OP_mul, LT_F32, S(2, rows, NB), NULL, 2, xp, lt_node_retain(t));
        y = N(LT_OP_sub, LT_F32, S(2, rows, NB), NULL, 2, y, lt_node_retain(t));
        lt_node *roots[2] = {y, t};
        int nr = mode == 1 ? 2 : 1;
        if (nr == 1)
            lt_node_release(t);
        run_out r = run(roots, nr, 0);
        int want_k = mode == 0 ? 1 : 2;
        assert_int_equal(lt_program_n_kernels(r.p), want_k);
        for (int i = 0; i < rows * NB; i++) {
            float tv = mode == 2 ? expf(b[i % NB] * 2) : b[i % NB] * 2 + 1;
            want[i] = x[i] * tv - tv;
        }
        near(r.out[0]->data, want, rows * NB, 2e-6);
        if (nr == 2)
            for (int j = 0; j < NB; j++)
                assert_float_equal(((float *)r.out[1]->data)[j], b[j] * 2 + 1, 1e-6);
        run_free(&r);
    }
    free(x); free(b); free(want);
}

static void test_reduce_fused(void **state)
{
    enum { R = 40, C = 300 };
    float *x = malloc(R * C * 4), *t = malloc(R * C * 4);
    fill(x, R * C, -1, 2);
    fill(t, R * C, 0, 1);
    lt_shape s = S(2, R, C);
    /* mean((x - t)^2) over all dims: one kernel */
    lt_node *xp = P(LT_F32, s, x), *tp = P(LT_F32, s, t);
    lt_node *d = N(LT_OP_sub, LT_F32, s, NULL, 2, xp, tp);
    lt_node *sq = N(LT_OP_mul, LT_F32, s, NULL, 2, lt_node_retain(d), d);
    lt_node *m = N(LT_OP_mean, LT_F32, S(0), &(lt_attrs){.n = 2, .i = {3, 0}}, 1, sq);
    run_out r = run(&m, 1, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 1);
    double acc = 0;
    for (int i = 0; i < R * C; i++)
        acc += (double)(x[i] - t[i]) * (x[i] - t[i]);
    float want = (float)(acc / (R * C));
    near(r.out[0]->data, &want, 1, 1e-5);
    run_free(&r);

    /* sum over dim 0 (outer) and amax over dim 1 (inner) of exp(x), keepdim */
    xp = P(LT_F32, s, x);
    lt_node *e = N(LT_OP_exp, LT_F32, s, NULL, 1, xp);
    lt_node *roots[2];
    roots[0] = N(LT_OP_sum, LT_F32, S(2, 1, C), &(lt_attrs){.n = 2, .i = {1, 1}}, 1, lt_node_retain(e));
    roots[1] = N(LT_OP_amax, LT_F32, S(1, R), &(lt_attrs){.n = 2, .i = {2, 0}}, 1, e);
    r = run(roots, 2, 0);
    float *w0 = malloc(C * 4), w1[R];
    for (int j = 0; j < C; j++) {
        double a = 0;
        for (int i = 0; i < R; i++) a += exp((double)x[i * C + j]);
        w0[j] = (float)a;
    }
    for (int i = 0; i < R; i++) {
        float mx = -INFINITY;
        for (int j = 0; j < C; j++) mx = fmaxf(mx, expf(x[i * C + j]));
        w1[i] = mx;
    }
    near(r.out[0]->data, w0, C, 1e-5);
    near(r.out[1]->data, w1, R, 1e-6);
    run_free(&r);
    free(w0);
    free(x);
    free(t);
}

static void test_reduce_kinds(void **state)
{
    /* [2,3,4] with a NaN: sum over dims {0,2}, argmax dim 1, any/all, prod */
    float x[24];
    for (int i = 0; i < 24; i++) x[i] = (float)((i * 5) % 7) - 3;
    x[13] = NAN;
    lt_shape s = S(3, 2, 3, 4);
    lt_node *roots[5];
    lt_node *xp = P(LT_F32, s, x);
    roots[0] = N(LT_OP_sum, LT_F32, S(1, 3), &(lt_attrs){.n = 2, .i = {5, 0}}, 1, lt_node_retain(xp));
    roots[1] = N(LT_OP_argmax, LT_I64, S(2, 2, 4), &(lt_attrs){.n = 2, .i = {1, 0}}, 1, lt_node_retain(xp));
    roots[2] = N(LT_OP_argmin, LT_I64, S(0), &(lt_attrs){.n = 2, .i = {-1, 0}}, 1, lt_node_retain(xp));
    lt_node *gt = N(LT_OP_gt, LT_BOOL, s, NULL, 2, lt_node_retain(xp), lt_node_new_scalar(1, LT_F64, 0, LT_NODE_WRAPPED));
    roots[3] = N(LT_OP_any, LT_BOOL, S(1, 2), &(lt_attrs){.n = 2, .i = {6, 0}}, 1, gt);
    roots[4] = N(LT_OP_prod, LT_F32, S(1, 4), &(lt_attrs){.n = 2, .i = {6, 0}}, 1,
                 N(LT_OP_permute, LT_F32, S(3, 4, 2, 3), &(lt_attrs){.n = 3, .i = {2, 0, 1}}, 1, xp));
    run_out r = run(roots, 5, 0);
    const float *o0 = r.out[0]->data;
    for (int j = 0; j < 3; j++) {
        double a = 0;
        for (int i = 0; i < 2; i++) for (int k = 0; k < 4; k++) a += x[i * 12 + j * 4 + k];
        if (isnan(a)) assert_true(isnan(o0[j])); else assert_float_equal(o0[j], a, 1e-5);
    }
    const int64_t *o1 = r.out[1]->data;
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) {
            int best = 0;
            for (int j = 1; j < 3; j++) {
                float v = x[i * 12 + j * 4 + k], b = x[i * 12 + best * 4 + k];
                if (isnan(b)) break;
                if (isnan(v) || v > b) best = j;
            }
            assert_int_equal(o1[i * 4 + k], best);
        }
    assert_int_equal(*(int64_t *)r.out[2]->data, 13);   /* NaN wins */
    const uint8_t *o3 = r.out[3]->data;
    for (int i = 0; i < 2; i++) {
        int any = 0;
        for (int j = 0; j < 12; j++) any |= x[i * 12 + j] > 1;
        assert_int_equal(o3[i], any);
    }
    const float *o4 = r.out[4]->data;
    for (int k = 0; k < 4; k++) {
        double p = 1;
        for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) p *= x[i * 12 + j * 4 + k];
        if (isnan(p)) assert_true(isnan(o4[k])); else assert_float_equal(o4[k], p, 1e-3);
    }
    run_free(&r);
}

static void test_views(void **state)
{
    /* y = x[:, 1:5:2].T (expand to [3, 2, 4]) + b ; z = reshape(permute(x)) */
    float x[4 * 6], b[4];
    for (int i = 0; i < 24; i++) x[i] = (float)i;
    for (int i = 0; i < 4; i++) b[i] = 100.0f * i;
    lt_node *xp = P(LT_F32, S(2, 4, 6), x);
    lt_node *bp = P(LT_F32, S(1, 4), b);
    lt_node *sl = N(LT_OP_slice, LT_F32, S(2, 4, 2), &(lt_attrs){.n = 4, .i = {1, 1, 5, 2}}, 1, lt_node_retain(xp));
    lt_node *tr = N(LT_OP_permute, LT_F32, S(2, 2, 4), &(lt_attrs){.n = 2, .i = {1, 0}}, 1, sl);
    lt_node *ex = N(LT_OP_expand, LT_F32, S(3, 3, 2, 4), &(lt_attrs){.n = 3, .i = {3, 2, 4}}, 1, tr);
    lt_node *roots[3];
    roots[0] = N(LT_OP_add, LT_F32, S(3, 3, 2, 4), NULL, 2, ex, bp);
    lt_node *pm = N(LT_OP_permute, LT_F32, S(2, 6, 4), &(lt_attrs){.n = 2, .i = {1, 0}}, 1, lt_node_retain(xp));
    roots[1] = N(LT_OP_reshape, LT_F32, S(1, 24), &(lt_attrs){.n = 1, .i = {24}}, 1, pm);
    roots[2] = N(LT_OP_select, LT_F32, S(1, 4), &(lt_attrs){.n = 2, .i = {1, 3}}, 1, xp);
    run_out r = run(roots, 3, 0);
    const float *o = r.out[0]->data;
    for (int e = 0; e < 3; e++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                assert_float_equal(o[e * 8 + i * 4 + j], x[j * 6 + 1 + 2 * i] + b[j], 0);
    o = r.out[1]->data;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 4; j++)
            assert_float_equal(o[i * 4 + j], x[j * 6 + i], 0);
    o = r.out[2]->data;
    for (int j = 0; j < 4; j++)
        assert_float_equal(o[j], x[j * 6 + 3], 0);
    run_free(&r);
}

static void test_transpose_mm(void **state)
{
    enum { M = 5, K = 7, Nn = 3 };
    float a[K * M], w[Nn * K], want[M * Nn];
    fill(a, K * M, -1, 2);
    fill(w, Nn * K, -0.5f, 1);
    lt_node *ap = P(LT_F32, S(2, K, M), a), *wp = P(LT_F32, S(2, Nn, K), w);
    lt_node *at = N(LT_OP_permute, LT_F32, S(2, M, K), &(lt_attrs){.n = 2, .i = {1, 0}}, 1, ap);
    lt_node *wt = N(LT_OP_permute, LT_F32, S(2, K, Nn), &(lt_attrs){.n = 2, .i = {1, 0}}, 1, wp);
    lt_node *mm = N(LT_OP_mm, LT_F32, S(2, M, Nn), NULL, 2, at, wt);
    run_out r = run(&mm, 1, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 1);   /* no copy kernels */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < Nn; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)a[k * M + i] * w[j * K + k];
            want[i * Nn + j] = (float)acc;
        }
    near(r.out[0]->data, want, M * Nn, 1e-5);
    run_free(&r);
}

/* A donated output written in place during the block (p' = p - lr * g
 * straight into p's buffer) must not be visible to ops that read p after
 * it in the same kernel: z = p * 3 + p' still sees the old p, whichever of
 * p * 3 and the update comes first. */
static void test_donation_inplace_order(void **state)
{
    enum { NB = 3 * 40000 };
    float *p = malloc(NB * 4), *g = malloc(NB * 4), *want = malloc(NB * 4);
    fill(p, NB, -1, 2);
    fill(g, NB, 0, 1);
    for (int order = 0; order < 2; order++) {
        lt_node *pp = P(LT_F32, S(2, 3, 40000), p), *gp = P(LT_F32, S(2, 3, 40000), g);
        lt_buffer *pbuf = pp->buf;
        lt_node *three = lt_node_new_scalar(3, LT_F64, 0, LT_NODE_WRAPPED);
        lt_node *t = NULL;
        if (order == 1)   /* p * 3 before the update's op */
            t = N(LT_OP_mul, LT_F32, S(2, 3, 40000), NULL, 2, lt_node_retain(pp), three);
        lt_node *upd = N(LT_OP_sub, LT_F32, S(2, 3, 40000), NULL, 2, lt_node_retain(pp),
                         N(LT_OP_mul, LT_F32, S(2, 3, 40000), NULL, 2, gp,
                           lt_node_new_scalar(0.125, LT_F64, 0, LT_NODE_WRAPPED)));
        if (order == 0)
            t = N(LT_OP_mul, LT_F32, S(2, 3, 40000), NULL, 2, lt_node_retain(pp), three);
        lt_node *z = N(LT_OP_add, LT_F32, S(2, 3, 40000), NULL, 2, t, lt_node_retain(upd));
        lt_node_release(pp);
        lt_node *roots[2] = {upd, z};
        run_out r = run(roots, 2, 1);
        assert_int_equal(lt_program_n_kernels(r.p), 1);
        assert_int_equal(lt_program_output_donor(r.p, 0), 0);
        assert_true(r.out[0] == pbuf);
        for (int i = 0; i < NB; i++)
            want[i] = p[i] - g[i] * 0.125f;
        near(r.out[0]->data, want, NB, 1e-6);
        for (int i = 0; i < NB; i++)
            want[i] = p[i] * 3 + (p[i] - g[i] * 0.125f);
        near(r.out[1]->data, want, NB, 1e-6);
        run_free(&r);
    }
    free(p); free(g); free(want);
}

static void test_donation_alias(void **state)
{
    enum { N0 = 1000 };
    float p[N0], g[N0], want[N0];
    fill(p, N0, -1, 2);
    fill(g, N0, 0, 1);
    lt_node *pp = P(LT_F32, S(2, 10, 100), p), *gp = P(LT_F32, S(2, 10, 100), g);
    lt_buffer *pbuf = pp->buf;
    lt_node *lr = lt_node_new_scalar(0.125, LT_F64, 0, LT_NODE_WRAPPED);
    lt_node *upd = N(LT_OP_sub, LT_F32, S(2, 10, 100), NULL, 2, lt_node_retain(pp),
                     N(LT_OP_mul, LT_F32, S(2, 10, 100), NULL, 2, gp, lr));
    lt_node *roots[3] = {upd, lt_node_retain(pp),
                         N(LT_OP_reshape, LT_F32, S(1, 1000), &(lt_attrs){.n = 1, .i = {1000}}, 1, pp)};
    /* with p also an output (alias) p cannot be donated */
    run_out r = run(roots, 3, 1);
    assert_int_not_equal(lt_program_output_donor(r.p, 0), 0);  /* p is aliased */
    assert_true(r.out[1] == pbuf && r.out[2] == pbuf);
    assert_int_equal(lt_program_n_kernels(r.p), 1);
    run_free(&r);

    pp = P(LT_F32, S(2, 10, 100), p);
    gp = P(LT_F32, S(2, 10, 100), g);
    pbuf = pp->buf;
    lr = lt_node_new_scalar(0.125, LT_F64, 0, LT_NODE_WRAPPED);
    upd = N(LT_OP_sub, LT_F32, S(2, 10, 100), NULL, 2, pp,
            N(LT_OP_mul, LT_F32, S(2, 10, 100), NULL, 2, gp, lr));
    r = run(&upd, 1, 1);
    assert_int_equal(lt_program_output_donor(r.p, 0), 0);
    assert_true(r.out[0] == pbuf);
    for (int i = 0; i < N0; i++) want[i] = p[i] - g[i] * 0.125f;
    near(r.out[0]->data, want, N0, 1e-6);
    run_free(&r);

    /* a group feeding a reduction: the update is stored by the reduce step
     * (p' = p - lr * g, and sum(p' * p') in the same pass) and may still
     * overwrite p; large enough for several threads and blocks */
    enum { NB = 3 * 40000 };
    float *pb = malloc(NB * 4), *gb = malloc(NB * 4);
    fill(pb, NB, -1, 2);
    fill(gb, NB, 0, 1);
    for (int mode = 0; mode < 2; mode++) {   /* sum over all / over dim 1 */
        pp = P(LT_F32, S(2, 3, 40000), pb);
        gp = P(LT_F32, S(2, 3, 40000), gb);
        pbuf = pp->buf;
        lr = lt_node_new_scalar(0.125, LT_F64, 0, LT_NODE_WRAPPED);
        upd = N(LT_OP_sub, LT_F32, S(2, 3, 40000), NULL, 2, pp,
                N(LT_OP_mul, LT_F32, S(2, 3, 40000), NULL, 2, gp, lr));
        lt_node *sq = N(LT_OP_mul, LT_F32, S(2, 3, 40000), NULL, 2,
                        lt_node_retain(upd), lt_node_retain(upd));
        lt_node *red = mode == 0
            ? N(LT_OP_sum, LT_F32, S(0), &(lt_attrs){.n = 2, .i = {3, 0}}, 1, sq)
            : N(LT_OP_sum, LT_F32, S(1, 3), &(lt_attrs){.n = 2, .i = {2, 0}}, 1, sq);
        lt_node *rr[2] = {upd, red};
        r = run(rr, 2, 1);
        assert_int_equal(lt_program_n_kernels(r.p), 1);
        assert_true(lt_program_output_donor(r.p, 0) >= 0);
        assert_true(r.out[0] == pbuf);                 /* p overwritten */
        double tot[3] = {0, 0, 0};
        float *wb = malloc(NB * 4);
        for (int i = 0; i < NB; i++) {
            wb[i] = pb[i] - gb[i] * 0.125f;
            tot[i / 40000] += (double)wb[i] * wb[i];
        }
        near(r.out[0]->data, wb, NB, 1e-6);
        const float *got = r.out[1]->data;
        if (mode == 0)
            assert_true(fabs(got[0] - (tot[0] + tot[1] + tot[2])) <=
                        1e-5 * (tot[0] + tot[1] + tot[2]));
        else
            for (int k = 0; k < 3; k++)
                assert_true(fabs(got[k] - tot[k]) <= 1e-5 * tot[k]);
        free(wb);
        run_free(&r);
    }
    free(pb);
    free(gb);
}

static void test_scratch_reuse(void **state)
{
    enum { D = 32 };
    float x[D * D];
    fill(x, D * D, -0.1f, 0.2f);
    lt_shape s = S(2, D, D);
    lt_node *xp = P(LT_F32, s, x);
    lt_node *v = lt_node_retain(xp);
    for (int k = 0; k < 6; k++)
        v = N(LT_OP_mm, LT_F32, s, NULL, 2, v, lt_node_retain(xp));
    lt_node_release(xp);
    run_out r = run(&v, 1, 0);
    /* 5 intermediates of 4 KiB; at most 2 live at once */
    assert_true(lt_program_scratch_bytes(r.p) <= 2 * D * D * 4);
    assert_int_equal(lt_program_n_kernels(r.p), 6);
    /* reference */
    double cur[D * D], nxt[D * D];
    for (int i = 0; i < D * D; i++) cur[i] = x[i];
    for (int k = 0; k < 6; k++) {
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) {
                double a = 0;
                for (int q = 0; q < D; q++) a += cur[i * D + q] * x[q * D + j];
                nxt[i * D + j] = a;
            }
        memcpy(cur, nxt, sizeof cur);
    }
    const float *o = r.out[0]->data;
    for (int i = 0; i < D * D; i++)
        assert_true(fabs(o[i] - cur[i]) <= 1e-4 * fabs(cur[i]) + 1e-9);
    run_free(&r);
}

static void test_softmax_primitives(void **state)
{
    /* softmax from primitives: exercises fusion across reductions without
     * cycles (e = exp(x - max) feeds sum, and e / sum needs both) */
    enum { R = 7, C = 33 };
    float x[R * C], want[R * C];
    fill(x, R * C, -3, 6);
    lt_shape s = S(2, R, C), sk = S(2, R, 1);
    lt_node *xp = P(LT_F32, s, x);
    lt_node *mx = N(LT_OP_amax, LT_F32, sk, &(lt_attrs){.n = 2, .i = {2, 1}}, 1, lt_node_retain(xp));
    lt_node *e = N(LT_OP_exp, LT_F32, s, NULL, 1, N(LT_OP_sub, LT_F32, s, NULL, 2, xp, mx));
    lt_node *sm = N(LT_OP_sum, LT_F32, sk, &(lt_attrs){.n = 2, .i = {2, 1}}, 1, lt_node_retain(e));
    lt_node *y = N(LT_OP_div, LT_F32, s, NULL, 2, e, sm);
    /* and a matmul feeding back into an elementwise sibling of its input */
    lt_node *sq = N(LT_OP_mul, LT_F32, s, NULL, 2, lt_node_retain(y), lt_node_retain(y));
    float wv[C * C];
    fill(wv, C * C, -1, 2);
    lt_node *w = P(LT_F32, S(2, C, C), wv);
    lt_node *mm = N(LT_OP_mm, LT_F32, s, NULL, 2, lt_node_retain(sq), w);
    lt_node *z = N(LT_OP_add, LT_F32, s, NULL, 2, sq, mm);
    lt_node *roots[2] = {y, z};
    run_out r = run(roots, 2, 0);
    for (int i = 0; i < R; i++) {
        double m = -INFINITY, a = 0;
        for (int j = 0; j < C; j++) m = fmax(m, x[i * C + j]);
        for (int j = 0; j < C; j++) a += exp(x[i * C + j] - m);
        for (int j = 0; j < C; j++) want[i * C + j] = (float)(exp(x[i * C + j] - m) / a);
    }
    near(r.out[0]->data, want, R * C, 1e-5);
    float zw[R * C];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            double acc = 0;
            for (int k = 0; k < C; k++)
                acc += (double)want[i * C + k] * want[i * C + k] * wv[k * C + j];
            zw[i * C + j] = (float)(want[i * C + j] * want[i * C + j] + acc);
        }
    near(r.out[1]->data, zw, R * C, 1e-4);
    /* amax, exp+sum (absorbed), div+mul (fused), mm, add */
    assert_true(lt_program_n_kernels(r.p) <= 5);
    run_free(&r);
}

/* device buffer cache (lazy/device.c): a freed block of >= 64 KiB is
 * reused by the next allocation of the same size class; accounting counts
 * live buffers only; small buffers are not cached. Under ASan the cache is
 * off (every free must be seen), so pointer reuse is only checked without
 * it. */
static void test_buffer_cache(void **state)
{
    size_t base = lt_core_bytes_in_use(1);
    lt_buffer *a, *b, *c;
    assert_int_equal(lt_buffer_alloc(1, LT_F32, 300000, &a), LT_OK);
    assert_int_equal(lt_core_bytes_in_use(1), base + 1200000);
    memset(a->data, 0x5a, 1200000);
    void *pa = a->data;
    lt_buffer_release(a);
    assert_int_equal(lt_core_bytes_in_use(1), base);
    /* 299000 floats: same size class (1.19 MB rounds up like 1.2 MB) */
    assert_int_equal(lt_buffer_alloc(1, LT_F32, 299000, &b), LT_OK);
    assert_int_equal(lt_core_bytes_in_use(1), base + 1196000);
#if !defined(__SANITIZE_ADDRESS__)
    assert_ptr_equal(b->data, pa);
#endif
    /* a different class gets other memory, and is writable to its end */
    assert_int_equal(lt_buffer_alloc(1, LT_I64, 400000, &c), LT_OK);
    assert_ptr_not_equal(c->data, b->data);
    memset(c->data, 1, 3200000);
    ((char *)b->data)[1196000 - 1] = 7;
    lt_buffer_release(b);
    lt_buffer_release(c);
    assert_int_equal(lt_core_bytes_in_use(1), base);
    /* many sizes: the cache stays bounded and every buffer is usable */
    for (int k = 1; k <= 80; k++) {
        lt_buffer *t;
        assert_int_equal(lt_buffer_alloc(1, LT_BOOL, 70000 * k, &t), LT_OK);
        ((char *)t->data)[70000 * k - 1] = 1;
        lt_buffer_release(t);
    }
    assert_int_equal(lt_core_bytes_in_use(1), base);
}

static int setup(void **state)
{
    setenv("LAZYTPU_NUM_CORES", "2", 1);
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
        cmocka_unit_test(test_cse_dce),
        cmocka_unit_test(test_identities),
        cmocka_unit_test(test_chain_one_kernel),
        cmocka_unit_test(test_broadcast_producer),
        cmocka_unit_test(test_reduce_fused),
        cmocka_unit_test(test_reduce_kinds),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_transpose_mm),
        cmocka_unit_test(test_donation_alias),
        cmocka_unit_test(test_donation_inplace_order),
        cmocka_unit_test(test_scratch_reuse),
        cmocka_unit_test(test_softmax_primitives),
        cmocka_unit_test(test_buffer_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
