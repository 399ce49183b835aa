/*
 * tests/c/test_collectives.c — collectives over forked ranks: every reduce
 * type for every dtype, uneven and chunked sizes, gather/scatter views,
 * broadcast, exchange, and descriptor mismatches failing on every rank with
 * the same message. Expectations are computed independently (scalar loops
 * in rank order) in each child.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include "spawn_harness.h"
#include "kernel.h"

/* ------------------------------------------------------------ test values */

static float bf16_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* Value of element i on rank r for a reduce type (as double; exact in every
 * dtype used). */
static double tval(int r, int64_t i, int reduce, lt_dtype dt)
{
    switch (reduce) {
    case LT_REDUCE_SUM:
        return (double)((i * 7 + r * 3) % 23) - 11 + (lt_dtype_is_float(dt) ? 0.25 * r : 0);
    case LT_REDUCE_MUL:
        return (double)((i + r) % 3) + 1;          /* 1, 2, 3 */
    case LT_REDUCE_MIN:
    case LT_REDUCE_MAX:
        return (double)((i * 31 + r * 17) % 101) - 50;
    default:
        return (double)((i * 5 + r * 13) % 11) * ((i + r) % 4 == 0 ? 0 : 1);
    }
}

static void tstore(void *buf, lt_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case LT_F32: ((float *)buf)[i] = (float)v; break;
    case LT_BF16: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);  /* values are exact */
        break;
    }
    case LT_F64: ((double *)buf)[i] = v; break;
    case LT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case LT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case LT_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
    default: break;
    }
}

static double tload(const void *buf, lt_dtype dt, int64_t i)
{
    switch (dt) {
    case LT_F32: return ((const float *)buf)[i];
    case LT_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case LT_F64: return ((const double *)buf)[i];
    case LT_I64: return (double)((const int64_t *)buf)[i];
    case LT_I32: return ((const int32_t *)buf)[i];
    case LT_BOOL: return ((const uint8_t *)buf)[i];
    default: return 0;
    }
}

/* Independent expectation of all_reduce at element i. */
static double texpect(int n_ranks, int64_t i, int reduce, lt_dtype dt,
                      double scale)
{
    if (dt == LT_BOOL) {
        int acc = tval(0, i, reduce, dt) != 0;
        int is_and = reduce == LT_REDUCE_MUL || reduce == LT_REDUCE_MIN ||
                     reduce == LT_REDUCE_AND;
        for (int r = 1; r < n_ranks; r++) {
            int v = tval(r, i, reduce, dt) != 0;
            acc = is_and ? (acc && v) : (acc || v);
        }
        return acc;
    }
    if (!lt_dtype_is_float(dt)) {
        int64_t acc = (int64_t)tval(0, i, reduce, dt);
        for (int r = 1; r < n_ranks; r++) {
            int64_t v = (int64_t)tval(r, i, reduce, dt);
            switch (reduce) {
            case LT_REDUCE_SUM: acc += v; break;
            case LT_REDUCE_MUL: acc *= v; break;
            case LT_REDUCE_MIN: acc = v < acc ? v : acc; break;
            case LT_REDUCE_MAX: acc = v > acc ? v : acc; break;
            case LT_REDUCE_AND: acc &= v; break;
            default: acc |= v; break;
            }
        }
        if (dt == LT_I32) acc = (int32_t)acc;
        if (scale != 1.0) acc = (int64_t)((double)acc * scale);
        return (double)acc;
    }
    double acc = tval(0, i, reduce, dt);
    if (reduce >= LT_REDUCE_AND) acc = acc != 0;
    for (int r = 1; r < n_ranks; r++) {
        double v = tval(r, i, reduce, dt);
        switch (reduce) {
        case LT_REDUCE_SUM: acc += v; break;
        case LT_REDUCE_MUL: acc *= v; break;
        case LT_REDUCE_MIN: acc = fmin(acc, v); break;
        case LT_REDUCE_MAX: acc = fmax(acc, v); break;
        case LT_REDUCE_AND: acc = acc != 0 && v != 0; break;
        default: acc = acc != 0 || v != 0; break;
        }
    }
    acc *= scale;
    if (dt == LT_F32) acc = (float)acc;
    if (dt == LT_BF16) acc = bf16_round((float)acc);
    return acc;
}

