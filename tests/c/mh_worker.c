/*
 * tests/c/mh_worker.c — the worker program of test_multihost.c, run under
 * lazytpu-run (one host x N cores, or H hosts x C cores through mpirun).
 * Every mode checks what it can against independent expectations and
 * writes its results to DIR so that the test can compare runs.
 *
 *   mh_worker coll DIR      every collective x dtype x reduce type through
 *                           lt_world_* (as Python calls them) and as traced
 *                           IR ops; records in DIR/coll-<ordinal>.bin
 *   mh_worker sgd DIR       a 2-layer MLP trained with SGD (traced mm,
 *                           relu, threshold_backward, permute, all_reduce of
 *                           the gradients in the step's graph); parameters
 *                           in DIR/sgd-<ordinal>.bin
 *   mh_worker kill DIR V    all_reduces in a loop; ordinal V SIGKILLs itself
 *   mh_worker killhost DIR V  ordinal V SIGKILLs its launcher
 *   mh_worker mismatch DIR K  K=0: host 1 sends other shapes; K=1: one rank
 *                           of host 1 does; the error of every rank goes to
 *                           DIR/mm-<ordinal>.txt, then the world must still
 *                           work
 *   mh_worker fail DIR V    ordinal V exits 1 at once (hosts still connecting)
 *   mh_worker abstain DIR   ordinal 5 abstains from an all_reduce
 *   mh_worker early DIR     the ranks of host 1 skip the last all_reduce
 *   mh_worker stall DIR S   host 1 sleeps S seconds before its all_reduce
 *   mh_worker bench DIR MB  times a MB-megabyte f32 all_reduce (best of 5)
 *
 * Record format: int32 dtype, int64 bytes, data.
 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "lazytpu.h"
#include "world.h"

static int g_rank, g_size;
static FILE *g_out;

#define DIE(...)                                                            \
    do {                                                                    \
        fprintf(stderr, "mh_worker ordinal %d: ", g_rank);                  \
        fprintf(stderr, __VA_ARGS__);                                       \
        fprintf(stderr, "\n");                                              \
        exit(1);                                                            \
    } while (0)

static void rec(lt_dtype dt, const void *p, int64_t bytes)
{
    int32_t d = dt;
    fwrite(&d, 4, 1, g_out);
    fwrite(&bytes, 8, 1, g_out);
    if (bytes) fwrite(p, 1, (size_t)bytes, g_out);
}

static FILE *open_out(const char *dir, const char *what)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s-%d.bin", dir, what, g_rank);
    FILE *f = fopen(p, "wb");
    if (!f) DIE("cannot write %s", p);
    return f;
}

/* ------------------------------------------------------------ test values */

static double tval(int r, int64_t i, int reduce, lt_dtype dt)
{
    switch (reduce) {
    case LT_REDUCE_SUM:
        return (double)((i * 7 + r * 3) % 23) - 11 + (lt_dtype_is_float(dt) ? 0.25 * r : 0);
    case LT_REDUCE_MUL:
        return (double)((i + r) % 3 == 0 ? 2 : 1) * ((i + r) % 5 == 0 ? -1 : 1);
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
    case LT_BF16: ((uint16_t *)buf)[i] = lt_f32_to_bf16((float)v); break;
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
    case LT_BF16: return lt_bf16_to_f32(((const uint16_t *)buf)[i]);
    case LT_F64: return ((const double *)buf)[i];
    case LT_I64: return (double)((const int64_t *)buf)[i];
    case LT_I32: return ((const int32_t *)buf)[i];
    case LT_BOOL: return ((const uint8_t *)buf)[i];
    default: return 0;
    }
}

