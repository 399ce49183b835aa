/*
 * tests/c/test_kernels.c — library kernels called directly on lt_view's over
 * malloc'd arrays, against naive double loops written here: matmul, norm,
 * scatter, cat, index, loss, random. (conv and pool: test_kernels_conv.c.)
 */
#include "kt_test.h"

/* ------------------------------------------------------------------ matmul */

/* ref[b,i,j] = sum_k a[b,i,k] b[b,k,j] over logical values. */
static double *mm_ref(const double *a, const double *b, int64_t B, int64_t M, int64_t K, int64_t N,
                      lt_dtype odt)
{
    double *r = kt_talloc((size_t)(B * M * N) * sizeof *r);
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += a[(bi * M + i) * K + k] * b[(bi * K + k) * N + j];
                r[(bi * M + i) * N + j] = kt_round_to(odt, s);
            }
    return r;
}

static void run_mm(lt_op op, const lt_view *a, const lt_view *b, const double *ref, lt_dtype odt,
                   int nd, const int64_t *odims, const lt_kernel_ctx *ctx, double atol, double rtol,
                   const char *what)
{
    lt_view in[2] = {*a, *b};
    lt_view out = kt_out(odt, nd, odims);
    lt_attrs at = {0};
    assert_int_equal(lt_kernel_matmul(op, &at, in, 2, &out, ctx), LT_OK);
    kt_check(what, &out, ref, kt_numel_of(nd, odims), atol, rtol);
}

static void test_mm_f32_layouts(void **state)
{
    const int64_t M = 37, K = 53, N = 29;
    double *av = kt_rvals(M * K, LT_F32), *bv = kt_rvals(K * N, LT_F32);
    double *ref = mm_ref(av, bv, 1, M, K, N, LT_F64);
    const lt_kernel_ctx *ctxs[2] = {&kt_ctx1, &kt_ctx2};
    for (int c = 0; c < 2; c++) {
        const lt_kernel_ctx *ctx = ctxs[c];
        lt_view ac = kt_view(LT_F32, 2, DIMS(M, K), NULL, 0, av);
        lt_view bc = kt_view(LT_F32, 2, DIMS(K, N), NULL, 0, bv);
        lt_view at = kt_view_t(LT_F32, M, K, av);
        lt_view bt = kt_view_t(LT_F32, K, N, bv);
        /* row stride larger than the row (in place, ld > cols), with offset */
        lt_view apad = kt_view(LT_F32, 2, DIMS(M, K), DIMS(K + 7, 1), 5, av);
        /* every other column: not BLAS-compatible, must be packed */
        lt_view bstep = kt_view(LT_F32, 2, DIMS(K, N), DIMS(2 * N, 2), 3, bv);
        /* transposed with padding */
        lt_view bt_pad = kt_view(LT_F32, 2, DIMS(K, N), DIMS(1, K + 3), 1, bv);
        run_mm(LT_OP_mm, &ac, &bc, ref, LT_F32, 2, DIMS(M, N), ctx, 1e-5, 1e-5, "mm nn");
        run_mm(LT_OP_mm, &at, &bc, ref, LT_F32, 2, DIMS(M, N), ctx, 1e-5, 1e-5, "mm tn");
        run_mm(LT_OP_mm, &ac, &bt, ref, LT_F32, 2, DIMS(M, N), ctx, 1e-5, 1e-5, "mm nt");
        run_mm(LT_OP_mm, &at, &bt, ref, LT_F32, 2, DIMS(M, N), ctx, 1e-5, 1e-5, "mm tt");
        run_mm(LT_OP_mm, &apad, &bstep, ref, LT_F32, 2, DIMS(M, N), ctx, 1e-5, 1e-5, "mm pad/step");
        run_mm(LT_OP_mm, &apad, &bt_pad, ref, LT_F32, 2, DIMS(M, N), ctx, 1e-5, 1e-5, "mm pad/tpad");
    }
    /* broadcast operand: a row repeated (stride 0) */
    double *arow = kt_talloc((size_t)(M * K) * sizeof(double));
    for (int64_t i = 0; i < M; i++) memcpy(arow + i * K, av, (size_t)K * sizeof(double));
    double *rref = mm_ref(arow, bv, 1, M, K, N, LT_F64);
    lt_view abc = kt_view(LT_F32, 2, DIMS(M, K), DIMS(0, 1), 0, arow);
    lt_view bc = kt_view(LT_F32, 2, DIMS(K, N), NULL, 0, bv);
    run_mm(LT_OP_mm, &abc, &bc, rref, LT_F32, 2, DIMS(M, N), &kt_ctx2, 1e-5, 1e-5, "mm bcast");
    /* vector-like shapes */
    lt_view a1 = kt_view_t(LT_F32, 1, K, av);
    double *r1 = mm_ref(av, bv, 1, 1, K, N, LT_F64);
    run_mm(LT_OP_mm, &a1, &bc, r1, LT_F32, 2, DIMS(1, N), &kt_ctx1, 1e-5, 1e-5, "mm 1xK");
}

static void test_mm_f64_bf16_mixed(void **state)
{
    const int64_t M = 19, K = 40, N = 23;
    double *av = kt_rvals(M * K, LT_BF16), *bv = kt_rvals(K * N, LT_BF16);
    double *r64 = mm_ref(av, bv, 1, M, K, N, LT_F64);
    double *rbf = mm_ref(av, bv, 1, M, K, N, LT_BF16);
    lt_view a64 = kt_view_t(LT_F64, M, K, av), b64 = kt_view(LT_F64, 2, DIMS(K, N), NULL, 0, bv);
    run_mm(LT_OP_mm, &a64, &b64, r64, LT_F64, 2, DIMS(M, N), &kt_ctx2, 1e-12, 1e-12, "mm f64");
    /* bf16 storage: f32 accumulation, rounded once on store -> within one bf16 ulp */
    lt_view abf = kt_view_t(LT_BF16, M, K, av), bbf = kt_view(LT_BF16, 2, DIMS(K, N), NULL, 0, bv);
    run_mm(LT_OP_mm, &abf, &bbf, rbf, LT_BF16, 2, DIMS(M, N), &kt_ctx1, 1e-3, 1.0 / 128, "mm bf16");
    /* and the f32-accumulated value must not be a bf16 accumulation: compare
     * a long dot product where per-step bf16 rounding would drift */
    const int64_t KL = 2048;
    double *ones = kt_talloc((size_t)KL * sizeof(double)), *small = kt_talloc((size_t)KL * sizeof(double));
    for (int64_t k = 0; k < KL; k++) { ones[k] = 1.0; small[k] = 1.0 / 256; }
    lt_view al = kt_view(LT_BF16, 2, DIMS(1, KL), NULL, 0, ones);
    lt_view bl = kt_view(LT_BF16, 2, DIMS(KL, 1), NULL, 0, small);
    double rl = 8.0;
    run_mm(LT_OP_mm, &al, &bl, &rl, LT_BF16, 2, DIMS(1, 1), &kt_ctx1, 0, 0, "mm bf16 f32-acc");
    /* mixed bf16 x f32 -> f32 */
    lt_view b32 = kt_view(LT_F32, 2, DIMS(K, N), NULL, 0, bv);
    double *r32 = mm_ref(av, bv, 1, M, K, N, LT_F32);
    run_mm(LT_OP_mm, &abf, &b32, r32, LT_F32, 2, DIMS(M, N), &kt_ctx2, 1e-5, 1e-5, "mm bf16xf32");
}

