/* tests/c/test_linalg.c — lazy/kernels/linalg.c's routines on one matrix
 * (lt_linalg_inv, lt_linalg_eigh, lt_linalg_svd) against references: an
 * inverse by Gauss-Jordan with full pivoting (another algorithm), closed
 * forms (2x2 symmetric eigenvalues, diagonal and permuted matrices), the
 * singular values of B against the eigenvalues of B^T B, and every result's
 * defining identities (support_linalg.h); LAPACK's info for singular
 * matrices; rank-deficient and empty matrices; the upper/lower triangle
 * choice; full and reduced SVD of tall, wide and square matrices. The table
 * ops over batches and views: test_ops_diff.c (cases_linalg). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "linalg.h"
#include "support_linalg.h"

static unsigned rng = 12345;
static double rnd(void)
{
    rng = rng * 1103515245u + 12345u;
    return (double)((rng >> 8) & 0xFFFF) / 32768.0 - 1.0;
}

static double *mat(int64_t r, int64_t c)
{
    double *a = malloc(sizeof(double) * (size_t)(r * c + 1));
    for (int64_t i = 0; i < r * c; i++) a[i] = rnd();
    return a;
}

static double *copy(const double *a, int64_t n)
{
    double *b = malloc(sizeof(double) * (size_t)(n + 1));
    memcpy(b, a, sizeof(double) * (size_t)n);
    return b;
}

/* Gauss-Jordan with full pivoting on [A | I] (reference inverse) */
static void ref_inv(int64_t n, const double *a0, double *x)
{
    double *a = copy(a0, n * n);
    int64_t *cp = malloc(sizeof(int64_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n * n; i++) x[i] = (i / n) == (i % n);
    for (int64_t k = 0; k < n; k++) {
        int64_t pr = k, pc = k;
        for (int64_t i = k; i < n; i++)
            for (int64_t j = k; j < n; j++)
                if (fabs(a[i * n + j]) > fabs(a[pr * n + pc])) { pr = i; pc = j; }
        for (int64_t j = 0; j < n; j++) {
            double t = a[k * n + j]; a[k * n + j] = a[pr * n + j]; a[pr * n + j] = t;
            t = x[k * n + j]; x[k * n + j] = x[pr * n + j]; x[pr * n + j] = t;
        }
        for (int64_t i = 0; i < n; i++) {   /* swap columns k, pc of a */
            double t = a[i * n + k]; a[i * n + k] = a[i * n + pc]; a[i * n + pc] = t;
        }
        cp[k] = pc;
        double d = a[k * n + k];
        for (int64_t j = 0; j < n; j++) { a[k * n + j] /= d; x[k * n + j] /= d; }
        for (int64_t i = 0; i < n; i++) {
            if (i == k) continue;
            double f = a[i * n + k];
            for (int64_t j = 0; j < n; j++) { a[i * n + j] -= f * a[k * n + j]; x[i * n + j] -= f * x[k * n + j]; }
        }
    }
    /* column swaps of A are row swaps of its inverse, undone in reverse */
    for (int64_t k = n - 1; k >= 0; k--)
        for (int64_t j = 0; j < n; j++) {
            double t = x[k * n + j]; x[k * n + j] = x[cp[k] * n + j]; x[cp[k] * n + j] = t;
        }
    free(a);
    free(cp);
}

static void test_inverse(void **st)
{
    int64_t ns[] = {0, 1, 2, 3, 5, 8, 17, 40};
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        int64_t n = ns[c];
        double *a = mat(n, n);
        for (int64_t i = 0; i < n; i++) a[i * n + i] += 2;   /* well conditioned */
        double *w = copy(a, n * n), *x = mat(n, n), *r = mat(n, n);
        assert_int_equal(lt_linalg_inv(n, w, x), 0);
        char what[64];
        snprintf(what, sizeof what, "inv %lldx%lld", (long long)n, (long long)n);
        assert_int_equal(la_check_inv(what, n, a, x, 1e-13), 0);
        ref_inv(n, a, r);
        for (int64_t i = 0; i < n * n; i++) assert_true(fabs(x[i] - r[i]) <= 1e-12 * (1 + fabs(r[i])));
        free(a); free(w); free(x); free(r);
    }
    /* a pivot needing a row swap (a zero on the diagonal) */
    double p[] = {0, 1, 1, 0}, px[4];
    assert_int_equal(lt_linalg_inv(2, p, px), 0);
    assert_true(px[0] == 0 && px[1] == 1 && px[2] == 1 && px[3] == 0);
}

