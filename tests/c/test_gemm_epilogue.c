/* tests/c/test_gemm_epilogue.c — GEMM epilogues (lazy/compile_pattern.c
 * lt_cc_epilogues, lazy/kernels/matmul.c lt_kernel_matmul_epi): an
 * elementwise group reading an mm / addmm result runs inside the GEMM's
 * step (one kernel), with the values of the unfused computation (the GEMM
 * alone, then the group over its stored result); cases that must not fuse
 * (a transposed read, an input that depends on the product) stay apart. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "kutil.h"

#include "support_compile.h"

static void fill(float *x, int n, float a, float b)
{
    for (int i = 0; i < n; i++)
        x[i] = a + b * (float)((i * 7919) % 101) / 101.0f;
}

static void __attribute__((unused)) near(const float *got, const float *want, int n, double rtol)
{
    for (int i = 0; i < n; i++) {
        double tol = rtol * (fabs(want[i]) + 1e-6) + 1e-6;
        if (!(fabs((double)got[i] - want[i]) <= tol))
            fail_msg("element %d: got %.9g want %.9g", i, got[i], want[i]);
    }
}


static float bf(float x) { return lt_bf16_to_f32_inline(lt_bf16_from_f32(x)); }

static void out_f32(const lt_buffer *b, lt_dtype dt, float *dst, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = dt == LT_BF16 ? lt_bf16_to_f32_inline(((const uint16_t *)b->data)[i])
                               : ((const float *)b->data)[i];
}

static void same(const float *got, const float *want, int n, double rtol, const char *what)
{
    for (int i = 0; i < n; i++) {
        double tol = rtol * (fabs(want[i]) + 1);
        if (!(fabs((double)got[i] - want[i]) <= tol))
            fail_msg("%s element %d: got %.9g want %.9g", what, i, got[i], want[i]);
    }
}

/* Storage of n f32 values as dt. */
static void *as_dt(const float *x, int n, lt_dtype dt, void *buf)
{
    if (dt == LT_F32)
        return memcpy(buf, x, (size_t)n * 4);
    for (int i = 0; i < n; i++)
        ((uint16_t *)buf)[i] = lt_bf16_from_f32(x[i]);
    return buf;
}

enum { ACT_RELU, ACT_GELU, ACT_TANH, ACT_SIGMOID, ACT_BIAS_GELU };

/* The activation chain over node h ([M, N] or a 3-D view of it), with
 * bias2 ([N], for ACT_BIAS_GELU) added first. */
static lt_node *act(int kind, lt_dtype dt, lt_shape s, lt_node *h, lt_node *bias2)
{
    static const lt_op ops[] = {LT_OP_relu, LT_OP_gelu, LT_OP_tanh, LT_OP_sigmoid, LT_OP_gelu};
    if (kind == ACT_BIAS_GELU)
        h = N(LT_OP_add, dt, s, NULL, 2, h, bias2);
    return N(ops[kind], dt, s, NULL, 1, h);
}

/* One case: h = x @ w (+ bias: addmm), y = act(h) (through a 3-D view
 * [2, M/2, N] when view3); keep_h: h is an output too (the backward's
 * pre-activation). Checks the kernel count and y (and h) against the
 * unfused computation: a program computing h alone, then one computing
 * act over h's stored values. */
