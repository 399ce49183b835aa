/*
 * lazy/kernels/pool_max2.c — max pooling with a 2x2 kernel and stride 2
 * (no padding, dilation 1), the pooling of most CNNs, forward and backward.
 *
 * The windows do not overlap: the top-left [2*fh, 2*fw] of a plane is
 * tiled by fh*fw full windows (fh = min(oh, H/2), fw = min(ow, W/2));
 * ceil_mode's partial windows on the last output row/column go through the
 * general lt_pool_max_at. A full window's max is
 *   comb(comb(x00, x01), comb(x10, x11)),
 * where comb(p, q) takes the later q iff q > p or q is NaN. That equals the
 * sequential scan of the general kernel (the last NaN wins, else the first
 * maximum, ties keep the first), and is branch-free: the loops vectorise
 * (built with -O3, see CMakeLists.txt; "m2 is NaN" is written as "c or d
 * is NaN", a form GCC 12 vectorises).
 * The backward writes every element of dx exactly once (g at the window's
 * argmax, 0 elsewhere) instead of clearing dx and accumulating.
 * Threads: lt_par_for over chunks of planes.
 */
#include "pool.h"
#include "par.h"

/* Runs CALL(o, n) over [0, fw) in blocks of n = 8 (the loops inline with
 * a constant count: fully vectorised). A remainder is covered by one more
 * block that overlaps the previous one (rows shorter than 8: two blocks of
 * 4), which only recomputes identical results: every write is a function
 * of its own window. */
#define MAX2_BLOCKS(CALL, fw)                                                              \
    do {                                                                                   \
        int64_t o_ = 0, f_ = (fw);                                                         \
        for (; o_ + 8 <= f_; o_ += 8) CALL(o_, 8);                                         \
        if (o_ < f_) {                                                                     \
            if (f_ >= 8) CALL(f_ - 8, 8);                                                  \
            else if (f_ >= 4) { CALL(0, 4); CALL(f_ - 4, 4); }                             \
            else for (; o_ < f_; o_++) CALL(o_, 1);                                        \
        }                                                                                  \
    } while (0)

/* Row of fw full windows over input rows r0, r1: selector s in 0..3 of
 * each window's max (row-major position in the window) and its value. */
#define MAX2_IMPL(T, SUF)                                                                  \
static inline __attribute__((always_inline)) void                                         \
max2_fwd_row_##SUF(const T *restrict r0, const T *restrict r1, int64_t fw,      \
                               T *restrict y)                                              \
{                                                                                          \
    _Pragma("omp simd")                                                                    \
    for (int64_t ox = 0; ox < fw; ox++) {                                                  \
        T a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];          \
        T m1 = ((b > a) | (b != b)) ? b : a;                                               \
        T m2 = ((d > c) | (d != d)) ? d : c;                                               \
        y[ox] = ((m2 > m1) | (c != c) | (d != d)) ? m2 : m1;                                        \
    }                                                                                      \
}                                                                                          \
/* flat plane index of each window's max: base + 2*ox + {0, 1, W, W+1} */                 \
static inline __attribute__((always_inline)) void                                         \
max2_idx_row_##SUF(const T *restrict r0, const T *restrict r1, int64_t fw,      \
                               int64_t W, int64_t base, int64_t *restrict i64,             \
                               int32_t *restrict i32)                                      \
{                                                                                          \
    if (i64) {                                                                             \
        _Pragma("omp simd")                                                                \
        for (int64_t ox = 0; ox < fw; ox++) {                                              \
            T a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];      \
            T m1 = ((b > a) | (b != b)) ? b : a, m2 = ((d > c) | (d != d)) ? d : c;        \
            int64_t top = ((b > a) | (b != b)) ? 1 : 0;                                    \
            int64_t bot = ((d > c) | (d != d)) ? (int64_t)W + 1 : (int64_t)W;              \
            i64[ox] = base + 2 * ox + (((m2 > m1) | (c != c) | (d != d)) ? bot : top);     \
        }                                                                                  \
    } else {                                                                               \
        _Pragma("omp simd")                                                                \
        for (int64_t ox = 0; ox < fw; ox++) {                                              \
            T a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];      \
            T m1 = ((b > a) | (b != b)) ? b : a, m2 = ((d > c) | (d != d)) ? d : c;        \
            int32_t top = ((b > a) | (b != b)) ? 1 : 0;                                    \
            int32_t bot = ((d > c) | (d != d)) ? (int32_t)W + 1 : (int32_t)W;              \
            i32[ox] = (int32_t)base + 2 * (int32_t)ox + (((m2 > m1) | (c != c) | (d != d)) ? bot : top);\
        }                                                                                  \
    }                                                                                      \
}                                                                                          \
/* dx rows d0, d1 of fw full windows: g at the max, +0 elsewhere (g + 0 as              \
 * the general kernel's 0 += g gives, so -0 becomes +0) */                                 \
