/*
 * tests/c/support_linalg.h — the defining identities of the linear-algebra
 * results, as checks (support_linalg.c): what an inverse, a symmetric
 * eigen-decomposition and an SVD must satisfy whatever algorithm made them
 * (eigenvectors and singular vectors are unique only up to sign, so tests
 * compare identities, not entries). Row-major double matrices. Each check
 * returns 0, or 1 after printing "FAIL <what>: <which identity>, <error>".
 */
#ifndef LT_SUPPORT_LINALG_H
#define LT_SUPPORT_LINALG_H

#include <stdint.h>

/* max |A X - I| and max |X A - I| <= tol * n * |A|_max * |X|_max */
int la_check_inv(const char *what, int64_t n, const double *a, const double *x, double tol);

/* symmetric a (n x n): w ascending; |A V - V diag(w)| <= tol * n * |A|_max;
 * |V^T V - I| <= tol * n; each column's largest-magnitude entry positive.
 * v NULL: only the eigenvalues, against w_ref (ascending) within tol * |A|. */
int la_check_eigh(const char *what, int64_t n, const double *a, const double *w,
                  const double *v, const double *w_ref, double tol);

/* a (m x n), k = min(m, n), U [m, full ? m : k], Vh [full ? n : k, n]: s
 * descending >= 0; |U[:, :k] diag(s) Vh[:k] - A| <= tol * max(m, n) * |A|_max;
 * orthonormal columns of U and rows of Vh within tol * max(m, n). */
int la_check_svd(const char *what, int64_t m, int64_t n, const double *a, int full,
                 const double *s, const double *u, const double *vh, double tol);

#endif