static void test_mm_int_and_errors(void **state)
{
    const int64_t M = 4, K = 5, N = 3;
    double av[20], bv[15];
    for (int i = 0; i < 20; i++) av[i] = (i * 7) % 11 - 5;
    for (int i = 0; i < 15; i++) bv[i] = (i * 5) % 9 - 4;
    double *ref = mm_ref(av, bv, 1, M, K, N, LT_F64);
    lt_view a = kt_view_t(LT_I64, M, K, av), b = kt_view(LT_I32, 2, DIMS(K, N), NULL, 0, bv);
    run_mm(LT_OP_mm, &a, &b, ref, LT_I64, 2, DIMS(M, N), &kt_ctx2, 0, 0, "mm int");
    /* bool is not supported */
    lt_view ab = kt_view(LT_BOOL, 2, DIMS(M, K), NULL, 0, av);
    lt_view bb = kt_view(LT_BOOL, 2, DIMS(K, N), NULL, 0, bv);
    lt_view in[2] = {ab, bb};
    lt_view out = kt_out(LT_BOOL, 2, DIMS(M, N));
    lt_attrs at = {0};
    assert_int_equal(lt_kernel_matmul(LT_OP_mm, &at, in, 2, &out, &kt_ctx1), LT_ERR_DTYPE);
    assert_non_null(strstr(lt_last_error(), "mm"));
    assert_non_null(strstr(lt_last_error(), "bool"));
    /* K = 0 gives zeros */
    lt_view a0 = kt_view(LT_F32, 2, DIMS(3, 0), NULL, 0, NULL), b0 = kt_view(LT_F32, 2, DIMS(0, 2), NULL, 0, NULL);
    double z[6] = {0};
    run_mm(LT_OP_mm, &a0, &b0, z, LT_F32, 2, DIMS(3, 2), &kt_ctx1, 0, 0, "mm K=0");
}

static void test_bmm_layouts(void **state)
{
    const int64_t B = 5, M = 6, K = 7, N = 4;
    double *av = kt_rvals(B * M * K, LT_F32), *bv = kt_rvals(B * K * N, LT_F32);
    double *ref = mm_ref(av, bv, B, M, K, N, LT_F64);
    for (int c = 0; c < 2; c++) {
        const lt_kernel_ctx *ctx = c ? &kt_ctx2 : &kt_ctx1;
        lt_view a = kt_view(LT_F32, 3, DIMS(B, M, K), NULL, 0, av);
        lt_view b = kt_view(LT_F32, 3, DIMS(B, K, N), NULL, 0, bv);
        /* per-batch transposed: storage [B, K, M] */
        lt_view at = kt_view(LT_F32, 3, DIMS(B, M, K), DIMS(M * K, 1, M), 0, av);
        /* batch not outermost: storage [M, B, K] (ld = B*K) */
        lt_view ap = kt_view(LT_F32, 3, DIMS(B, M, K), DIMS(K, B * K, 1), 2, av);
        /* fully strided: storage [N, K, B] */
        lt_view bs = kt_view(LT_F32, 3, DIMS(B, K, N), DIMS(1, B, K * B), 0, bv);
        run_mm(LT_OP_bmm, &a, &b, ref, LT_F32, 3, DIMS(B, M, N), ctx, 1e-5, 1e-5, "bmm");
        run_mm(LT_OP_bmm, &at, &b, ref, LT_F32, 3, DIMS(B, M, N), ctx, 1e-5, 1e-5, "bmm t");
        run_mm(LT_OP_bmm, &ap, &bs, ref, LT_F32, 3, DIMS(B, M, N), ctx, 1e-5, 1e-5, "bmm perm");
        lt_view abf = kt_view(LT_BF16, 3, DIMS(B, M, K), DIMS(M * K, 1, M), 0, av);
        lt_view bbf = kt_view(LT_BF16, 3, DIMS(B, K, N), NULL, 0, bv);
        double *av16 = kt_talloc((size_t)(B * M * K) * sizeof(double));
        double *bv16 = kt_talloc((size_t)(B * K * N) * sizeof(double));
        for (int64_t i = 0; i < B * M * K; i++) av16[i] = kt_round_bf16(av[i]);
        for (int64_t i = 0; i < B * K * N; i++) bv16[i] = kt_round_bf16(bv[i]);
        double *r16 = mm_ref(av16, bv16, B, M, K, N, LT_BF16);
        run_mm(LT_OP_bmm, &abf, &bbf, r16, LT_BF16, 3, DIMS(B, M, N), ctx, 1e-3, 1.0 / 128, "bmm bf16");
    }
    /* many small products (attention: [B*heads, 64, 32] x [.., 32, 64]),
     * whole matrices claimed per worker, in place with a transposed b */
    {
        const int64_t B2 = 64, M2 = 64, K2 = 32, N2 = 64;
        double *a2 = kt_rvals(B2 * M2 * K2, LT_F32), *b2 = kt_rvals(B2 * K2 * N2, LT_F32);
        double *r2 = mm_ref(a2, b2, B2, M2, K2, N2, LT_F64);
        lt_view va = kt_view(LT_F32, 3, DIMS(B2, M2, K2), NULL, 0, a2);
        lt_view vb = kt_view(LT_F32, 3, DIMS(B2, K2, N2), NULL, 0, b2);
        /* the same values stored per batch as [N2, K2] (k^T) */
        lt_view vbt = kt_view(LT_F32, 3, DIMS(B2, K2, N2), DIMS(K2 * N2, 1, K2), 0, b2);
        for (int c = 0; c < 2; c++) {
            const lt_kernel_ctx *ctx = c ? &kt_ctx2 : &kt_ctx1;
            run_mm(LT_OP_bmm, &va, &vb, r2, LT_F32, 3, DIMS(B2, M2, N2), ctx, 1e-5, 1e-5,
                   "bmm many small");
            run_mm(LT_OP_bmm, &va, &vbt, r2, LT_F32, 3, DIMS(B2, M2, N2), ctx, 1e-5, 1e-5,
                   "bmm many small, b transposed");
        }
    }
    /* broadcast batch (stride 0) on b */
    double *bb = kt_talloc((size_t)(B * K * N) * sizeof(double));
    for (int64_t i = 0; i < B; i++) memcpy(bb + i * K * N, bv, (size_t)(K * N) * sizeof(double));
    double *rb = mm_ref(av, bb, B, M, K, N, LT_F64);
    lt_view a = kt_view(LT_F32, 3, DIMS(B, M, K), NULL, 0, av);
    lt_view b0 = kt_view(LT_F32, 3, DIMS(B, K, N), DIMS(0, N, 1), 0, bb);
    run_mm(LT_OP_bmm, &a, &b0, rb, LT_F32, 3, DIMS(B, M, N), &kt_ctx2, 1e-5, 1e-5, "bmm bcast");
    lt_view b0s = kt_view(LT_F64, 3, DIMS(B, K, N), DIMS(0, 1, K), 0, bb);  /* bcast + transposed f64 */
    lt_view a64 = kt_view(LT_F64, 3, DIMS(B, M, K), NULL, 0, av);
    run_mm(LT_OP_bmm, &a64, &b0s, rb, LT_F64, 3, DIMS(B, M, N), &kt_ctx2, 1e-12, 1e-12, "bmm bcast f64");
}