static inline __attribute__((always_inline)) void                                         \
max2_bwd_row_##SUF(const T *restrict r0, const T *restrict r1, int64_t fw,      \
                               const T *restrict g, T *restrict d0, T *restrict d1)        \
{                                                                                          \
    _Pragma("omp simd")                                                                    \
    for (int64_t ox = 0; ox < fw; ox++) {                                                  \
        T a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];          \
        T m1 = ((b > a) | (b != b)) ? b : a, m2 = ((d > c) | (d != d)) ? d : c;            \
        T gv = g[ox] + (T)0, z = 0;                                                        \
        T top = ((m2 > m1) | (c != c) | (d != d)) ? z : gv;                                \
        T bot = ((m2 > m1) | (c != c) | (d != d)) ? gv : z;                                \
        d0[2 * ox] = ((b > a) | (b != b)) ? z : top;                                       \
        d0[2 * ox + 1] = ((b > a) | (b != b)) ? top : z;                                   \
        d1[2 * ox] = ((d > c) | (d != d)) ? z : bot;                                       \
        d1[2 * ox + 1] = ((d > c) | (d != d)) ? bot : z;                                   \
    }                                                                                      \
}                                                                                          \
static void max2_fwd_plane_##SUF(const pool_geom *q, const T *x, T *y, void *idx,          \
                                 lt_dtype idt)                                             \
{                                                                                          \
    int64_t W = q->W, fh = q->oh < q->H / 2 ? q->oh : q->H / 2;                            \
    int64_t fw = q->ow < W / 2 ? q->ow : W / 2;                                            \
    for (int64_t oy = 0; oy < q->oh; oy++) {                                               \
        const T *r0 = x + 2 * oy * W, *r1 = r0 + W;                                        \
        int64_t o = oy * q->ow, f = oy < fh ? fw : 0;                                      \
        int64_t *i64 = idx && idt == LT_I64 ? (int64_t *)idx + o : NULL;                  \
        int32_t *i32 = idx && idt == LT_I32 ? (int32_t *)idx + o : NULL;                  \
        T *yo = y ? y + o : NULL;                                                          \
        if (f && y) {                                                                      \
            MAX2_BLOCKS(MAX2_FWD_##SUF, f);                                                \
        }                                                                                  \
        if (f && (i64 || i32)) {                                                           \
            MAX2_BLOCKS(MAX2_IDX_##SUF, f);                                                \
        }                                                                                  \
        for (int64_t ox = (idx && idt != LT_I64 && idt != LT_I32) ? 0 : f; ox < q->ow;     \
             ox++) {                                                                       \
            T v;                                                                           \
            int64_t k = lt_pool_max_at_##SUF(q, x, oy, ox, &v);                            \
            if (y) y[o + ox] = v;                                                          \
            if (idx) kt_store_i(idx, idt, o + ox, k);                                      \
        }                                                                                  \
    }                                                                                      \
}                                                                                          \
static void max2_bwd_plane_##SUF(const pool_geom *q, const T *g, const T *x, T *dx)        \
{                                                                                          \
    int64_t W = q->W, H = q->H, fh = q->oh < H / 2 ? q->oh : H / 2;                        \
    int64_t fw = q->ow < W / 2 ? q->ow : W / 2;                                            \
    for (int64_t oy = 0; oy < fh; oy++) {                                                  \
        T *d0 = dx + 2 * oy * W, *d1 = d0 + W;                                             \
        const T *r0 = x + 2 * oy * W, *r1 = r0 + W, *go = g + oy * q->ow;                  \
        MAX2_BLOCKS(MAX2_BWD_##SUF, fw);                                                   \
        for (int64_t w = 2 * fw; w < W; w++) d0[w] = d1[w] = 0;                            \
    }                                                                                      \
    if (2 * fh < H) memset(dx + 2 * fh * W, 0, (size_t)((H - 2 * fh) * W) * sizeof(T));    \
    /* partial windows (ceil_mode) cover only the cleared remainder */                    \
    for (int64_t oy = 0; oy < q->oh; oy++)                                                 \
        for (int64_t ox = oy < fh ? fw : 0; ox < q->ow; ox++) {                            \
            T v;                                                                           \
            int64_t k = lt_pool_max_at_##SUF(q, x, oy, ox, &v);                            \
            if (k >= 0 && k < H * W) dx[k] += g[oy * q->ow + ox];                          \
        }                                                                                  \
}
#define MAX2_FWD_f(o, n) max2_fwd_row_f(r0 + 2 * (o), r1 + 2 * (o), n, yo + (o))
#define MAX2_FWD_d(o, n) max2_fwd_row_d(r0 + 2 * (o), r1 + 2 * (o), n, yo + (o))
#define MAX2_IDX_f(o, n) max2_idx_row_f(r0 + 2 * (o), r1 + 2 * (o), n, W, 2 * oy * W + 2 * (o), \
                                        i64 ? i64 + (o) : NULL, i32 ? i32 + (o) : NULL)
#define MAX2_IDX_d(o, n) max2_idx_row_d(r0 + 2 * (o), r1 + 2 * (o), n, W, 2 * oy * W + 2 * (o), \
                                        i64 ? i64 + (o) : NULL, i32 ? i32 + (o) : NULL)
#define MAX2_BWD_f(o, n) max2_bwd_row_f(r0 + 2 * (o), r1 + 2 * (o), n, go + (o), d0 + 2 * (o), \
                                        d1 + 2 * (o))