/* all_reduce expectation at element i, computed in rank order. */
static double texpect(int n, int64_t i, int reduce, lt_dtype dt, double scale)
{
    if (dt == LT_BOOL) {
        int is_and = reduce == LT_REDUCE_MUL || reduce == LT_REDUCE_MIN ||
                     reduce == LT_REDUCE_AND;
        int acc = tval(0, i, reduce, dt) != 0;
        for (int r = 1; r < n; r++) {
            int v = tval(r, i, reduce, dt) != 0;
            acc = is_and ? (acc && v) : (acc || v);
        }
        return acc;
    }
    if (!lt_dtype_is_float(dt)) {
        int64_t acc = (int64_t)tval(0, i, reduce, dt);
        for (int r = 1; r < n; r++) {
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
    for (int r = 1; r < n; r++) {
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
    if (dt == LT_BF16) acc = lt_bf16_to_f32(lt_f32_to_bf16((float)acc));
    return acc;
}

static int close_enough(double got, double want, lt_dtype dt)
{
    double tol = dt == LT_F64 ? 1e-12 : dt == LT_F32 ? 1e-5 : dt == LT_BF16 ? 1e-2 : 0;
    return fabs(got - want) <= tol * (1 + fabs(want));
}

static double gval(int r, int64_t i, lt_dtype dt)
{
    double v = (double)((r * 37 + i) % 97) - 40;
    return dt == LT_BOOL ? ((r + i) % 3 == 0) : v;
}

/* -------------------------------------------------------------- coll mode */

static void coll_all_reduce(lt_world *w, lt_dtype dt, int red, int64_t n)
{
    double scale = (red == LT_REDUCE_SUM && dt != LT_BOOL) ? 0.5 : 1.0;
    if (lt_dtype_is_float(dt) && red == LT_REDUCE_MAX) scale = 2.0;
    size_t es = lt_dtype_size(dt);
    unsigned char *in = malloc((size_t)n * es + 1), *out = malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n; i++) tstore(in, dt, i, tval(g_rank, i, red, dt));
    if (lt_world_all_reduce(w, in, out, n, dt, red, scale, NULL) != LT_OK)
        DIE("all_reduce %s %s n %lld: %s", lt_dtype_name(dt),
            lt_reduce_type_name(red), (long long)n, lt_last_error());
    for (int64_t i = 0; i < n; i++) {
        double want = texpect(g_size, i, red, dt, scale), got = tload(out, dt, i);
        if (!close_enough(got, want, dt))
            DIE("all_reduce %s %s n %lld: [%lld] = %g, want %g", lt_dtype_name(dt),
                lt_reduce_type_name(red), (long long)n, (long long)i, got, want);
    }
    rec(dt, out, n * (int64_t)es);
    free(in);
    free(out);
}

static void coll_all_gather(lt_world *w, lt_dtype dt, int64_t outer, int64_t block)
{
    size_t es = lt_dtype_size(dt);
    int64_t n = outer * block;
    unsigned char *in = malloc((size_t)n * es + 1);
    unsigned char *out = malloc((size_t)n * g_size * es + 1);
    for (int64_t i = 0; i < n; i++) tstore(in, dt, i, gval(g_rank, i, dt));
    if (lt_world_all_gather(w, in, out, outer, block, dt, NULL) != LT_OK)
        DIE("all_gather %s: %s", lt_dtype_name(dt), lt_last_error());
    for (int64_t o = 0; o < outer; o++)
        for (int r = 0; r < g_size; r++)
            for (int64_t j = 0; j < block; j++) {
                double got = tload(out, dt, (o * g_size + r) * block + j);
                double want = gval(r, o * block + j, dt);
                if (dt == LT_BF16) want = lt_bf16_to_f32(lt_f32_to_bf16((float)want));
                if (got != want)
                    DIE("all_gather %s [%lld][%d][%lld] = %g, want %g",
                        lt_dtype_name(dt), (long long)o, r, (long long)j, got, want);
            }
    rec(dt, out, n * g_size * (int64_t)es);
    free(in);
    free(out);
}

static void coll_reduce_scatter(lt_world *w, lt_dtype dt, int red, int64_t outer,
                                int64_t block)
{
    size_t es = lt_dtype_size(dt);
    int N = g_size;
    int64_t n_in = outer * N * block;
    double scale = red == LT_REDUCE_SUM && dt != LT_BOOL ? 2.0 : 1.0;
    unsigned char *in = malloc((size_t)n_in * es + 1);
    unsigned char *out = malloc((size_t)outer * block * es + 1);
    for (int64_t i = 0; i < n_in; i++) tstore(in, dt, i, tval(g_rank, i, red, dt));
    if (lt_world_reduce_scatter(w, in, out, outer, block, dt, red, scale, NULL) != LT_OK)
        DIE("reduce_scatter %s %s: %s", lt_dtype_name(dt), lt_reduce_type_name(red),
            lt_last_error());
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < block; j++) {
            int64_t src = (o * N + g_rank) * block + j;
            double want = texpect(N, src, red, dt, scale);
            double got = tload(out, dt, o * block + j);
            if (!close_enough(got, want, dt))
                DIE("reduce_scatter %s %s [%lld][%lld] = %g, want %g",
                    lt_dtype_name(dt), lt_reduce_type_name(red), (long long)o,
                    (long long)j, got, want);
        }
    rec(dt, out, outer * block * (int64_t)es);
    free(in);
    free(out);
}

static void coll_broadcast(lt_world *w, lt_dtype dt, int64_t n, int root)
{
    size_t es = lt_dtype_size(dt);
    unsigned char *buf = malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n; i++) tstore(buf, dt, i, gval(g_rank, i, dt));
    if (lt_world_broadcast(w, buf, buf, n, dt, root, NULL) != LT_OK)
        DIE("broadcast %s root %d: %s", lt_dtype_name(dt), root, lt_last_error());
    for (int64_t i = 0; i < n; i++) {
        double want = gval(root, i, dt);
        if (dt == LT_BF16) want = lt_bf16_to_f32(lt_f32_to_bf16((float)want));
        if (tload(buf, dt, i) != want)
            DIE("broadcast %s root %d [%lld] = %g, want %g", lt_dtype_name(dt), root,
                (long long)i, tload(buf, dt, i), want);
    }
    rec(dt, buf, n * (int64_t)es);
    free(buf);
}

