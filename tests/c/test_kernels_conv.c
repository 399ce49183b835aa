/*
 * tests/c/test_kernels_conv.c — conv2d (forward, backward input, backward
 * weight) and pooling kernels against naive double loops written here.
 */
#include "kt_test.h"
#include "conv_wino.h"

/* ---------------------------------------------------------------- conv2d */

typedef struct conv_case {
    int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, g;
} conv_case;

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* y, dx, dw references from x, w, gy (all logical row-major). */
static void conv_ref(const conv_case *q, const double *x, const double *w, const double *gy,
                     double *y, double *dx, double *dw)
{
    int64_t oh = conv_out(q->H, q->kh, q->sh, q->ph, q->dh), ow = conv_out(q->W, q->kw, q->sw, q->pw, q->dw);
    int64_t Cg = q->C / q->g, Og = q->O / q->g;
    memset(y, 0, (size_t)(q->N * q->O * oh * ow) * sizeof(double));
    memset(dx, 0, (size_t)(q->N * q->C * q->H * q->W) * sizeof(double));
    memset(dw, 0, (size_t)(q->O * Cg * q->kh * q->kw) * sizeof(double));
    for (int64_t n = 0; n < q->N; n++)
        for (int64_t o = 0; o < q->O; o++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    int64_t yi = ((n * q->O + o) * oh + oy) * ow + ox;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t i = 0; i < q->kh; i++)
                            for (int64_t j = 0; j < q->kw; j++) {
                                int64_t iy = oy * q->sh - q->ph + i * q->dh;
                                int64_t ix = ox * q->sw - q->pw + j * q->dw;
                                if (iy < 0 || iy >= q->H || ix < 0 || ix >= q->W) continue;
                                int64_t ci = (o / Og) * Cg + c;
                                int64_t xi = ((n * q->C + ci) * q->H + iy) * q->W + ix;
                                int64_t wi = ((o * Cg + c) * q->kh + i) * q->kw + j;
                                y[yi] += x[xi] * w[wi];
                                dx[xi] += gy[yi] * w[wi];
                                dw[wi] += gy[yi] * x[xi];
                            }
                }
}

static void run_conv_case(const conv_case *q, lt_dtype dt, int nhwc, const lt_kernel_ctx *ctx)
{
    int64_t oh = conv_out(q->H, q->kh, q->sh, q->ph, q->dh), ow = conv_out(q->W, q->kw, q->sw, q->pw, q->dw);
    int64_t Cg = q->C / q->g;
    int64_t nx = q->N * q->C * q->H * q->W, nw = q->O * Cg * q->kh * q->kw, ny = q->N * q->O * oh * ow;
    double *x = kt_rvals(nx, dt), *w = kt_rvals(nw, dt), *gy = kt_rvals(ny, dt);
    double *y = kt_talloc((size_t)ny * 8), *dx = kt_talloc((size_t)nx * 8), *dw = kt_talloc((size_t)nw * 8);
    conv_ref(q, x, w, gy, y, dx, dw);
    double atol = dt == LT_BF16 ? 2e-2 : dt == LT_F32 ? 1e-4 : 1e-11;
    double rtol = dt == LT_BF16 ? 1.0 / 64 : dt == LT_F32 ? 1e-4 : 1e-11;
    if (dt == LT_BF16) {
        for (int64_t i = 0; i < ny; i++) y[i] = kt_round_bf16(y[i]);
        for (int64_t i = 0; i < nx; i++) dx[i] = kt_round_bf16(dx[i]);
        for (int64_t i = 0; i < nw; i++) dw[i] = kt_round_bf16(dw[i]);
    }
    int64_t xd[4] = {q->N, q->C, q->H, q->W};
    int64_t xs_nhwc[4] = {q->H * q->W * q->C, 1, q->W * q->C, q->C};
    lt_view xv = kt_view(dt, 4, xd, nhwc ? xs_nhwc : NULL, 0, x);
    /* weight given as a permuted view too when nhwc: storage [O, kh, kw, Cg] */
    int64_t wd[4] = {q->O, Cg, q->kh, q->kw};
    int64_t ws_perm[4] = {q->kh * q->kw * Cg, 1, q->kw * Cg, Cg};
    lt_view wv = kt_view(dt, 4, wd, nhwc ? ws_perm : NULL, 0, w);
    int64_t yd[4] = {q->N, q->O, oh, ow};
    lt_view gv = kt_view(dt, 4, yd, NULL, 0, gy);
    lt_attrs at = KATTR(q->sh, q->sw, q->ph, q->pw, q->dh, q->dw, q->g);
    char what[96];
    snprintf(what, sizeof what, "conv N%lld C%lld O%lld k%lldx%lld g%lld dt%d nhwc%d nt%d",
             (long long)q->N, (long long)q->C, (long long)q->O, (long long)q->kh, (long long)q->kw,
             (long long)q->g, (int)dt, nhwc, ctx->nthreads);

    lt_view in[2] = {xv, wv};
    lt_view out = kt_out(dt, 4, yd);
    assert_int_equal(lt_kernel_conv(LT_OP_conv2d, &at, in, 2, &out, ctx), LT_OK);
    kt_check(what, &out, y, ny, atol, rtol);

    lt_attrs atb = at;
    atb.i[7] = q->H; atb.i[8] = q->W; atb.n = 9;
    in[0] = gv; in[1] = wv;
    out = kt_out(dt, 4, xd);
    assert_int_equal(lt_kernel_conv(LT_OP_conv2d_backward_input, &atb, in, 2, &out, ctx), LT_OK);
    kt_check(what, &out, dx, nx, atol, rtol);

    atb.i[7] = q->kh; atb.i[8] = q->kw;
    in[0] = gv; in[1] = xv;
    out = kt_out(dt, 4, wd);
    assert_int_equal(lt_kernel_conv(LT_OP_conv2d_backward_weight, &atb, in, 2, &out, ctx), LT_OK);
    kt_check(what, &out, dw, nw, atol * 4, rtol);
}

