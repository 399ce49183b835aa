/* tests/c/test_mxu.c — TPU precision levels (lazy/kernels/mxu.c, the level
 * API in lazy/precision.c, the graph key): the bf16 split of special and
 * random values, the pass tables and their summation order (bit-exact
 * against the formula written out), the NaN-to-0 rule, and the matmul and
 * conv kernels at each level on every GEMM path (plain, own small GEMM,
 * K split over workers, batched, addmm's bias, bf16 storage) against a
 * reference that sums each pass in double. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kutil.h"
#include "mxu.h"
#include "graph.h"
#include "device.h"
#include "program.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f + (float)(*s >> 24) * 1e-7f;
}

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static float rne(float x) { return lt_bf16_to_f32_inline(lt_bf16_from_f32(x)); }

static void test_names_and_api(void **st)
{
    (void)st;
    assert_int_equal(lt_init(), LT_OK);
    const char *names[] = {"f32", "default", "high", "highest"};
    lt_matmul_precision lv[] = {LT_MATMUL_F32, LT_MATMUL_DEFAULT, LT_MATMUL_HIGH,
                                LT_MATMUL_HIGHEST};
    for (int i = 0; i < 4; i++) {
        lt_matmul_precision p;
        assert_int_equal(lt_matmul_precision_parse(names[i], &p), LT_OK);
        assert_int_equal(p, lv[i]);
        assert_string_equal(lt_matmul_precision_name(lv[i]), names[i]);
        assert_int_equal(lt_set_matmul_precision(lv[i]), LT_OK);
        assert_int_equal(lt_get_matmul_precision(), lv[i]);
        char *rep = lt_matmul_precision_report();
        assert_non_null(strstr(rep, names[i]));
        free(rep);
    }
    lt_matmul_precision p;
    assert_int_equal(lt_matmul_precision_parse("HIGH", &p), LT_ERR_ARG);
    assert_non_null(strstr(lt_last_error(), "HIGH"));
    assert_int_equal(lt_set_matmul_precision((lt_matmul_precision)2), LT_ERR_ARG);
    assert_int_equal(lt_get_matmul_precision(), LT_MATMUL_HIGHEST);
    assert_null(lt_matmul_precision_name((lt_matmul_precision)5));
    assert_int_equal(lt_set_matmul_precision(LT_MATMUL_F32), LT_OK);
}

static void test_split(void **st)
{
    (void)st;
    float xs[] = {1.0f, -1.0f, 3.14159265f, -2.7182817f, 1.0f + 0x1p-23f, 0.99609375f,
                  0x1.fffffep127f, 1e-40f, 0.0f, -0.0f, 123456.789f, 0x1.234568p-100f};
    int n = (int)(sizeof xs / sizeof xs[0]);
    float parts[3 * 16];
    lt_mxu_split(LT_MATMUL_DEFAULT, xs, n, parts, 1, NULL);
    for (int i = 0; i < n; i++) assert_true(bits_of(parts[i]) == bits_of(rne(xs[i])));
    lt_mxu_split(LT_MATMUL_HIGH, xs, n, parts, 1, NULL);
    for (int i = 0; i < n; i++) {
        float hi = parts[i], lo = parts[n + i];
        assert_true(bits_of(hi) == (bits_of(xs[i]) & 0xFFFF0000u));
        assert_true(bits_of(lo) == bits_of(rne(xs[i] - hi)));
        assert_true((bits_of(lo) & 0xFFFFu) == 0);
    }
    lt_mxu_split(LT_MATMUL_HIGHEST, xs, n, parts, 1, NULL);
    for (int i = 0; i < n; i++) {
        float hi = parts[i], mid = parts[n + i], lo = parts[2 * n + i];
        assert_true((bits_of(hi) & 0xFFFFu) == 0 && (bits_of(mid) & 0xFFFFu) == 0 &&
                    (bits_of(lo) & 0xFFFFu) == 0);
        /* three bf16 parts hold the 24 bits of a normal f32 exactly */
        if (fabsf(xs[i]) >= 0x1p-126f && fabsf(xs[i]) <= 0x1p127f)
            assert_true((double)hi + (double)mid + (double)lo == (double)xs[i]);
    }
    /* infinities: hi keeps them, the rest is inf - inf = NaN */
    float inf[2] = {INFINITY, -INFINITY};
    lt_mxu_split(LT_MATMUL_HIGHEST, inf, 2, parts, 1, NULL);
    assert_true(parts[0] == INFINITY && parts[1] == -INFINITY);
    assert_true(isnan(parts[2]) && isnan(parts[4]));
    /* a NaN stays NaN in hi */
    float nan1 = NAN;
    lt_mxu_split(LT_MATMUL_HIGH, &nan1, 1, parts, 1, NULL);
    assert_true(isnan(parts[0]));
    /* many values, split on threads, equal the serial split */
    enum { N = 100000 };
    float *x = malloc(N * sizeof *x), *p1 = malloc(3 * N * sizeof *p1),
          *p2 = malloc(3 * N * sizeof *p2);
    unsigned s = 7;
    for (int i = 0; i < N; i++) x[i] = frand(&s) * 1000.0f;
    lt_mxu_split(LT_MATMUL_HIGHEST, x, N, p1, 1, NULL);
    lt_mxu_split(LT_MATMUL_HIGHEST, x, N, p2, 2, NULL);
    assert_memory_equal(p1, p2, 3 * N * sizeof *p1);
    free(x);
    free(p1);
    free(p2);
}

