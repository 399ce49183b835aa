/* tests/c/support_linalg.c — see support_linalg.h. */
#include "support_linalg.h"

#include <math.h>
#include <stdio.h>

static double amax(const double *a, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

static int fail(const char *what, const char *identity, double err, double lim)
{
    printf("FAIL %s: %s, error %g > %g\n", what, identity, err, lim);
    return 1;
}

int la_check_inv(const char *what, int64_t n, const double *a, const double *x, double tol)
{
    double lim = tol * (double)(n > 0 ? n : 1) * amax(a, n * n) * amax(x, n * n), e1 = 0, e2 = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double ax = 0, xa = 0;
            for (int64_t k = 0; k < n; k++) {
                ax += a[i * n + k] * x[k * n + j];
                xa += x[i * n + k] * a[k * n + j];
            }
            e1 = fmax(e1, fabs(ax - (i == j)));
            e2 = fmax(e2, fabs(xa - (i == j)));
        }
    if (!(e1 <= lim)) return fail(what, "A X = I", e1, lim);
    if (!(e2 <= lim)) return fail(what, "X A = I", e2, lim);
    return 0;
}

int la_check_eigh(const char *what, int64_t n, const double *a, const double *w,
                  const double *v, const double *w_ref, double tol)
{
    double an = amax(a, n * n), nn = (double)(n > 0 ? n : 1);
    for (int64_t i = 1; i < n; i++)
        if (!(w[i - 1] <= w[i])) return fail(what, "eigenvalues ascending", w[i - 1] - w[i], 0);
    if (w_ref)
        for (int64_t i = 0; i < n; i++)
            if (!(fabs(w[i] - w_ref[i]) <= tol * nn * fmax(an, 1e-300)))
                return fail(what, "eigenvalue vs reference", fabs(w[i] - w_ref[i]), tol * nn * an);
    if (!v) return 0;
    double er = 0, eo = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double av = 0, vv = 0;
            for (int64_t k = 0; k < n; k++) {
                av += a[i * n + k] * v[k * n + j];
                vv += v[k * n + i] * v[k * n + j];
            }
            er = fmax(er, fabs(av - v[i * n + j] * w[j]));
            eo = fmax(eo, fabs(vv - (i == j)));
        }
    if (!(er <= tol * nn * an)) return fail(what, "A V = V diag(w)", er, tol * nn * an);
    if (!(eo <= tol * nn)) return fail(what, "V^T V = I", eo, tol * nn);
    for (int64_t j = 0; j < n; j++) {
        int64_t b = 0;
        for (int64_t k = 1; k < n; k++)
            if (fabs(v[k * n + j]) > fabs(v[b * n + j])) b = k;
        if (v[b * n + j] < 0) return fail(what, "largest entry of each eigenvector positive", v[b * n + j], 0);
    }
    return 0;
}

int la_check_svd(const char *what, int64_t m, int64_t n, const double *a, int full,
                 const double *s, const double *u, const double *vh, double tol)
{
    int64_t k = m < n ? m : n, uc = full ? m : k, vr = full ? n : k;
    double an = amax(a, m * n), big = (double)(m > n ? m : n), lim = tol * big * fmax(an, 1e-300);
    for (int64_t i = 0; i < k; i++) {
        if (!(s[i] >= 0)) return fail(what, "singular values >= 0", s[i], 0);
        if (i && !(s[i - 1] >= s[i])) return fail(what, "singular values descending", s[i] - s[i - 1], 0);
    }
    double e = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double r = 0;
            for (int64_t q = 0; q < k; q++) r += u[i * uc + q] * s[q] * vh[q * n + j];
            e = fmax(e, fabs(r - a[i * n + j]));
        }
    if (!(e <= lim)) return fail(what, "U diag(S) Vh = A", e, lim);
    e = 0;
    for (int64_t p = 0; p < uc; p++)
        for (int64_t q = 0; q < uc; q++) {
            double d = 0;
            for (int64_t i = 0; i < m; i++) d += u[i * uc + p] * u[i * uc + q];
            e = fmax(e, fabs(d - (p == q)));
        }
    if (!(e <= tol * big)) return fail(what, "U^T U = I", e, tol * big);
    e = 0;
    for (int64_t p = 0; p < vr; p++)
        for (int64_t q = 0; q < vr; q++) {
            double d = 0;
            for (int64_t j = 0; j < n; j++) d += vh[p * n + j] * vh[q * n + j];
            e = fmax(e, fabs(d - (p == q)));
        }
    if (!(e <= tol * big)) return fail(what, "Vh Vh^T = I", e, tol * big);
    return 0;
}
