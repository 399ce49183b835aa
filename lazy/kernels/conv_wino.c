/*
 * lazy/kernels/conv_wino.c — Winograd F(2x2,3x3) for 3x3, stride-1,
 * dilation-1, one-group convolutions in f32 (conv.c hands over f32 and
 * bf16 storage, both computed in f32): forward, input gradient (the
 * forward conv of the output gradient with the flipped, transposed
 * weight: lt_wino_conv.flip) and weight gradient (the adjoint, below).
 *
 * Each 2x2 block of output pixels ("tile") is A^T [(G g G^T) . (B^T d B)] A
 * for its 4x4 input patch d and each 3x3 filter g: 16 products per tile
 * and channel pair instead of 36 (2.25x fewer multiply-adds than im2col +
 * GEMM). Per chunk of samples:
 *   input transform  x [n][Ci][H][W] -> V[16][tiles][Ci] (channel-last:
 *                    each sample is first packed into a zero-padded
 *                    [rows][cols][Ci] buffer, then B^T d B is vectorised
 *                    over the channels)
 *   16 GEMMs         M[k] = V[k] [tiles x Ci] . U[k] [Ci x Co] (serial
 *                    calls, sgemm_small.c's kernel or OpenBLAS, spread
 *                    over the core's helper threads)
 *   output transform M -> [rows][cols][Co] per sample (A^T m A vectorised
 *                    over the output channels) -> out [n][Co][OH][OW]
 * The weight transform U[16][Ci][Co] = G g G^T is done once per call,
 * vectorised over Co. Odd output sizes compute a last half-empty tile row /
 * column from zero padding and drop it on store.
 *
 * Accuracy: the transforms only add, subtract and halve (exact scalings);
 * max error / scale against float64 on ResNet-18's and the CNN's shapes
 * 2e-7..8e-7 for all three ops (im2col 2e-7..6e-7, eager 1e-7..2.5e-6).
 * F(4x4,3x3) (points 0, +-1, +-2) was measured in a float32 model at
 * 3e-6 (16 channels) .. 1.4e-5 (512) of the scale, 10x F(2x2,3x3)'s and
 * at the f32 tests' tolerance (2e-5 of the scale): not used.
 */
#include "kutil.h"
#include "par.h"
#include "conv_wino.h"
#include "options.h"

/* Samples per chunk: V and M of a chunk (16 * tiles * (Ci + Co) floats)
 * stay around this many bytes (L3-resident; larger GEMMs than per-sample
 * ones). */
#ifndef WINO_CHUNK_BYTES
#define WINO_CHUNK_BYTES (4u << 20)
#endif

/* The default choice's thresholds (lt_wino_choose, measured crossover
 * there): GEMM rows (samples x tiles) and channels on each side. */
#define WINO_MIN_ROWS 32
#define WINO_MIN_CHANNELS 8

typedef struct wino_plan {
    const lt_wino_conv *q;
    int64_t TH, TW, T;         /* tiles per sample: rows, columns, all */
    int64_t PR, PC;            /* padded channel-last input: 2*TH+2 rows, 2*TW+2 cols */
    int64_t nb;                /* samples per chunk (V / M are sized for nb) */
    const float *x, *w, *gy;   /* gy: the weight gradient's output gradient */
    float *out;
    float *U, *V, *M;          /* [16][Ci][Co], [16][nb*T][Ci], [16][nb*T][Co] */
    float **xp, **yt;          /* per worker: padded input, channel-last output */
    int64_t n0, nbc;           /* the chunk being computed: first sample, samples */
    int64_t per;               /* weight transforms: channels per item */
    size_t bytes;              /* scratch allocated (for the OOM message) */
    int nt;                    /* workers (per-worker scratch) */
} wino_plan;

/* 8 floats as one AVX2 register (GCC/clang vector extension; unaligned
 * loads and stores through memcpy), the channel step of the transforms. */
typedef float wino_v8 __attribute__((vector_size(32)));

