/*
 * lazy/kernels/linalg.c — the linear-algebra table ops (inv, eigh, svd) over
 * a batch of matrices, and the double-precision routines they run on one
 * matrix (linalg.h): LU inverse with partial pivoting, cyclic Jacobi for
 * symmetric eigenproblems, one-sided (Hestenes) Jacobi for the SVD. Jacobi
 * methods are simple and accurate to a few ulps of the matrix norm; they
 * are meant for the small matrices models decompose (a few hundred rows),
 * not for large ones (O(n^3) per sweep, ~6-10 sweeps).
 *
 * Float inputs of any float dtype are computed in f64 and rounded once when
 * stored. The packed output layouts are documented in lazy/ops.def; the shim
 * slices them into aten's outputs (views, folded into the consumers).
 */
#include "linalg.h"

#include <float.h>
#include <math.h>
#include "kutil.h"

/* ------------------------------------------------------------- inverse */

int64_t lt_linalg_inv(int64_t n, double *a, double *x)
{
    int64_t info = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) x[i * n + j] = i == j;
    /* forward: P A = L U, the same row operations on x (x = L^-1 P) */
    for (int64_t k = 0; k < n; k++) {
        int64_t p = k;
        for (int64_t i = k + 1; i < n; i++)
            if (fabs(a[i * n + k]) > fabs(a[p * n + k])) p = i;
        if (a[p * n + k] == 0) {
            if (!info) info = k + 1;
            continue;
        }
        if (p != k)
            for (int64_t j = 0; j < n; j++) {
                double t = a[k * n + j]; a[k * n + j] = a[p * n + j]; a[p * n + j] = t;
                t = x[k * n + j]; x[k * n + j] = x[p * n + j]; x[p * n + j] = t;
            }
        const double *ak = a + k * n, *xk = x + k * n;
        for (int64_t i = k + 1; i < n; i++) {
            double f = a[i * n + k] / ak[k];
            if (f == 0) continue;
            double *ai = a + i * n, *xi = x + i * n;
            ai[k] = f;
            for (int64_t j = k + 1; j < n; j++) ai[j] -= f * ak[j];
            for (int64_t j = 0; j < n; j++) xi[j] -= f * xk[j];
        }
    }
    /* backward: x = U^-1 x (a zero pivot gives inf/NaN, as getrs would) */
    for (int64_t k = n - 1; k >= 0; k--) {
        double *xk = x + k * n;
        for (int64_t j = k + 1; j < n; j++) {
            double f = a[k * n + j];
            if (f == 0) continue;
            const double *xj = x + j * n;
            for (int64_t c = 0; c < n; c++) xk[c] -= f * xj[c];
        }
        double d = a[k * n + k];
        for (int64_t c = 0; c < n; c++) xk[c] /= d;
    }
    return info;
}

/* ---------------------------------------------------------- symmetric eigen */

/* cos/sin of the Jacobi rotation that zeroes the off-diagonal g of the 2x2
 * symmetric [[x, g], [g, y]] (Rutishauser's formulas) */