static int close_enough(double got, double want, lt_dtype dt)
{
    double tol = dt == LT_F64 ? 1e-12 : dt == LT_F32 ? 1e-5 : dt == LT_BF16 ? 1e-2 : 0;
    return fabs(got - want) <= tol * (1 + fabs(want));
}

/* ------------------------------------------------------------ all_reduce */

typedef struct ar_ctx {
    int64_t n;
    double scale;
    int in_place;
    int only_dtype;    /* -1 = all */
    int only_reduce;   /* -1 = all */
} ar_ctx;

static int rank_all_reduce_matrix(lt_world *w, int rank, void *vctx,
                                  hr_result *res)
{
    ar_ctx *c = vctx;
    int N = lt_world_size(w);
    for (int dt = 0; dt <= LT_BOOL; dt++)  /* the collective dtypes */ {
        if (c->only_dtype >= 0 && dt != c->only_dtype) continue;
        for (int red = LT_REDUCE_SUM; red <= LT_REDUCE_OR; red++) {
            if (c->only_reduce >= 0 && red != c->only_reduce) continue;
            /* integer scale is only meaningful for sum; keep products exact */
            double scale = (red == LT_REDUCE_SUM || lt_dtype_is_float(dt)) ? c->scale : 1.0;
            size_t es = lt_dtype_size(dt);
            unsigned char *in = malloc((size_t)c->n * es + 1);
            unsigned char *out = c->in_place ? in : malloc((size_t)c->n * es + 1);
            for (int64_t i = 0; i < c->n; i++) tstore(in, dt, i, tval(rank, i, red, dt));
            lt_status st = lt_world_all_reduce(w, in, out, c->n, dt, red, scale, NULL);
            HR_CHECK(res, rank, st == LT_OK, "all_reduce %s %s: %s",
                     lt_dtype_name(dt), lt_reduce_type_name(red), lt_last_error());
            for (int64_t i = 0; i < c->n; i++) {
                double want = texpect(N, i, red, dt, scale);
                double got = tload(out, dt, i);
                HR_CHECK(res, rank, close_enough(got, want, dt),
                         "all_reduce %s %s scale %g n %lld: [%lld] = %g, want %g",
                         lt_dtype_name(dt), lt_reduce_type_name(red), scale,
                         (long long)c->n, (long long)i, got, want);
            }
            if (!c->in_place) free(out);
            free(in);
        }
    }
    return 0;
}

static void expect_all_ok(hr_result *res, int n)
{
    assert_non_null(res);
    int bad = 0;
    for (int r = 0; r < n; r++) bad |= res->exit_code[r] != 0;
    if (bad) hr_dump(res, n);
    for (int r = 0; r < n; r++) assert_int_equal(res->exit_code[r], 0);
    assert_int_equal(res->killed_by_harness, 0);
}

static void test_all_reduce_every_type_8_ranks(void **state)
{
    ar_ctx c = { 1001, 1.0, 0, -1, -1 };
    hr_result *res = hr_run(8, 0, 30, 60, rank_all_reduce_matrix, NULL, &c);
    expect_all_ok(res, 8);
    hr_free(res);
}

static void test_all_reduce_3_ranks_in_place_scaled(void **state)
{
    ar_ctx c = { 77, 0.5, 1, -1, -1 };
    hr_result *res = hr_run(3, 0, 30, 60, rank_all_reduce_matrix, NULL, &c);
    expect_all_ok(res, 3);
    hr_free(res);
}

