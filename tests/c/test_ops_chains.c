/* tests/c/test_ops_chains.c — differential tests beyond single ops: random
 * fused elementwise DAGs (5-30 ops, broadcasts, scalar parameters, several
 * roots per sync) against support_ref.c, compile-cache semantics (scalar
 * parameters never recompile and take their new value; buffer aliasing is
 * part of the key) and error paths. Env: LT_DIFF_CHAINS=n (default 60). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_diff.h"

/* ------------------------------------------------- random fused chains */

typedef struct chain_val {
    lt_tensor *t;
    ref_array r;
} chain_val;

static const lt_op chain_unary[] = {LT_OP_neg, LT_OP_tanh, LT_OP_sigmoid, LT_OP_sin,
                                    LT_OP_cos, LT_OP_abs, LT_OP_relu, LT_OP_gelu,
                                    LT_OP_silu, LT_OP_exp /* applied to tanh */};
static const lt_op chain_binary[] = {LT_OP_add, LT_OP_sub, LT_OP_mul, LT_OP_maximum,
                                     LT_OP_minimum, LT_OP_div /* by 1+|x| */};

static int chain_apply(lt_op op, chain_val *in, int n, const lt_attrs *at, chain_val *out)
{
    lt_tensor *ts[3];
    ref_array rs[3];
    for (int i = 0; i < n; i++) {
        ts[i] = in[i].t;
        rs[i] = in[i].r;
    }
    if (ref_eval(op, at, rs, n, &out->r)) {
        printf("chain: reference failed: %s\n", ref_error());
        return -1;
    }
    if (lt_trace(op, ts, n, at, &out->t) != LT_OK) {
        printf("FAIL chain: lt_trace(%s) failed: %s\n", dt_op_names[op], lt_last_error());
        ref_array_free(&out->r);
        return -1;
    }
    return 0;
}

/* One random DAG of n_ops elementwise ops over 2-4 leaves (big: ~70k
 * elements, crossing fused-block and OpenMP boundaries). Leaves reach the
 * graph in a random input mode (data, pending, transposed or strided view). */