static inline wino_v8 wino_ld(const float *p)
{
    wino_v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void wino_st(float *p, wino_v8 v) { memcpy(p, &v, sizeof v); }

/* B^T d B of the 4x4 patch at d (row stride rs, column stride cs, channel
 * c..c+width) into the 16 matrices at v (stride ldk); T is float or
 * wino_v8, LD / ST its load and store. */
#define WINO_IN_TILE(T, LD, ST)                                                      \
    do {                                                                             \
        T t[4][4];                                                                   \
        for (int j = 0; j < 4; j++) {                                                \
            T d0 = LD(d + j * cs + c), d1 = LD(d + rs + j * cs + c);                 \
            T d2 = LD(d + 2 * rs + j * cs + c), d3 = LD(d + 3 * rs + j * cs + c);    \
            t[0][j] = d0 - d2;                                                       \
            t[1][j] = d1 + d2;                                                       \
            t[2][j] = d2 - d1;                                                       \
            t[3][j] = d1 - d3;                                                       \
        }                                                                            \
        for (int i = 0; i < 4; i++) {                                                \
            ST(v + (i * 4 + 0) * ldk + c, t[i][0] - t[i][2]);                        \
            ST(v + (i * 4 + 1) * ldk + c, t[i][1] + t[i][2]);                        \
            ST(v + (i * 4 + 2) * ldk + c, t[i][2] - t[i][1]);                        \
            ST(v + (i * 4 + 3) * ldk + c, t[i][1] - t[i][3]);                        \
        }                                                                            \
    } while (0)

#define WINO_LDS(p) (*(p))
#define WINO_STS(p, x) (*(p) = (x))

/* out[j][i] = src[i * ls + j] for an 8x8 block (three rounds of shuffles:
 * unpack pairs, pairs of pairs, halves). */
static inline void wino_tr8_regs(const float *src, int64_t ls, wino_v8 out[8])
{
    wino_v8 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = wino_ld(src + i * ls);
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4)
        for (int h = 0; h < 2; h++) {
            u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
    for (int j = 0; j < 4; j++) {
        out[j] = __builtin_shufflevector(u[j], u[j + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        out[j + 4] = __builtin_shufflevector(u[j], u[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}

/* dst[j * ld + i] = src[i * ls + j] for an 8x8 block. */
static inline void wino_tr8(const float *src, int64_t ls, float *dst, int64_t ld)
{
    wino_v8 o[8];
    wino_tr8_regs(src, ls, o);
    for (int j = 0; j < 8; j++) wino_st(dst + j * ld, o[j]);
}

/* dst[j * ld + i] = src[i * ls + j], i < ni, j < nj: 8x8 blocks, scalar
 * edges. */
static void wino_transpose(const float *src, int64_t ls, int64_t ni, float *dst, int64_t ld,
                           int64_t nj)
{
    int64_t i0 = 0;
    for (; i0 + 8 <= ni; i0 += 8) {
        int64_t j0 = 0;
        for (; j0 + 8 <= nj; j0 += 8) wino_tr8(src + i0 * ls + j0, ls, dst + j0 * ld + i0, ld);
        for (int64_t j = j0; j < nj; j++)
            for (int64_t i = i0; i < i0 + 8; i++) dst[j * ld + i] = src[i * ls + j];
    }
    for (int64_t j = 0; j < nj; j++)
        for (int64_t i = i0; i < ni; i++) dst[j * ld + i] = src[i * ls + j];
}

/* ---- weight transform: U[k][ci][co] = (G g G^T)[k], G = [1 0 0; .5 .5 .5;
 * .5 -.5 .5; 0 0 1], for input channels [ci0, ci1), vectorised over blocks
 * of 8 output channels ---- */
#define WINO_W_TILE(T, ST)                                                           \
    do {                                                                             \
        T a[4][3];                                                                   \
        for (int j = 0; j < 3; j++) {                                                \
            a[0][j] = g[j];                                                          \
            a[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);                           \
            a[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);                           \
            a[3][j] = g[6 + j];                                                      \
        }                                                                            \
        for (int i = 0; i < 4; i++) {                                                \
            ST(u + (i * 4 + 0) * ld, a[i][0]);                                       \
            ST(u + (i * 4 + 1) * ld, 0.5f * (a[i][0] + a[i][1] + a[i][2]));          \
            ST(u + (i * 4 + 2) * ld, 0.5f * (a[i][0] - a[i][1] + a[i][2]));          \
            ST(u + (i * 4 + 3) * ld, a[i][2]);                                       \
        }                                                                            \
    } while (0)

static void wino_weight(const wino_plan *p, int64_t ci0, int64_t ci1)
{
    const lt_wino_conv *q = p->q;
    int64_t Ci = q->Ci, Co = q->Co, ld = Ci * Co;
    const float *w = p->w;
    /* tap t of filter (co, ci) */
#define WINO_TAP(co, ci, t) (q->flip ? w[((ci) * Co + (co)) * 9 + 8 - (t)] : w[((co) * Ci + (ci)) * 9 + (t)])
    /* ci outer: U's 16 rows are written as sequential streams; a ci's
     * filters (one 36-byte run per co) share their cache lines with the
     * next ci's */
    int64_t cov = Co & ~(int64_t)7;
    for (int64_t ci = ci0; ci < ci1; ci++)
        for (int64_t co0 = 0; co0 < cov; co0 += 8) {
            /* the 8 filters' taps 0..7 by a register transpose of their
             * rows (flip: stored taps 1..8 are taps 7..0), tap 8 gathered */
            wino_v8 g[9], r[8];
            float g8[8];
            if (q->flip) {
                const float *f = w + (ci * Co + co0) * 9;
                wino_tr8_regs(f + 1, 9, r);
                for (int t = 0; t < 8; t++) g[t] = r[7 - t];
                for (int k = 0; k < 8; k++) g8[k] = f[k * 9];
            } else {
                const float *f = w + (co0 * Ci + ci) * 9;
                wino_tr8_regs(f, Ci * 9, g);
                for (int k = 0; k < 8; k++) g8[k] = f[k * Ci * 9 + 8];
            }
            g[8] = wino_ld(g8);
            float *restrict u = p->U + ci * Co + co0;
            WINO_W_TILE(wino_v8, wino_st);
        }
    for (int64_t co = cov; co < Co; co++)
        for (int64_t ci = ci0; ci < ci1; ci++) {
            float g[9];
            for (int t = 0; t < 9; t++) g[t] = WINO_TAP(co, ci, t);
            float *restrict u = p->U + ci * Co + co;
            WINO_W_TILE(float, WINO_STS);
        }
#undef WINO_TAP
}

static void wino_weight_item(void *arg, int64_t c, int w)
{
    (void)w;
    const wino_plan *p = arg;
    int64_t c1 = (c + 1) * p->per < p->q->Ci ? (c + 1) * p->per : p->q->Ci;
    wino_weight(p, c * p->per, c1);
}

/* ---- input: one sample x [Ci][H][W] into the zero-padded channel-last
 * xp [PR][PC][Ci] (row r, column c hold x[.][r - ph][c - pw]) ---- */
static void wino_pack(const wino_plan *p, const float *restrict x, float *restrict xp)
{
    const lt_wino_conv *q = p->q;
    int64_t Ci = q->Ci, H = q->H, W = q->W, hw = H * W, PC = p->PC;
    int64_t xb = q->pw < PC ? q->pw : PC;
    int64_t xe = q->pw + W < PC ? q->pw + W : PC;
    for (int64_t r = 0; r < p->PR; r++) {
        float *restrict row = xp + r * PC * Ci;
        int64_t iy = r - q->ph;
        if (iy < 0 || iy >= H) {
            memset(row, 0, (size_t)(PC * Ci) * sizeof(float));
            continue;
        }
        if (xb) memset(row, 0, (size_t)(xb * Ci) * sizeof(float));
        if (xe < PC) memset(row + xe * Ci, 0, (size_t)((PC - xe) * Ci) * sizeof(float));
        /* [Ci][W] (row iy of every channel) -> [W][Ci] */
        wino_transpose(x + iy * W, hw, Ci, row + q->pw * Ci, Ci, xe - q->pw);
    }
}

/* V rows of sample s of the chunk: B^T d B per tile, B^T = [1 0 -1 0;
 * 0 1 1 0; 0 -1 1 0; 0 1 0 -1], vectorised over the input channels. */
static void wino_in(const wino_plan *p, const float *restrict xp, int64_t s)
{
    int64_t Ci = p->q->Ci, ldk = p->nb * p->T * Ci, rs = p->PC * Ci, cs = Ci;
    for (int64_t ty = 0; ty < p->TH; ty++)
        for (int64_t tx = 0; tx < p->TW; tx++) {
            const float *restrict d = xp + (2 * ty * p->PC + 2 * tx) * Ci;
            float *restrict v = p->V + (s * p->T + ty * p->TW + tx) * Ci;
            int64_t c = 0;
            for (; c + 8 <= Ci; c += 8) WINO_IN_TILE(wino_v8, wino_ld, wino_st);
            for (; c < Ci; c++) WINO_IN_TILE(float, WINO_LDS, WINO_STS);
        }
}

/* A^T m A of the 16 values at m (stride ldk), channels c..c+width, into
 * the 2x2 output block at o (row stride rs, column stride cs). */
#define WINO_OUT_TILE(T, LD, ST)                                                     \
    do {                                                                             \
        T r[2][4];                                                                   \
        for (int j = 0; j < 4; j++) {                                                \
            T m0 = LD(m + j * ldk + c), m1 = LD(m + (4 + j) * ldk + c);              \
            T m2 = LD(m + (8 + j) * ldk + c), m3 = LD(m + (12 + j) * ldk + c);       \
            r[0][j] = m0 + m1 + m2;                                                  \
            r[1][j] = m1 - m2 - m3;                                                  \
        }                                                                            \
        for (int i = 0; i < 2; i++) {                                                \
            ST(o + i * rs + c, r[i][0] + r[i][1] + r[i][2]);                         \
            ST(o + i * rs + cs + c, r[i][1] - r[i][2] - r[i][3]);                    \
        }                                                                            \
    } while (0)

/* Output of sample s of the chunk: A^T m A per tile (A^T = [1 1 1 0;
 * 0 1 -1 -1]) into the channel-last yt [2*TH][2*TW][Co], vectorised over
 * the output channels, then transposed into out [Co][OH][OW] (the odd
 * last row / column dropped). */
static void wino_out(const wino_plan *p, int64_t s, float *restrict yt, float *restrict y)
{
    const lt_wino_conv *q = p->q;
    int64_t Co = q->Co, ldk = p->nb * p->T * Co, OWp = 2 * p->TW;
    int64_t rs = OWp * Co, cs = Co;
    for (int64_t ty = 0; ty < p->TH; ty++)
        for (int64_t tx = 0; tx < p->TW; tx++) {
            const float *restrict m = p->M + (s * p->T + ty * p->TW + tx) * Co;
            float *restrict o = yt + (2 * ty * OWp + 2 * tx) * Co;
            int64_t c = 0;
            for (; c + 8 <= Co; c += 8) WINO_OUT_TILE(wino_v8, wino_ld, wino_st);
            for (; c < Co; c++) WINO_OUT_TILE(float, WINO_LDS, WINO_STS);
        }
    /* [OH][OWp][Co] -> [Co][OH][OW]: all rows at once when OW = OWp */
    int64_t OH = q->OH, OW = q->OW, ohw = OH * OW;
    if (OW == OWp)
        wino_transpose(yt, Co, ohw, y, ohw, Co);
    else
        for (int64_t oy = 0; oy < OH; oy++)
            wino_transpose(yt + oy * OWp * Co, Co, OW, y + oy * OW, ohw, Co);
}

static void wino_in_item(void *arg, int64_t s, int w)
{
    const wino_plan *p = arg;
    const lt_wino_conv *q = p->q;
    wino_pack(p, p->x + (p->n0 + s) * q->Ci * q->H * q->W, p->xp[w]);
    wino_in(p, p->xp[w], s);
}

static void wino_gemm_item(void *arg, int64_t k, int w)
{
    (void)w;
    const wino_plan *p = arg;
    int64_t Ci = p->q->Ci, Co = p->q->Co, rows = p->nbc * p->T;
    const float *a = p->V + k * p->nb * p->T * Ci, *b = p->U + k * Ci * Co;
    float *c = p->M + k * p->nb * p->T * Co;
    /* the own small-GEMM kernel (sgemm_small.c) at every size here when
     * its 16-column panels fit Co: no beta pass over M (OpenBLAS zeroes C
     * first: a fifth of the CNN conv's time with K = 16) and no packing of
     * A; measured per conv (ms, one thread): 16->32ch 14x14 N32 0.90 ->
     * 0.57, 256ch 4x4 N16 3.00 -> 2.67, 64ch 16x16 N16 2.53 -> 2.39; slower
     * with 16 rows (512ch 2x2 N16: 11.8 -> 15.7, not taken by default) */
    if (Co % 16 == 0 && rows >= WINO_MIN_ROWS)
        lt_sgemm_small(0, 0, rows, Co, Ci, a, Ci, b, Co, 0.0f, c, Co);
    else
        lt_kutil_gemm(LT_F32, 0, 0, rows, Co, Ci, a, Ci, b, Co, 0.0, c, Co);
}

static void wino_out_item(void *arg, int64_t s, int w)
{
    const wino_plan *p = arg;
    const lt_wino_conv *q = p->q;
    wino_out(p, s, p->yt[w], p->out + (p->n0 + s) * q->Co * q->OH * q->OW);
}

/* ---- weight gradient: y = A^T [(G g G^T) . (B^T d B)] A is linear in g,
 * so per tile dg = G^T [(A dy A^T) . (B^T d B)] G, summed over the tiles:
 * V as in the forward, Z = A dy A^T of the output gradient's 2x2 blocks
 * into M ([16][tiles][Co]), 16 GEMMs Acc[k] += Z[k]^T V[k] ([Co x Ci],
 * accumulated over chunks in U's buffer), then G^T Acc G per filter. ---- */

/* A dy A^T (A = [1 0; 1 1; 1 -1; 0 -1]) of the 2x2 block at d (row stride
 * rs, column stride cs) into the 16 matrices at z (stride ldk). */
#define WINO_GY_TILE(T, LD, ST)                                                      \
    do {                                                                             \
        T t[4][2];                                                                   \
        for (int j = 0; j < 2; j++) {                                                \
            T d0 = LD(d + j * cs + c), d1 = LD(d + rs + j * cs + c);                 \
            t[0][j] = d0;                                                            \
            t[1][j] = d0 + d1;                                                       \
            t[2][j] = d0 - d1;                                                       \
            t[3][j] = -d1;                                                           \
        }                                                                            \
        for (int i = 0; i < 4; i++) {                                                \
            ST(z + (i * 4 + 0) * ldk + c, t[i][0]);                                  \
            ST(z + (i * 4 + 1) * ldk + c, t[i][0] + t[i][1]);                        \
            ST(z + (i * 4 + 2) * ldk + c, t[i][0] - t[i][1]);                        \
            ST(z + (i * 4 + 3) * ldk + c, -t[i][1]);                                 \
        }                                                                            \
    } while (0)

/* Z rows of sample s of the chunk from its output gradient gy [Co][OH][OW]:
 * transposed into the channel-last yt [2*TH][2*TW][Co] (a missing last
 * row / column of an odd size is zero), then A dy A^T per tile. */
static void wino_gy(const wino_plan *p, int64_t s, float *restrict yt, const float *gy)
{
    const lt_wino_conv *q = p->q;
    int64_t Co = q->Co, OH = q->OH, OW = q->OW, ohw = OH * OW, OWp = 2 * p->TW;
    if (OW == OWp) {
        wino_transpose(gy, ohw, Co, yt, Co, ohw);
    } else {
        for (int64_t oy = 0; oy < OH; oy++) {
            wino_transpose(gy + oy * OW, ohw, Co, yt + oy * OWp * Co, Co, OW);
            memset(yt + (oy * OWp + OW) * Co, 0, (size_t)Co * sizeof(float));
        }
    }
    if (OH < 2 * p->TH) memset(yt + OH * OWp * Co, 0, (size_t)(OWp * Co) * sizeof(float));
    int64_t ldk = p->nb * p->T * Co, rs = OWp * Co, cs = Co;
    for (int64_t ty = 0; ty < p->TH; ty++)
        for (int64_t tx = 0; tx < p->TW; tx++) {
            const float *restrict d = yt + (2 * ty * OWp + 2 * tx) * Co;
            float *restrict z = p->M + (s * p->T + ty * p->TW + tx) * Co;
            int64_t c = 0;
            for (; c + 8 <= Co; c += 8) WINO_GY_TILE(wino_v8, wino_ld, wino_st);
            for (; c < Co; c++) WINO_GY_TILE(float, WINO_LDS, WINO_STS);
        }
}

static void wino_bw_in_item(void *arg, int64_t s, int w)
{
    const wino_plan *p = arg;
    const lt_wino_conv *q = p->q;
    wino_pack(p, p->x + (p->n0 + s) * q->Ci * q->H * q->W, p->xp[w]);
    wino_in(p, p->xp[w], s);
    wino_gy(p, s, p->yt[w], p->gy + (p->n0 + s) * q->Co * q->OH * q->OW);
}

static void wino_bw_gemm_item(void *arg, int64_t k, int w)
{
    (void)w;
    const wino_plan *p = arg;
    int64_t Ci = p->q->Ci, Co = p->q->Co, rows = p->nbc * p->T;
    lt_kutil_gemm(LT_F32, 1, 0, Co, Ci, rows, p->M + k * p->nb * p->T * Co, Co,
                  p->V + k * p->nb * p->T * Ci, Ci, p->n0 ? 1.0 : 0.0, p->U + k * Ci * Co, Ci);
}

/* G^T m G (G^T = [1 .5 .5 0; 0 .5 -.5 0; 0 .5 .5 1]) of the 16 values at
 * m (stride ld) into r[3][3]. */
#define WINO_DW_TILE(T, LD)                                                          \
    do {                                                                             \
        T t[3][4];                                                                   \
        for (int l = 0; l < 4; l++) {                                                \
            T m0 = LD(m + l * ld), m1 = LD(m + (4 + l) * ld);                        \
            T m2 = LD(m + (8 + l) * ld), m3 = LD(m + (12 + l) * ld);                 \
            t[0][l] = m0 + 0.5f * (m1 + m2);                                         \
            t[1][l] = 0.5f * (m1 - m2);                                              \
            t[2][l] = 0.5f * (m1 + m2) + m3;                                         \
        }                                                                            \
        for (int a = 0; a < 3; a++) {                                                \
            r[a][0] = t[a][0] + 0.5f * (t[a][1] + t[a][2]);                          \
            r[a][1] = 0.5f * (t[a][1] - t[a][2]);                                    \
            r[a][2] = 0.5f * (t[a][1] + t[a][2]) + t[a][3];                          \
        }                                                                            \
    } while (0)

/* dw[co][ci][3][3] for output channels [o0, o1) from Acc (U's buffer),
 * vectorised over 8 input channels (whose 72 taps are contiguous in dw). */
static void wino_dw(const wino_plan *p, int64_t o0, int64_t o1)
{
    int64_t Ci = p->q->Ci, Co = p->q->Co, ld = Ci * Co;
    for (int64_t o = o0; o < o1; o++) {
        float *dw = p->out + o * Ci * 9;
        int64_t c = 0;
        for (; c + 8 <= Ci; c += 8) {
            const float *m = p->U + o * Ci + c;
            wino_v8 r[3][3];
            WINO_DW_TILE(wino_v8, wino_ld);
            float tmp[9][8];
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) wino_st(tmp[a * 3 + b], r[a][b]);
            for (int k = 0; k < 8; k++)
                for (int t = 0; t < 9; t++) dw[(c + k) * 9 + t] = tmp[t][k];
        }
        for (; c < Ci; c++) {
            const float *m = p->U + o * Ci + c;
            float r[3][3];
            WINO_DW_TILE(float, WINO_LDS);
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) dw[c * 9 + a * 3 + b] = r[a][b];
        }
    }
}

static void wino_dw_item(void *arg, int64_t c, int w)
{
    (void)w;
    const wino_plan *p = arg;
    int64_t o1 = (c + 1) * p->per < p->q->Co ? (c + 1) * p->per : p->q->Co;
    wino_dw(p, c * p->per, o1);
}

/* ---- choice ----
 * Measured crossover (one thread, Zen 3, f32, ms im2col -> Winograd,
 * forward / input gradient): the GEMM rows N * tiles decide, as the weight
 * transform and the 16 passes over U ([Ci x Co] each) are paid once per
 * call however few tiles share them:
 *   rows 16  N16 512ch 2x2: 9.1 -> 13.4 / 9.4 -> 18.4;
 *            N4 512ch 4x4: 8.8 -> 16.6 / 5.9 -> 16.9              lose
 *   rows 32  N8 256ch 4x4: 2.17 -> 2.47 / 2.36 -> 2.25;
 *            N32 256ch 2x2: 2.80 -> 2.06 / 3.07 -> 2.06            even / win
 *   rows 64+ N16 256ch 4x4: 4.4 -> 2.7; N16 128ch 8x8: 4.1 -> 2.2;
 *            N16 64ch 16x16: 4.4 -> 2.4; N32 16->32ch 14x14: 1.09 -> 0.57
 *            (forward and input gradient alike)                     win
 * Channels: 1 input channel (the CNN's first layer, 1->16 at 28x28) is
 * 0.38 -> 0.54 (GEMMs with K = 1: all transform), its input gradient
 * (16 -> 1) 0.46 -> 1.01; 8 -> 8 at 8x8 N16 wins (0.08 -> 0.06).
 * Weight gradient, the same rule: rows 16 (N16 512ch 2x2) 5.2 -> 5.9;
 * rows 32 (N8 256ch 4x4) 2.06 -> 1.45; N16 128ch 8x8 4.0 -> 2.3, N16
 * 256ch 4x4 4.2 -> 2.4, N32 16->32ch 14x14 1.12 -> 0.64; 1 input channel
 * 0.37 -> 0.90. */
int lt_wino_choose(const lt_wino_conv *q)
{
    if (q->OH < 1 || q->OW < 1 || q->ph < 0 || q->pw < 0 || q->N < 1 || q->Ci < 1 || q->Co < 1)
        return 0;
    const char *algo = lt_opt_str(LT_OPT_CONV_ALGO);
    if (strcmp(algo, "winograd") == 0) return 1;
    if (strcmp(algo, "im2col") == 0) return 0;
    int64_t rows = q->N * ((q->OH + 1) / 2) * ((q->OW + 1) / 2);
    return rows >= WINO_MIN_ROWS && q->Ci >= WINO_MIN_CHANNELS && q->Co >= WINO_MIN_CHANNELS;
}

/* Sizes p for q and allocates its scratch (nt workers); 0 on failure
 * (what was allocated is freed by wino_plan_free). */
static int wino_plan_init(wino_plan *p, const lt_wino_conv *q, int nt)
{
    p->q = q;
    p->TH = (q->OH + 1) / 2; p->TW = (q->OW + 1) / 2; p->T = p->TH * p->TW;
    p->PR = 2 * p->TH + 2; p->PC = 2 * p->TW + 2;
    int64_t per = 16 * p->T * (q->Ci + q->Co) * (int64_t)sizeof(float);
    p->nb = (int64_t)WINO_CHUNK_BYTES / per;
    if (p->nb < 1) p->nb = 1;
    if (p->nb > q->N) p->nb = q->N;
    size_t nu = (size_t)(16 * q->Ci * q->Co), nv = (size_t)(16 * p->nb * p->T * q->Ci);
    size_t nm = (size_t)(16 * p->nb * p->T * q->Co);
    size_t nxp = (size_t)(p->PR * p->PC * q->Ci), nyt = (size_t)(4 * p->T * q->Co);
    p->bytes = (nu + nv + nm + (size_t)nt * (nxp + nyt)) * sizeof(float);
    p->nt = nt;
    p->U = malloc(nu * sizeof(float));
    p->V = malloc(nv * sizeof(float));
    p->M = malloc(nm * sizeof(float));
    p->xp = calloc((size_t)nt, sizeof *p->xp);
    p->yt = calloc((size_t)nt, sizeof *p->yt);
    int ok = p->U && p->V && p->M && p->xp && p->yt;
    for (int i = 0; ok && i < nt; i++) {
        p->xp[i] = malloc(nxp * sizeof(float));
        p->yt[i] = malloc(nyt * sizeof(float));
        ok = p->xp[i] && p->yt[i];
    }
    return ok;
}

static void wino_plan_free(wino_plan *p)
{
    for (int i = 0; p->xp && p->yt && i < p->nt; i++) {
        free(p->xp[i]);
        free(p->yt[i]);
    }
    free(p->xp); free(p->yt);
    free(p->U); free(p->V); free(p->M);
}

/* Items of >= 16 channels out of n, ~4 per worker (1 item when small). */
static int64_t wino_per(int64_t n, int64_t work, int nt)
{
    int64_t items = nt > 1 && work >= 4096 ? (int64_t)nt * 4 : 1;
    int64_t per = (n + items - 1) / items;
    if (per < 16) per = n < 16 ? n : 16;
    return per;
}

lt_status lt_wino_run(const lt_wino_conv *q, const float *x, const float *w, float *out,
                      int nt, const lt_kernel_ctx *ctx)
{
    wino_plan p = {0};
    if (nt < 1) nt = 1;
    p.x = x; p.w = w; p.out = out;
    int ok = wino_plan_init(&p, q, nt);
    if (ok) {
        p.per = wino_per(q->Ci, q->Ci * q->Co, nt);
        int64_t items = (q->Ci + p.per - 1) / p.per;
        lt_par_for(ctx, items > 1 ? nt : 1, items, wino_weight_item, &p);
        for (p.n0 = 0; p.n0 < q->N; p.n0 += p.nb) {
            p.nbc = q->N - p.n0 < p.nb ? q->N - p.n0 : p.nb;
            int tw = p.nbc > 1 ? nt : 1;
            lt_par_for(ctx, tw, p.nbc, wino_in_item, &p);
            lt_par_for(ctx, nt, 16, wino_gemm_item, &p);
            lt_par_for(ctx, tw, p.nbc, wino_out_item, &p);
        }
    }
    wino_plan_free(&p);
    if (!ok)
        return lt_set_error(LT_ERR_OOM, "conv2d (winograd): cannot allocate %lld bytes of scratch",
                            (long long)p.bytes);
    return LT_OK;
}

lt_status lt_wino_run_bw(const lt_wino_conv *q, const float *x, const float *gy, float *dw,
                         int nt, const lt_kernel_ctx *ctx)
{
    wino_plan p = {0};
    if (nt < 1) nt = 1;
    p.x = x; p.gy = gy; p.out = dw;
    int ok = !q->flip && wino_plan_init(&p, q, nt);
    if (ok) {
        for (p.n0 = 0; p.n0 < q->N; p.n0 += p.nb) {
            p.nbc = q->N - p.n0 < p.nb ? q->N - p.n0 : p.nb;
            lt_par_for(ctx, p.nbc > 1 ? nt : 1, p.nbc, wino_bw_in_item, &p);
            lt_par_for(ctx, nt, 16, wino_bw_gemm_item, &p);
        }
        p.per = wino_per(q->Co, q->Ci * q->Co, nt);
        int64_t items = (q->Co + p.per - 1) / p.per;
        lt_par_for(ctx, items > 1 ? nt : 1, items, wino_dw_item, &p);
    }
    wino_plan_free(&p);
    if (q->flip)
        return lt_set_error(LT_ERR_INTERNAL, "conv2d_backward_weight (winograd): flipped geometry");
    if (!ok)
        return lt_set_error(LT_ERR_OOM, "conv2d_backward_weight (winograd): cannot allocate %lld "
                            "bytes of scratch", (long long)p.bytes);
    return LT_OK;
}