/* -------------------------------------------------------------------- norm */

static void norm_ref(lt_op op, const double *a, const double *b, double *r, const int64_t *dims,
                     int dim)
{
    int64_t outer = 1, D = dims[dim], inner = 1;
    for (int d = 0; d < dim; d++) outer *= dims[d];
    for (int d = dim + 1; d < 3; d++) inner *= dims[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
#define AT(p, d) p[(o * D + (d)) * inner + j]
            double m = -INFINITY, s = 0, sg = 0, sgy = 0;
            for (int64_t d = 0; d < D; d++) if (AT(a, d) > m) m = AT(a, d);
            for (int64_t d = 0; d < D; d++) s += exp(AT(a, d) - m);
            if (b) for (int64_t d = 0; d < D; d++) { sg += AT(a, d); sgy += AT(a, d) * AT(b, d); }
            for (int64_t d = 0; d < D; d++) {
                double v;
                if (op == LT_OP_softmax) v = exp(AT(a, d) - m) / s;
                else if (op == LT_OP_log_softmax) v = AT(a, d) - m - log(s);
                else if (op == LT_OP_softmax_backward) v = AT(b, d) * (AT(a, d) - sgy);
                else v = AT(a, d) - exp(AT(b, d)) * sg;
                AT(r, d) = v;
            }
#undef AT
        }
}

static void test_softmax_family(void **state)
{
    const int64_t dims[3] = {3, 70, 9};  /* 70 > block width of strided rows */
    const int64_t n = 3 * 70 * 9;
    double *x = kt_rvals(n, LT_F32);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(x[i] * 20);
    double *g = kt_rvals(n, LT_F32);
    double *r = kt_talloc((size_t)n * sizeof(double));
    /* storage [9, 3, 70] -> logical strides */
    const int64_t pst[3] = {70, 1, 3 * 70};
    lt_op ops[4] = {LT_OP_softmax, LT_OP_log_softmax, LT_OP_softmax_backward, LT_OP_log_softmax_backward};
    for (int oi = 0; oi < 4; oi++)
        for (int dim = 0; dim < 3; dim++)
            for (int c = 0; c < 2; c++) {
                int bwd = oi >= 2;
                /* backward: y = softmax or log_softmax of x (consistent inputs) */
                double *y = NULL;
                if (bwd) {
                    y = kt_talloc((size_t)n * sizeof(double));
                    norm_ref(oi == 2 ? LT_OP_softmax : LT_OP_log_softmax, x, NULL, y, dims, dim);
                    for (int64_t i = 0; i < n; i++) y[i] = (float)y[i];
                }
                lt_view in[2];
                in[0] = kt_view(LT_F32, 3, dims, c ? pst : NULL, c, bwd ? g : x);
                if (bwd) in[1] = kt_view(LT_F32, 3, dims, NULL, 0, y);
                norm_ref(ops[oi], bwd ? g : x, y, r, dims, dim);
                lt_view out = kt_out(LT_F32, 3, dims);
                lt_attrs at = KATTR(dim);
                assert_int_equal(lt_kernel_norm(ops[oi], &at, in, bwd ? 2 : 1, &out,
                                                c ? &kt_ctx2 : &kt_ctx1), LT_OK);
                char what[64];
                snprintf(what, sizeof what, "norm op %d dim %d strided %d", oi, dim, c);
                kt_check(what, &out, r, n, 2e-5, 1e-4);
            }
}

