/* tests/c/support_diff_random.c — test_ops_diff's property-checked cases:
 * random ops (statistics and seeding) and collectives on a world of 1
 * (dt_cases_random, dt_cases_collective; support_diff.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_diff.h"


static int trace_rand(lt_op op, int64_t seed, lt_dtype dt, int64_t n, double **vals)
{
    lt_tensor *s = NULL, *r = NULL;
    lt_shape zs = S(0);
    int rc = -1;
    if (lt_tensor_from_host(0, &seed, LT_I64, &zs, &s) != LT_OK) goto out;
    lt_attrs at = A(3, dt, 1, (int)n);
    if (lt_trace1(op, s, &at, &r) != LT_OK) goto out;
    if (lt_tensor_dtype(r) != dt || lt_tensor_shape(r)->ndim != 1 ||
        lt_tensor_shape(r)->dims[0] != n)
        goto out;
    rc = dt_read_tensor(r, vals);
out:
    if (rc) printf("FAIL %s seed %lld dtype %s n %lld: %s\n", dt_op_names[op], (long long)seed,
                   dt_dtn(dt), (long long)n, lt_last_error());
    lt_tensor_release(s);
    lt_tensor_release(r);
    return rc;
}

void dt_cases_random(lt_op op)
{
    int k = dt_op_kind[op];
    lt_dtype dts[] = {LT_F32, LT_F64, LT_BF16};
    for (int d = 0; d < 3; d++) {
        int64_t n = 200000;
        double *a = NULL, *b = NULL, *c = NULL;
        dt_fam[k].cases++;
        dt_op_cases[op]++;
        int bad = trace_rand(op, 42, dts[d], n, &a) || trace_rand(op, 42, dts[d], n, &b) ||
                  trace_rand(op, 43, dts[d], n, &c);
        if (!bad) {
            int same = 1, diff = 0;
            double mean = 0, m2 = 0, lo = INFINITY, hi = -INFINITY;
            for (int64_t i = 0; i < n; i++) {
                same &= a[i] == b[i];
                diff += a[i] != c[i];
                mean += a[i];
                m2 += a[i] * a[i];
                lo = fmin(lo, a[i]);
                hi = fmax(hi, a[i]);
            }
            mean /= (double)n;
            double var = m2 / (double)n - mean * mean;
            double em = op == LT_OP_rand_uniform ? 0.5 : 0.0;
            double ev = op == LT_OP_rand_uniform ? 1.0 / 12 : 1.0;
            double vtol = dts[d] == LT_BF16 ? 0.03 : 0.02;
            if (!same) { printf("FAIL %s %s: same seed, different values\n", dt_op_names[op], dt_dtn(dts[d])); bad = 1; }
            if (diff < n / 2) { printf("FAIL %s %s: seeds 42 and 43 agree on %lld of %lld\n", dt_op_names[op], dt_dtn(dts[d]), (long long)(n - diff), (long long)n); bad = 1; }
            if (fabs(mean - em) > 0.01 || fabs(var - ev) > vtol * ev) {
                printf("FAIL %s %s: mean %g (want %g), var %g (want %g)\n", dt_op_names[op], dt_dtn(dts[d]), mean, em, var, ev);
                bad = 1;
            }
            if (op == LT_OP_rand_uniform && (lo < 0 || hi >= 1)) {
                printf("FAIL %s %s: range [%g, %g] outside [0, 1)\n", dt_op_names[op], dt_dtn(dts[d]), lo, hi);
                bad = 1;
            }
            if (op == LT_OP_rand_normal && (hi < 3 || lo > -3)) {
                printf("FAIL %s %s: range [%g, %g] too narrow for N(0,1)\n", dt_op_names[op], dt_dtn(dts[d]), lo, hi);
                bad = 1;
            }
        }
        free(a);
        free(b);
        free(c);
        if (bad) dt_fam[k].failed++;
    }
}

/* collectives on a world of 1: identity (times scale for reductions) */
void dt_cases_collective(lt_op op)
{
    int k = dt_op_kind[op];
    double scales[] = {1.0, 0.5};
    for (int si = 0; si < 2; si++) {
        if ((op == LT_OP_all_gather || op == LT_OP_broadcast) && si) break;
        lt_attrs at = A(2, 0, 0);
        double scale = 1.0;
        if (op == LT_OP_all_reduce || op == LT_OP_reduce_scatter) {
            at.f[0] = scales[si];
            scale = scales[si];
        }
        in_spec sp = T(D(2, 4, 3), LT_F32, G_NORM);
        char desc[600], err[256];
        dt_describe(desc, sizeof desc, op, &at, &sp, 1, 0);
        dt_fam[k].cases++;
        dt_op_cases[op]++;
        dev_in d;
        lt_tensor *out = NULL;
        double *got = NULL;
        int bad = 1;
        if (dt_make_input(&sp, 0, &d, err, sizeof err)) {
            dt_report_fail(desc, "%s", err);
            dt_fam[k].failed++;
            continue;
        }
        if (lt_trace1(op, d.t, &at, &out) != LT_OK) {
            dt_report_fail(desc, "lt_trace failed: %s", lt_last_error());
        } else if (dt_numel(lt_tensor_shape(out)) != 24) {
            dt_report_fail(desc, "output dt_numel %lld, want 24", (long long)dt_numel(lt_tensor_shape(out)));
        } else if (dt_read_tensor(out, &got)) {
            dt_report_fail(desc, "read failed: %s", lt_last_error());
        } else {
            ref_array want = d.r;
            ref_array w2;
            ref_array_init(&w2, LT_F32, &sp.shape);
            for (int i = 0; i < 24; i++) w2.v[i] = dt_store_round(want.v[i] * scale, LT_F32);
            bad = dt_compare(desc, &w2, got, TOL);
            ref_array_free(&w2);
        }
        free(got);
        lt_tensor_release(out);
        dt_dev_free(&d, 1);
        if (bad) dt_fam[k].failed++;
    }
}