static int run_chain(int seed, int n_ops, int big)
{
    chain_val v[128];
    int nv = 0, bad = 0;
    static const int small_shapes[][3] = {{2, 4, 5}, {2, 1, 5}, {2, 4, 1}, {1, 5, 0}, {0, 0, 0}};
    static const int big_shapes[][3] = {{3, 700, 33}, {3, 1, 33}, {3, 700, 1}, {700, 33, 0}, {0, 0, 0}};
    const int (*leaf_shapes)[3] = big ? big_shapes : small_shapes;
    char log[4096];
    size_t lp = 0;
    int n_leaves = 2 + (int)dt_rng_int(0, 2);
    for (int i = 0; i < n_leaves; i++) {
        const int *ls = leaf_shapes[dt_rng_int(0, 4)];
        lt_shape s = ls[0] == 0 ? S(0) : ls[2] == 0 ? S(2, ls[0], ls[1]) : S(3, ls[0], ls[1], ls[2]);
        if (i == 0) s = S(3, leaf_shapes[0][0], leaf_shapes[0][1], leaf_shapes[0][2]);
        in_spec sp = dt_rng_int(0, 3) == 0 && i ? W(dt_rng_range(-2, 2), LT_F64) : T(s, LT_F32, G_NORM);
        char err[256];
        dev_in d;
        int mode = (int)dt_rng_int(0, N_MODES - 1);
        if (dt_make_input(&sp, mode, &d, err, sizeof err)) {
            printf("FAIL chain %d: %s\n", seed, err);
            for (int k = 0; k < nv; k++) { lt_tensor_release(v[k].t); ref_array_free(&v[k].r); }
            return 1;
        }
        v[nv].t = d.t;
        v[nv].r = d.r;
        char sh[64];
        dt_shape_str(&sp.shape, sh, sizeof sh);
        lp += (size_t)snprintf(log + lp, sizeof log - lp, "v%d=%s%s%s; ", nv,
                               sp.kind == K_WRAPPED ? "wrapped" : "leaf", sh,
                               sp.kind == K_WRAPPED ? "" : mode == M_DATA ? "" :
                               mode == M_PENDING ? "(pending)" : mode == M_TRANSPOSED ?
                               "(transposed view)" : "(strided view)");
        nv++;
    }
    for (int i = 0; i < n_ops && nv < 120; i++) {
        int r = (int)dt_rng_int(0, 9);
        chain_val tmp[3], res;
        lt_attrs at = A(0);
        lt_op op;
        int a = (int)dt_rng_int(0, nv - 1), b = (int)dt_rng_int(0, nv - 1);
        if (r < 4) {
            op = chain_unary[dt_rng_int(0, sizeof chain_unary / sizeof chain_unary[0] - 1)];
            if (op == LT_OP_exp) {             /* exp(tanh(x)) keeps values bounded */
                tmp[0] = v[a];
                if (chain_apply(LT_OP_tanh, tmp, 1, &at, &res)) { bad = 1; break; }
                v[nv++] = res;
                lp += (size_t)snprintf(log + lp, lp < sizeof log ? sizeof log - lp : 0, "v%d=tanh(v%d); ", nv - 1, a);
                a = nv - 1;
            }
            tmp[0] = v[a];
            if (chain_apply(op, tmp, 1, &at, &res)) { bad = 1; break; }
            lp += (size_t)snprintf(log + lp, lp < sizeof log ? sizeof log - lp : 0, "v%d=%s(v%d); ", nv, dt_op_names[op], a);
        } else if (r < 8) {
            op = chain_binary[dt_rng_int(0, sizeof chain_binary / sizeof chain_binary[0] - 1)];
            if (op == LT_OP_div) {             /* x / (1 + |y|) */
                tmp[0] = v[b];
                if (chain_apply(LT_OP_abs, tmp, 1, &at, &res)) { bad = 1; break; }
                v[nv++] = res;
                chain_val one;
                char err[256];
                dev_in d;
                in_spec sp = W(1.0, LT_F64);
                if (dt_make_input(&sp, 0, &d, err, sizeof err)) { bad = 1; break; }
                one.t = d.t;
                one.r = d.r;
                tmp[0] = v[nv - 1];
                tmp[1] = one;
                if (chain_apply(LT_OP_add, tmp, 2, &at, &res)) { bad = 1; dt_dev_free(&d, 1); break; }
                dt_dev_free(&d, 1);
                v[nv++] = res;
                lp += (size_t)snprintf(log + lp, lp < sizeof log ? sizeof log - lp : 0, "v%d=1+|v%d|; ", nv - 1, b);
                b = nv - 1;
            }
            tmp[0] = v[a];
            tmp[1] = v[b];
            if (chain_apply(op, tmp, 2, &at, &res)) { bad = 1; break; }
            lp += (size_t)snprintf(log + lp, lp < sizeof log ? sizeof log - lp : 0, "v%d=%s(v%d, v%d); ", nv, dt_op_names[op], a, b);
        } else if (r == 8) {
            op = LT_OP_lerp;
            int c = (int)dt_rng_int(0, nv - 1);
            tmp[0] = v[a];
            tmp[1] = v[b];
            tmp[2] = v[c];
            if (chain_apply(op, tmp, 3, &at, &res)) { bad = 1; break; }
            lp += (size_t)snprintf(log + lp, lp < sizeof log ? sizeof log - lp : 0, "v%d=lerp(v%d, v%d, v%d); ", nv, a, b, c);
        } else {
            /* a scalar parameter: x * s + t */
            chain_val s1;
            char err[256];
            dev_in d;
            in_spec sp = W(dt_rng_range(-1.5, 1.5), LT_F64);
            if (dt_make_input(&sp, 0, &d, err, sizeof err)) { bad = 1; break; }
            s1.t = d.t;
            s1.r = d.r;
            tmp[0] = v[a];
            tmp[1] = s1;
            op = LT_OP_mul;
            int rc = chain_apply(op, tmp, 2, &at, &res);
            dt_dev_free(&d, 1);
            if (rc) { bad = 1; break; }
            lp += (size_t)snprintf(log + lp, lp < sizeof log ? sizeof log - lp : 0, "v%d=v%d*%g; ", nv, a, sp.value);
        }
        v[nv++] = res;
    }
    /* read the last value and two random others (multi-root sync) */
    int picks[3] = {nv - 1, (int)dt_rng_int(0, nv - 1), (int)dt_rng_int(0, nv - 1)};
    lt_tensor *roots[3] = {v[picks[0]].t, v[picks[1]].t, v[picks[2]].t};
    if (!bad && lt_sync(roots, 3, LT_SYNC_EXPLICIT, 1) != LT_OK) {
        printf("FAIL chain %d: lt_sync failed: %s\n  %s\n", seed, lt_last_error(), log);
        bad = 1;
    }
    for (int k = 0; k < 3 && !bad; k++) {
        chain_val *c = &v[picks[k]];
        double *got = NULL;
        char desc[4300];
        snprintf(desc, sizeof desc, "chain seed %d (value v%d of %d): %s", seed, picks[k], nv, log);
        if (dt_read_tensor(c->t, &got)) {
            dt_report_fail(desc, "read failed: %s", lt_last_error());
            bad = 1;
        } else if (dt_numel(lt_tensor_shape(c->t)) != dt_numel(&c->r.shape)) {
            dt_report_fail(desc, "dt_numel %lld, want %lld", (long long)dt_numel(lt_tensor_shape(c->t)),
                        (long long)dt_numel(&c->r.shape));
            bad = 1;
        } else {
            tol_t tol = {1e-4, 1e-5};
            bad = dt_compare(desc, &c->r, got, tol);
        }
        free(got);
    }
    for (int k = 0; k < nv; k++) {
        lt_tensor_release(v[k].t);
        ref_array_free(&v[k].r);
    }
    return bad;
}