static void test_all_reduce_chunked(void **state)
{
    /* 1 MiB world, 4 ranks: slots of ~200 KiB, so 300k floats = 6 chunks */
    ar_ctx c = { 300001, 0.25, 0, LT_F32, LT_REDUCE_SUM };
    hr_result *res = hr_run(4, 1 << 20, 30, 60, rank_all_reduce_matrix, NULL, &c);
    expect_all_ok(res, 4);
    hr_free(res);
    ar_ctx c2 = { 250003, 1.0, 1, LT_BF16, LT_REDUCE_SUM };
    res = hr_run(4, 1 << 20, 30, 60, rank_all_reduce_matrix, NULL, &c2);
    expect_all_ok(res, 4);
    hr_free(res);
    ar_ctx c3 = { 100000, 1.0, 0, LT_I64, LT_REDUCE_MAX };
    res = hr_run(4, 1 << 20, 30, 60, rank_all_reduce_matrix, NULL, &c3);
    expect_all_ok(res, 4);
    hr_free(res);
}

/* ------------------------------------------------ gather / scatter / bcast */

typedef struct view_ctx {
    int64_t outer, block;
} view_ctx;

static float gval(int r, int64_t i) { return (float)(r * 1000 + i % 997); }

static int rank_all_gather(lt_world *w, int rank, void *vctx, hr_result *res)
{
    view_ctx *c = vctx;
    int N = lt_world_size(w);
    int64_t n = c->outer * c->block;
    float *in = malloc((size_t)n * 4 + 4);
    float *out = malloc((size_t)n * N * 4 + 4);
    for (int64_t i = 0; i < n; i++) in[i] = gval(rank, i);
    lt_status st = lt_world_all_gather(w, in, out, c->outer, c->block, LT_F32, NULL);
    HR_CHECK(res, rank, st == LT_OK, "all_gather: %s", lt_last_error());
    for (int64_t o = 0; o < c->outer; o++)
        for (int r = 0; r < N; r++)
            for (int64_t j = 0; j < c->block; j++) {
                float got = out[(o * N + r) * c->block + j];
                float want = gval(r, o * c->block + j);
                HR_CHECK(res, rank, got == want,
                         "all_gather [%lld][%d][%lld] = %g, want %g",
                         (long long)o, r, (long long)j, got, want);
            }
    free(in);
    free(out);
    return 0;
}

static void test_all_gather_dims_and_chunks(void **state)
{
    view_ctx c = { 3, 35 };      /* [3, 5, 7] gathered along dim 1 */
    hr_result *res = hr_run(4, 0, 30, 60, rank_all_gather, NULL, &c);
    expect_all_ok(res, 4);
    hr_free(res);
    view_ctx c2 = { 2, 100003 }; /* rows larger than a slot: split rows */
    res = hr_run(4, 1 << 20, 30, 60, rank_all_gather, NULL, &c2);
    expect_all_ok(res, 4);
    hr_free(res);
    view_ctx c3 = { 4000, 13 };  /* many small rows per chunk */
    res = hr_run(3, 1 << 20, 30, 60, rank_all_gather, NULL, &c3);
    expect_all_ok(res, 3);
    hr_free(res);
}

static int rank_reduce_scatter(lt_world *w, int rank, void *vctx, hr_result *res)
{
    view_ctx *c = vctx;
    int N = lt_world_size(w);
    int64_t n_in = c->outer * N * c->block;
    float *in = malloc((size_t)n_in * 4 + 4);
    float *out = malloc((size_t)c->outer * c->block * 4 + 4);
    for (int64_t i = 0; i < n_in; i++) in[i] = gval(rank, i) * 0.5f;
    lt_status st = lt_world_reduce_scatter(w, in, out, c->outer, c->block,
                                           LT_F32, LT_REDUCE_SUM, 2.0, NULL);
    HR_CHECK(res, rank, st == LT_OK, "reduce_scatter: %s", lt_last_error());
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t j = 0; j < c->block; j++) {
            int64_t src = (o * N + rank) * c->block + j;
            float acc = 0;
            for (int r = 0; r < N; r++) acc += gval(r, src) * 0.5f;
            float want = acc * 2.0f;
            float got = out[o * c->block + j];
            HR_CHECK(res, rank, fabsf(got - want) <= 1e-5f * (1 + fabsf(want)),
                     "reduce_scatter [%lld][%lld] = %g, want %g",
                     (long long)o, (long long)j, got, want);
        }
    free(in);
    free(out);
    return 0;
}