static void jacobi_cs(double x, double y, double g, double *c, double *s)
{
    double theta = (y - x) / (2 * g);
    double t = fabs(theta) > 1e150 ? 0.5 / theta
             : (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
    *c = 1 / sqrt(t * t + 1);
    *s = t * *c;
}

int lt_linalg_eigh(int64_t n, double *a, int upper, double *w, double *v)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) {
            if (upper) a[i * n + j] = a[j * n + i];
            else a[j * n + i] = a[i * n + j];
        }
    if (v)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) v[i * n + j] = i == j;
    double norm = 0;
    for (int64_t i = 0; i < n * n; i++) norm += a[i] * a[i];
    double tol = DBL_EPSILON * DBL_EPSILON * norm;
    int sweep = 0;
    for (; sweep < 100; sweep++) {
        double off = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = i + 1; j < n; j++) off += a[i * n + j] * a[i * n + j];
        if (off <= tol || off == 0) break;
        for (int64_t p = 0; p < n - 1; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double g = a[p * n + q];
                if (g == 0) continue;
                /* negligible next to its diagonal: rotating would change
                 * nothing but rounding (and could keep Jacobi going) */
                if (fabs(g) <= 0.5 * DBL_EPSILON * sqrt(fabs(a[p * n + p] * a[q * n + q]))) {
                    a[p * n + q] = a[q * n + p] = 0;
                    continue;
                }
                double c, s;
                jacobi_cs(a[p * n + p], a[q * n + q], g, &c, &s);
                for (int64_t k = 0; k < n; k++) {     /* columns p, q */
                    double x = a[k * n + p], y = a[k * n + q];
                    a[k * n + p] = c * x - s * y;
                    a[k * n + q] = s * x + c * y;
                }
                for (int64_t k = 0; k < n; k++) {     /* rows p, q */
                    double x = a[p * n + k], y = a[q * n + k];
                    a[p * n + k] = c * x - s * y;
                    a[q * n + k] = s * x + c * y;
                }
                a[p * n + q] = a[q * n + p] = 0;
                if (v)
                    for (int64_t k = 0; k < n; k++) {
                        double x = v[k * n + p], y = v[k * n + q];
                        v[k * n + p] = c * x - s * y;
                        v[k * n + q] = s * x + c * y;
                    }
            }
    }
    for (int64_t i = 0; i < n; i++) w[i] = a[i * n + i];
    /* ascending (selection sort: n is small), vectors along */
    for (int64_t i = 0; i < n; i++) {
        int64_t b = i;
        for (int64_t j = i + 1; j < n; j++)
            if (w[j] < w[b]) b = j;
        if (b == i) continue;
        double t = w[i]; w[i] = w[b]; w[b] = t;
        if (v)
            for (int64_t k = 0; k < n; k++) {
                t = v[k * n + i]; v[k * n + i] = v[k * n + b]; v[k * n + b] = t;
            }
    }
    if (v)
        for (int64_t j = 0; j < n; j++) {
            int64_t b = 0;
            for (int64_t k = 1; k < n; k++)
                if (fabs(v[k * n + j]) > fabs(v[b * n + j])) b = k;
            if (v[b * n + j] < 0)
                for (int64_t k = 0; k < n; k++) v[k * n + j] = -v[k * n + j];
        }
    return sweep;
}

/* ------------------------------------------------------------------- SVD */

/* One-sided Jacobi on the rows of w (k rows of length len): rotates pairs
 * of rows until every pair is orthogonal to 1e-15 of their norms, applying
 * the same rotations to the rows of q (k x k, starting as the identity). */
static void jacobi_rows(int64_t k, int64_t len, double *w, double *q)
{
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) q[i * k + j] = i == j;
    for (int sweep = 0; sweep < 60; sweep++) {
        int rotated = 0;
        for (int64_t p = 0; p < k - 1; p++)
            for (int64_t r = p + 1; r < k; r++) {
                double *wp = w + p * len, *wr = w + r * len;
                double al = 0, be = 0, ga = 0;
                for (int64_t i = 0; i < len; i++) {
                    al += wp[i] * wp[i];
                    be += wr[i] * wr[i];
                    ga += wp[i] * wr[i];
                }
                if (ga == 0 || fabs(ga) <= 1e-15 * sqrt(al * be)) continue;
                rotated = 1;
                double c, s;
                jacobi_cs(al, be, ga, &c, &s);
                for (int64_t i = 0; i < len; i++) {
                    double x = wp[i], y = wr[i];
                    wp[i] = c * x - s * y;
                    wr[i] = s * x + c * y;
                }
                double *qp = q + p * k, *qr = q + r * k;
                for (int64_t i = 0; i < k; i++) {
                    double x = qp[i], y = qr[i];
                    qp[i] = c * x - s * y;
                    qr[i] = s * x + c * y;
                }
            }
        if (!rotated) break;
    }
}

/* Rows [have, want) of b (rows of length len, the first `have` orthonormal)
 * completed to an orthonormal set: each new row is the standard basis
 * vector with the largest residual after two Gram-Schmidt passes. */
static void complete_rows(double *b, int64_t have, int64_t want, int64_t len, double *tmp)
{
    for (int64_t r = have; r < want; r++) {
        double best = -1;
        for (int64_t e = 0; e < len; e++) {
            for (int64_t i = 0; i < len; i++) tmp[i] = i == e;
            for (int pass = 0; pass < 2; pass++)
                for (int64_t j = 0; j < r; j++) {
                    double d = 0;
                    for (int64_t i = 0; i < len; i++) d += b[j * len + i] * tmp[i];
                    for (int64_t i = 0; i < len; i++) tmp[i] -= d * b[j * len + i];
                }
            double nn = 0;
            for (int64_t i = 0; i < len; i++) nn += tmp[i] * tmp[i];
            if (nn > best) {
                best = nn;
                for (int64_t i = 0; i < len; i++) b[r * len + i] = tmp[i];
            }
            if (nn > 0.5) break;   /* good enough: stop looking */
        }
        double inv = 1 / sqrt(best);
        for (int64_t i = 0; i < len; i++) b[r * len + i] *= inv;
    }
}