static void test_random_chains(void **st)
{
    int failed = 0, n = getenv("LT_DIFF_CHAINS") ? atoi(getenv("LT_DIFF_CHAINS")) : 60;
    int nbig = n / 6 + 1;
    for (int s = 0; s < n + nbig; s++) {
        dt_rng_state = 0x1234567ull + (uint64_t)s * 7919;
        failed += run_chain(s, 5 + (int)dt_rng_int(0, 25), s >= n);
    }
    printf("%-11s %6d %6d   (%d of them on ~70k-element shapes)\n", "chains", n + nbig, failed, nbig);
    assert_int_equal(failed, 0);
}

/* ------------------------------------------------- cache semantics */

/* out = x * s + y for device x, y and a wrapped scalar s; compared with the
 * reference. Returns 0 when equal. */
static int axpy_case(lt_tensor *x, lt_tensor *y, const ref_array *rx, const ref_array *ry,
                     double sv)
{
    lt_tensor *s = NULL, *m = NULL, *o = NULL;
    ref_array rs, rm, ro;
    int bad = 1;
    double *got = NULL;
    lt_shape z = S(0);
    ref_array_init(&rs, LT_F64, &z);
    rs.wrapped = 1;
    rs.v[0] = sv;
    ref_array in1[2] = {*rx, rs};
    ref_eval(LT_OP_mul, NULL, in1, 2, &rm);
    ref_array in2[2] = {rm, *ry};
    ref_eval(LT_OP_add, NULL, in2, 2, &ro);
    char desc[128];
    snprintf(desc, sizeof desc, "cache: x * %g + y", sv);
    if (lt_scalar(0, sv, LT_F64, 1, &s) == LT_OK && lt_trace2(LT_OP_mul, x, s, NULL, &m) == LT_OK &&
        lt_trace2(LT_OP_add, m, y, NULL, &o) == LT_OK && dt_read_tensor(o, &got) == 0)
        bad = dt_compare(desc, &ro, got, TOL);
    else
        dt_report_fail(desc, "API failed: %s", lt_last_error());
    free(got);
    lt_tensor_release(s);
    lt_tensor_release(m);
    lt_tensor_release(o);
    ref_array_free(&rs);
    ref_array_free(&rm);
    ref_array_free(&ro);
    return bad;
}