static void test_softmax_dtypes_and_stability(void **state)
{
    /* huge logits: must not overflow */
    double x[4] = {1000, 1001, 999, -1000};
    double r[4];
    int64_t d[3] = {1, 4, 1};
    norm_ref(LT_OP_softmax, x, NULL, r, d, 1);
    lt_view in = kt_view(LT_F32, 1, DIMS(4), NULL, 0, x);
    lt_view out = kt_out(LT_F32, 1, DIMS(4));
    lt_attrs at = KATTR(0);
    assert_int_equal(lt_kernel_norm(LT_OP_softmax, &at, &in, 1, &out, &kt_ctx1), LT_OK);
    kt_check("softmax big", &out, r, 4, 1e-6, 1e-5);
    norm_ref(LT_OP_log_softmax, x, NULL, r, d, 1);
    assert_int_equal(lt_kernel_norm(LT_OP_log_softmax, &at, &in, 1, &out, &kt_ctx1), LT_OK);
    kt_check("log_softmax big", &out, r, 4, 1e-4, 1e-6);
    /* bf16 and f64, dim 1 of [5, 33] */
    const int64_t dims[3] = {5, 33, 1};
    double *xv = kt_rvals(5 * 33, LT_BF16);
    double *rr = kt_talloc(5 * 33 * sizeof(double));
    norm_ref(LT_OP_log_softmax, xv, NULL, rr, dims, 1);
    lt_view x64 = kt_view(LT_F64, 2, DIMS(5, 33), NULL, 0, xv);
    lt_view o64 = kt_out(LT_F64, 2, DIMS(5, 33));
    at = KATTR(1);
    assert_int_equal(lt_kernel_norm(LT_OP_log_softmax, &at, &x64, 1, &o64, &kt_ctx1), LT_OK);
    kt_check("log_softmax f64", &o64, rr, 5 * 33, 1e-12, 1e-12);
    for (int64_t i = 0; i < 5 * 33; i++) rr[i] = kt_round_bf16(rr[i]);
    lt_view xbf = kt_view_t(LT_BF16, 5, 33, xv);
    lt_view obf = kt_out(LT_BF16, 2, DIMS(5, 33));
    assert_int_equal(lt_kernel_norm(LT_OP_log_softmax, &at, &xbf, 1, &obf, &kt_ctx2), LT_OK);
    kt_check("log_softmax bf16", &obf, rr, 5 * 33, 1e-3, 1.0 / 128);
}

/* ----------------------------------------------------------------- scatter */

static void test_scatters(void **state)
{
    /* slice_scatter: base [4,6], dim 1, 1:6:2 -> src [4,3] given transposed */
    double *base = kt_rvals(24, LT_F32), *src = kt_rvals(12, LT_F32);
    double ref[24];
    memcpy(ref, base, sizeof ref);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) ref[i * 6 + 1 + 2 * j] = src[i * 3 + j];
    lt_view in[2] = {kt_view(LT_F32, 2, DIMS(4, 6), NULL, 0, base), kt_view_t(LT_F32, 4, 3, src)};
    lt_view out = kt_out(LT_F32, 2, DIMS(4, 6));
    lt_attrs at = KATTR(1, 1, 6, 2);
    assert_int_equal(lt_kernel_scatter(LT_OP_slice_scatter, &at, in, 2, &out, &kt_ctx2), LT_OK);
    kt_check("slice_scatter", &out, ref, 24, 0, 0);
    /* src shape mismatch */
    in[1] = kt_view(LT_F32, 2, DIMS(4, 2), NULL, 0, src);
    assert_int_equal(lt_kernel_scatter(LT_OP_slice_scatter, &at, in, 2, &out, &kt_ctx1), LT_ERR_SHAPE);

    /* select_scatter: base [3,4,2] f32, dim 1 index 2, src [3,2] f64 -> f64 out */
    double *b3 = kt_rvals(24, LT_F32), *s3 = kt_rvals(6, LT_F64);
    double r3[24];
    memcpy(r3, b3, sizeof r3);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) r3[(i * 4 + 2) * 2 + k] = s3[i * 2 + k];
    in[0] = kt_view(LT_F32, 3, DIMS(3, 4, 2), NULL, 0, b3);
    in[1] = kt_view(LT_F64, 2, DIMS(3, 2), NULL, 0, s3);
    out = kt_out(LT_F64, 3, DIMS(3, 4, 2));
    at = KATTR(1, 2);
    assert_int_equal(lt_kernel_scatter(LT_OP_select_scatter, &at, in, 2, &out, &kt_ctx1), LT_OK);
    kt_check("select_scatter", &out, r3, 24, 0, 0);

    /* diagonal_scatter on [3,4,5] with offsets 1 / -1 over dims (0,2) and (1,2) */
    int64_t offs[3] = {1, -1, 0}, d1s[3] = {0, 1, 2}, d2s[3] = {2, 2, 1};
    for (int t = 0; t < 3; t++) {
        int64_t sh[3] = {3, 4, 5}, off = offs[t], d1 = d1s[t], d2 = d2s[t];
        int64_t n1 = sh[d1], n2 = sh[d2];
        int64_t len = off >= 0 ? (n1 < n2 - off ? n1 : n2 - off) : (n1 + off < n2 ? n1 + off : n2);
        int other = 3 - (int)d1 - (int)d2;
        double *bb = kt_rvals(60, LT_F32), *ss = kt_rvals(sh[other] * len, LT_F32);
        double rr[60];
        memcpy(rr, bb, sizeof rr);
        for (int64_t o = 0; o < sh[other]; o++)
            for (int64_t k = 0; k < len; k++) {
                int64_t c[3];
                c[other] = o;
                c[d1] = off >= 0 ? k : k - off;
                c[d2] = off >= 0 ? k + off : k;
                rr[(c[0] * 4 + c[1]) * 5 + c[2]] = ss[o * len + k];
            }
        in[0] = kt_view(LT_F32, 3, sh, NULL, 0, bb);
        in[1] = kt_view_t(LT_F32, sh[other], len, ss);
        out = kt_out(LT_F32, 3, sh);
        at = KATTR(off, d1, d2);
        assert_int_equal(lt_kernel_scatter(LT_OP_diagonal_scatter, &at, in, 2, &out, &kt_ctx2), LT_OK);
        kt_check("diagonal_scatter", &out, rr, 60, 0, 0);
    }

    /* as_strided_scatter: base [4,5] storage, region sizes [2,3] strides [6,1] offset 2 */
    double *ba = kt_rvals(20, LT_F32), *sa = kt_rvals(6, LT_F32);
    double ra[20];
    memcpy(ra, ba, sizeof ra);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) ra[2 + i * 6 + j] = sa[i * 3 + j];
    in[0] = kt_view(LT_F32, 2, DIMS(4, 5), NULL, 0, ba);
    in[1] = kt_view(LT_F32, 2, DIMS(2, 3), NULL, 0, sa);
    out = kt_out(LT_F32, 2, DIMS(4, 5));
    at = KATTR(2, 2, 3, 6, 1, 2);
    assert_int_equal(lt_kernel_scatter(LT_OP_as_strided_scatter, &at, in, 2, &out, &kt_ctx1), LT_OK);
    kt_check("as_strided_scatter", &out, ra, 20, 0, 0);
    at = KATTR(2, 2, 3, 6, 1, 15);  /* runs past the storage */
    assert_int_equal(lt_kernel_scatter(LT_OP_as_strided_scatter, &at, in, 2, &out, &kt_ctx1), LT_ERR_ARG);
}

