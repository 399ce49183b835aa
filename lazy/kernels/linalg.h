/*
 * lazy/kernels/linalg.h — dense linear algebra on small matrices, in double
 * precision, one matrix at a time (linalg.c). The table ops inv, eigh and
 * svd (lt_kernel_linalg) run these over the batch of an input [.., m, n];
 * the C tests call them directly. Matrices are row-major and contiguous.
 * Every routine works for n == 0 (nothing to do).
 */
#ifndef LT_LINALG_H
#define LT_LINALG_H

#include <stdint.h>

/* Inverse of the n x n matrix a into x (n x n) by LU factorisation with
 * partial pivoting, as LAPACK's getrf + getrs against the identity. a is
 * overwritten (its LU factors). Returns 0, or LAPACK's info: the 1-based
 * index of the first pivot that is exactly zero (the matrix is singular;
 * x then holds infinities/NaN, as eager's values then are unspecified). */
int64_t lt_linalg_inv(int64_t n, double *a, double *x);

/* Eigen-decomposition of the symmetric n x n matrix a (only the lower
 * triangle is read when upper == 0, only the upper one otherwise; a is
 * overwritten) by cyclic Jacobi rotations until the off-diagonal part is
 * below DBL_EPSILON of the matrix norm (an entry negligible next to its
 * diagonal is dropped): eigenvalues ascending into w[n], the
 * orthonormal eigenvectors into the COLUMNS of v (n x n, may be NULL when
 * not wanted), each with its largest-magnitude component positive (the
 * first such one on ties). Returns the number of sweeps (at most 100). */
int lt_linalg_eigh(int64_t n, double *a, int upper, double *w, double *v);

/* Singular value decomposition a = U diag(s) Vh of the m x n matrix a
 * (overwritten) by one-sided Jacobi rotations, k = min(m, n): s[k]
 * descending and >= 0; U (m x ucols, ucols = full ? m : k) and Vh
 * (vrows x n, vrows = full ? n : k) with orthonormal columns / rows (the
 * columns of U and rows of Vh past the rank, and the full_matrices extras,
 * complete the bases). The sign of each pair (U column j, Vh row j) makes
 * Vh row j's largest-magnitude entry positive. u / vh may be NULL when not
 * wanted. Returns 0, or -1 when scratch could not be allocated. */
int lt_linalg_svd(int64_t m, int64_t n, double *a, int full, double *s, double *u,
                  double *vh);

#endif
