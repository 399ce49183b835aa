/*
 * spawn/reduce.c — element-wise reductions across shared-memory slots.
 * Works in cache-sized blocks: the accumulator block stays in L1 while each
 * source block streams through once.
 */
#pragma GCC optimize("O3")
#include <string.h>
#include "f16.h"      /* base/ */
#include "reduce.h"

#define BLK 2048

/* ---- floating point: acc op= src over m elements ---- */
#define FLOAT_COMBINE(T, acc, src, m, reduce)                                 \
    do {                                                                      \
        switch (reduce) {                                                     \
        case LT_REDUCE_SUM:                                                   \
            for (int64_t i = 0; i < (m); i++) acc[i] += src[i];               \
            break;                                                            \
        case LT_REDUCE_MUL:                                                   \
            for (int64_t i = 0; i < (m); i++) acc[i] *= src[i];               \
            break;                                                            \
        case LT_REDUCE_MIN:                                                   \
            for (int64_t i = 0; i < (m); i++) {                               \
                T a = acc[i], b = src[i];                                     \
                acc[i] = (a != a || a < b) ? a : b;                           \
            }                                                                 \
            break;                                                            \
        case LT_REDUCE_MAX:                                                   \
            for (int64_t i = 0; i < (m); i++) {                               \
                T a = acc[i], b = src[i];                                     \
                acc[i] = (a != a || a > b) ? a : b;                           \
            }                                                                 \
            break;                                                            \
        case LT_REDUCE_AND:                                                   \
            for (int64_t i = 0; i < (m); i++)                                 \
                acc[i] = (T)(acc[i] != 0 && src[i] != 0);                     \
            break;                                                            \
        default:                                                              \
            for (int64_t i = 0; i < (m); i++)                                 \
                acc[i] = (T)(acc[i] != 0 || src[i] != 0);                     \
            break;                                                            \
        }                                                                     \
    } while (0)

/* Logical and/or of floats start from 0/1 so a single rank's value is
 * normalised too. */
#define FLOAT_NORMALISE(T, acc, m, reduce)                                    \
    do {                                                                      \
        if ((reduce) == LT_REDUCE_AND || (reduce) == LT_REDUCE_OR)            \
            for (int64_t i = 0; i < (m); i++) acc[i] = (T)(acc[i] != 0);      \
    } while (0)

static void reduce_f32(float *dst, const void *const *srcs, int nsrc,
                       int64_t n, int reduce, double scale)
{
    float sc = (float)scale;
    for (int64_t b0 = 0; b0 < n; b0 += BLK) {
        int64_t m = n - b0 < BLK ? n - b0 : BLK;
        float *acc = dst + b0;
        const float *s0 = (const float *)srcs[0] + b0;
        if (acc != s0) memcpy(acc, s0, (size_t)m * 4);
        FLOAT_NORMALISE(float, acc, m, reduce);
        for (int k = 1; k < nsrc; k++) {
            const float *src = (const float *)srcs[k] + b0;
            FLOAT_COMBINE(float, acc, src, m, reduce);
        }
        if (scale != 1.0)
            for (int64_t i = 0; i < m; i++) acc[i] *= sc;
    }
}

static void reduce_f64(double *dst, const void *const *srcs, int nsrc,
                       int64_t n, int reduce, double scale)
{
    for (int64_t b0 = 0; b0 < n; b0 += BLK) {
        int64_t m = n - b0 < BLK ? n - b0 : BLK;
        double *acc = dst + b0;
        const double *s0 = (const double *)srcs[0] + b0;
        if (acc != s0) memcpy(acc, s0, (size_t)m * 8);
        FLOAT_NORMALISE(double, acc, m, reduce);
        for (int k = 1; k < nsrc; k++) {
            const double *src = (const double *)srcs[k] + b0;
            FLOAT_COMBINE(double, acc, src, m, reduce);
        }
        if (scale != 1.0)
            for (int64_t i = 0; i < m; i++) acc[i] *= scale;
    }
}