static const conv_case conv_cases[] = {
    /* N  C  H   W  O kh kw sh sw ph pw dh dw g */
    {2, 3, 9, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {3, 4, 10, 11, 6, 3, 2, 2, 3, 1, 2, 2, 1, 2},
    {4, 6, 7, 7, 6, 1, 1, 1, 1, 0, 0, 1, 1, 3},     /* pointwise path */
    {1, 2, 5, 6, 2, 1, 1, 2, 2, 0, 0, 1, 1, 1},     /* 1x1 strided, N < threads */
    {3, 4, 8, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1, 4},     /* depthwise x2 */
    {2, 2, 6, 5, 3, 2, 3, 1, 2, 2, 0, 2, 2, 1},     /* padding larger than half kernel */
    /* stride 1, >= 16 channels per group, >= 1024 input pixels: backward
     * input as a forward conv (below: col2im) */
    {2, 16, 24, 22, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {2, 32, 23, 24, 4, 3, 2, 1, 1, 2, 1, 2, 1, 2},  /* dilated, groups, uneven padding */
    {2, 16, 6, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {2, 32, 7, 6, 4, 3, 2, 1, 1, 2, 1, 2, 1, 2},
    {1, 16, 5, 5, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1},    /* padding beyond the kernel: col2im */
    /* large enough for threads (>= 1e6 flops): small spatial -> GEMM split
     * (GEMM blocks and layout loops on helpers, weight gradient in place) */
    {5, 32, 6, 5, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {4, 24, 7, 7, 40, 3, 3, 2, 2, 1, 1, 1, 1, 2},   /* strided: col2im, groups */
    {3, 64, 2, 2, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* 2x2 maps, N < 2 threads' chunks */
    {4, 48, 4, 3, 64, 1, 1, 2, 1, 0, 0, 1, 1, 1},   /* 1x1 strided */
    {7, 128, 12, 12, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1}, /* chunks 3+3+1 in order */
    /* >= CONV_SPLIT_MIN_COLS columns per chunk: batch split with partials */
    {5, 4, 24, 23, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {4, 3, 50, 47, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1},  /* ResNet stem-like, odd size */
};

static void test_conv_f32(void **state)
{
    for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
        run_conv_case(&conv_cases[k], LT_F32, 0, &kt_ctx1);
        run_conv_case(&conv_cases[k], LT_F32, 1, &kt_ctx2);
        kt_tfree_all();
    }
}

static void test_conv_f64_bf16(void **state)
{
    for (size_t k = 0; k < sizeof conv_cases / sizeof *conv_cases; k++) {
        run_conv_case(&conv_cases[k], LT_F64, k & 1, &kt_ctx2);
        run_conv_case(&conv_cases[k], LT_BF16, !(k & 1), &kt_ctx2);
        kt_tfree_all();
    }
}

static void test_conv_errors(void **state)
{
    lt_view in[2] = {kt_view(LT_I64, 4, DIMS(1, 1, 3, 3), NULL, 0, NULL),
                     kt_view(LT_I64, 4, DIMS(1, 1, 2, 2), NULL, 0, NULL)};
    lt_view out = kt_out(LT_I64, 4, DIMS(1, 1, 2, 2));
    lt_attrs at = KATTR(1, 1, 0, 0, 1, 1, 1);
    assert_int_equal(lt_kernel_conv(LT_OP_conv2d, &at, in, 2, &out, &kt_ctx1), LT_ERR_DTYPE);
    assert_non_null(strstr(lt_last_error(), "conv2d"));
    assert_non_null(strstr(lt_last_error(), "i64"));
}

/* ---------------------------------------------- Winograd F(2x2,3x3) path */

/* 3x3 stride-1 cases for conv_wino.c: odd sizes (half-empty edge tiles),
 * padding 0 / 1 / 2 (the input gradient then runs with padding 2 / 1 / 0),
 * batch 1, channel counts off the 8-wide vector step, 1x1 outputs. */
static const conv_case wino_cases[] = {
    /* N  C  H   W  O kh kw sh sw ph pw dh dw g */
    {2, 16, 9, 8, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {1, 13, 7, 11, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {3, 8, 6, 5, 17, 3, 3, 1, 1, 0, 0, 1, 1, 1},
    {2, 5, 5, 6, 3, 3, 3, 1, 1, 2, 2, 1, 1, 1},
    {2, 9, 3, 3, 8, 3, 3, 1, 1, 0, 1, 1, 1, 1},     /* 1-row output, uneven padding */
    {4, 32, 2, 2, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* ResNet's 2x2 maps */
    {5, 24, 14, 13, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1}, /* two workers, several chunks */
    {2, 1, 10, 9, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* one input channel: direct */
    {1, 1, 7, 5, 16, 3, 3, 1, 1, 0, 2, 1, 1, 1},    /* direct, uneven padding, batch 1 */
};

/* Calls lt_wino_run / lt_wino_run_bw directly (no dispatch that could fall
 * back to im2col) on f32 against the double reference: forward, the input
 * gradient as the flipped conv of gy (padding 2 - p), the weight gradient. Tolerances as the im2col
 * tests' f32 (1e-4 abs + rel): F(2x2,3x3)'s transforms only add and halve,
 * the sums have ~4x more terms of similar size (measured max error on
 * these cases ~2e-6). */
static void run_wino_direct(const conv_case *q, const lt_kernel_ctx *ctx)
{
    int64_t oh = conv_out(q->H, 3, 1, q->ph, 1), ow = conv_out(q->W, 3, 1, q->pw, 1);
    int64_t nx = q->N * q->C * q->H * q->W, nw = q->O * q->C * 9, ny = q->N * q->O * oh * ow;
    double *x = kt_rvals(nx, LT_F32), *w = kt_rvals(nw, LT_F32), *gy = kt_rvals(ny, LT_F32);
    double *y = kt_talloc((size_t)ny * 8), *dx = kt_talloc((size_t)nx * 8), *dw = kt_talloc((size_t)nw * 8);
    conv_ref(q, x, w, gy, y, dx, dw);
    float *xf = kt_talloc((size_t)nx * 4), *wf = kt_talloc((size_t)nw * 4), *gf = kt_talloc((size_t)ny * 4);
    float *yf = kt_talloc((size_t)ny * 4), *dxf = kt_talloc((size_t)nx * 4);
    float *dwf = kt_talloc((size_t)nw * 4);
    for (int64_t i = 0; i < nx; i++) xf[i] = (float)x[i];
    for (int64_t i = 0; i < nw; i++) wf[i] = (float)w[i];
    for (int64_t i = 0; i < ny; i++) gf[i] = (float)gy[i];
    lt_wino_conv f = {q->N, q->C, q->H, q->W, q->O, oh, ow, q->ph, q->pw, 0};
    lt_wino_conv b = {q->N, q->O, oh, ow, q->C, q->H, q->W, 2 - q->ph, 2 - q->pw, 1};
    assert_int_equal(lt_wino_run(&f, xf, wf, yf, ctx->nthreads, ctx), LT_OK);
    assert_int_equal(lt_wino_run(&b, gf, wf, dxf, ctx->nthreads, ctx), LT_OK);
    assert_int_equal(lt_wino_run_bw(&f, xf, gf, dwf, ctx->nthreads, ctx), LT_OK);
    assert_int_equal(lt_wino_run_bw(&b, gf, xf, dwf + 1, ctx->nthreads, ctx), LT_ERR_INTERNAL);
    double err = 0;
    for (int64_t i = 0; i < ny; i++) {
        double e = fabs(yf[i] - y[i]);
        err = e > err ? e : err;
        if (e > 1e-4 + 1e-4 * fabs(y[i]))
            fail_msg("wino fwd N%lld C%lld O%lld: y[%lld] = %.9g, expected %.9g", (long long)q->N,
                     (long long)q->C, (long long)q->O, (long long)i, yf[i], y[i]);
    }
    for (int64_t i = 0; i < nx; i++) {
        double e = fabs(dxf[i] - dx[i]);
        err = e > err ? e : err;
        if (e > 1e-4 + 1e-4 * fabs(dx[i]))
            fail_msg("wino bin N%lld C%lld O%lld: dx[%lld] = %.9g, expected %.9g", (long long)q->N,
                     (long long)q->C, (long long)q->O, (long long)i, dxf[i], dx[i]);
    }
    for (int64_t i = 0; i < nw; i++) {   /* sums over N * pixels: the im2col tests' 4x */
        double e = fabs(dwf[i] - dw[i]);
        if (e > 4e-4 + 1e-4 * fabs(dw[i]))
            fail_msg("wino bw N%lld C%lld O%lld: dw[%lld] = %.9g, expected %.9g", (long long)q->N,
                     (long long)q->C, (long long)q->O, (long long)i, dwf[i], dw[i]);
    }
    assert_true(err < 1e-4);
}

static void test_conv_winograd_direct(void **state)
{
    for (size_t k = 0; k < sizeof wino_cases / sizeof *wino_cases; k++) {
        run_wino_direct(&wino_cases[k], &kt_ctx1);
        run_wino_direct(&wino_cases[k], &kt_ctx2);
        kt_tfree_all();
    }
}

/* The same cases through lt_kernel_conv with LAZYTPU_CONV_ALGO forcing each
 * path, then unset (the default choice; one input channel: the direct
 * kernel) (forward, input and weight gradients; f32 and bf16 storage,
 * strided operands). */
static void test_conv_winograd_forced(void **state)
{
    const char *algos[] = {"winograd", "im2col", NULL};
    for (int a = 0; a < 3; a++) {
        if (algos[a]) setenv("LAZYTPU_CONV_ALGO", algos[a], 1);
        else unsetenv("LAZYTPU_CONV_ALGO");
        for (size_t k = 0; k < sizeof wino_cases / sizeof *wino_cases; k++) {
            run_conv_case(&wino_cases[k], LT_F32, (int)(k & 1), &kt_ctx1);
            run_conv_case(&wino_cases[k], LT_BF16, !(k & 1), &kt_ctx2);
            kt_tfree_all();
        }
    }
    unsetenv("LAZYTPU_CONV_ALGO");
}

/* conv_direct.c called directly on the one-channel cases (f32, 1 and 2
 * workers) against the double reference; other geometries refused. */
static void test_conv_direct_c1(void **state)
{
    for (size_t k = 0; k < sizeof wino_cases / sizeof *wino_cases; k++) {
        const conv_case *q = &wino_cases[k];
        if (q->C != 1) continue;
        int64_t oh = conv_out(q->H, 3, 1, q->ph, 1), ow = conv_out(q->W, 3, 1, q->pw, 1);
        int64_t nx = q->N * q->H * q->W, nw = q->O * 9, ny = q->N * q->O * oh * ow;
        double *x = kt_rvals(nx, LT_F32), *w = kt_rvals(nw, LT_F32), *gy = kt_rvals(ny, LT_F32);
        double *y = kt_talloc((size_t)ny * 8), *dx = kt_talloc((size_t)nx * 8);
        double *dw = kt_talloc((size_t)nw * 8);
        conv_ref(q, x, w, gy, y, dx, dw);
        float *xf = kt_talloc((size_t)nx * 4), *wf = kt_talloc((size_t)nw * 4);
        float *yf = kt_talloc((size_t)ny * 4);
        for (int64_t i = 0; i < nx; i++) xf[i] = (float)x[i];
        for (int64_t i = 0; i < nw; i++) wf[i] = (float)w[i];
        lt_wino_conv f = {q->N, 1, q->H, q->W, q->O, oh, ow, q->ph, q->pw, 0};
        for (int nt = 1; nt <= 2; nt++) {
            const lt_kernel_ctx *ctx = nt == 1 ? &kt_ctx1 : &kt_ctx2;
            memset(yf, 0xff, (size_t)ny * 4);   /* NaNs: every output must be written */
            assert_int_equal(lt_conv_direct_c1(&f, xf, wf, yf, nt, ctx), LT_OK);
            for (int64_t i = 0; i < ny; i++)
                if (!(fabs(yf[i] - y[i]) <= 1e-5 + 1e-5 * fabs(y[i])))
                    fail_msg("direct c1 case %zu: y[%lld] = %.9g, expected %.9g", k, (long long)i,
                             yf[i], y[i]);
        }
        lt_wino_conv two = f;
        two.Ci = 2;
        assert_int_equal(lt_conv_direct_c1(&two, xf, wf, yf, 1, &kt_ctx1), LT_ERR_INTERNAL);
        kt_tfree_all();
    }
}

/* The dispatch: the environment variable overrides, the default follows
 * the measured crossover (>= 32 GEMM rows, >= 8 channels each side). */
static void test_conv_winograd_choice(void **state)
{
    lt_wino_conv l1 = {16, 64, 16, 16, 64, 16, 16, 1, 1, 0};      /* ResNet-18 layer1 */
    lt_wino_conv l4 = {16, 512, 2, 2, 512, 2, 2, 1, 1, 0};        /* 16 rows */
    lt_wino_conv c1 = {32, 1, 28, 28, 16, 28, 28, 1, 1, 0};       /* 1 input channel */
    lt_wino_conv bad = {2, 8, 1, 1, 8, -1, -1, 0, 0, 0};
    unsetenv("LAZYTPU_CONV_ALGO");
    assert_int_equal(lt_wino_choose(&l1), 1);
    assert_int_equal(lt_wino_choose(&l4), 0);
    assert_int_equal(lt_wino_choose(&c1), 0);
    assert_int_equal(lt_conv_direct_c1_choose(&c1), 1);
    assert_int_equal(lt_conv_direct_c1_choose(&l1), 0);
    setenv("LAZYTPU_CONV_ALGO", "winograd", 1);
    assert_int_equal(lt_conv_direct_c1_choose(&c1), 0);
    assert_int_equal(lt_wino_choose(&l4), 1);
    assert_int_equal(lt_wino_choose(&c1), 1);
    assert_int_equal(lt_wino_choose(&bad), 0);
    setenv("LAZYTPU_CONV_ALGO", "im2col", 1);
    assert_int_equal(lt_wino_choose(&l1), 0);
    assert_int_equal(lt_conv_direct_c1_choose(&c1), 0);
    unsetenv("LAZYTPU_CONV_ALGO");
}

/* ------------------------------------------------------------------ pool */

static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil_mode)
{
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = num / s + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--;
    return o;
}

static void test_max_pool(void **state)
{
    const int64_t P0 = 2, P1 = 3, H = 9, W = 10;
    const int64_t kh = 3, kw = 2, sh = 2, sw = 3, ph = 1, pw = 1, dh = 2, dw = 1;
    int64_t n = P0 * P1 * H * W;
    double *x = kt_rvals(n, LT_F32);
    for (int64_t i = 0; i < n; i++) x[i] = floor(x[i] * 4) / 4;   /* many ties */
    x[W + 5] = NAN;      /* row 1: inside windows */
    x[H * W + 3] = -INFINITY;
    for (int ceil_mode = 0; ceil_mode < 2; ceil_mode++) {
        int64_t oh = pool_out(H, kh, sh, ph, dh, ceil_mode), ow = pool_out(W, kw, sw, pw, dw, ceil_mode);
        int64_t no = P0 * P1 * oh * ow;
        double *ry = kt_talloc((size_t)no * 8), *ri = kt_talloc((size_t)no * 8);
        double *g = kt_rvals(no, LT_F32), *rdx = kt_talloc((size_t)n * 8);
        for (int64_t p = 0; p < P0 * P1; p++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    double m = -INFINITY;
                    int64_t best = -1;
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++) {
                            int64_t iy = oy * sh - ph + i * dh, ix = ox * sw - pw + j * dw;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                            double v = x[p * H * W + iy * W + ix];
                            if (best < 0) best = iy * W + ix;   /* first valid element */
                            if (v > m || isnan(v)) { m = v; best = iy * W + ix; }
                        }
                    int64_t o = (p * oh + oy) * ow + ox;
                    ry[o] = m;
                    ri[o] = (double)best;
                    rdx[p * H * W + best] += g[o];
                }
        for (int c = 0; c < 2; c++) {
            const lt_kernel_ctx *ctx = c ? &kt_ctx2 : &kt_ctx1;
            int64_t xd[4] = {P0, P1, H, W}, od[4] = {P0, P1, oh, ow};
            int64_t xs[4] = {H * W, P0 * H * W, 1, H};   /* [P1, P0, W, H] storage */
            lt_view xv = kt_view(LT_F32, 4, xd, c ? xs : NULL, 0, x);
            lt_attrs at = KATTR(kh, kw, sh, sw, ph, pw, dh, dw, ceil_mode);
            lt_view y = kt_out(LT_F32, 4, od), yi = kt_out(LT_I64, 4, od), dx = kt_out(LT_F32, 4, xd);
            assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d, &at, &xv, 1, &y, ctx), LT_OK);
            kt_check("max_pool2d", &y, ry, no, 0, 0);
            assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d_indices, &at, &xv, 1, &yi, ctx), LT_OK);
            kt_check("max_pool2d_indices", &yi, ri, no, 0, 0);
            lt_view bin[2] = {kt_view(LT_F32, 4, od, NULL, 0, g), xv};
            assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d_backward, &at, bin, 2, &dx, ctx), LT_OK);
            kt_check("max_pool2d_backward", &dx, rdx, n, 1e-6, 1e-6);
        }
        kt_tfree_all();
        x = kt_rvals(n, LT_F32);
        for (int64_t i = 0; i < n; i++) x[i] = floor(x[i] * 4) / 4;
        x[W + 5] = NAN;      /* row 1: inside windows */
        x[H * W + 3] = -INFINITY;
    }
    /* bf16, 3-D input [C,H,W] with the default (kernel-sized) stride */
    double *xb = kt_rvals(3 * 6 * 6, LT_BF16), rb[3 * 3 * 3];
    for (int64_t c = 0; c < 3; c++)
        for (int64_t oy = 0; oy < 3; oy++)
            for (int64_t ox = 0; ox < 3; ox++) {
                double m = -INFINITY;
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 2; j++) {
                        double v = xb[(c * 6 + oy * 2 + i) * 6 + ox * 2 + j];
                        if (v > m) m = v;
                    }
                rb[(c * 3 + oy) * 3 + ox] = m;
            }
    lt_view xv = kt_view(LT_BF16, 3, DIMS(3, 6, 6), NULL, 0, xb);
    lt_view y = kt_out(LT_BF16, 3, DIMS(3, 3, 3));
    lt_attrs at = KATTR(2, 2, 2, 2, 0, 0, 1, 1, 0);
    assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d, &at, &xv, 1, &y, &kt_ctx1), LT_OK);
    kt_check("max_pool2d bf16 3-D", &y, rb, 27, 0, 0);
}