static void test_pass_tables(void **st)
{
    (void)st;
    const unsigned char (*pr)[2];
    assert_int_equal(lt_mxu_passes(LT_MATMUL_DEFAULT, &pr), 1);
    assert_true(pr[0][0] == 0 && pr[0][1] == 0);
    assert_int_equal(lt_mxu_passes(LT_MATMUL_HIGH, &pr), 3);
    const unsigned char h3[3][2] = {{1, 0}, {0, 1}, {0, 0}};   /* lo*hi, hi*lo, hi*hi */
    assert_memory_equal(pr, h3, sizeof h3);
    assert_int_equal(lt_mxu_passes(LT_MATMUL_HIGHEST, &pr), 6);
    /* mid*mid, hi*lo, lo*hi, hi*mid, mid*hi, hi*hi */
    const unsigned char h6[6][2] = {{1, 1}, {0, 2}, {2, 0}, {0, 1}, {1, 0}, {0, 0}};
    assert_memory_equal(pr, h6, sizeof h6);
    assert_int_equal(lt_mxu_passes(LT_MATMUL_F32, &pr), 0);
    assert_int_equal(lt_mxu_parts(LT_MATMUL_F32), 0);
    assert_int_equal(lt_mxu_parts(LT_MATMUL_HIGHEST), 3);
}

/* elementwise product as the "pass": each output one exact product */
static lt_status ew_pass(void *arg, const lt_view *a, const lt_view *b, const lt_view *out)
{
    int *calls = arg;
    (*calls)++;
    int64_t n = kt_numel(&out->shape);
    for (int64_t i = 0; i < n; i++)
        ((float *)out->data)[i] = ((const float *)a->data)[i] * ((const float *)b->data)[i];
    return LT_OK;
}

/* x*y at level p, the XLA formula written out in f32 */
static float formula(int p, float x, float y)
{
    if (p == LT_MATMUL_DEFAULT) return rne(x) * rne(y);
    float xh = from_bits(bits_of(x) & 0xFFFF0000u), yh = from_bits(bits_of(y) & 0xFFFF0000u);
    if (p == LT_MATMUL_HIGH) {
        float xl = rne(x - xh), yl = rne(y - yh);
        float low = xl * yh + xh * yl;
        if (isnan(low)) low = 0.0f;
        return low + xh * yh;
    }
    float xr = x - xh, yr = y - yh;
    float xm = from_bits(bits_of(xr) & 0xFFFF0000u), ym = from_bits(bits_of(yr) & 0xFFFF0000u);
    float xl = rne(xr - xm), yl = rne(yr - ym);
    float acc = xm * ym;
    acc = acc + xh * yl;
    acc = acc + xl * yh;
    acc = acc + xh * ym;
    acc = acc + xm * yh;
    if (isnan(acc)) acc = 0.0f;
    return acc + xh * yh;
}