static void coll_exchange(lt_world *w)
{
    size_t len = (size_t)g_rank * 150000 + 5;
    unsigned char *p = malloc(len);
    for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(g_rank * 7 + i);
    void *all = NULL;
    size_t *lens = calloc((size_t)g_size, sizeof *lens);
    if (lt_world_exchange(w, "ckpt", p, len, &all, lens) != LT_OK)
        DIE("rendezvous: %s", lt_last_error());
    size_t off = 0;
    for (int r = 0; r < g_size; r++) {
        if (lens[r] != (size_t)r * 150000 + 5)
            DIE("rendezvous: len[%d] = %zu", r, lens[r]);
        for (size_t i = 0; i < lens[r]; i++)
            if (((unsigned char *)all)[off + i] != (unsigned char)(r * 7 + i))
                DIE("rendezvous: payload %d byte %zu", r, i);
        off += lens[r];
    }
    rec(LT_BOOL, all, (int64_t)off);
    free(all);
    if (lt_world_exchange(w, "empty", NULL, 0, &all, lens) != LT_OK || all)
        DIE("empty rendezvous: %s", lt_last_error());
    free(lens);
    free(p);
}

/* Traced IR ops: x = [8][6] (rank-dependent) through the graph. */
static void coll_ir(lt_dtype dt)
{
    int64_t dims[2] = { 8, 6 };
    lt_shape s = lt_shape_make(2, dims);
    size_t es = lt_dtype_size(dt);
    unsigned char host[48 * 8], out[48 * 8 * 64];
    for (int i = 0; i < 48; i++) tstore(host, dt, i, tval(g_rank, i, LT_REDUCE_SUM, dt));
    lt_tensor *x = NULL, *y = NULL;
    if (lt_tensor_from_host(0, host, dt, &s, &x) != LT_OK) DIE("from_host: %s", lt_last_error());
    lt_attrs a;
    /* all_reduce(sum, scale 0.25) */
    memset(&a, 0, sizeof a);
    a.n = 1;
    a.i[0] = LT_REDUCE_SUM;
    a.f[0] = dt == LT_BOOL ? 1.0 : 0.25;
    if (lt_trace1(LT_OP_all_reduce, x, &a, &y) != LT_OK ||
        lt_tensor_to_host(y, out, dt) != LT_OK)
        DIE("IR all_reduce %s: %s", lt_dtype_name(dt), lt_last_error());
    for (int i = 0; i < 48; i++)
        if (!close_enough(tload(out, dt, i), texpect(g_size, i, LT_REDUCE_SUM, dt, a.f[0]), dt))
            DIE("IR all_reduce %s [%d] = %g, want %g", lt_dtype_name(dt), i,
                tload(out, dt, i), texpect(g_size, i, LT_REDUCE_SUM, dt, a.f[0]));
    rec(dt, out, 48 * (int64_t)es);
    lt_tensor_release(y);
    /* all_gather(dim 1) */
    memset(&a, 0, sizeof a);
    a.n = 1;
    a.i[0] = 1;
    if (lt_trace1(LT_OP_all_gather, x, &a, &y) != LT_OK ||
        lt_tensor_to_host(y, out, dt) != LT_OK)
        DIE("IR all_gather %s: %s", lt_dtype_name(dt), lt_last_error());
    for (int i = 0; i < 8; i++)
        for (int c = 0; c < 6 * g_size; c++) {
            double want = tval(c / 6, i * 6 + c % 6, LT_REDUCE_SUM, dt);
            if (dt == LT_BOOL) want = want != 0;
            if (dt == LT_BF16) want = lt_bf16_to_f32(lt_f32_to_bf16((float)want));
            if (dt == LT_I32 || dt == LT_I64) want = (int64_t)want;
            if (tload(out, dt, i * 6 * g_size + c) != want)
                DIE("IR all_gather %s [%d][%d] = %g, want %g", lt_dtype_name(dt), i,
                    c, tload(out, dt, i * 6 * g_size + c), want);
        }
    rec(dt, out, 48 * g_size * (int64_t)es);
    lt_tensor_release(y);
    /* reduce_scatter(max, dim 0) needs 8 % N == 0 */
    if (8 % g_size == 0) {
        memset(&a, 0, sizeof a);
        a.n = 2;
        a.i[0] = LT_REDUCE_MAX;
        a.i[1] = 0;
        a.f[0] = 1.0;
        if (lt_trace1(LT_OP_reduce_scatter, x, &a, &y) != LT_OK ||
            lt_tensor_to_host(y, out, dt) != LT_OK)
            DIE("IR reduce_scatter %s: %s", lt_dtype_name(dt), lt_last_error());
        int rows = 8 / g_size;
        for (int i = 0; i < rows * 6; i++) {
            int64_t src = (int64_t)g_rank * rows * 6 + i;
            double want = -1e300;
            for (int r = 0; r < g_size; r++) {
                double v = tval(r, src, LT_REDUCE_SUM, dt);
                if (dt == LT_BOOL) v = v != 0;
                if (dt == LT_BF16) v = lt_bf16_to_f32(lt_f32_to_bf16((float)v));
                if (dt == LT_I32 || dt == LT_I64) v = (int64_t)v;
                want = v > want ? v : want;
            }
            if (tload(out, dt, i) != want)
                DIE("IR reduce_scatter %s [%d] = %g, want %g", lt_dtype_name(dt), i,
                    tload(out, dt, i), want);
        }
        rec(dt, out, rows * 6 * (int64_t)es);
        lt_tensor_release(y);
    }
    /* broadcast(root = last ordinal) */
    memset(&a, 0, sizeof a);
    a.n = 1;
    a.i[0] = g_size - 1;
    if (lt_trace1(LT_OP_broadcast, x, &a, &y) != LT_OK ||
        lt_tensor_to_host(y, out, dt) != LT_OK)
        DIE("IR broadcast %s: %s", lt_dtype_name(dt), lt_last_error());
    for (int i = 0; i < 48; i++) {
        double want = tval(g_size - 1, i, LT_REDUCE_SUM, dt);
        if (dt == LT_BOOL) want = want != 0;
        if (dt == LT_BF16) want = lt_bf16_to_f32(lt_f32_to_bf16((float)want));
        if (dt == LT_I32 || dt == LT_I64) want = (int64_t)want;
        if (tload(out, dt, i) != want)
            DIE("IR broadcast %s [%d] = %g, want %g", lt_dtype_name(dt), i,
                tload(out, dt, i), want);
    }
    rec(dt, out, 48 * (int64_t)es);
    lt_tensor_release(y);
    lt_tensor_release(x);
}