/* Max pooling reference of one geometry over P planes of [H, W]: values ry,
 * flat indices ri and the backward dx of g (accumulated into rdx, zeroed by
 * the caller). PyTorch's rule: NaN wins (the last one), else the first
 * maximum; an all -inf window gives its first valid element. */
static void max_pool_ref(const double *x, int64_t P, int64_t H, int64_t W, const int64_t *k6,
                         int64_t dh, int64_t dw, int64_t oh, int64_t ow, double *ry, double *ri,
                         const double *g, double *rdx)
{
    int64_t kh = k6[0], kw = k6[1], sh = k6[2], sw = k6[3], ph = k6[4], pw = k6[5];
    for (int64_t p = 0; p < P; p++)
        for (int64_t oy = 0; oy < oh; oy++)
            for (int64_t ox = 0; ox < ow; ox++) {
                double m = -INFINITY;
                int64_t best = -1;
                for (int64_t i = 0; i < kh; i++)
                    for (int64_t j = 0; j < kw; j++) {
                        int64_t iy = oy * sh - ph + i * dh, ix = ox * sw - pw + j * dw;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        double v = x[p * H * W + iy * W + ix];
                        if (best < 0) best = iy * W + ix;
                        if (v > m || isnan(v)) { m = v; best = iy * W + ix; }
                    }
                int64_t o = (p * oh + oy) * ow + ox;
                ry[o] = m;
                ri[o] = (double)best;
                rdx[p * H * W + best] += g[o];
            }
}