static void test_reduce_scatter_dims_and_chunks(void **state)
{
    view_ctx c = { 3, 10 };
    hr_result *res = hr_run(4, 0, 30, 60, rank_reduce_scatter, NULL, &c);
    expect_all_ok(res, 4);
    hr_free(res);
    view_ctx c2 = { 2, 60001 };
    res = hr_run(4, 1 << 20, 30, 60, rank_reduce_scatter, NULL, &c2);
    expect_all_ok(res, 4);
    hr_free(res);
}

static int rank_broadcast(lt_world *w, int rank, void *vctx, hr_result *res)
{
    int64_t n = *(int64_t *)vctx;
    int64_t *buf = calloc((size_t)n + 1, 8);
    for (int64_t i = 0; i < n; i++) buf[i] = rank * 1000000 + i;
    lt_status st = lt_world_broadcast(w, buf, buf, n, LT_I64, 2, NULL);
    HR_CHECK(res, rank, st == LT_OK, "broadcast: %s", lt_last_error());
    for (int64_t i = 0; i < n; i++)
        HR_CHECK(res, rank, buf[i] == 2000000 + i, "broadcast [%lld] = %lld",
                 (long long)i, (long long)buf[i]);
    free(buf);
    return 0;
}

static void test_broadcast(void **state)
{
    int64_t n = 10;
    hr_result *res = hr_run(4, 0, 30, 60, rank_broadcast, NULL, &n);
    expect_all_ok(res, 4);
    hr_free(res);
    n = 200003;                      /* chunked */
    res = hr_run(3, 1 << 20, 30, 60, rank_broadcast, NULL, &n);
    expect_all_ok(res, 3);
    hr_free(res);
}

static int rank_exchange(lt_world *w, int rank, void *vctx, hr_result *res)
{
    int N = lt_world_size(w);
    size_t len = (size_t)rank * 150000 + 5;   /* > slot for big ranks */
    unsigned char *p = malloc(len);
    for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(rank * 7 + i);
    void *all = NULL;
    size_t lens[LT_WORLD_MAX_RANKS];
    lt_status st = lt_world_exchange(w, "ckpt", p, len, &all, lens);
    HR_CHECK(res, rank, st == LT_OK, "exchange: %s", lt_last_error());
    size_t off = 0;
    for (int r = 0; r < N; r++) {
        HR_CHECK(res, rank, lens[r] == (size_t)r * 150000 + 5, "len[%d] = %zu", r, lens[r]);
        for (size_t i = 0; i < lens[r]; i++)
            HR_CHECK(res, rank, ((unsigned char *)all)[off + i] == (unsigned char)(r * 7 + i),
                     "payload %d byte %zu", r, i);
        off += lens[r];
    }
    free(all);
    free(p);
    /* an empty rendezvous works too */
    st = lt_world_exchange(w, "empty", NULL, 0, &all, lens);
    HR_CHECK(res, rank, st == LT_OK && all == NULL, "empty exchange: %s", lt_last_error());
    return 0;
}

static void test_exchange_uneven_payloads(void **state)
{
    hr_result *res = hr_run(4, 1 << 20, 30, 60, rank_exchange, NULL, NULL);
    expect_all_ok(res, 4);
    hr_free(res);
}

/* ------------------------------------------------------------- mismatches */