static void mode_coll(lt_world *w, const char *dir)
{
    g_out = open_out(dir, "coll");
    for (int dt = 0; dt <= LT_BOOL; dt++)  /* the collective dtypes */
        for (int red = LT_REDUCE_SUM; red <= LT_REDUCE_OR; red++)
            coll_all_reduce(w, dt, red, 1001);
    coll_all_reduce(w, LT_F32, LT_REDUCE_SUM, 300001);   /* several chunks */
    coll_all_reduce(w, LT_BF16, LT_REDUCE_SUM, 250003);
    coll_all_reduce(w, LT_I64, LT_REDUCE_MAX, 100000);
    coll_all_reduce(w, LT_F32, LT_REDUCE_SUM, 0);
    for (int dt = 0; dt <= LT_BOOL; dt++)  /* the collective dtypes */ coll_all_gather(w, dt, 3, 35);
    coll_all_gather(w, LT_F32, 2, 100003);
    coll_all_gather(w, LT_I32, 4000, 13);
    for (int dt = 0; dt <= LT_BOOL; dt++)  /* the collective dtypes */
        for (int red = LT_REDUCE_SUM; red <= LT_REDUCE_OR; red++)
            coll_reduce_scatter(w, dt, red, 3, 10);
    coll_reduce_scatter(w, LT_F32, LT_REDUCE_SUM, 2, 60001);
    coll_reduce_scatter(w, LT_BF16, LT_REDUCE_SUM, 700, 9);
    for (int dt = 0; dt <= LT_BOOL; dt++)  /* the collective dtypes */ {
        coll_broadcast(w, dt, 1000, g_size > 5 ? 5 : g_size - 1);
        coll_broadcast(w, dt, 17, 0);
    }
    coll_broadcast(w, LT_I64, 200003, g_size - 1);
    coll_exchange(w);
    if (lt_world_barrier(w) != LT_OK) DIE("barrier: %s", lt_last_error());
    if (lt_init() != LT_OK) DIE("lt_init: %s", lt_last_error());
    for (int dt = 0; dt <= LT_BOOL; dt++)  /* the collective dtypes */ coll_ir(dt);
    if (lt_wait(-1) != LT_OK) DIE("wait: %s", lt_last_error());
    fclose(g_out);
}