/* max_pool2d, max_pool2d_indices (i32 indices when i32, else i64) and
 * max_pool2d_backward (recompute from x) of x [xd] with attrs at on ctx,
 * checked against the reference values ry, indices ri and input gradient
 * rdx of output gradient g [od]; dx within atol/rtol. Returns the input,
 * gradient and indices views (*xv, *gv, *yi) for further checks. */
static void check_max_pool(const char *what, lt_dtype dt, const int64_t xd[4],
                           const int64_t od[4], const lt_attrs *at, const lt_kernel_ctx *ctx,
                           int i32, double *x, double *g, const double *ry, const double *ri,
                           const double *rdx, double atol, double rtol, lt_view *xv,
                           lt_view *gv, lt_view *yi)
{
    int64_t n = xd[0] * xd[1] * xd[2] * xd[3], no = od[0] * od[1] * od[2] * od[3];
    *xv = kt_view(dt, 4, xd, NULL, 0, x);
    *gv = kt_view(dt, 4, od, NULL, 0, g);
    lt_view y = kt_out(dt, 4, od), dx = kt_out(dt, 4, xd);
    *yi = kt_out(i32 ? LT_I32 : LT_I64, 4, od);
    assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d, at, xv, 1, &y, ctx), LT_OK);
    kt_check(what, &y, ry, no, 0, 0);
    assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d_indices, at, xv, 1, yi, ctx), LT_OK);
    kt_check(what, yi, ri, no, 0, 0);
    lt_view bin[2] = {*gv, *xv};
    assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d_backward, at, bin, 2, &dx, ctx), LT_OK);
    kt_check(what, &dx, rdx, n, atol, rtol);
}