static int rank_mismatch(lt_world *w, int rank, void *vctx, hr_result *res)
{
    int kind = *(int *)vctx;
    float buf[1024];
    for (int i = 0; i < 1024; i++) buf[i] = 1;
    lt_status st;
    if (kind == 0) {          /* shape */
        st = lt_world_all_reduce(w, buf, buf, rank == 3 ? 1024 : 512, LT_F32,
                                 LT_REDUCE_SUM, 1.0, NULL);
    } else if (kind == 1) {   /* op */
        float out[8 * 4];
        st = rank == 1 ? lt_world_all_gather(w, buf, out, 1, 4, LT_F32, NULL)
                       : lt_world_all_reduce(w, buf, buf, 4, LT_F32,
                                             LT_REDUCE_SUM, 1.0, NULL);
    } else if (kind == 2) {   /* invalid argument on one rank */
        st = lt_world_all_reduce(w, buf, buf, 16, LT_F32,
                                 rank == 2 ? 17 : LT_REDUCE_SUM, 1.0, NULL);
    } else {                  /* reduce type */
        st = lt_world_all_reduce(w, buf, buf, 16, LT_F32,
                                 rank == 1 ? LT_REDUCE_MAX : LT_REDUCE_SUM, 1.0, NULL);
    }
    res->status[rank] = st;
    snprintf(res->msg[rank], sizeof res->msg[rank], "%s", lt_last_error());
    if (st == LT_OK) return 2;
    /* the world stays usable after a disagreement */
    for (int i = 0; i < 8; i++) buf[i] = (float)rank;
    st = lt_world_all_reduce(w, buf, buf, 8, LT_F32, LT_REDUCE_MAX, 1.0, NULL);
    if (st != LT_OK || buf[0] != (float)(lt_world_size(w) - 1)) return 3;
    return 0;
}

static void check_mismatch(int kind, int n, const char *want)
{
    hr_result *res = hr_run(n, 0, 30, 60, rank_mismatch, NULL, &kind);
    assert_non_null(res);
    for (int r = 0; r < n; r++) {
        if (res->exit_code[r] != 0 || strcmp(res->msg[r], want) != 0)
            hr_dump(res, n);
        assert_int_equal(res->exit_code[r], 0);
        assert_int_equal(res->status[r], LT_ERR_COLLECTIVE);
        assert_string_equal(res->msg[r], want);
    }
    hr_free(res);
}

static void test_mismatched_shape_fails_on_every_rank(void **state)
{
    check_mismatch(0, 4, "all_reduce: rank 3 sent f32 [1024] but rank 0 sent f32 [512]");
}

static void test_mismatched_op_fails_on_every_rank(void **state)
{
    check_mismatch(1, 3, "collective mismatch: rank 1 called all_gather f32 [4] "
                         "but rank 0 called all_reduce f32 [4]");
}

static void test_invalid_argument_fails_on_every_rank(void **state)
{
    check_mismatch(2, 4, "all_reduce: rank 2 passed invalid arguments: invalid reduce type 17");
}

static void test_mismatched_reduce_type(void **state)
{
    check_mismatch(3, 2, "all_reduce: rank 1 asked for reduce type max but rank 0 for sum");
}

/* --------------------------------------------------------- world of one */