/* --------------------------------------------------------------------- cat */

static void test_cat(void **state)
{
    double *a = kt_rvals(2 * 3, LT_F32), *b = kt_rvals(2 * 4, LT_F32), *c = kt_talloc(2 * 1 * sizeof(double));
    c[0] = 7; c[1] = -3;
    double ref[2 * 8];
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 3; j++) ref[i * 8 + j] = a[i * 3 + j];
        for (int j = 0; j < 4; j++) ref[i * 8 + 3 + j] = b[i * 4 + j];
        ref[i * 8 + 7] = c[i];
    }
    lt_view in[3] = {kt_view(LT_F32, 2, DIMS(2, 3), NULL, 0, a), kt_view_t(LT_F32, 2, 4, b),
                     kt_view(LT_I32, 2, DIMS(2, 1), NULL, 0, c)};
    lt_view out = kt_out(LT_F32, 2, DIMS(2, 8));
    lt_attrs at = KATTR(1);
    assert_int_equal(lt_kernel_cat(LT_OP_cat, &at, in, 3, &out, &kt_ctx1), LT_OK);
    kt_check("cat dim1", &out, ref, 16, 0, 0);
    /* dim 0, bf16 out, large enough for the threaded copy */
    const int64_t R = 300, C = 130;
    double *x = kt_rvals(R * C, LT_BF16), *y = kt_rvals(R * C, LT_BF16);
    double *r2 = kt_talloc((size_t)(2 * R * C) * sizeof(double));
    memcpy(r2, x, (size_t)(R * C) * sizeof(double));
    memcpy(r2 + R * C, y, (size_t)(R * C) * sizeof(double));
    lt_view in2[2] = {kt_view_t(LT_F32, R, C, x), kt_view(LT_BF16, 2, DIMS(R, C), NULL, 0, y)};
    lt_view out2 = kt_out(LT_BF16, 2, DIMS(2 * R, C));
    at = KATTR(0);
    assert_int_equal(lt_kernel_cat(LT_OP_cat, &at, in2, 2, &out2, &kt_ctx2), LT_OK);
    kt_check("cat dim0", &out2, r2, 2 * R * C, 0, 0);
    /* mismatched input */
    in2[1] = kt_view(LT_BF16, 2, DIMS(R, C - 1), NULL, 0, y);
    assert_int_equal(lt_kernel_cat(LT_OP_cat, &at, in2, 2, &out2, &kt_ctx1), LT_ERR_SHAPE);
}

/* ------------------------------------------------------------------- index */

static void test_index_select(void **state)
{
    double *src = kt_rvals(10 * 6, LT_F32);
    double idx[5] = {3, 0, 9, 3, 7};
    double ref[5 * 6];
    for (int j = 0; j < 5; j++)
        for (int k = 0; k < 6; k++) ref[j * 6 + k] = src[(int)idx[j] * 6 + k];
    lt_view in[2] = {kt_view_t(LT_F32, 10, 6, src), kt_view(LT_I64, 1, DIMS(5), DIMS(2), 1, idx)};
    lt_view out = kt_out(LT_F32, 2, DIMS(5, 6));
    lt_attrs at = KATTR(0);
    assert_int_equal(lt_kernel_index(LT_OP_index_select, &at, in, 2, &out, &kt_ctx2), LT_OK);
    kt_check("index_select d0", &out, ref, 30, 0, 0);
    /* dim 1 with i32 indices, many indices (parallel over them) */
    double idx1[40], ref1[10 * 40];
    for (int j = 0; j < 40; j++) idx1[j] = (j * 5) % 6;
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 40; j++) ref1[i * 40 + j] = src[i * 6 + (int)idx1[j]];
    in[0] = kt_view(LT_F32, 2, DIMS(10, 6), NULL, 0, src);
    in[1] = kt_view(LT_I32, 1, DIMS(40), NULL, 0, idx1);
    out = kt_out(LT_F32, 2, DIMS(10, 40));
    at = KATTR(1);
    assert_int_equal(lt_kernel_index(LT_OP_index_select, &at, in, 2, &out, &kt_ctx2), LT_OK);
    kt_check("index_select d1", &out, ref1, 400, 0, 0);
    /* out of range, then negative */
    double bad[3] = {1, 12, 2};
    in[0] = kt_view(LT_F32, 2, DIMS(10, 6), NULL, 0, src);
    in[1] = kt_view(LT_I64, 1, DIMS(3), NULL, 0, bad);
    out = kt_out(LT_F32, 2, DIMS(3, 6));
    at = KATTR(0);
    assert_int_equal(lt_kernel_index(LT_OP_index_select, &at, in, 2, &out, &kt_ctx1), LT_ERR_ARG);
    assert_string_equal(lt_last_error(), "index_select: index 12 is out of range for dimension 0 of size 10");
    bad[1] = -1;
    in[1] = kt_view(LT_I64, 1, DIMS(3), NULL, 0, bad);
    assert_int_equal(lt_kernel_index(LT_OP_index_select, &at, in, 2, &out, &kt_ctx1), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "index -1"));
    /* float index dtype is rejected */
    in[1] = kt_view(LT_F32, 1, DIMS(3), NULL, 0, idx);
    assert_int_equal(lt_kernel_index(LT_OP_index_select, &at, in, 2, &out, &kt_ctx1), LT_ERR_DTYPE);
}

