/*
 * tests/c/test_hfuse.c — horizontal fusion (lazy/compile_hfuse.c,
 * lazy/kernels/fused_multi.c): independent fused groups of the same program
 * become one kernel and compute exactly what each computes alone; a group
 * reading another's output is not merged with it; groups of different
 * programs are not merged; a segment's integer division by zero fails the
 * merged kernel like eager.
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
#include "fused.h"

static lt_shape S1(int64_t n)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = 1;
    s.dims[0] = n;
    return s;
}

static lt_shape S2(int64_t a, int64_t b)
{
    lt_shape s = S1(a);
    s.ndim = 2;
    s.dims[1] = b;
    return s;
}

static lt_node *P(lt_dtype dt, lt_shape s, const float *x)
{
    int64_t n = lt_shape_numel(&s);
    lt_buffer *b;
    assert_int_equal(lt_buffer_alloc(0, dt, n, &b), LT_OK);
    lt_convert(x, LT_F32, b->data, dt, n);
    return lt_node_new_data(b, &s, dt, 0);
}

static lt_node *W(double v) { return lt_node_new_scalar(v, LT_F64, 0, LT_NODE_WRAPPED); }

static lt_node *N2(lt_op op, lt_dtype dt, lt_shape s, lt_node *a, lt_node *b)
{
    lt_node *in[2] = {a, b};
    lt_node *r = lt_node_new(op, in, 2, NULL, &s, dt, 0, 0);
    lt_node_release(a);
    lt_node_release(b);
    return r;
}

#define TC_OWN_BUILDERS   /* P, N2 below: float data, two inputs */
#include "support_compile.h"

static float *filled(int64_t n, float a, float b, int seed)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = a + b * (float)((i * 7919 + seed * 104729) % 1013) / 1013.0f;
    return x;
}

/* SGD with momentum on parameter k: buf' = buf * 0.9 + g, p' = p - 0.01 *
 * buf' (roots: p', buf'). */
enum { NP = 7 };
static const int64_t SIZES[NP] = {1, 37, 256, 1000, 5000, 3 * 40000, 70000};
static const lt_dtype DTS[NP] = {LT_F32, LT_F32, LT_BF16, LT_F32, LT_F32, LT_F32, LT_BF16};

static void sgd_roots(int k, float *const *p, float *const *g, float *const *m,
                      lt_node **roots, lt_buffer **pbuf)
{
    lt_shape s = k == 5 ? S2(3, 40000) : S1(SIZES[k]);
    lt_dtype dt = DTS[k];
    lt_node *pp = P(dt, s, p[k]), *gp = P(dt, s, g[k]), *mp = P(dt, s, m[k]);
    *pbuf = pp->buf;
    lt_node *m2 = N2(LT_OP_add, dt, s, N2(LT_OP_mul, dt, s, mp, W(0.9)), gp);
    lt_node *p2 = N2(LT_OP_sub, dt, s, pp,
                     N2(LT_OP_mul, dt, s, lt_node_retain(m2), W(0.01)));
    roots[0] = p2;
    roots[1] = m2;
}