static void test_product_order(void **st)
{
    (void)st;
    enum { N = 4096 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *r = malloc(N * sizeof *r);
    unsigned s = 11;
    for (int i = 0; i < N; i++) {
        a[i] = frand(&s) * 3.0f;
        b[i] = frand(&s) * 0.01f;
    }
    a[0] = 1.0f; b[0] = INFINITY;     /* hi*hi = inf, the low passes NaN: inf */
    a[1] = 1.5f; b[1] = -INFINITY;
    a[2] = NAN; b[2] = 2.0f;
    lt_shape sh = lt_shape_make(1, (int64_t[]){N});
    lt_view va = kt_contig_view(a, LT_F32, &sh), vb = kt_contig_view(b, LT_F32, &sh);
    int levels[3] = {LT_MATMUL_DEFAULT, LT_MATMUL_HIGH, LT_MATMUL_HIGHEST}, npass[3] = {1, 3, 6};
    for (int l = 0; l < 3; l++) {
        int calls = 0;
        assert_int_equal(lt_mxu_product(levels[l], &va, &vb, &sh, r, ew_pass, &calls, 2, NULL), LT_OK);
        assert_int_equal(calls, npass[l]);
        for (int i = 0; i < N; i++) {
            float f = formula(levels[l], a[i], b[i]);
            assert_true(bits_of(r[i]) == bits_of(f) || (isnan(r[i]) && isnan(f)));
        }
        assert_true(r[0] == INFINITY && r[1] == -INFINITY && isnan(r[2]));
    }
    free(a);
    free(b);
    free(r);
}

/* ---- kernels at each level against a reference summing each pass in
 * double (exact products; only the f32 accumulation order differs) ---- */

typedef struct mat {
    int64_t B, M, N, K;
    float *a, *b, *bias;      /* a [B,M,K], b [B,K,N], bias [N] or NULL */
} mat;

static double ref_elem(int p, const mat *m, const float *pa, const float *pb, int64_t bi,
                       int64_t i, int64_t j, double *mag)
{
    int64_t na = m->B * m->M * m->K, nb = m->B * m->K * m->N;
    const unsigned char (*pr)[2];
    int np = lt_mxu_passes(p, &pr);
    float acc = 0.0f;
    *mag = 0.0;
    for (int k = 0; k < np; k++) {
        double s = 0.0;
        for (int64_t t = 0; t < m->K; t++) {
            double prod = (double)pa[pr[k][0] * na + (bi * m->M + i) * m->K + t] *
                          (double)pb[pr[k][1] * nb + (bi * m->K + t) * m->N + j];
            s += prod;
            *mag += fabs(prod);
        }
        float pk = (float)s;
        if (k == 0) acc = pk;
        else if (k < np - 1) acc = acc + pk;
        else acc = (isnan(acc) ? 0.0f : acc) + pk;
    }
    if (m->bias) acc = acc + m->bias[j];
    return acc;
}

/* runs op on m at level p (in threads nt) and checks every element; the
 * result must also differ from plain f32 where the level drops bits */
static void check_kernel(lt_op op, const mat *m, int p, int nt, lt_dtype in_dt)
{
    int64_t B = m->B, M = m->M, N = m->N, K = m->K;
    lt_shape sa = op == LT_OP_bmm ? lt_shape_make(3, (int64_t[]){B, M, K})
                                  : lt_shape_make(2, (int64_t[]){M, K});
    lt_shape sb = op == LT_OP_bmm ? lt_shape_make(3, (int64_t[]){B, K, N})
                                  : lt_shape_make(2, (int64_t[]){K, N});
    lt_shape so = op == LT_OP_bmm ? lt_shape_make(3, (int64_t[]){B, M, N})
                                  : lt_shape_make(2, (int64_t[]){M, N});
    lt_shape sbias = lt_shape_make(1, (int64_t[]){N});
    int64_t na = B * M * K, nb = B * K * N, no = B * M * N;
    /* the operands as the kernel sees them (bf16 storage: rounded) */
    uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2);
    float *av = malloc(na * 4), *bv = malloc(nb * 4);
    for (int64_t i = 0; i < na; i++) {
        a16[i] = lt_bf16_from_f32(m->a[i]);
        av[i] = in_dt == LT_BF16 ? lt_bf16_to_f32_inline(a16[i]) : m->a[i];
    }
    for (int64_t i = 0; i < nb; i++) {
        b16[i] = lt_bf16_from_f32(m->b[i]);
        bv[i] = in_dt == LT_BF16 ? lt_bf16_to_f32_inline(b16[i]) : m->b[i];
    }
    lt_view in[3];
    int n_in = 0;
    if (m->bias) in[n_in++] = kt_contig_view(m->bias, LT_F32, &sbias);
    in[n_in++] = kt_contig_view(in_dt == LT_BF16 ? (void *)a16 : (void *)m->a, in_dt, &sa);
    in[n_in++] = kt_contig_view(in_dt == LT_BF16 ? (void *)b16 : (void *)m->b, in_dt, &sb);
    float *out = malloc(no * 4);
    lt_view vo = kt_contig_view(out, LT_F32, &so);
    lt_kernel_ctx ctx = {0, nt, p};
    assert_int_equal(lt_kernel_matmul(op, NULL, in, n_in, &vo, &ctx), LT_OK);
    /* reference parts: both operands bf16 multiply in one exact pass */
    int eff = in_dt == LT_BF16 ? LT_MATMUL_DEFAULT : p;
    float *pa = malloc(3 * na * 4), *pb = malloc(3 * nb * 4);
    lt_mxu_split(eff, av, na, pa, 1, NULL);
    lt_mxu_split(eff, bv, nb, pb, 1, NULL);
    double worst = 0.0, off_f32 = 0.0;
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double mag, exact = m->bias ? m->bias[j] : 0.0;
                double r = ref_elem(eff, m, pa, pb, bi, i, j, &mag);
                for (int64_t t = 0; t < K; t++)
                    exact += (double)av[(bi * M + i) * K + t] * bv[(bi * K + t) * N + j];
                double got = out[(bi * M + i) * N + j];
                double scale = mag + (m->bias ? fabs(m->bias[j]) : 0.0) + 1e-30;
                double e = fabs(got - r) / scale;
                if (e > worst) worst = e;
                double f = fabs(got - exact) / scale;
                if (f > off_f32) off_f32 = f;
            }
    /* f32 accumulation over K terms and up to 6 passes: a few ulps per
     * term at most; the levels' own error is 2^-9 .. 2^-15 of the scale */
    double tol = (double)(K + 8) * 0x1p-23;
    if (worst > tol)
        fail_msg("%s B%lld M%lld N%lld K%lld level %d: %.3g off the emulation (tol %.3g)",
                 lt_op_name(op), (long long)B, (long long)M, (long long)N, (long long)K, p,
                 worst, tol);
    /* and the level shows (short sums: the dropped bits are not averaged away) */
    if (in_dt == LT_F32 && K <= 64 && p == LT_MATMUL_DEFAULT) assert_true(off_f32 > 0x1p-12);
    if (in_dt == LT_F32 && K <= 64 && p == LT_MATMUL_HIGH) assert_true(off_f32 > 0x1p-20);
    free(a16); free(b16); free(av); free(bv); free(out); free(pa); free(pb);
}