static void test_inverse_singular_info(void **st)
{
    double x[9];
    double a1[] = {1, 2, 2, 4};                      /* second pivot 0 */
    assert_int_equal(lt_linalg_inv(2, a1, x), 2);
    double a2[] = {0, 0, 0, 0};
    assert_int_equal(lt_linalg_inv(2, a2, x), 1);
    double a3[] = {1, 0, 0, 0, 0, 0, 0, 0, 1};      /* zero middle column */
    assert_int_equal(lt_linalg_inv(3, a3, x), 2);
    assert_true(isinf(x[4]) || isnan(x[4]));
}

static double *sym(int64_t n)
{
    double *a = mat(n, n);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) a[j * n + i] = a[i * n + j];
    return a;
}

static void test_eigh(void **st)
{
    int64_t ns[] = {0, 1, 2, 3, 7, 16, 33};
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++)
        for (int upper = 0; upper < 2; upper++) {
            int64_t n = ns[c];
            double *a = sym(n), *g = copy(a, n * n);
            /* garbage in the triangle that must not be read */
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < n; j++)
                    if (upper ? i > j : i < j) g[i * n + j] = 1e3 * rnd();
            double *w = malloc(sizeof(double) * (size_t)(n + 1)), *v = mat(n, n);
            int sweeps = lt_linalg_eigh(n, g, upper, w, v);
            assert_true(sweeps >= 0 && sweeps < 30);
            char what[64];
            snprintf(what, sizeof what, "eigh %lld upper=%d", (long long)n, upper);
            assert_int_equal(la_check_eigh(what, n, a, w, v, NULL, 1e-13), 0);
            /* values only: the same values */
            double *g2 = copy(a, n * n), *w2 = malloc(sizeof(double) * (size_t)(n + 1));
            lt_linalg_eigh(n, g2, upper, w2, NULL);
            assert_int_equal(la_check_eigh(what, n, a, w2, NULL, w, 1e-13), 0);
            free(a); free(g); free(w); free(v); free(g2); free(w2);
        }
}

static void test_eigh_closed_forms(void **st)
{
    /* [[a, b], [b, c]]: (a + c)/2 -+ sqrt(((a - c)/2)^2 + b^2) */
    double a = 1.5, b = -0.75, c = -2;
    double m[] = {a, b, b, c}, w[2], v[4];
    lt_linalg_eigh(2, m, 0, w, v);
    double h = sqrt((a - c) * (a - c) / 4 + b * b);
    assert_true(fabs(w[0] - ((a + c) / 2 - h)) < 1e-15 && fabs(w[1] - ((a + c) / 2 + h)) < 1e-15);
    /* diagonal: sorted values, unit vectors with +1 */
    double d[] = {3, 0, 0, 0, -1, 0, 0, 0, 2}, dw[3], dv[9];
    lt_linalg_eigh(3, d, 1, dw, dv);
    assert_true(dw[0] == -1 && dw[1] == 2 && dw[2] == 3);
    assert_true(dv[1 * 3 + 0] == 1 && dv[2 * 3 + 1] == 1 && dv[0 * 3 + 2] == 1);
    /* repeated eigenvalues: 2 I + e e^T (n = 6): values 2 (x5) and 2 + 6 */
    double r[36], r0[36], rw[6], rv[36];
    for (int i = 0; i < 36; i++) r[i] = r0[i] = (i / 6 == i % 6) * 2.0 + 1.0;
    lt_linalg_eigh(6, r, 0, rw, rv);
    for (int i = 0; i < 5; i++) assert_true(fabs(rw[i] - 2) < 1e-14);
    assert_true(fabs(rw[5] - 8) < 1e-14);
    assert_int_equal(la_check_eigh("eigh repeated", 6, r0, rw, rv, NULL, 1e-13), 0);
}