/* --------------------------------------------------------------- sgd mode */

#define SGD_B 64
#define SGD_D 16
#define SGD_H 32
#define SGD_O 4
#define SGD_STEPS 12

static float sgd_x(int i, int j) { return (float)sin(0.37 * i + 0.11 * j * j + 0.5); }
static float sgd_t(int i, int k) { return (float)cos(0.21 * i * (k + 1) - 0.3 * k); }

static lt_tensor *host_tensor(const float *p, int r, int c)
{
    int64_t d[2] = { r, c };
    lt_shape s = lt_shape_make(2, d);
    lt_tensor *t = NULL;
    if (lt_tensor_from_host(0, p, LT_F32, &s, &t) != LT_OK)
        DIE("from_host: %s", lt_last_error());
    return t;
}

static lt_tensor *op2(lt_op op, lt_tensor *a, lt_tensor *b, const lt_attrs *at)
{
    lt_tensor *o = NULL;
    if (lt_trace2(op, a, b, at, &o) != LT_OK) DIE("%s: %s", lt_op_name(op), lt_last_error());
    return o;
}

static lt_tensor *op1(lt_op op, lt_tensor *a, const lt_attrs *at)
{
    lt_tensor *o = NULL;
    if (lt_trace1(op, a, at, &o) != LT_OK) DIE("%s: %s", lt_op_name(op), lt_last_error());
    return o;
}

static lt_tensor *transpose(lt_tensor *a)
{
    lt_attrs at;
    memset(&at, 0, sizeof at);
    at.n = 2;
    at.i[0] = 1;
    at.i[1] = 0;
    return op1(LT_OP_permute, a, &at);
}