static void check_case(int M, int K, int Nn, lt_dtype dt, int addmm, int kind, int keep_h,
                       int view3)
{
    int nx = M * K, nw = K * Nn, no = M * Nn;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(Nn * 4), *b2 = malloc(Nn * 4);
    float *h1 = malloc(no * 4), *y1 = malloc(no * 4), *h2 = malloc(no * 4), *y2 = malloc(no * 4);
    void *tmp = malloc((size_t)(nx > nw ? nx : nw) * 4 + 64);
    fill(x, nx, -1, 2);
    fill(w, nw, -0.5f, 1);
    fill(b, Nn, -1, 2);
    fill(b2, Nn, 0.3f, -0.7f);
    lt_shape sm = S(2, M, Nn), sy = view3 ? S(3, 2, M / 2, Nn) : sm;
    lt_attrs r3 = A(3, 2, M / 2, Nn);
    for (int pass = 0; pass < 2; pass++) {
        lt_node *xp = P(dt, S(2, M, K), as_dt(x, nx, dt, tmp));
        lt_node *wp = P(dt, S(2, K, Nn), as_dt(w, nw, dt, tmp));
        lt_node *h = addmm ? N(LT_OP_addmm, dt, sm, NULL, 3, P(dt, S(1, Nn), as_dt(b, Nn, dt, tmp)), xp, wp)
                           : N(LT_OP_mm, dt, sm, NULL, 2, xp, wp);
        lt_node *hv = view3 ? N(LT_OP_reshape, dt, sy, &r3, 1, lt_node_retain(h)) : lt_node_retain(h);
        if (pass == 0) {    /* fused: one program */
            lt_node *y = act(kind, dt, sy, hv, kind == ACT_BIAS_GELU ? P(dt, S(1, Nn), as_dt(b2, Nn, dt, tmp)) : NULL);
            lt_node *roots[2] = {y, h};
            if (!keep_h)
                lt_node_release(h);
            run_out r = run(roots, keep_h ? 2 : 1, 0);
            assert_int_equal(lt_program_n_kernels(r.p), 1);
            out_f32(r.out[0], dt, y1, no);
            if (keep_h)
                out_f32(r.out[1], dt, h1, no);
            run_free(&r);
        } else {            /* unfused: h alone, then act over its values */
            lt_node_release(hv);
            run_out r = run(&h, 1, 0);
            out_f32(r.out[0], dt, h2, no);
            lt_node *hd = P(dt, sy, r.out[0]->data);
            run_free(&r);
            lt_node *y = act(kind, dt, sy, hd, kind == ACT_BIAS_GELU ? P(dt, S(1, Nn), as_dt(b2, Nn, dt, tmp)) : NULL);
            run_out r2 = run(&y, 1, 0);
            out_f32(r2.out[0], dt, y2, no);
            run_free(&r2);
        }
    }
    /* the same BLAS products per element, blocked differently (another
     * summation order in the last bits; bf16: one rounding step) */
    double tol = dt == LT_BF16 ? 1.0 / 128 : 2e-5;
    same(y1, y2, no, tol, "activation");
    if (keep_h)
        same(h1, h2, no, tol, "pre-activation");
    /* and against plain loops */
    for (int i = 0; i < M && dt == LT_F32; i++)
        for (int j = 0; j < Nn; j++) {
            double acc = addmm ? b[j] : 0;
            for (int k = 0; k < K; k++) acc += (double)x[i * K + k] * w[k * Nn + j];
            if (kind == ACT_BIAS_GELU) acc += b2[j];
            double v = kind == ACT_RELU ? (acc > 0 ? acc : 0)
                     : kind == ACT_TANH ? tanh(acc)
                     : kind == ACT_SIGMOID ? 1 / (1 + exp(-acc))
                     : 0.5 * acc * (1 + erf(acc / sqrt(2.0)));
            if (fabs(v - y1[i * Nn + j]) > 1e-4 * (fabs(v) + 1))
                fail_msg("loop reference [%d, %d]: got %.9g want %.9g", i, j, y1[i * Nn + j], v);
        }
    (void)bf;
    free(x); free(w); free(b); free(b2); free(h1); free(y1); free(h2); free(y2); free(tmp);
}