/* 2x2 / stride 2 max pooling (pool_max2.c's fast path) against the
 * reference: odd and even sizes, rows shorter and longer than a vector,
 * ceil_mode's partial windows (incl. an input with only a partial window),
 * ties, NaN patterns in a window (one, two: the last wins, NaN first then a
 * larger value), all -inf windows; f32 with i64 and i32 indices, f64, bf16
 * storage; 1 and 2 threads. */
static void test_max_pool_2x2(void **state)
{
    static const int64_t sizes[][3] = {  /* H, W, planes */
        {9, 7, 6}, {28, 28, 5}, {14, 14, 40}, {1, 5, 3}, {6, 35, 4}, {2, 2, 1}, {5, 40, 3},
    };
    const lt_dtype dts[3] = {LT_F32, LT_F64, LT_BF16};
    const int64_t k6[6] = {2, 2, 2, 2, 0, 0};
    for (size_t sc = 0; sc < sizeof sizes / sizeof *sizes; sc++)
        for (int di = 0; di < 3; di++)
            for (int ceil_mode = 0; ceil_mode < 2; ceil_mode++) {
                lt_dtype dt = dts[di];
                int64_t H = sizes[sc][0], W = sizes[sc][1], P = sizes[sc][2], n = P * H * W;
                int64_t oh = pool_out(H, 2, 2, 0, 1, ceil_mode), ow = pool_out(W, 2, 2, 0, 1, ceil_mode);
                if (oh <= 0 || ow <= 0) continue;
                int64_t no = P * oh * ow;
                double *x = kt_rvals(n, dt);
                for (int64_t i = 0; i < n; i++) x[i] = floor(x[i] * 4) / 4;  /* ties */
                /* NaN / -inf patterns in successive full windows of plane 0 */
                for (int64_t w = 0; w + 1 < W && w < 22; w += 2) {
                    int64_t a = w, b = w + 1, c = W + w, d = W + w + 1;
                    if (H < 2) break;
                    switch (w / 2) {
                    case 0: x[a] = NAN; break;
                    case 1: x[a] = NAN; x[c] = NAN; break;      /* the last NaN wins */
                    case 2: x[b] = NAN; x[d] = NAN; break;
                    case 3: x[a] = NAN; x[b] = 5; break;        /* NaN first, then larger */
                    case 4: x[a] = x[b] = x[c] = x[d] = -INFINITY; break;
                    case 5: x[b] = x[d] = 7; break;             /* tie across rows */
                    case 6: x[c] = NAN; x[b] = 9; break;
                    case 7: x[a] = x[d] = 8; break;
                    case 8: x[b] = NAN; break;
                    case 9: x[d] = NAN; x[a] = 9; break;
                    case 10: x[c] = NAN; break;
                    }
                }
                double *ry = kt_talloc((size_t)no * 8), *ri = kt_talloc((size_t)no * 8);
                double *g = kt_rvals(no, dt), *rdx = kt_talloc((size_t)n * 8);
                max_pool_ref(x, P, H, W, k6, 1, 1, oh, ow, ry, ri, g, rdx);
                for (int c = 0; c < 2; c++) {
                    const lt_kernel_ctx *ctx = c ? &kt_ctx2 : &kt_ctx1;
                    char what[96];
                    snprintf(what, sizeof what, "max_pool2d 2x2 H%lld W%lld dt%d ceil%d nt%d",
                             (long long)H, (long long)W, (int)dt, ceil_mode, c + 1);
                    int64_t xd[4] = {1, P, H, W}, od[4] = {1, P, oh, ow};
                    lt_attrs at = KATTR(2, 2, 2, 2, 0, 0, 1, 1, ceil_mode);
                    lt_view xv, gv, yi;
                    check_max_pool(what, dt, xd, od, &at, ctx, c, x, g, ry, ri, rdx, 0, 0,
                                   &xv, &gv, &yi);
                }
                kt_tfree_all();
            }
}