static void mode_sgd(const char *dir)
{
    if (lt_init() != LT_OK) DIE("lt_init: %s", lt_last_error());
    int N = g_size;
    if (SGD_B % N) DIE("batch %d not divisible by world %d", SGD_B, N);
    int b = SGD_B / N, r0 = g_rank * b;
    static float w1[SGD_D * SGD_H], w2[SGD_H * SGD_O], xs[SGD_B * SGD_D], ts[SGD_B * SGD_O];
    for (int i = 0; i < SGD_D * SGD_H; i++) w1[i] = (float)(0.3 * sin(1.3 * i + 0.2));
    for (int i = 0; i < SGD_H * SGD_O; i++) w2[i] = (float)(0.3 * cos(0.7 * i - 0.1));
    for (int i = 0; i < b; i++) {
        for (int j = 0; j < SGD_D; j++) xs[i * SGD_D + j] = sgd_x(r0 + i, j);
        for (int k = 0; k < SGD_O; k++) ts[i * SGD_O + k] = sgd_t(r0 + i, k);
    }
    lt_tensor *W1 = host_tensor(w1, SGD_D, SGD_H), *W2 = host_tensor(w2, SGD_H, SGD_O);
    lt_tensor *X = host_tensor(xs, b, SGD_D), *T = host_tensor(ts, b, SGD_O);
    lt_tensor *two_over_B = NULL, *lr = NULL, *zero = NULL;
    if (lt_scalar(0, 2.0 / SGD_B, LT_F64, 1, &two_over_B) != LT_OK ||
        lt_scalar(0, 0.05, LT_F64, 1, &lr) != LT_OK ||
        lt_scalar(0, 0.0, LT_F64, 1, &zero) != LT_OK)
        DIE("scalar: %s", lt_last_error());
    lt_attrs ar;
    memset(&ar, 0, sizeof ar);
    ar.n = 1;
    ar.i[0] = LT_REDUCE_SUM;
    ar.f[0] = 1.0;
    for (int step = 0; step < SGD_STEPS; step++) {
        lt_tensor *hp = op2(LT_OP_mm, X, W1, NULL);
        lt_tensor *h = op1(LT_OP_relu, hp, NULL);
        lt_tensor *y = op2(LT_OP_mm, h, W2, NULL);
        lt_tensor *diff = op2(LT_OP_sub, y, T, NULL);
        lt_tensor *dy = op2(LT_OP_mul, diff, two_over_B, NULL);
        lt_tensor *hT = transpose(h);
        lt_tensor *dW2 = op2(LT_OP_mm, hT, dy, NULL);
        lt_tensor *W2T = transpose(W2);
        lt_tensor *dh = op2(LT_OP_mm, dy, W2T, NULL);
        lt_tensor *dhp = NULL;
        if (lt_trace3(LT_OP_threshold_backward, dh, hp, zero, NULL, &dhp) != LT_OK)
            DIE("threshold_backward: %s", lt_last_error());
        lt_tensor *XT = transpose(X);
        lt_tensor *dW1 = op2(LT_OP_mm, XT, dhp, NULL);
        lt_tensor *g1 = op1(LT_OP_all_reduce, dW1, &ar);
        lt_tensor *g2 = op1(LT_OP_all_reduce, dW2, &ar);
        lt_tensor *u1 = op2(LT_OP_mul, g1, lr, NULL), *u2 = op2(LT_OP_mul, g2, lr, NULL);
        lt_tensor *n1 = op2(LT_OP_sub, W1, u1, NULL), *n2 = op2(LT_OP_sub, W2, u2, NULL);
        if (lt_tensor_assign(W1, n1) != LT_OK || lt_tensor_assign(W2, n2) != LT_OK)
            DIE("assign: %s", lt_last_error());
        lt_tensor *tmp[] = { hp, h, y, diff, dy, hT, dW2, W2T, dh, dhp, XT, dW1,
                             g1, g2, u1, u2, n1, n2 };
        for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) lt_tensor_release(tmp[i]);
        if (lt_sync_core(0, LT_SYNC_MARK_STEP, 0) != LT_OK)
            DIE("step %d: %s", step, lt_last_error());
    }
    if (lt_tensor_to_host(W1, w1, LT_F32) != LT_OK || lt_tensor_to_host(W2, w2, LT_F32) != LT_OK)
        DIE("read params: %s", lt_last_error());
    g_out = open_out(dir, "sgd");
    rec(LT_F32, w1, sizeof w1);
    rec(LT_F32, w2, sizeof w2);
    fclose(g_out);
    lt_tensor *all[] = { W1, W2, X, T, two_over_B, lr, zero };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) lt_tensor_release(all[i]);
    if (lt_wait(-1) != LT_OK) DIE("wait: %s", lt_last_error());
}

/* ------------------------------------------------------------ fault modes */