static void make(mat *m, int64_t B, int64_t M, int64_t N, int64_t K, int bias, unsigned seed)
{
    m->B = B; m->M = M; m->N = N; m->K = K;
    m->a = malloc(B * M * K * 4);
    m->b = malloc(B * K * N * 4);
    m->bias = bias ? malloc(N * 4) : NULL;
    for (int64_t i = 0; i < B * M * K; i++) m->a[i] = frand(&seed);
    for (int64_t i = 0; i < B * K * N; i++) m->b[i] = frand(&seed) * 2.0f;
    for (int64_t i = 0; bias && i < N; i++) m->bias[i] = frand(&seed);
}

static void unmake(mat *m)
{
    free(m->a);
    free(m->b);
    free(m->bias);
}

static void test_matmul_kernel_paths(void **st)
{
    (void)st;
    int levels[3] = {LT_MATMUL_DEFAULT, LT_MATMUL_HIGH, LT_MATMUL_HIGHEST};
    struct { lt_op op; int64_t B, M, N, K; int bias, nt; } cases[] = {
        {LT_OP_mm, 1, 7, 5, 3, 0, 1},          /* BLAS, tiny */
        {LT_OP_mm, 1, 64, 64, 64, 0, 2},       /* own small GEMM, row split */
        {LT_OP_mm, 1, 16, 16, 8192, 0, 2},     /* K split over workers */
        {LT_OP_addmm, 1, 40, 48, 33, 1, 2},    /* bias after the passes */
        {LT_OP_bmm, 6, 9, 16, 12, 0, 2},       /* batch of small products */
        {LT_OP_mm, 1, 5, 4, 0, 0, 1},          /* K = 0: zeros */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int l = 0; l < 3; l++) {
            mat m;
            make(&m, cases[c].B, cases[c].M, cases[c].N, cases[c].K, cases[c].bias,
                 (unsigned)(c * 7 + l));
            if (cases[c].K == 0) {
                float out[20];
                lt_shape so = lt_shape_make(2, (int64_t[]){5, 4});
                lt_shape sa = lt_shape_make(2, (int64_t[]){5, 0});
                lt_shape sb = lt_shape_make(2, (int64_t[]){0, 4});
                lt_view in[2] = {kt_contig_view(m.a, LT_F32, &sa), kt_contig_view(m.b, LT_F32, &sb)};
                lt_view vo = kt_contig_view(out, LT_F32, &so);
                lt_kernel_ctx ctx = {0, 1, levels[l]};
                memset(out, 0x7f, sizeof out);
                assert_int_equal(lt_kernel_matmul(LT_OP_mm, NULL, in, 2, &vo, &ctx), LT_OK);
                for (int i = 0; i < 20; i++) assert_true(out[i] == 0.0f);
            } else {
                check_kernel(cases[c].op, &m, levels[l], cases[c].nt, LT_F32);
            }
            unmake(&m);
        }
    /* bf16 operands: one exact pass whatever the level */
    mat m;
    make(&m, 1, 24, 32, 40, 0, 99);
    check_kernel(LT_OP_mm, &m, LT_MATMUL_HIGHEST, 2, LT_BF16);
    unmake(&m);
}