/* General max pooling (pool.c's row kernel) on larger inputs: rows wider
 * than a tile (64 outputs) with remainders, strides 1, 2 and 3 (the three
 * inner loops), padding, dilation, ceil_mode, enough elements for two
 * threads, NaN/-inf/ties; f32 (i64 and i32 indices), f64, bf16. */
static void test_max_pool_general(void **state)
{
    static const int64_t geo[][9] = {   /* H, W, planes, kh, kw, sh, sw, ph, pw */
        {32, 32, 70, 3, 3, 2, 2, 1, 1},   /* ResNet stem pool */
        {9, 150, 40, 3, 2, 1, 1, 1, 0},   /* stride 1, two tiles + remainder */
        {7, 200, 50, 2, 3, 3, 3, 1, 1},   /* stride 3 */
        {11, 131, 45, 3, 3, 2, 2, 0, 1},
    };
    const lt_dtype dts[3] = {LT_F32, LT_F64, LT_BF16};
    for (size_t gi = 0; gi < sizeof geo / sizeof *geo; gi++)
        for (int di = 0; di < 3; di++)
            for (int ceil_mode = 0; ceil_mode < 2; ceil_mode++) {
                const int64_t *q = geo[gi];
                lt_dtype dt = dts[di];
                int64_t H = q[0], W = q[1], P = q[2], n = P * H * W;
                int64_t dh = 1 + (gi & 1), dw = 1 + (ceil_mode && gi == 3);
                int64_t oh = pool_out(H, q[3], q[5], q[7], dh, ceil_mode);
                int64_t ow = pool_out(W, q[4], q[6], q[8], dw, ceil_mode);
                int64_t no = P * oh * ow;
                double *x = kt_rvals(n, dt);
                for (int64_t i = 0; i < n; i++) x[i] = floor(x[i] * 4) / 4;  /* ties */
                for (int64_t i = 0; i < n; i += 97) x[i] = NAN;
                for (int64_t i = 5; i < n; i += 89) x[i] = -INFINITY;
                for (int64_t i = 0; i < 3 * W && i < n; i++) x[i] = -INFINITY;  /* all -inf rows */
                x[W + 1] = NAN;
                double *ry = kt_talloc((size_t)no * 8), *ri = kt_talloc((size_t)no * 8);
                double *g = kt_rvals(no, dt), *rdx = kt_talloc((size_t)n * 8);
                int64_t k6[6] = {q[3], q[4], q[5], q[6], q[7], q[8]};
                max_pool_ref(x, P, H, W, k6, dh, dw, oh, ow, ry, ri, g, rdx);
                if (dt == LT_BF16)
                    for (int64_t i = 0; i < n; i++) rdx[i] = kt_round_bf16(rdx[i]);
                for (int c = 0; c < 2; c++) {
                    const lt_kernel_ctx *ctx = c ? &kt_ctx2 : &kt_ctx1;
                    char what[96];
                    snprintf(what, sizeof what, "max_pool2d geo%zu dt%d ceil%d nt%d", gi, (int)dt,
                             ceil_mode, c + 1);
                    int64_t xd[4] = {1, P, H, W}, od[4] = {1, P, oh, ow};
                    lt_attrs at = KATTR(q[3], q[4], q[5], q[6], q[7], q[8], dh, dw, ceil_mode);
                    lt_view xv, gv, yi;
                    check_max_pool(what, dt, xd, od, &at, ctx, c, x, g, ry, ri, rdx, 1e-6,
                                   dt == LT_BF16 ? 1.0 / 128 : 1e-6, &xv, &gv, &yi);
                    /* the same from the forward's indices (i64 / i32) */
                    lt_view bi[3] = {gv, xv, yi};
                    lt_view dx2 = kt_out(dt, 4, xd);
                    assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d_backward_idx, &at, bi, 3, &dx2, ctx),
                                     LT_OK);
                    kt_check(what, &dx2, rdx, n, 1e-6, dt == LT_BF16 ? 1.0 / 128 : 1e-6);
                    if (gi == 0 && di == 0 && !ceil_mode) {   /* an index outside the plane */
                        int64_t *iv = (int64_t *)yi.data;
                        if (c) ((int32_t *)iv)[5] = (int32_t)(H * W);
                        else iv[5] = -1;
                        assert_int_equal(lt_kernel_pool(LT_OP_max_pool2d_backward_idx, &at, bi, 3, &dx2, ctx),
                                         LT_ERR_ARG);
                        assert_non_null(strstr(lt_last_error(), "outside"));
                    }
                }
                kt_tfree_all();
            }
}