static void test_no_world_is_identity_like(void **state)
{
    float a[5] = { 1, -2, 3, 0, 5 }, b[5];
    assert_int_equal(lt_world_all_reduce(NULL, a, b, 5, LT_F32, LT_REDUCE_SUM, 0.5, NULL), LT_OK);
    for (int i = 0; i < 5; i++) assert_true(b[i] == a[i] * 0.5f);
    assert_int_equal(lt_world_all_gather(NULL, a, b, 1, 5, LT_F32, NULL), LT_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(lt_world_broadcast(NULL, a, b, 5, LT_F32, 0, NULL), LT_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(lt_world_broadcast(NULL, a, b, 5, LT_F32, 1, NULL), LT_ERR_ARG);
    int64_t ia[3] = { 4, 6, -8 }, ib[3];
    assert_int_equal(lt_world_reduce_scatter(NULL, ia, ib, 1, 3, LT_I64, LT_REDUCE_SUM, 0.5, NULL), LT_OK);
    assert_true(ib[0] == 2 && ib[1] == 3 && ib[2] == -4);
}

/* ------------------------------------------------- lt_kernel_collective */

static lt_view mkview(void *data, lt_dtype dt, int ndim, const int64_t *dims,
                      const int64_t *strides)
{
    lt_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dt;
    v.shape.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        v.shape.dims[d] = dims[d];
        v.strides[d] = strides[d];
    }
    return v;
}

/* Each rank holds x = base[3][4] (row-major) and passes its TRANSPOSE (a
 * strided view [4][3]) to the kernel; checks all_reduce(sum, scale 0.5),
 * all_gather(dim 1), reduce_scatter(max, dim 0) and broadcast(root 1). */
static int rank_kernel(lt_world *w, int rank, void *vctx, hr_result *res)
{
    int N = lt_world_size(w);
    char v[32];
    setenv("LAZYTPU_SHM_NAME", lt_world_name(w), 1);
    snprintf(v, sizeof v, "%d", rank);
    setenv("LAZYTPU_ORDINAL", v, 1);
    snprintf(v, sizeof v, "%d", N);
    setenv("LAZYTPU_WORLD_SIZE", v, 1);
    float base[12];
    for (int i = 0; i < 12; i++) base[i] = (float)(rank * 100 + i);
    int64_t tdims[2] = { 4, 3 }, tstr[2] = { 1, 4 };
    lt_view xt = mkview(base, LT_F32, 2, tdims, tstr);   /* xt[i][j] = base[j*4+i] */
    lt_kernel_ctx ctx = { 0, 1 };
    lt_attrs a;
    float out[4 * 3 * 8];
    int64_t cst[2] = { 3, 1 };

    memset(&a, 0, sizeof a);
    a.n = 1; a.i[0] = LT_REDUCE_SUM; a.f[0] = 0.5;
    lt_view o = mkview(out, LT_F32, 2, tdims, cst);
    lt_status st = lt_kernel_collective(LT_OP_all_reduce, &a, &xt, 1, &o, &ctx);
    HR_CHECK(res, rank, st == LT_OK, "kernel all_reduce: %s", lt_last_error());
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            float want = 0;
            for (int r = 0; r < N; r++) want += (float)(r * 100 + j * 4 + i);
            want *= 0.5f;
            HR_CHECK(res, rank, out[i * 3 + j] == want, "all_reduce [%d][%d] = %g want %g",
                     i, j, out[i * 3 + j], want);
        }

    memset(&a, 0, sizeof a);
    a.n = 1; a.i[0] = 1;
    int64_t gdims[2] = { 4, 3 * N }, gst[2] = { 3 * N, 1 };
    o = mkview(out, LT_F32, 2, gdims, gst);
    st = lt_kernel_collective(LT_OP_all_gather, &a, &xt, 1, &o, &ctx);
    HR_CHECK(res, rank, st == LT_OK, "kernel all_gather: %s", lt_last_error());
    for (int i = 0; i < 4; i++)
        for (int c = 0; c < 3 * N; c++) {
            int r = c / 3, j = c % 3;
            float want = (float)(r * 100 + j * 4 + i);
            HR_CHECK(res, rank, out[i * 3 * N + c] == want, "all_gather [%d][%d] = %g want %g",
                     i, c, out[i * 3 * N + c], want);
        }

    /* reduce_scatter over dim 0 of xt [4][3] needs 4 % N == 0 */
    memset(&a, 0, sizeof a);
    a.n = 2; a.i[0] = LT_REDUCE_MAX; a.i[1] = 0; a.f[0] = 1.0;
    int64_t sdims[2] = { 4 / N, 3 };
    o = mkview(out, LT_F32, 2, sdims, cst);
    st = lt_kernel_collective(LT_OP_reduce_scatter, &a, &xt, 1, &o, &ctx);
    HR_CHECK(res, rank, st == LT_OK, "kernel reduce_scatter: %s", lt_last_error());
    for (int i = 0; i < 4 / N; i++)
        for (int j = 0; j < 3; j++) {
            int gi = rank * (4 / N) + i;
            float want = (float)((N - 1) * 100 + j * 4 + gi);
            HR_CHECK(res, rank, out[i * 3 + j] == want, "reduce_scatter [%d][%d] = %g want %g",
                     i, j, out[i * 3 + j], want);
        }

    memset(&a, 0, sizeof a);
    a.n = 1; a.i[0] = 1;
    o = mkview(out, LT_F32, 2, tdims, cst);
    st = lt_kernel_collective(LT_OP_broadcast, &a, &xt, 1, &o, &ctx);
    HR_CHECK(res, rank, st == LT_OK, "kernel broadcast: %s", lt_last_error());
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            HR_CHECK(res, rank, out[i * 3 + j] == (float)(100 + j * 4 + i),
                     "broadcast [%d][%d] = %g", i, j, out[i * 3 + j]);

    /* an output shape that does not fit the world is an error, not a crash */
    o = mkview(out, LT_F32, 2, tdims, cst);
    a.n = 1; a.i[0] = 0;
    st = lt_kernel_collective(LT_OP_all_gather, &a, &xt, 1, &o, &ctx);
    HR_CHECK(res, rank, st == LT_ERR_SHAPE, "all_gather with wrong output: %d", st);
    return 0;
}