static void test_same_program_one_kernel(void **state)
{
    (void)state;
    float *p[NP], *g[NP], *m[NP];
    for (int k = 0; k < NP; k++) {
        p[k] = filled(SIZES[k], -1, 2, k);
        g[k] = filled(SIZES[k], -0.5f, 1, k + 11);
        m[k] = filled(SIZES[k], 0, 0.3f, k + 23);
    }
    for (int donate = 0; donate < 2; donate++) {
        /* each update alone: one kernel each */
        lt_buffer *alone[NP][2];
        for (int k = 0; k < NP; k++) {
            lt_node *roots[2];
            lt_buffer *pb;
            sgd_roots(k, p, g, m, roots, &pb);
            run_out r = run(roots, 2, donate);
            assert_int_equal(lt_program_n_kernels(r.p), 1);
            alone[k][0] = lt_buffer_retain(r.out[0]);
            alone[k][1] = lt_buffer_retain(r.out[1]);
            run_free(&r);
        }
        /* all updates in one graph: one kernel */
        lt_node *roots[2 * NP];
        lt_buffer *pbufs[NP];
        for (int k = 0; k < NP; k++)
            sgd_roots(k, p, g, m, roots + 2 * k, &pbufs[k]);
        run_out r = run(roots, 2 * NP, donate);
        assert_int_equal(lt_program_n_kernels(r.p), 1);
        for (int k = 0; k < NP; k++) {
            size_t bytes = (size_t)SIZES[k] * lt_dtype_size(DTS[k]);
            /* bit for bit what the update computes alone */
            assert_memory_equal(r.out[2 * k]->data, alone[k][0]->data, bytes);
            assert_memory_equal(r.out[2 * k + 1]->data, alone[k][1]->data, bytes);
            if (donate) {   /* each p' went into its own p */
                assert_true(lt_program_output_donor(r.p, 2 * k) >= 0);
                assert_true(r.out[2 * k] == pbufs[k]);
            }
            /* and the values are right */
            float *got = malloc(SIZES[k] * sizeof *got);
            lt_convert(r.out[2 * k]->data, DTS[k], got, LT_F32, SIZES[k]);
            for (int64_t i = 0; i < SIZES[k]; i++) {
                float want = p[k][i] - 0.01f * (m[k][i] * 0.9f + g[k][i]);
                double tol = DTS[k] == LT_BF16 ? 2e-2 * (fabs(want) + 1e-2) : 1e-5;
                if (!(fabs(got[i] - want) <= tol))
                    fail_msg("param %d element %ld: got %g want %g", k, (long)i,
                             got[i], want);
            }
            free(got);
            lt_buffer_release(alone[k][0]);
            lt_buffer_release(alone[k][1]);
        }
        run_free(&r);
    }
    for (int k = 0; k < NP; k++) {
        free(p[k]);
        free(g[k]);
        free(m[k]);
    }
}

/* y = x * 2 + 1 */
static lt_node *affine(lt_node *x, lt_shape s)
{
    return N2(LT_OP_add, LT_F32, s, N2(LT_OP_mul, LT_F32, s, x, W(2)), W(1));
}

/* B reads A's output (broadcast: no vertical fusion), both of the same
 * program: A must run before B, so they stay two kernels; C, independent,
 * of the same program, joins B. */
static void test_dependent_not_merged(void **state)
{
    (void)state;
    float *x1 = filled(64, -1, 2, 1), *x3 = filled(50, -1, 2, 3);
    lt_node *a = affine(P(LT_F32, S1(64), x1), S1(64));
    lt_node *b = affine(lt_node_retain(a), S2(300, 64));
    lt_node *c = affine(P(LT_F32, S1(50), x3), S1(50));
    lt_node *roots[3] = {a, b, c};
    run_out r = run(roots, 3, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 2);
    const float *ya = r.out[0]->data, *yb = r.out[1]->data, *yc = r.out[2]->data;
    for (int i = 0; i < 64; i++)
        assert_true(ya[i] == x1[i] * 2 + 1);
    for (int i = 0; i < 300 * 64; i++)
        assert_true(yb[i] == (x1[i % 64] * 2 + 1) * 2 + 1);
    for (int i = 0; i < 50; i++)
        assert_true(yc[i] == x3[i] * 2 + 1);
    run_free(&r);
    free(x1);
    free(x3);
}

/* Independent groups of different programs (x * 2 + 1 and x * 2 - 1) stay
 * kernels of their own; two of each make two kernels. */