static void test_gather_scatter_add(void **state)
{
    /* gather dim 1: src [3,5] (transposed storage), idx [3,4] */
    double *src = kt_rvals(15, LT_F64);
    double idx[12] = {0, 4, 4, 1, 2, 2, 0, 3, 4, 3, 2, 1};
    double ref[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) ref[i * 4 + j] = src[i * 5 + (int)idx[i * 4 + j]];
    lt_view in[3] = {kt_view_t(LT_F64, 3, 5, src), kt_view(LT_I64, 2, DIMS(3, 4), NULL, 0, idx)};
    lt_view out = kt_out(LT_F64, 2, DIMS(3, 4));
    lt_attrs at = KATTR(1);
    assert_int_equal(lt_kernel_index(LT_OP_gather, &at, in, 2, &out, &kt_ctx1), LT_OK);
    kt_check("gather d1", &out, ref, 12, 0, 0);
    /* gather dim 0: idx [2,5] over src [3,5] */
    double idx0[10] = {2, 0, 1, 1, 0, 0, 2, 2, 1, 0}, ref0[10];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 5; j++) ref0[i * 5 + j] = src[(int)idx0[i * 5 + j] * 5 + j];
    in[1] = kt_view(LT_I32, 2, DIMS(2, 5), NULL, 0, idx0);
    out = kt_out(LT_F64, 2, DIMS(2, 5));
    at = KATTR(0);
    assert_int_equal(lt_kernel_index(LT_OP_gather, &at, in, 2, &out, &kt_ctx2), LT_OK);
    kt_check("gather d0", &out, ref0, 10, 0, 0);
    idx0[3] = 3;
    in[1] = kt_view(LT_I32, 2, DIMS(2, 5), NULL, 0, idx0);
    assert_int_equal(lt_kernel_index(LT_OP_gather, &at, in, 2, &out, &kt_ctx1), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "gather: index 3 is out of range for dimension 0 of size 3"));

    /* scatter_add dim 1 with duplicate indices: base [3,5], idx/src [3,4] */
    double *base = kt_rvals(15, LT_F32), *s = kt_rvals(12, LT_F32);
    double rsa[15];
    memcpy(rsa, base, sizeof rsa);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) rsa[i * 5 + (int)idx[i * 4 + j]] += s[i * 4 + j];
    in[0] = kt_view(LT_F32, 2, DIMS(3, 5), NULL, 0, base);
    in[1] = kt_view(LT_I64, 2, DIMS(3, 4), NULL, 0, idx);
    in[2] = kt_view_t(LT_F32, 3, 4, s);
    out = kt_out(LT_F32, 2, DIMS(3, 5));
    at = KATTR(1);
    assert_int_equal(lt_kernel_index(LT_OP_scatter_add, &at, in, 3, &out, &kt_ctx2), LT_OK);
    kt_check("scatter_add d1", &out, rsa, 15, 1e-6, 1e-6);
    /* scatter_add dim 0, i64 values, idx [2,5] into base [3,5] */
    double bi[15], si[10], ri[15];
    for (int i = 0; i < 15; i++) bi[i] = ri[i] = i;
    for (int i = 0; i < 10; i++) si[i] = 100 + i;
    idx0[3] = 1;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 5; j++) ri[(int)idx0[i * 5 + j] * 5 + j] += si[i * 5 + j];
    in[0] = kt_view(LT_I64, 2, DIMS(3, 5), NULL, 0, bi);
    in[1] = kt_view(LT_I32, 2, DIMS(2, 5), NULL, 0, idx0);
    in[2] = kt_view(LT_I64, 2, DIMS(2, 5), NULL, 0, si);
    out = kt_out(LT_I64, 2, DIMS(3, 5));
    at = KATTR(0);
    assert_int_equal(lt_kernel_index(LT_OP_scatter_add, &at, in, 3, &out, &kt_ctx1), LT_OK);
    kt_check("scatter_add d0 int", &out, ri, 15, 0, 0);
    idx0[0] = -2;
    in[1] = kt_view(LT_I32, 2, DIMS(2, 5), NULL, 0, idx0);
    assert_int_equal(lt_kernel_index(LT_OP_scatter_add, &at, in, 3, &out, &kt_ctx1), LT_ERR_ARG);
}

static void test_embedding_backward_arange(void **state)
{
    /* idx [2,3] with repeats and the padding row 2; grad [2,3,4]; 5 rows */
    double idx[6] = {1, 2, 1, 4, 0, 1};
    double *g = kt_rvals(24, LT_F32);
    double ref[20] = {0};
    for (int m = 0; m < 6; m++)
        if (idx[m] != 2)
            for (int j = 0; j < 4; j++) ref[(int)idx[m] * 4 + j] += g[m * 4 + j];
    lt_view in[2] = {kt_view(LT_F32, 3, DIMS(2, 3, 4), DIMS(1, 8, 2), 0, g),
                     kt_view(LT_I64, 2, DIMS(2, 3), NULL, 0, idx)};
    lt_view out = kt_out(LT_F32, 2, DIMS(5, 4));
    lt_attrs at = KATTR(5, 2);
    assert_int_equal(lt_kernel_index(LT_OP_embedding_backward, &at, in, 2, &out, &kt_ctx2), LT_OK);
    kt_check("embedding_backward", &out, ref, 20, 1e-6, 1e-6);
    /* large: threaded path, bf16 output, no padding; same result for 1 and 2 threads */
    const int64_t NW = 300, D = 96, M = 700;
    double *ix = kt_talloc((size_t)M * sizeof(double));
    for (int64_t m = 0; m < M; m++) ix[m] = (m * 37) % NW;
    double *gl = kt_rvals(M * D, LT_BF16);
    double *rl = kt_talloc((size_t)(NW * D) * sizeof(double));
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < D; j++) rl[(int64_t)ix[m] * D + j] += gl[m * D + j];
    for (int64_t i = 0; i < NW * D; i++) rl[i] = kt_round_bf16(rl[i]);
    in[0] = kt_view(LT_BF16, 2, DIMS(M, D), NULL, 0, gl);
    in[1] = kt_view(LT_I32, 1, DIMS(M), NULL, 0, ix);
    lt_view o1 = kt_out(LT_BF16, 2, DIMS(NW, D)), o2 = kt_out(LT_BF16, 2, DIMS(NW, D));
    at = KATTR(NW, -1);
    assert_int_equal(lt_kernel_index(LT_OP_embedding_backward, &at, in, 2, &o1, &kt_ctx1), LT_OK);
    assert_int_equal(lt_kernel_index(LT_OP_embedding_backward, &at, in, 2, &o2, &kt_ctx2), LT_OK);
    kt_check("embedding_backward big", &o1, rl, NW * D, 1e-3, 1.0 / 128);
    assert_memory_equal(o1.data, o2.data, (size_t)(NW * D) * 2);
    ix[5] = NW;
    in[1] = kt_view(LT_I32, 1, DIMS(M), NULL, 0, ix);
    assert_int_equal(lt_kernel_index(LT_OP_embedding_backward, &at, in, 2, &o1, &kt_ctx1), LT_ERR_ARG);

    /* arange: float and int */
    double st = 1.5, sp = -0.25, ra[7];
    for (int k = 0; k < 7; k++) ra[k] = (float)(1.5 - 0.25 * k);
    lt_view ar[2] = {kt_view(LT_F64, 0, NULL, NULL, 0, &st), kt_view(LT_F64, 0, NULL, NULL, 0, &sp)};
    lt_view oa = kt_out(LT_F32, 1, DIMS(7));
    at = KATTR(LT_F32, 7);
    assert_int_equal(lt_kernel_index(LT_OP_arange, &at, ar, 2, &oa, &kt_ctx1), LT_OK);
    kt_check("arange f32", &oa, ra, 7, 0, 0);
    double is = -3, ip = 4, ri[5];
    for (int k = 0; k < 5; k++) ri[k] = -3 + 4 * k;
    ar[0] = kt_view(LT_I64, 0, NULL, NULL, 0, &is);
    ar[1] = kt_view(LT_I64, 0, NULL, NULL, 0, &ip);
    lt_view oi = kt_out(LT_I64, 1, DIMS(5));
    at = KATTR(LT_I64, 5);
    assert_int_equal(lt_kernel_index(LT_OP_arange, &at, ar, 2, &oi, &kt_ctx2), LT_OK);
    kt_check("arange i64", &oi, ri, 5, 0, 0);
}