static void reduce_bf16(uint16_t *dst, const void *const *srcs, int nsrc,
                        int64_t n, int reduce, double scale)
{
    float acc[BLK], tmp[BLK];
    float sc = (float)scale;
    for (int64_t b0 = 0; b0 < n; b0 += BLK) {
        int64_t m = n - b0 < BLK ? n - b0 : BLK;
        const uint16_t *s0 = (const uint16_t *)srcs[0] + b0;
        for (int64_t i = 0; i < m; i++) acc[i] = lt_bf16_to_f32_inline(s0[i]);
        FLOAT_NORMALISE(float, acc, m, reduce);
        for (int k = 1; k < nsrc; k++) {
            const uint16_t *sk = (const uint16_t *)srcs[k] + b0;
            for (int64_t i = 0; i < m; i++) tmp[i] = lt_bf16_to_f32_inline(sk[i]);
            const float *src = tmp;
            FLOAT_COMBINE(float, acc, src, m, reduce);
        }
        if (scale != 1.0)
            for (int64_t i = 0; i < m; i++) acc[i] *= sc;
        for (int64_t i = 0; i < m; i++) dst[b0 + i] = lt_bf16_from_f32(acc[i]);
    }
}

/* v * scale truncated toward zero into a `bytes`-wide integer, saturating
 * (NaN -> 0): a plain cast of an out-of-range double is undefined. */
static inline int64_t sat_scaled(int64_t v, double scale, int bytes)
{
    double d = (double)v * scale;
    if (d != d) return 0;
    double hi = bytes == 4 ? 2147483647.0 : 9.2233720368547758e18;
    double lo = bytes == 4 ? -2147483648.0 : -9.2233720368547758e18;
    if (d >= hi) return bytes == 4 ? INT32_MAX : INT64_MAX;
    if (d <= lo) return bytes == 4 ? INT32_MIN : INT64_MIN;
    return (int64_t)d;
}

/* ---- integers (U = unsigned twin for wrapping arithmetic) ---- */
#define INT_REDUCE_FN(NAME, T, U)                                             \
    static void NAME(T *dst, const void *const *srcs, int nsrc, int64_t n,    \
                     int reduce, double scale)                                \
    {                                                                         \
        for (int64_t b0 = 0; b0 < n; b0 += BLK) {                             \
            int64_t m = n - b0 < BLK ? n - b0 : BLK;                          \
            T *acc = dst + b0;                                                \
            const T *s0 = (const T *)srcs[0] + b0;                            \
            if (acc != s0) memcpy(acc, s0, (size_t)m * sizeof(T));            \
            for (int k = 1; k < nsrc; k++) {                                  \
                const T *src = (const T *)srcs[k] + b0;                       \
                switch (reduce) {                                             \
                case LT_REDUCE_SUM:                                           \
                    for (int64_t i = 0; i < m; i++)                           \
                        acc[i] = (T)((U)acc[i] + (U)src[i]);                  \
                    break;                                                    \
                case LT_REDUCE_MUL:                                           \
                    for (int64_t i = 0; i < m; i++)                           \
                        acc[i] = (T)((U)acc[i] * (U)src[i]);                  \
                    break;                                                    \
                case LT_REDUCE_MIN:                                           \
                    for (int64_t i = 0; i < m; i++)                           \
                        acc[i] = src[i] < acc[i] ? src[i] : acc[i];           \
                    break;                                                    \
                case LT_REDUCE_MAX:                                           \
                    for (int64_t i = 0; i < m; i++)                           \
                        acc[i] = src[i] > acc[i] ? src[i] : acc[i];           \
                    break;                                                    \
                case LT_REDUCE_AND:                                           \
                    for (int64_t i = 0; i < m; i++) acc[i] &= src[i];         \
                    break;                                                    \
                default:                                                      \
                    for (int64_t i = 0; i < m; i++) acc[i] |= src[i];         \
                    break;                                                    \
                }                                                             \
            }                                                                 \
            if (scale != 1.0)                                                 \
                for (int64_t i = 0; i < m; i++)                               \
                    acc[i] = (T)sat_scaled(acc[i], scale, (int)sizeof(T));     \
        }                                                                     \
    }

INT_REDUCE_FN(reduce_i64, int64_t, uint64_t)
INT_REDUCE_FN(reduce_i32, int32_t, uint32_t)

static void reduce_bool(uint8_t *dst, const void *const *srcs, int nsrc,
                        int64_t n, int reduce)
{
    int is_and = reduce == LT_REDUCE_MUL || reduce == LT_REDUCE_MIN ||
                 reduce == LT_REDUCE_AND;
    for (int64_t b0 = 0; b0 < n; b0 += BLK) {
        int64_t m = n - b0 < BLK ? n - b0 : BLK;
        uint8_t *acc = dst + b0;
        const uint8_t *s0 = (const uint8_t *)srcs[0] + b0;
        for (int64_t i = 0; i < m; i++) acc[i] = s0[i] != 0;
        for (int k = 1; k < nsrc; k++) {
            const uint8_t *src = (const uint8_t *)srcs[k] + b0;
            if (is_and)
                for (int64_t i = 0; i < m; i++) acc[i] &= src[i] != 0;
            else
                for (int64_t i = 0; i < m; i++) acc[i] |= src[i] != 0;
        }
    }
}