#define MAX2_BWD_d(o, n) max2_bwd_row_d(r0 + 2 * (o), r1 + 2 * (o), n, go + (o), d0 + 2 * (o), \
                                        d1 + 2 * (o))
MAX2_IMPL(float, f)
MAX2_IMPL(double, d)

typedef struct max2_job {
    lt_dtype cdt, idt;
    const pool_geom *q;
    const void *x, *g;
    void *y, *idx, *dx;
    int64_t per;                /* planes per chunk */
    int bwd;
} max2_job;

static void max2_chunk(void *arg, int64_t c, int w)
{
    (void)w;
    const max2_job *j = arg;
    const pool_geom *q = j->q;
    int64_t hw = q->H * q->W, ohw = q->oh * q->ow;
    int64_t p1 = (c + 1) * j->per < q->P ? (c + 1) * j->per : q->P;
    for (int64_t p = c * j->per; p < p1; p++) {
        if (j->cdt == LT_F64) {
            const double *x = (const double *)j->x + p * hw;
            if (j->bwd)
                max2_bwd_plane_d(q, (const double *)j->g + p * ohw, x, (double *)j->dx + p * hw);
            else
                max2_fwd_plane_d(q, x, j->y ? (double *)j->y + p * ohw : NULL,
                                 j->idx ? (char *)j->idx + p * ohw * (int64_t)kt_dtsize(j->idt) : NULL,
                                 j->idt);
        } else {
            const float *x = (const float *)j->x + p * hw;
            if (j->bwd)
                max2_bwd_plane_f(q, (const float *)j->g + p * ohw, x, (float *)j->dx + p * hw);
            else
                max2_fwd_plane_f(q, x, j->y ? (float *)j->y + p * ohw : NULL,
                                 j->idx ? (char *)j->idx + p * ohw * (int64_t)kt_dtsize(j->idt) : NULL,
                                 j->idt);
        }
    }
}

/* Planes per chunk (~16K input elements, at least one plane) and the
 * workers worth waking (a fork/join costs more than < 64K elements). */
static void max2_run(max2_job *j, int nt, const lt_kernel_ctx *ctx)
{
    int64_t hw = j->q->H * j->q->W, total = j->q->P * hw;
    j->per = hw > 0 ? 16384 / hw : 1;
    if (j->per < 1) j->per = 1;
    int64_t n = (j->q->P + j->per - 1) / j->per;
    if (total < 65536) nt = 1;
    lt_par_for(ctx, nt, n, max2_chunk, j);
}

void lt_pool_max2_fwd(lt_dtype cdt, const pool_geom *q, const void *x, void *y, void *idx,
                      lt_dtype idt, int nt, const lt_kernel_ctx *ctx)
{
    max2_job j = {cdt, idt, q, x, NULL, y, idx, NULL, 1, 0};
    max2_run(&j, nt, ctx);
}

void lt_pool_max2_bwd(lt_dtype cdt, const pool_geom *q, const void *g, const void *x, void *dx,
                      int nt, const lt_kernel_ctx *ctx)
{
    max2_job j = {cdt, LT_F32, q, x, g, NULL, NULL, dx, 1, 1};
    max2_run(&j, nt, ctx);
}