static void test_avg_pool(void **state)
{
    const int64_t P = 4, H = 10, W = 7, k = 3, s = 2, p = 1;  /* H: ceil window clipped at H+p */
    int64_t n = P * H * W;
    double *x = kt_rvals(n, LT_F64);
    for (int ceil_mode = 0; ceil_mode < 2; ceil_mode++)
        for (int cip = 0; cip < 2; cip++)
            for (int divo = 0; divo <= 5; divo += 5) {
                int64_t oh = pool_out(H, k, s, p, 1, ceil_mode), ow = pool_out(W, k, s, p, 1, ceil_mode);
                int64_t no = P * oh * ow;
                double *ry = kt_talloc((size_t)no * 8), *g = kt_rvals(no, LT_F64);
                double *rdx = kt_talloc((size_t)n * 8);
                for (int64_t q = 0; q < P; q++)
                    for (int64_t oy = 0; oy < oh; oy++)
                        for (int64_t ox = 0; ox < ow; ox++) {
                            /* window in padded coordinates, clipped to the padded input */
                            int64_t y0 = oy * s - p, x0 = ox * s - p;
                            int64_t y1 = y0 + k < H + p ? y0 + k : H + p;
                            int64_t x1 = x0 + k < W + p ? x0 + k : W + p;
                            int64_t padded = (y1 - y0) * (x1 - x0), valid = 0;
                            double sum = 0;
                            for (int64_t iy = y0; iy < y1; iy++)
                                for (int64_t ix = x0; ix < x1; ix++)
                                    if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
                                        sum += x[(q * H + iy) * W + ix];
                                        valid++;
                                    }
                            double div = divo ? divo : cip ? (double)padded : (double)valid;
                            int64_t o = (q * oh + oy) * ow + ox;
                            ry[o] = valid ? sum / div : 0;
                            for (int64_t iy = y0; iy < y1; iy++)
                                for (int64_t ix = x0; ix < x1; ix++)
                                    if (valid && iy >= 0 && iy < H && ix >= 0 && ix < W)
                                        rdx[(q * H + iy) * W + ix] += g[o] / div;
                        }
                /* storage [W, P, H] */
                lt_view xv = kt_view(LT_F64, 3, DIMS(P, H, W), DIMS(H, 1, P * H), 0, x);
                lt_attrs at = KATTR(k, k, s, s, p, p, ceil_mode, cip, divo);
                lt_view y = kt_out(LT_F64, 3, DIMS(P, oh, ow)), dx = kt_out(LT_F64, 3, DIMS(P, H, W));
                assert_int_equal(lt_kernel_pool(LT_OP_avg_pool2d, &at, &xv, 1, &y, &kt_ctx2), LT_OK);
                kt_check("avg_pool2d", &y, ry, no, 1e-12, 1e-12);
                lt_view bin[2] = {kt_view(LT_F64, 3, DIMS(P, oh, ow), NULL, 0, g), xv};
                assert_int_equal(lt_kernel_pool(LT_OP_avg_pool2d_backward, &at, bin, 2, &dx, &kt_ctx1), LT_OK);
                kt_check("avg_pool2d_backward", &dx, rdx, n, 1e-12, 1e-12);
            }
}