/* a 1x1 convolution of one input channel: y = x * w[o], one product per
 * output, so the level's formula holds bit for bit */
static void test_conv_kernel(void **st)
{
    (void)st;
    enum { NB = 2, H = 5, W = 6, O = 3 };
    float x[NB * H * W], w[O], y[NB * O * H * W];
    unsigned s = 5;
    for (int i = 0; i < NB * H * W; i++) x[i] = frand(&s) * 4.0f;
    for (int i = 0; i < O; i++) w[i] = frand(&s);
    lt_shape sx = lt_shape_make(4, (int64_t[]){NB, 1, H, W});
    lt_shape sw = lt_shape_make(4, (int64_t[]){O, 1, 1, 1});
    lt_shape sy = lt_shape_make(4, (int64_t[]){NB, O, H, W});
    lt_attrs at = {0};
    at.n = 7;
    int64_t a[7] = {1, 1, 0, 0, 1, 1, 1};
    memcpy(at.i, a, sizeof a);
    lt_view in[2] = {kt_contig_view(x, LT_F32, &sx), kt_contig_view(w, LT_F32, &sw)};
    lt_view vo = kt_contig_view(y, LT_F32, &sy);
    int levels[4] = {LT_MATMUL_F32, LT_MATMUL_DEFAULT, LT_MATMUL_HIGH, LT_MATMUL_HIGHEST};
    for (int l = 0; l < 4; l++) {
        lt_kernel_ctx ctx = {0, 2, levels[l]};
        assert_int_equal(lt_kernel_conv(LT_OP_conv2d, &at, in, 2, &vo, &ctx), LT_OK);
        for (int n = 0; n < NB; n++)
            for (int o = 0; o < O; o++)
                for (int p = 0; p < H * W; p++) {
                    float xv = x[n * H * W + p];
                    float want = levels[l] ? formula(levels[l], w[o], xv) : w[o] * xv;
                    assert_true(bits_of(y[(n * O + o) * H * W + p]) == bits_of(want));
                }
    }
}