/* -------------------------------------------------------------------- loss */

static void test_nll_loss(void **state)
{
    const int64_t N = 7, C = 5, IGN = -100;
    double *lp = kt_rvals(N * C, LT_F32);
    double tg[7] = {0, 4, IGN, 2, 2, 1, 3};
    double w[5] = {0.5, 2.0, 1.0, 0.25, 3.0};
    for (int use_w = 0; use_w < 2; use_w++)
        for (int red = 0; red < 3; red++) {
            double per[7], s = 0, ws = 0;
            for (int n = 0; n < N; n++) {
                if (tg[n] == IGN) { per[n] = 0; continue; }
                int t = (int)tg[n];
                double wt = use_w ? w[t] : 1;
                per[n] = -wt * lp[n * C + t];
                s += per[n];
                ws += wt;
            }
            double red_v = red == 1 ? s / ws : s;
            lt_view in[3] = {kt_view_t(LT_F32, N, C, lp), kt_view(LT_I64, 1, DIMS(N), NULL, 0, tg),
                             kt_view(LT_F32, 1, DIMS(C), NULL, 0, w)};
            int nin = use_w ? 3 : 2;
            lt_attrs at = KATTR(red, IGN);
            lt_view out = red == 0 ? kt_out(LT_F32, 1, DIMS(N)) : kt_out(LT_F32, 0, NULL);
            assert_int_equal(lt_kernel_loss(LT_OP_nll_loss, &at, in, nin, &out, &kt_ctx2), LT_OK);
            if (red == 0) kt_check("nll none", &out, per, N, 1e-6, 1e-6);
            else kt_check("nll reduced", &out, &red_v, 1, 1e-6, 1e-5);
            /* backward */
            double gv[7], gr[7 * 5] = {0};
            for (int n = 0; n < N; n++) gv[n] = 0.5 + n;
            double g0 = 1.75;
            for (int n = 0; n < N; n++) {
                if (tg[n] == IGN) continue;
                int t = (int)tg[n];
                double wt = use_w ? w[t] : 1;
                double gg = red == 0 ? gv[n] : red == 1 ? g0 / ws : g0;
                gr[n * C + t] = -wt * gg;
            }
            lt_view bin[4];
            bin[0] = red == 0 ? kt_view(LT_F32, 1, DIMS(N), NULL, 0, gv) : kt_view(LT_F32, 0, NULL, NULL, 0, &g0);
            bin[1] = in[0]; bin[2] = in[1]; bin[3] = in[2];
            lt_view bout = kt_out(LT_F32, 2, DIMS(N, C));
            assert_int_equal(lt_kernel_loss(LT_OP_nll_loss_backward, &at, bin, nin + 1, &bout, &kt_ctx1), LT_OK);
            kt_check("nll backward", &bout, gr, N * C, 1e-6, 1e-5);
        }
    /* 1-D input with 0-dim target */
    double t0 = 3, r0 = -lp[3];
    lt_view in1[2] = {kt_view(LT_F32, 1, DIMS(C), NULL, 0, lp), kt_view(LT_I64, 0, NULL, NULL, 0, &t0)};
    lt_view o0 = kt_out(LT_F32, 0, NULL);
    lt_attrs at = KATTR(1, IGN);
    assert_int_equal(lt_kernel_loss(LT_OP_nll_loss, &at, in1, 2, &o0, &kt_ctx1), LT_OK);
    kt_check("nll 1-D", &o0, &r0, 1, 1e-6, 1e-6);
    /* out-of-range target */
    tg[1] = 5;
    lt_view in2[2] = {kt_view(LT_F32, 2, DIMS(N, C), NULL, 0, lp), kt_view(LT_I64, 1, DIMS(N), NULL, 0, tg)};
    assert_int_equal(lt_kernel_loss(LT_OP_nll_loss, &at, in2, 2, &o0, &kt_ctx1), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "target 5"));
    /* all ignored + mean -> NaN, like PyTorch */
    double all_ign[7] = {IGN, IGN, IGN, IGN, IGN, IGN, IGN}, nanv = NAN;
    in2[1] = kt_view(LT_I64, 1, DIMS(N), NULL, 0, all_ign);
    assert_int_equal(lt_kernel_loss(LT_OP_nll_loss, &at, in2, 2, &o0, &kt_ctx1), LT_OK);
    kt_check("nll all ignored", &o0, &nanv, 1, 0, 0);
}

/* ------------------------------------------------------------------ random */

