/* tests/c/support_diff_linalg.c — test_ops_diff's cases of the linear-algebra
 * kind (dt_cases_linalg, support_diff.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_diff.h"
#include "support_linalg.h"

/* inv / eigh / svd through the API over a batch [2, 3, m, n], from device
 * data and from a transposed view (the kernel reads strided input): each
 * matrix's packed result must satisfy the decomposition's identities
 * (support_linalg.h; vectors are unique only up to sign). The routines
 * themselves against references: test_linalg.c. */
void dt_cases_linalg(lt_op op)
{
    int k = dt_op_kind[op];
    static const int64_t sh[][2] = {{3, 3}, {5, 5}, {1, 1}, {4, 2}, {2, 4}, {0, 0}, {6, 3}};
    lt_dtype dts[] = {LT_F32, LT_F64};
    for (int d = 0; d < 2; d++)
        for (size_t c = 0; c < sizeof sh / sizeof sh[0]; c++)
            for (int mode = 0; mode < 2; mode++)
                for (int flag = 0; flag < 2; flag++) {
                    int64_t m = sh[c][0], n = sh[c][1];
                    if (op != LT_OP_svd && m != n) continue;
                    dt_fam[k].cases++;
                    dt_op_cases[op]++;
                    int64_t B = 6, mn = m * n;
                    double *a = malloc(sizeof(double) * (size_t)(B * mn + 1));
                    double *host = malloc(sizeof(double) * (size_t)(B * mn + 1));
                    for (int64_t i = 0; i < B * mn; i++)
                        a[i] = dt_store_round(dt_rng_range(-1, 1), dts[d]);
                    for (int64_t b = 0; b < B; b++) {
                        double *ab = a + b * mn;
                        if (op == LT_OP_eigh)   /* symmetric (the kernel reads one triangle) */
                            for (int64_t i = 0; i < m; i++)
                                for (int64_t j = 0; j < i; j++) ab[j * n + i] = ab[i * n + j];
                        if (op == LT_OP_inv)
                            for (int64_t i = 0; i < n; i++) ab[i * n + i] += 3;
                        /* mode 1: stored transposed, read through a permute */
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < n; j++)
                                host[b * mn + (mode ? j * m + i : i * n + j)] = ab[i * n + j];
                    }
                    lt_shape xs = mode ? D(2, 3, n, m) : D(2, 3, m, n);
                    lt_tensor *x = NULL, *v = NULL, *y = NULL;
                    int bad = lt_tensor_from_host(0, host, LT_F64, &xs, &x) != LT_OK;
                    lt_tensor *xd = NULL;
                    if (!bad && dts[d] != LT_F64) {
                        lt_attrs ca = A(1, dts[d]);
                        bad |= lt_trace1(LT_OP_cast, x, &ca, &xd) != LT_OK;
                    } else if (!bad) {
                        xd = lt_tensor_retain(x);
                    }
                    if (!bad && mode) {
                        lt_attrs pa = A(4, 0, 1, 3, 2);
                        bad |= lt_trace1(LT_OP_permute, xd, &pa, &v) != LT_OK;
                    } else if (!bad) {
                        v = lt_tensor_retain(xd);
                    }
                    lt_attrs at = A(1, flag);
                    if (!bad) bad |= lt_trace1(op, v, &at, &y) != LT_OK;
                    double *got = NULL;
                    if (!bad) bad |= dt_read_tensor(y, &got) != 0;
                    char what[128];
                    snprintf(what, sizeof what, "%s %s [2, 3, %lld, %lld] mode %d flag %d",
                             dt_op_names[op], dt_dtn(dts[d]), (long long)m, (long long)n, mode, flag);
                    if (bad) printf("FAIL %s: %s\n", what, lt_last_error());
                    const lt_shape *ys = bad ? NULL : lt_tensor_shape(y);
                    int64_t R = ys ? ys->dims[2] : 0, C = ys ? ys->dims[3] : 0;
                    double tol = dts[d] == LT_F64 ? 1e-12 : dt_bf16_mode ? 2e-2 : 1e-6;
                    for (int64_t b = 0; !bad && b < B; b++) {
                        const double *ab = a + b * mn, *yb = got + b * R * C;
                        if (op == LT_OP_inv) {
                            double *xi = malloc(sizeof(double) * (size_t)(mn + 1));
                            for (int64_t i = 0; i < n; i++)
                                for (int64_t j = 0; j < n; j++) xi[i * n + j] = yb[i * C + j];
                            bad |= la_check_inv(what, n, ab, xi, tol);
                            if (n > 0 && yb[n] != 0) { printf("FAIL %s: info %g\n", what, yb[n]); bad = 1; }
                            free(xi);
                        } else if (op == LT_OP_eigh) {
                            bad |= la_check_eigh(what, n, ab, yb, yb + n, NULL, tol);
                        } else {
                            int64_t kk = m < n ? m : n, uc = flag ? m : kk, vr = flag ? n : kk;
                            double *u = malloc(sizeof(double) * (size_t)(m * uc + 1));
                            double *vh = malloc(sizeof(double) * (size_t)(vr * n + 1));
                            for (int64_t i = 0; i < m; i++)
                                for (int64_t j = 0; j < uc; j++) u[i * uc + j] = yb[i * C + j];
                            for (int64_t i = 0; i < vr; i++)
                                for (int64_t j = 0; j < n; j++) vh[i * n + j] = yb[(m + 1 + i) * C + j];
                            bad |= la_check_svd(what, m, n, ab, flag, yb + m * C, u, vh, tol);
                            free(u);
                            free(vh);
                        }
                    }
                    if (bad) dt_fam[k].failed++;
                    free(got);
                    free(a);
                    free(host);
                    lt_tensor_release(x);
                    lt_tensor_release(xd);
                    lt_tensor_release(v);
                    lt_tensor_release(y);
                }
}