static void test_adaptive_avg_pool(void **state)
{
    const int64_t N = 2, C = 3, H = 10, W = 7;
    int64_t outs[3][2] = {{3, 4}, {1, 1}, {10, 7}};
    int64_t n = N * C * H * W;
    double *x = kt_rvals(n, LT_F32);
    for (int t = 0; t < 3; t++) {
        int64_t oh = outs[t][0], ow = outs[t][1], no = N * C * oh * ow;
        double *ry = kt_talloc((size_t)no * 8), *g = kt_rvals(no, LT_F32), *rdx = kt_talloc((size_t)n * 8);
        for (int64_t p = 0; p < N * C; p++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    int64_t y0 = (int64_t)floor((double)oy * H / oh), y1 = (int64_t)ceil((double)(oy + 1) * H / oh);
                    int64_t x0 = (int64_t)floor((double)ox * W / ow), x1 = (int64_t)ceil((double)(ox + 1) * W / ow);
                    double s = 0, cnt = (double)((y1 - y0) * (x1 - x0));
                    int64_t o = (p * oh + oy) * ow + ox;
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = x0; ix < x1; ix++) {
                            s += x[(p * H + iy) * W + ix];
                            rdx[(p * H + iy) * W + ix] += g[o] / cnt;
                        }
                    ry[o] = s / cnt;
                }
        lt_view xv = kt_view(LT_F32, 4, DIMS(N, C, H, W), NULL, 0, x);
        lt_attrs at = KATTR(oh, ow);
        lt_view y = kt_out(LT_F32, 4, DIMS(N, C, oh, ow)), dx = kt_out(LT_F32, 4, DIMS(N, C, H, W));
        assert_int_equal(lt_kernel_pool(LT_OP_adaptive_avg_pool2d, &at, &xv, 1, &y, &kt_ctx2), LT_OK);
        kt_check("adaptive_avg_pool2d", &y, ry, no, 1e-6, 1e-5);
        lt_view bin[2] = {kt_view(LT_F32, 4, DIMS(N, C, oh, ow), NULL, 0, g), xv};
        assert_int_equal(lt_kernel_pool(LT_OP_adaptive_avg_pool2d_backward, &at, bin, 2, &dx, &kt_ctx1), LT_OK);
        kt_check("adaptive_avg_pool2d_backward", &dx, rdx, n, 1e-6, 1e-5);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_conv_f32, kt_teardown),
        cmocka_unit_test_teardown(test_conv_f64_bf16, kt_teardown),
        cmocka_unit_test_teardown(test_conv_errors, kt_teardown),
        cmocka_unit_test_teardown(test_conv_winograd_direct, kt_teardown),
        cmocka_unit_test_teardown(test_conv_winograd_forced, kt_teardown),
        cmocka_unit_test_teardown(test_conv_winograd_choice, kt_teardown),
        cmocka_unit_test_teardown(test_conv_direct_c1, kt_teardown),
        cmocka_unit_test_teardown(test_max_pool, kt_teardown),
        cmocka_unit_test_teardown(test_max_pool_2x2, kt_teardown),
        cmocka_unit_test_teardown(test_max_pool_general, kt_teardown),
        cmocka_unit_test_teardown(test_avg_pool, kt_teardown),
        cmocka_unit_test_teardown(test_adaptive_avg_pool, kt_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