static void check_svd_case(int64_t m, int64_t n, int full, double *a, const char *kind)
{
    int64_t k = m < n ? m : n, uc = full ? m : k, vr = full ? n : k;
    double *w = copy(a, m * n), *s = malloc(sizeof(double) * (size_t)(k + 1));
    double *u = malloc(sizeof(double) * (size_t)(m * uc + 1)), *vh = malloc(sizeof(double) * (size_t)(vr * n + 1));
    assert_int_equal(lt_linalg_svd(m, n, w, full, s, u, vh), 0);
    char what[96];
    snprintf(what, sizeof what, "svd %s %lldx%lld full=%d", kind, (long long)m, (long long)n, full);
    assert_int_equal(la_check_svd(what, m, n, a, full, s, u, vh, 1e-13), 0);
    /* s^2 = the eigenvalues of A^T A (or A A^T), the largest k of them */
    int64_t q = m >= n ? n : m;
    double *g = malloc(sizeof(double) * (size_t)(q * q + 1)), *gw = malloc(sizeof(double) * (size_t)(q + 1));
    for (int64_t i = 0; i < q; i++)
        for (int64_t j = 0; j < q; j++) {
            double d = 0;
            for (int64_t t = 0; t < (m >= n ? m : n); t++)
                d += m >= n ? a[t * n + i] * a[t * n + j] : a[i * n + t] * a[j * n + t];
            g[i * q + j] = d;
        }
    lt_linalg_eigh(q, g, 0, gw, NULL);
    double smax = k ? s[0] : 0;
    for (int64_t i = 0; i < k; i++)
        assert_true(fabs(s[i] * s[i] - gw[q - 1 - i]) <= 1e-12 * (1 + smax * smax));
    /* values only */
    double *w2 = copy(a, m * n), *s2 = malloc(sizeof(double) * (size_t)(k + 1));
    assert_int_equal(lt_linalg_svd(m, n, w2, 0, s2, NULL, NULL), 0);
    for (int64_t i = 0; i < k; i++) assert_true(fabs(s2[i] - s[i]) <= 1e-14 * (1 + smax));
    free(w); free(s); free(u); free(vh); free(g); free(gw); free(w2); free(s2);
}

static void test_svd(void **st)
{
    int64_t sh[][2] = {{0, 3}, {3, 0}, {1, 1}, {4, 3}, {3, 4}, {7, 7}, {20, 5}, {5, 20}, {1, 6}};
    for (size_t c = 0; c < sizeof sh / sizeof sh[0]; c++)
        for (int full = 0; full < 2; full++) {
            int64_t m = sh[c][0], n = sh[c][1];
            double *a = mat(m, n);
            check_svd_case(m, n, full, a, "random");
            /* rank 1: an outer product (the bases must still be completed) */
            double *x = mat(m, 1), *y = mat(1, n);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) a[i * n + j] = x[i] * y[j];
            check_svd_case(m, n, full, a, "rank1");
            memset(a, 0, sizeof(double) * (size_t)(m * n));
            check_svd_case(m, n, full, a, "zero");
            free(a); free(x); free(y);
        }
    /* a diagonal with known values, permuted: s sorted */
    double d[] = {0, 2, 0, 0, 0, -5, 1, 0, 0}, s[3], u[9], vh[9];
    lt_linalg_svd(3, 3, d, 0, s, u, vh);
    assert_true(fabs(s[0] - 5) < 1e-15 && fabs(s[1] - 2) < 1e-15 && fabs(s[2] - 1) < 1e-15);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inverse),
        cmocka_unit_test(test_inverse_singular_info),
        cmocka_unit_test(test_eigh),
        cmocka_unit_test(test_eigh_closed_forms),
        cmocka_unit_test(test_svd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