static void write_text(const char *dir, const char *what, const char *text)
{
    /* written under a temporary name and renamed: a worker stopped while
     * writing (its peer failed first) leaves no half-written file */
    char p[1024], tmp[1100];
    snprintf(p, sizeof p, "%s/%s-%d.txt", dir, what, g_rank);
    snprintf(tmp, sizeof tmp, "%s.part", p);
    FILE *f = fopen(tmp, "w");
    if (!f) DIE("cannot write %s", tmp);
    fputs(text, f);
    if (fclose(f) != 0 || rename(tmp, p) != 0) DIE("cannot write %s", p);
}

static void note_process(const char *dir)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%d %d %s\n", (int)getpid(), (int)getppid(),
             getenv("LAZYTPU_SHM_NAME") ? getenv("LAZYTPU_SHM_NAME") : "-");
    write_text(dir, "proc", buf);
}

static void mode_kill(lt_world *w, const char *dir, int victim, int host_kill)
{
    note_process(dir);
    /* everyone has written its file before anything dies */
    if (lt_world_barrier(w) != LT_OK) DIE("barrier: %s", lt_last_error());
    float v[256];
    for (int it = 0; it < 100000; it++) {
        if (g_rank == victim && it == 3) {
            if (host_kill) kill(getppid(), SIGKILL);
            else kill(getpid(), SIGKILL);
        }
        for (int i = 0; i < 256; i++) v[i] = (float)(g_rank + i);
        if (lt_world_all_reduce(w, v, v, 256, LT_F32, LT_REDUCE_SUM, 1.0, NULL) != LT_OK)
            DIE("all_reduce %d: %s", it, lt_last_error());
        usleep(20000);
    }
}

static void mode_mismatch(lt_world *w, const char *dir, int kind)
{
    static float buf[1024];
    int C = lt_world_local_size(w), host = lt_world_host_index(w);
    int64_t n = 512;
    if (kind == 0 && host == 1) n = 1024;
    if (kind == 1 && g_rank == C + 2) n = 1024;
    lt_status st = lt_world_all_reduce(w, buf, buf, n, LT_F32, LT_REDUCE_SUM, 1.0, NULL);
    if (st == LT_OK) DIE("mismatched all_reduce succeeded");
    write_text(dir, "mm", lt_last_error());
    /* the world stays usable */
    for (int i = 0; i < 8; i++) buf[i] = (float)g_rank;
    if (lt_world_all_reduce(w, buf, buf, 8, LT_F32, LT_REDUCE_MAX, 1.0, NULL) != LT_OK)
        DIE("all_reduce after mismatch: %s", lt_last_error());
    if (buf[0] != (float)(g_size - 1)) DIE("all_reduce after mismatch: %g", buf[0]);
}

/* Host 1 arrives late (after `secs`), host 0 waits in an all_reduce. */
static void mode_stall(lt_world *w, int secs)
{
    if (lt_world_host_index(w) == 1) sleep((unsigned)secs);
    float v[8] = { 0 };
    if (lt_world_all_reduce(w, v, v, 8, LT_F32, LT_REDUCE_SUM, 1.0, NULL) != LT_OK)
        DIE("all_reduce: %s", lt_last_error());
}

/* The metrics report, as lazytpu.spawn writes it (LAZYTPU_METRICS_FILE
 * with {ordinal} replaced). */
static void write_metrics(void)
{
    const char *m = getenv("LAZYTPU_METRICS_FILE");
    if (!m || !*m) return;
    char path[1024];
    const char *ph = strstr(m, "{ordinal}");
    if (ph)
        snprintf(path, sizeof path, "%.*s%d%s", (int)(ph - m), m, g_rank, ph + 9);
    else
        snprintf(path, sizeof path, "%s", m);
    char *rep = lt_metrics_report();
    FILE *f = fopen(path, "w");
    if (f && rep) fputs(rep, f);
    if (f) fclose(f);
    free(rep);
}

/* Ordinal 5 cannot take part (lt_world_abstain, as a rank whose program
 * failed does); every rank of every host must get the same error. */