static void test_different_programs(void **state)
{
    (void)state;
    float *x = filled(104, -1, 2, 5);
    lt_node *roots[4];
    for (int k = 0; k < 4; k++) {
        lt_node *xp = P(LT_F32, S1(100 + k), x);
        roots[k] = N2(k % 2 ? LT_OP_sub : LT_OP_add, LT_F32, S1(100 + k),
                      N2(LT_OP_mul, LT_F32, S1(100 + k), xp, W(2)), W(1));
    }
    run_out r = run(roots, 4, 0);
    assert_int_equal(lt_program_n_kernels(r.p), 2);
    for (int k = 0; k < 4; k++) {
        const float *y = r.out[k]->data;
        for (int i = 0; i < 100 + k; i++)
            assert_true(y[i] == x[i] * 2 + (k % 2 ? -1 : 1));
    }
    run_free(&r);
    free(x);
}

/* lt_fused_run_multi directly: segments of an i64 floor_divide program
 * (5, 40000 and 7 elements: threads, several chunks). Without a zero
 * divisor every segment is right; with one in the last segment the run
 * reports eager's ZeroDivisionError and the other segments are still
 * computed (ASan: no bound segment leaks on that path). */
static void test_run_multi_values_and_fault(void **state)
{
    (void)state;
    enum { NS = 3 };
    const int64_t n[NS] = {5, 40000, 7};
    lt_fused *seg[NS];
    lt_view in[2 * NS], out[NS];
    int64_t *a[NS], *b[NS], *o[NS];
    for (int k = 0; k < NS; k++) {
        lt_shape s = S1(n[k]);
        seg[k] = lt_fused_new(LT_I64, &s, 2);
        int x = lt_fused_load(seg[k], 0), y = lt_fused_load(seg[k], 1);
        lt_fused_store(seg[k], lt_fused_op(seg[k], LT_OP_floor_divide, LT_I64, x, y, -1));
        assert_int_equal(lt_fused_finish(seg[k]), LT_OK);
        a[k] = malloc(n[k] * sizeof(int64_t));
        b[k] = malloc(n[k] * sizeof(int64_t));
        o[k] = malloc(n[k] * sizeof(int64_t));
        for (int64_t i = 0; i < n[k]; i++) {
            a[k][i] = i * 37 - 1000 + k;
            b[k][i] = 1 + (i + k) % 9;
        }
        lt_view *v[3] = {&in[2 * k], &in[2 * k + 1], &out[k]};
        int64_t *d[3] = {a[k], b[k], o[k]};
        for (int q = 0; q < 3; q++) {
            memset(v[q], 0, sizeof *v[q]);
            v[q]->data = d[q];
            v[q]->dtype = LT_I64;
            v[q]->shape = s;
            lt_contiguous_strides(&s, v[q]->strides);
        }
    }
    const lt_kernel_ctx ctx = {0, 2};
    for (int fault = 0; fault < 2; fault++) {
        if (fault)
            b[2][3] = 0;
        lt_status st = lt_fused_run_multi(seg, NS, in, out, &ctx);
        if (fault) {
            assert_int_equal(st, LT_ERR_VALUE);
            assert_non_null(strstr(lt_last_error(), "ZeroDivisionError"));
        } else {
            assert_int_equal(st, LT_OK);
        }
        for (int k = 0; k < NS; k++)
            for (int64_t i = 0; i < n[k]; i++) {
                int64_t q = b[k][i] ? a[k][i] / b[k][i] : 0;
                if (b[k][i] && (a[k][i] % b[k][i]) != 0 && ((a[k][i] < 0) != (b[k][i] < 0)))
                    q -= 1;
                assert_int_equal(o[k][i], q);
            }
    }
    for (int k = 0; k < NS; k++) {
        lt_fused_free(seg[k]);
        free(a[k]);
        free(b[k]);
        free(o[k]);
    }
}

static int setup(void **state)
{
    (void)state;
    setenv("LAZYTPU_NUM_CORES", "2", 1);
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
        cmocka_unit_test(test_same_program_one_kernel),
        cmocka_unit_test(test_dependent_not_merged),
        cmocka_unit_test(test_different_programs),
        cmocka_unit_test(test_run_multi_values_and_fault),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