static void test_random(void **state)
{
    const int64_t n = 50000;
    double seed = 1234, seed2 = 1235;
    lt_view s = kt_view(LT_I64, 0, NULL, NULL, 0, &seed), s2 = kt_view(LT_I64, 0, NULL, NULL, 0, &seed2);
    lt_attrs at = KATTR(LT_F32, 1, n);
    lt_view u1 = kt_out(LT_F32, 1, DIMS(n)), u2 = kt_out(LT_F32, 1, DIMS(n)), u3 = kt_out(LT_F32, 1, DIMS(n));
    assert_int_equal(lt_kernel_random(LT_OP_rand_uniform, &at, &s, 1, &u1, &kt_ctx1), LT_OK);
    assert_int_equal(lt_kernel_random(LT_OP_rand_uniform, &at, &s, 1, &u2, &kt_ctx2), LT_OK);
    assert_int_equal(lt_kernel_random(LT_OP_rand_uniform, &at, &s2, 1, &u3, &kt_ctx2), LT_OK);
    assert_memory_equal(u1.data, u2.data, (size_t)n * 4);
    double mean = 0, m2 = 0;
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ((float *)u1.data)[i];
        assert_true(v >= 0 && v < 1);
        mean += v; m2 += v * v;
        same += v == ((float *)u3.data)[i];
    }
    mean /= n; m2 = m2 / n - mean * mean;
    assert_true(fabs(mean - 0.5) < 0.01);
    assert_true(fabs(m2 - 1.0 / 12) < 0.005);
    assert_true(same < 50);
    /* bf16: still strictly below 1 */
    lt_view ub = kt_out(LT_BF16, 1, DIMS(n));
    at = KATTR(LT_BF16, 1, n);
    assert_int_equal(lt_kernel_random(LT_OP_rand_uniform, &at, &s, 1, &ub, &kt_ctx2), LT_OK);
    for (int64_t i = 0; i < n; i++) {
        double v = kt_get(ub.data, LT_BF16, i);
        assert_true(v >= 0 && v < 1);
    }
    /* normal f64: moments, determinism */
    lt_view g1 = kt_out(LT_F64, 2, DIMS(n / 2, 2)), g2 = kt_out(LT_F64, 2, DIMS(n / 2, 2));
    at = KATTR(LT_F64, 2, n / 2, 2);
    assert_int_equal(lt_kernel_random(LT_OP_rand_normal, &at, &s, 1, &g1, &kt_ctx2), LT_OK);
    assert_int_equal(lt_kernel_random(LT_OP_rand_normal, &at, &s, 1, &g2, &kt_ctx1), LT_OK);
    assert_memory_equal(g1.data, g2.data, (size_t)n * 8);
    mean = 0; m2 = 0;
    double m4 = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ((double *)g1.data)[i];
        assert_true(isfinite(v));
        mean += v; m2 += v * v; m4 += v * v * v * v;
    }
    mean /= n; m2 /= n; m4 /= n;
    assert_true(fabs(mean) < 0.03);
    assert_true(fabs(m2 - 1) < 0.05);
    assert_true(fabs(m4 - 3) < 0.3);   /* kurtosis of a normal */
}

/* A counter offset (second input) o: the output is elements o.. of the
 * stream, bitwise the whole output's block there (a core of a partitioned
 * step generating its block); odd offsets split rand_normal's pairs. */
static void test_random_offset(void **state)
{
    (void)state;
    const int64_t n = 1000;
    double seed = 77;
    lt_view s = kt_view(LT_I64, 0, NULL, NULL, 0, &seed);
    lt_op ops[2] = {LT_OP_rand_uniform, LT_OP_rand_normal};
    lt_dtype dts[2] = {LT_F32, LT_F64};
    int64_t offs[4] = {0, 1, 250, 613};
    for (int o = 0; o < 2; o++)
        for (int t = 0; t < 2; t++) {
            size_t es = dts[t] == LT_F32 ? 4 : 8;
            lt_attrs at = KATTR(dts[t], 1, n);
            lt_view whole = kt_out(dts[t], 1, DIMS(n));
            assert_int_equal(lt_kernel_random(ops[o], &at, &s, 1, &whole, &kt_ctx2), LT_OK);
            for (int k = 0; k < 4; k++) {
                int64_t m = k == 3 ? n - offs[k] : 100;
                double ov = (double)offs[k];
                lt_view in2[2] = {s, kt_view(k & 1 ? LT_I32 : LT_I64, 0, NULL, NULL, 0, &ov)};
                lt_attrs ab = KATTR(dts[t], 1, m);
                lt_view blk = kt_out(dts[t], 1, DIMS(m));
                assert_int_equal(lt_kernel_random(ops[o], &ab, in2, 2, &blk, &kt_ctx1), LT_OK);
                assert_memory_equal(blk.data, (char *)whole.data + (size_t)offs[k] * es, (size_t)m * es);
            }
            /* a wrong offset gives other values */
            double ov = 3;
            lt_view in2[2] = {s, kt_view(LT_I64, 0, NULL, NULL, 0, &ov)};
            lt_attrs ab = KATTR(dts[t], 1, 100);
            lt_view blk = kt_out(dts[t], 1, DIMS(100));
            assert_int_equal(lt_kernel_random(ops[o], &ab, in2, 2, &blk, &kt_ctx1), LT_OK);
            assert_memory_not_equal(blk.data, (char *)whole.data + 4 * es, 100 * es);
        }
    /* the offset must be an integer */
    double fv = 1;
    lt_view bad[2] = {s, kt_view(LT_F32, 0, NULL, NULL, 0, &fv)};
    lt_attrs ab = KATTR(LT_F32, 1, 4);
    lt_view blk = kt_out(LT_F32, 1, DIMS(4));
    assert_int_not_equal(lt_kernel_random(LT_OP_rand_uniform, &ab, bad, 2, &blk, &kt_ctx1), LT_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_mm_f32_layouts, kt_teardown),
        cmocka_unit_test_teardown(test_mm_f64_bf16_mixed, kt_teardown),
        cmocka_unit_test_teardown(test_mm_int_and_errors, kt_teardown),
        cmocka_unit_test_teardown(test_bmm_layouts, kt_teardown),
        cmocka_unit_test_teardown(test_softmax_family, kt_teardown),
        cmocka_unit_test_teardown(test_softmax_dtypes_and_stability, kt_teardown),
        cmocka_unit_test_teardown(test_scatters, kt_teardown),
        cmocka_unit_test_teardown(test_cat, kt_teardown),
        cmocka_unit_test_teardown(test_index_select, kt_teardown),
        cmocka_unit_test_teardown(test_gather_scatter_add, kt_teardown),
        cmocka_unit_test_teardown(test_embedding_backward_arange, kt_teardown),
        cmocka_unit_test_teardown(test_nll_loss, kt_teardown),
        cmocka_unit_test_teardown(test_random, kt_teardown),
        cmocka_unit_test_teardown(test_random_offset, kt_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