static void mode_abstain(lt_world *w, const char *dir)
{
    static float buf[64];
    lt_status st;
    if (g_rank == 5)
        st = lt_world_abstain(w, "all_reduce", "its input is poisoned");
    else
        st = lt_world_all_reduce(w, buf, buf, 64, LT_F32, LT_REDUCE_SUM, 1.0, NULL);
    if (st == LT_OK) DIE("all_reduce with an abstaining rank succeeded");
    write_text(dir, "mm", lt_last_error());
    for (int i = 0; i < 8; i++) buf[i] = (float)g_rank;
    if (lt_world_all_reduce(w, buf, buf, 8, LT_F32, LT_REDUCE_MAX, 1.0, NULL) != LT_OK)
        DIE("all_reduce after abstain: %s", lt_last_error());
}

static void mode_early(lt_world *w)
{
    float v[8] = { 0 };
    int rounds = lt_world_host_index(w) == 1 ? 2 : 3;
    for (int it = 0; it < rounds; it++)
        if (lt_world_all_reduce(w, v, v, 8, LT_F32, LT_REDUCE_SUM, 1.0, NULL) != LT_OK)
            DIE("all_reduce %d: %s", it, lt_last_error());
}

/* ------------------------------------------------------------------ bench */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void mode_bench(lt_world *w, int mb, int iters)
{
    int64_t n = ((int64_t)mb << 20) / 4;
    float *x = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i + g_rank) % 7);
    if (lt_world_all_reduce(w, x, x, n, LT_F32, LT_REDUCE_SUM, 1.0, NULL) != LT_OK)
        DIE("bench warm-up: %s", lt_last_error());
    double best = 1e9;
    for (int it = 0; it < iters; it++) {
        if (lt_world_barrier(w) != LT_OK) DIE("barrier: %s", lt_last_error());
        double t = now_s();
        if (lt_world_all_reduce(w, x, x, n, LT_F32, LT_REDUCE_SUM, 1.0 / g_size, NULL))
            DIE("bench: %s", lt_last_error());
        if (lt_world_barrier(w) != LT_OK) DIE("barrier: %s", lt_last_error());
        t = now_s() - t;
        if (t < best) best = t;
    }
    if (g_rank == 0)
        printf("MH_BENCH hosts=%d cores=%d mb=%d seconds=%.6f inter_ns=%lld\n",
               lt_world_num_hosts(w), lt_world_local_size(w), mb, best,
               (long long)lt_world_inter_ns(w));
    free(x);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: mh_worker coll|sgd|kill|killhost|mismatch|early|bench DIR [ARG]\n");
        return 2;
    }
    const char *mode = argv[1], *dir = argv[2];
    lt_world *w = NULL;
    if (lt_world_default(&w) != LT_OK) {
        fprintf(stderr, "mh_worker: %s\n", lt_last_error());
        return 1;
    }
    g_rank = lt_world_rank(w);
    g_size = lt_world_size(w);
    if (g_rank != lt_world_default_rank() || g_size != lt_world_default_size())
        DIE("world %d/%d but environment %d/%d", g_rank, g_size,
            lt_world_default_rank(), lt_world_default_size());
    if (!strcmp(mode, "coll")) mode_coll(w, dir);
    else if (!strcmp(mode, "sgd")) mode_sgd(dir);
    else if (!strcmp(mode, "kill")) mode_kill(w, dir, argc > 3 ? atoi(argv[3]) : 5, 0);
    else if (!strcmp(mode, "killhost")) mode_kill(w, dir, argc > 3 ? atoi(argv[3]) : 5, 1);
    else if (!strcmp(mode, "mismatch")) mode_mismatch(w, dir, argc > 3 ? atoi(argv[3]) : 0);
    else if (!strcmp(mode, "early")) {
        mode_early(w);   /* no final barrier: host 1 just exits */
        return 0;
    }
    else if (!strcmp(mode, "fail")) {   /* ordinal V fails at once */
        note_process(dir);
        if (g_rank == (argc > 3 ? atoi(argv[3]) : 3)) DIE("failing on purpose");
        sleep(30);
    }
    else if (!strcmp(mode, "abstain")) mode_abstain(w, dir);
    else if (!strcmp(mode, "stall")) mode_stall(w, argc > 3 ? atoi(argv[3]) : 30);
    else if (!strcmp(mode, "bench")) mode_bench(w, argc > 3 ? atoi(argv[3]) : 64, 5);
    else DIE("unknown mode %s", mode);
    if (lt_world_barrier(w) != LT_OK) DIE("final barrier: %s", lt_last_error());
    write_metrics();
    lt_shutdown();
    return 0;
}