lt_status lt_reduce_slots(void *dst, const void *const *srcs, int nsrc,
                          int64_t n, lt_dtype dt, int reduce, double scale)
{
    if (reduce < LT_REDUCE_SUM || reduce > LT_REDUCE_OR || nsrc < 1)
        return LT_ERR_ARG;
    switch (dt) {
    case LT_F32: reduce_f32(dst, srcs, nsrc, n, reduce, scale); break;
    case LT_F64: reduce_f64(dst, srcs, nsrc, n, reduce, scale); break;
    case LT_BF16: reduce_bf16(dst, srcs, nsrc, n, reduce, scale); break;
    case LT_I64: reduce_i64(dst, srcs, nsrc, n, reduce, scale); break;
    case LT_I32: reduce_i32(dst, srcs, nsrc, n, reduce, scale); break;
    case LT_BOOL: reduce_bool(dst, srcs, nsrc, n, reduce); break;
    default: return LT_ERR_ARG;
    }
    return LT_OK;
}

void lt_reduce_scale(void *buf, int64_t n, lt_dtype dt, double scale)
{
    if (scale == 1.0 || dt == LT_BOOL) return;
    const void *src[1] = { buf };
    lt_reduce_slots(buf, src, 1, n, dt, LT_REDUCE_SUM, scale);
}

/* ------------------------------------------------------- two-level (hosts) */

lt_dtype lt_reduce_acc_dtype(lt_dtype dt)
{
    return dt == LT_BF16 ? LT_F32 : dt;
}

lt_status lt_reduce_partial(void *dst, const void *const *srcs, int nsrc,
                            int64_t n, lt_dtype dt, int reduce)
{
    if (dt != LT_BF16)
        return lt_reduce_slots(dst, srcs, nsrc, n, dt, reduce, 1.0);
    if (reduce < LT_REDUCE_SUM || reduce > LT_REDUCE_OR || nsrc < 1)
        return LT_ERR_ARG;
    float tmp[BLK];
    for (int64_t b0 = 0; b0 < n; b0 += BLK) {
        int64_t m = n - b0 < BLK ? n - b0 : BLK;
        float *acc = (float *)dst + b0;
        const uint16_t *s0 = (const uint16_t *)srcs[0] + b0;
        for (int64_t i = 0; i < m; i++) acc[i] = lt_bf16_to_f32_inline(s0[i]);
        FLOAT_NORMALISE(float, acc, m, reduce);
        for (int k = 1; k < nsrc; k++) {
            const uint16_t *sk = (const uint16_t *)srcs[k] + b0;
            for (int64_t i = 0; i < m; i++) tmp[i] = lt_bf16_to_f32_inline(sk[i]);
            const float *src = tmp;
            FLOAT_COMBINE(float, acc, src, m, reduce);
        }
    }
    return LT_OK;
}

lt_status lt_reduce_finish(void *dst, const void *const *srcs, int nsrc,
                           int64_t n, lt_dtype dt, int reduce, double scale)
{
    if (dt != LT_BF16)
        return lt_reduce_slots(dst, srcs, nsrc, n, dt, reduce, scale);
    if (reduce < LT_REDUCE_SUM || reduce > LT_REDUCE_OR || nsrc < 1)
        return LT_ERR_ARG;
    float acc[BLK];
    float sc = (float)scale;
    for (int64_t b0 = 0; b0 < n; b0 += BLK) {
        int64_t m = n - b0 < BLK ? n - b0 : BLK;
        memcpy(acc, (const float *)srcs[0] + b0, (size_t)m * 4);
        FLOAT_NORMALISE(float, acc, m, reduce);
        for (int k = 1; k < nsrc; k++) {
            const float *src = (const float *)srcs[k] + b0;
            FLOAT_COMBINE(float, acc, src, m, reduce);
        }
        if (scale != 1.0)
            for (int64_t i = 0; i < m; i++) acc[i] *= sc;
        for (int64_t i = 0; i < m; i++) ((uint16_t *)dst)[b0 + i] = lt_bf16_from_f32(acc[i]);
    }
    return LT_OK;
}