int lt_linalg_svd(int64_t m, int64_t n, double *a, int full, double *s, double *u,
                  double *vh)
{
    int tall = m >= n;
    int64_t k = tall ? n : m, len = tall ? m : n;
    /* the rows of wv are the columns of A (tall) or its rows (wide), padded
     * to `len` rows so the basis can be completed in place */
    double *wv = malloc((size_t)(len * len + k * k + len + 1) * sizeof(double));
    if (!wv) return -1;
    double *q = wv + len * len, *tmp = q + k * k;
    for (int64_t r = 0; r < k; r++)
        for (int64_t i = 0; i < len; i++) wv[r * len + i] = tall ? a[i * n + r] : a[r * n + i];
    jacobi_rows(k, len, wv, q);
    for (int64_t r = 0; r < k; r++) {
        double nn = 0;
        for (int64_t i = 0; i < len; i++) nn += wv[r * len + i] * wv[r * len + i];
        s[r] = sqrt(nn);
    }
    /* descending, rows of wv and q along */
    for (int64_t i = 0; i < k; i++) {
        int64_t b = i;
        for (int64_t j = i + 1; j < k; j++)
            if (s[j] > s[b]) b = j;
        if (b == i) continue;
        double t = s[i]; s[i] = s[b]; s[b] = t;
        for (int64_t c = 0; c < len; c++) {
            t = wv[i * len + c]; wv[i * len + c] = wv[b * len + c]; wv[b * len + c] = t;
        }
        for (int64_t c = 0; c < k; c++) {
            t = q[i * k + c]; q[i * k + c] = q[b * k + c]; q[b * k + c] = t;
        }
    }
    /* unit rows for the nonzero values; the rest (and the full extras) complete the basis */
    int64_t rank = 0;
    while (rank < k && s[rank] > 0) rank++;
    for (int64_t r = 0; r < rank; r++)
        for (int64_t i = 0; i < len; i++) wv[r * len + i] /= s[r];
    int64_t want = full ? len : k;
    complete_rows(wv, rank, want, len, tmp);
    /* sign: the largest entry of each right vector positive */
    for (int64_t j = 0; j < k; j++) {
        const double *rv = tall ? q + j * k : wv + j * len;
        int64_t rl = tall ? k : len, b = 0;
        for (int64_t i = 1; i < rl; i++)
            if (fabs(rv[i]) > fabs(rv[b])) b = i;
        if (rv[b] >= 0) continue;
        for (int64_t i = 0; i < len; i++) wv[j * len + i] = -wv[j * len + i];
        for (int64_t i = 0; i < k; i++) q[j * k + i] = -q[j * k + i];
    }
    int64_t ucols = full ? m : k, vrows = full ? n : k;
    if (tall) {   /* U columns = rows of wv; Vh = q */
        if (u)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < ucols; j++) u[i * ucols + j] = wv[j * len + i];
        if (vh) memcpy(vh, q, (size_t)(n * n) * sizeof(double));
    } else {      /* U = q^T; Vh rows = rows of wv */
        if (u)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < m; j++) u[i * m + j] = q[j * k + i];
        if (vh) memcpy(vh, wv, (size_t)(vrows * n) * sizeof(double));
    }
    free(wv);
    return 0;
}

/* ------------------------------------------------------------ the ops */

typedef struct la_job {
    lt_op op;
    int64_t m, n, batch;
    int flag;                      /* eigh: upper; svd: full_matrices */
    const double *x;               /* [batch, m, n] */
    double *y;                     /* [batch, out rows, out cols] */
    int64_t orows, ocols;
    int oom;
} la_job;