static void test_kernel_on_world(void **state)
{
    hr_result *res = hr_run(2, 0, 30, 60, rank_kernel, NULL, NULL);
    expect_all_ok(res, 2);
    hr_free(res);
    res = hr_run(4, 0, 30, 60, rank_kernel, NULL, NULL);
    expect_all_ok(res, 4);
    hr_free(res);
}

/* Without a world (no LAZYTPU_SHM_NAME): identity-like. Runs in a child so
 * the process's world-of-one decision does not leak into other tests. */
static void test_kernel_without_world(void **state)
{
    pid_t pid = fork();
    if (pid == 0) {
        unsetenv("LAZYTPU_SHM_NAME");
        unsetenv("LAZYTPU_WORLD_SIZE");
        int64_t x[4] = { 3, -4, 5, 0 }, out[4];
        int64_t dims[1] = { 4 }, st1[1] = { 1 };
        lt_view xv = mkview(x, LT_I64, 1, dims, st1);
        lt_view ov = mkview(out, LT_I64, 1, dims, st1);
        lt_kernel_ctx ctx = { 0, 1 };
        lt_attrs a;
        memset(&a, 0, sizeof a);
        a.n = 1; a.i[0] = LT_REDUCE_SUM; a.f[0] = 2.0;
        if (lt_kernel_collective(LT_OP_all_reduce, &a, &xv, 1, &ov, &ctx) != LT_OK) _exit(1);
        if (out[0] != 6 || out[1] != -8 || out[2] != 10 || out[3] != 0) _exit(2);
        a.i[0] = 0;
        if (lt_kernel_collective(LT_OP_all_gather, &a, &xv, 1, &ov, &ctx) != LT_OK) _exit(3);
        if (memcmp(out, x, sizeof x)) _exit(4);
        a.n = 2; a.i[0] = LT_REDUCE_SUM; a.i[1] = 0; a.f[0] = 1.0;
        if (lt_kernel_collective(LT_OP_reduce_scatter, &a, &xv, 1, &ov, &ctx) != LT_OK) _exit(5);
        if (memcmp(out, x, sizeof x)) _exit(6);
        a.n = 1; a.i[0] = 0;
        memset(out, 0, sizeof out);
        if (lt_kernel_collective(LT_OP_broadcast, &a, &xv, 1, &ov, &ctx) != LT_OK) _exit(7);
        if (memcmp(out, x, sizeof x)) _exit(8);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_world_is_identity_like),
        cmocka_unit_test(test_all_reduce_every_type_8_ranks),
        cmocka_unit_test(test_all_reduce_3_ranks_in_place_scaled),
        cmocka_unit_test(test_all_reduce_chunked),
        cmocka_unit_test(test_all_gather_dims_and_chunks),
        cmocka_unit_test(test_reduce_scatter_dims_and_chunks),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_exchange_uneven_payloads),
        cmocka_unit_test(test_mismatched_shape_fails_on_every_rank),
        cmocka_unit_test(test_mismatched_op_fails_on_every_rank),
        cmocka_unit_test(test_invalid_argument_fails_on_every_rank),
        cmocka_unit_test(test_mismatched_reduce_type),
        cmocka_unit_test(test_kernel_on_world),
        cmocka_unit_test(test_kernel_without_world),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