static void test_epilogue_activations(void **state)
{
    (void)state;
    /* MLP layer (long K: the GEMM whole, then the epilogue in row
     * blocks), several row blocks, small and odd sizes */
    check_case(64, 784, 256, LT_F32, 1, ACT_RELU, 0, 0);
    /* wide and short K: row blocks with op(B) packed per block (M < N),
     * and column blocks (too few rows for two blocks per worker) */
    check_case(128, 64, 400, LT_F32, 1, ACT_RELU, 1, 0);
    check_case(40, 64, 400, LT_F32, 0, ACT_GELU, 1, 0);
    check_case(300, 64, 96, LT_F32, 1, ACT_GELU, 1, 0);
    check_case(7, 5, 3, LT_F32, 0, ACT_TANH, 0, 0);
    check_case(130, 33, 70, LT_F32, 0, ACT_SIGMOID, 1, 0);
    check_case(96, 40, 50, LT_F32, 1, ACT_BIAS_GELU, 1, 0);
    /* a Linear on 3-D input: the activation reads the product reshaped */
    check_case(128, 64, 80, LT_F32, 1, ACT_GELU, 1, 1);
}

static void test_epilogue_bf16(void **state)
{
    (void)state;
    check_case(64, 96, 256, LT_BF16, 1, ACT_RELU, 0, 0);
    check_case(300, 64, 96, LT_BF16, 1, ACT_GELU, 1, 0);
    check_case(40, 24, 36, LT_BF16, 0, ACT_BIAS_GELU, 1, 1);
    check_case(32, 200, 48, LT_BF16, 1, ACT_GELU, 1, 0);   /* long K: GEMM whole first */
}

/* Not fused: the activation reads the product transposed (another
 * element order), or an input of the group depends on the product (a sum
 * of it): the GEMM cannot run the group without waiting on itself. */
static void test_epilogue_refused(void **state)
{
    (void)state;
    enum { M = 48, K = 32, Nn = 40 };
    static float x[M * K], w[K * Nn];
    fill(x, M * K, -1, 2);
    fill(w, K * Nn, -0.5f, 1);
    lt_attrs tr = A(2, 1, 0);
    lt_node *h = N(LT_OP_mm, LT_F32, S(2, M, Nn), NULL, 2, P(LT_F32, S(2, M, K), x),
                   P(LT_F32, S(2, K, Nn), w));
    lt_node *y = N(LT_OP_relu, LT_F32, S(2, Nn, M), NULL, 1,
                   N(LT_OP_permute, LT_F32, S(2, Nn, M), &tr, 1, h));
    run_out r = run(&y, 1, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 2);
    run_free(&r);

    lt_attrs all = A(2, 3, 1);   /* dims 0 and 1, keepdim */
    h = N(LT_OP_mm, LT_F32, S(2, M, Nn), NULL, 2, P(LT_F32, S(2, M, K), x),
          P(LT_F32, S(2, K, Nn), w));
    lt_node *s = N(LT_OP_sum, LT_F32, S(2, 1, 1), &all, 1, lt_node_retain(h));
    y = N(LT_OP_mul, LT_F32, S(2, M, Nn), NULL, 2, N(LT_OP_relu, LT_F32, S(2, M, Nn), NULL, 1, h), s);
    r = run(&y, 1, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 3);
    double tot = 0, hv[M * Nn];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < Nn; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)x[i * K + k] * w[k * Nn + j];
            hv[i * Nn + j] = acc;
            tot += acc;
        }
    for (int i = 0; i < M * Nn; i++) {
        double want = (hv[i] > 0 ? hv[i] : 0) * tot, got = ((float *)r.out[0]->data)[i];
        if (fabs(got - want) > 1e-4 * (fabs(want) + 1))
            fail_msg("element %d: got %.9g want %.9g", i, got, want);
    }
    run_free(&r);
}

static int setup(void **state)
{
    (void)state;
    setenv("LAZYTPU_NUM_CORES", "1", 1);
    return lt_devices_init() == LT_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    lt_devices_shutdown();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epilogue_activations),
        cmocka_unit_test(test_epilogue_bf16),
        cmocka_unit_test(test_epilogue_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