static void test_cache_semantics(void **st)
{
    in_spec sx = T(D(3, 4), LT_F32, G_NORM), sy = T(D(3, 4), LT_F32, G_NORM);
    dev_in x, y;
    char err[256];
    assert_int_equal(dt_make_input(&sx, M_DATA, &x, err, sizeof err), 0);
    assert_int_equal(dt_make_input(&sy, M_DATA, &y, err, sizeof err), 0);
    /* scalar parameters: one compile serves every value */
    int bad = axpy_case(x.t, y.t, &x.r, &y.r, 2.5);
    int64_t u0 = lt_counter_value("UncachedCompile");
    assert_true(u0 > 0);    /* the counter is live, so the check below means something */
    double vals[] = {-3.25, 0.5, 1e3, 2.5, -7.125};
    for (int i = 0; i < 5; i++) bad += axpy_case(x.t, y.t, &x.r, &y.r, vals[i]);
    int64_t recompiles = lt_counter_value("UncachedCompile") - u0;
    if (recompiles != 0) {
        printf("FAIL cache: changing a wrapped scalar value recompiled %lld times (want 0)\n",
               (long long)recompiles);
        bad++;
    }
    /* constants 0, 1, -1 are baked in: still correct values */
    bad += axpy_case(x.t, y.t, &x.r, &y.r, 0);
    bad += axpy_case(x.t, y.t, &x.r, &y.r, 1);
    bad += axpy_case(x.t, y.t, &x.r, &y.r, -1);
    bad += axpy_case(x.t, y.t, &x.r, &y.r, 3);
    /* aliasing: x*s + x must not reuse the program of x*s + y wrongly */
    bad += axpy_case(x.t, x.t, &x.r, &x.r, 2.5);
    bad += axpy_case(x.t, y.t, &x.r, &y.r, 2.5);
    bad += axpy_case(y.t, y.t, &y.r, &y.r, 2.5);
    bad += axpy_case(y.t, x.t, &y.r, &x.r, 2.5);
    dt_dev_free(&x, 1);
    dt_dev_free(&y, 1);
    assert_int_equal(bad, 0);
}

/* ------------------------------------------------------ error paths */

static void test_errors(void **st)
{
    lt_tensor *a = NULL, *b = NULL, *c = NULL;
    float z[12] = {0};
    lt_shape s1 = S(2, 2, 3), s2 = S(1, 4);
    assert_int_equal(lt_tensor_from_host(0, z, LT_F32, &s1, &a), LT_OK);
    assert_int_equal(lt_tensor_from_host(0, z, LT_F32, &s2, &b), LT_OK);
    assert_int_equal(lt_trace2(LT_OP_add, a, b, NULL, &c), LT_ERR_SHAPE);
    assert_null(c);
    assert_non_null(strstr(lt_last_error(), "[2, 3]"));
    assert_non_null(strstr(lt_last_error(), "[4]"));
    assert_int_equal(lt_trace2(LT_OP_mm, a, a, NULL, &c), LT_ERR_SHAPE);
    lt_attrs at = A(3, 0, 1, 5);  /* permute with 3 dims on 2-d */
    assert_int_not_equal(lt_trace1(LT_OP_permute, a, &at, &c), LT_OK);
    lt_tensor_release(a);
    lt_tensor_release(b);
}

static int setup(void **st)
{
    return lt_init() == LT_OK ? 0 : -1;
}

static int teardown(void **st)
{
    lt_shutdown();
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_random_chains),
        cmocka_unit_test(test_cache_semantics),
    };
    return cmocka_run_group_tests_name("ops_chains", tests, setup, teardown);
}