static void la_one(la_job *j, int64_t b)
{
    int64_t m = j->m, n = j->n, osz = j->orows * j->ocols;
    double *y = j->y + b * osz;
    memset(y, 0, (size_t)osz * sizeof(double));
    double *a = malloc((size_t)(m * n + m * m + n * n + m + n + 1) * sizeof(double));
    if (!a) {
        j->oom = 1;
        return;
    }
    memcpy(a, j->x + b * m * n, (size_t)(m * n) * sizeof(double));
    double *t = a + m * n;
    if (j->op == LT_OP_inv) {          /* [n, n + 1]: inverse, info at (0, n) */
        int64_t info = lt_linalg_inv(n, a, t);
        for (int64_t i = 0; i < n; i++)
            memcpy(y + i * (n + 1), t + i * n, (size_t)n * sizeof(double));
        if (n > 0) y[n] = (double)info;
    } else if (j->op == LT_OP_eigh) {  /* [n + 1, n]: values, then vectors */
        lt_linalg_eigh(n, a, j->flag, y, y + n);
    } else {                           /* [m + 1 + vrows, max(m, n)]: U, S, Vh */
        int64_t k = m < n ? m : n, ucols = j->flag ? m : k, vrows = j->flag ? n : k;
        double *u = t, *vh = t + m * m, *s = vh + n * n;
        if (lt_linalg_svd(m, n, a, j->flag, s, u, vh)) j->oom = 1;
        for (int64_t i = 0; i < m; i++)
            memcpy(y + i * j->ocols, u + i * ucols, (size_t)ucols * sizeof(double));
        memcpy(y + m * j->ocols, s, (size_t)k * sizeof(double));
        for (int64_t i = 0; i < vrows; i++)
            memcpy(y + (m + 1 + i) * j->ocols, vh + i * n, (size_t)n * sizeof(double));
    }
    free(a);
}

/* inv / eigh / svd of x [.., m, n] into the packed contiguous out (ops.def).
 * Float dtypes only; LT_ERR_OOM when scratch fails. */
lt_status lt_kernel_linalg(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                           const lt_view *out, const lt_kernel_ctx *ctx)
{
    if ((op != LT_OP_inv && op != LT_OP_eigh && op != LT_OP_svd) || n_in != 1)
        return lt_set_error(LT_ERR_INTERNAL, "linalg kernel: unexpected op %d / %d inputs",
                            (int)op, n_in);
    if (!kt_is_float(in[0].dtype) || !kt_is_float(out->dtype))
        return lt_kutil_dtype_error(op, in, n_in, out);
    int nt = kt_nthreads(ctx);
    const lt_shape *xs = &in[0].shape, *os = &out->shape;
    if (xs->ndim < 2 || os->ndim != xs->ndim)
        return lt_set_error(LT_ERR_SHAPE, "%s: input rank %d, output rank %d", lt_op_name(op),
                            xs->ndim, os->ndim);
    la_job j;
    memset(&j, 0, sizeof j);
    j.op = op;
    j.m = xs->dims[xs->ndim - 2];
    j.n = xs->dims[xs->ndim - 1];
    j.orows = os->dims[os->ndim - 2];
    j.ocols = os->dims[os->ndim - 1];
    j.batch = j.m * j.n > 0 ? kt_numel(xs) / (j.m * j.n) : kt_numel(os) / (j.orows * j.ocols > 0 ? j.orows * j.ocols : 1);
    j.flag = attrs && attrs->n > 0 && attrs->i[0] != 0;
    if (kt_numel(os) == 0) return LT_OK;
    void *xo = NULL, *yo = NULL;
    const void *x = j.m * j.n > 0 ? lt_kutil_pack(&in[0], LT_F64, nt, &xo) : NULL;
    if (j.m * j.n > 0 && !x) return LT_ERR_OOM;
    double z = 0;
    j.x = x ? x : &z;
    void *y = kt_ptr(out);
    if (out->dtype != LT_F64 &&
        !(y = yo = lt_kutil_alloc((size_t)kt_numel(os) * sizeof(double), lt_op_name(op)))) {
        free(xo);
        return LT_ERR_OOM;
    }
    j.y = y;
    int64_t work = j.m * j.n * (j.m > j.n ? j.m : j.n);
    _Pragma("omp parallel for num_threads(nt) schedule(dynamic, 1) if (j.batch > 1 && j.batch * work > 20000)")
    for (int64_t b = 0; b < j.batch; b++) la_one(&j, b);
    lt_status st = LT_OK;
    if (j.oom) st = lt_set_error(LT_ERR_OOM, "%s: out of host memory for the scratch of a "
                                 "%lldx%lld matrix", lt_op_name(op), (long long)j.m, (long long)j.n);
    else if (yo) lt_kutil_unpack(yo, LT_F64, out, nt);
    free(xo);
    free(yo);
    return st;
}