/* The level is part of the key of a graph holding a product, not of one
 * without; the program carries it. */
static void test_graph_key(void **st)
{
    (void)st;
    assert_int_equal(lt_init(), LT_OK);
    lt_shape s = lt_shape_make(2, (int64_t[]){4, 4});
    lt_buffer *b0, *b1;
    assert_int_equal(lt_buffer_alloc(0, LT_F32, 16, &b0), LT_OK);
    assert_int_equal(lt_buffer_alloc(0, LT_F32, 16, &b1), LT_OK);
    lt_node *x = lt_node_new_data(b0, &s, LT_F32, 0), *w = lt_node_new_data(b1, &s, LT_F32, 0);
    lt_node *in[2] = {x, w};
    lt_node *mm = lt_node_new(LT_OP_mm, in, 2, NULL, &s, LT_F32, 0, 0);
    lt_node *ex = lt_node_new(LT_OP_exp, &x, 1, NULL, &s, LT_F32, 0, 0);
    uint64_t kmm[4], kex[4], smm[4];
    int prec[4];
    int levels[4] = {LT_MATMUL_F32, LT_MATMUL_DEFAULT, LT_MATMUL_HIGH, LT_MATMUL_HIGHEST};
    for (int l = 0; l < 4; l++) {
        assert_int_equal(lt_set_matmul_precision((lt_matmul_precision)levels[l]), LT_OK);
        lt_graph g;
        assert_int_equal(lt_graph_capture(&mm, 1, &g), LT_OK);
        kmm[l] = g.key;
        smm[l] = g.struct_key;
        prec[l] = g.mm_precision;
        lt_program *p;
        assert_int_equal(lt_compile(&g, &p), LT_OK);
        assert_int_equal(p->mm_precision, levels[l]);
        lt_program_release(p);
        lt_graph_free(&g);
        assert_int_equal(lt_graph_capture(&ex, 1, &g), LT_OK);
        kex[l] = g.key;
        assert_int_equal(g.mm_precision, LT_MATMUL_F32);
        lt_graph_free(&g);
    }
    for (int l = 0; l < 4; l++) {
        assert_int_equal(prec[l], levels[l]);
        assert_true(kex[l] == kex[0]);
        assert_true(smm[l] == smm[0]);
        for (int k = 0; k < l; k++) assert_true(kmm[l] != kmm[k]);
    }
    assert_int_equal(lt_set_matmul_precision(LT_MATMUL_F32), LT_OK);
    lt_node_release(mm);
    lt_node_release(ex);
    lt_node_release(x);
    lt_node_release(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_api),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_pass_tables),
        cmocka_unit_test(test_product_order),
        cmocka_unit_test(test_matmul_kernel_paths),
        cmocka_unit_test(test_conv_kernel),
        cmocka_unit_test(test_graph_key),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    lt_shutdown();
    return rc;
}
