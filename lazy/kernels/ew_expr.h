/*
 * lazy/kernels/ew_expr.h — helpers used by the expr column of lazy/ops.def.
 *
 * Each helper works on the three compute types of the fused interpreter
 * (float, double, int64_t) through _Generic on its first argument, with
 * PyTorch semantics: NaN propagates through maximum/minimum/clamp, round is
 * half-to-even, remainder follows Python's sign rule, and integer division
 * or modulo by zero yields 0 instead of trapping.
 */
#ifndef LT_EW_EXPR_H
#define LT_EW_EXPR_H

#include <math.h>
#include <stdint.h>

/* ---- rounding: identity on integers ---- */
#define LT_FLOOR(a) _Generic((a), float: floorf, double: floor, default: lt_ew_id_i)(a)
#define LT_CEIL(a)  _Generic((a), float: ceilf, double: ceil, default: lt_ew_id_i)(a)
#define LT_ROUND(a) _Generic((a), float: rintf, double: rint, default: lt_ew_id_i)(a)
#define LT_TRUNC(a) _Generic((a), float: truncf, double: trunc, default: lt_ew_id_i)(a)
static inline int64_t lt_ew_id_i(int64_t a) { return a; }

/* ---- maximum / minimum / clamp: NaN propagates ---- */
#define LT_MAXIMUM(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : ((a) > (b) ? (a) : (b)))
#define LT_MINIMUM(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : ((a) < (b) ? (a) : (b)))
#define LT_CLAMP(x, lo, hi) LT_MINIMUM(LT_MAXIMUM(x, lo), hi)

/* ---- bitwise, on the values as int64 (T is the compute type) ---- */
#define LT_BITAND(a, b) ((T)((int64_t)(a) & (int64_t)(b)))
#define LT_BITOR(a, b)  ((T)((int64_t)(a) | (int64_t)(b)))
#define LT_BITXOR(a, b) ((T)((int64_t)(a) ^ (int64_t)(b)))
#define LT_BITNOT(a)    ((T)(~(int64_t)(a)))

/* ---- pow ---- */
static inline int64_t lt_ew_pow_i(int64_t a, int64_t b)
{
    if (b < 0)   /* PyTorch errors; we give the integer-valued limit */
        return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    int64_t r = 1;
    uint64_t e = (uint64_t)b;
    uint64_t base = (uint64_t)a;   /* unsigned: wraparound, no UB */
    uint64_t acc = 1;
    while (e) {
        if (e & 1)
            acc *= base;
        base *= base;
        e >>= 1;
    }
    r = (int64_t)acc;
    return r;
}
#define LT_POW(a, b) _Generic((a), float: powf, double: pow, default: lt_ew_pow_i)(a, b)

/* ---- fmod (sign of the dividend) ---- */
static inline int64_t lt_ew_fmod_i(int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    return a % b;
}
#define LT_FMOD(a, b) _Generic((a), float: fmodf, double: fmod, default: lt_ew_fmod_i)(a, b)

/* ---- remainder (sign of the divisor, Python %) ---- */
static inline float lt_ew_rem_f(float a, float b)
{
    float r = fmodf(a, b);
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}
static inline double lt_ew_rem_d(double a, double b)
{
    double r = fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}
static inline int64_t lt_ew_rem_i(int64_t a, int64_t b)
{
    if (b == 0 || b == -1)
        return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}
#define LT_REMAINDER(a, b) _Generic((a), float: lt_ew_rem_f, double: lt_ew_rem_d, default: lt_ew_rem_i)(a, b)

/* ---- floor division ---- */
static inline double lt_ew_floordiv_d(double a, double b)
{
    if (b == 0)
        return a / b;
    double m = fmod(a, b);
    double q = (a - m) / b;          /* exact-ish integer quotient */
    if (m != 0 && ((m < 0) != (b < 0)))
        q -= 1;
    double f = floor(q);
    if (q - f > 0.5)                 /* guard against (a - m) / b rounding */
        f += 1;
    return f == 0 ? copysign(0.0, a / b) : f;
}
static inline float lt_ew_floordiv_f(float a, float b)
{
    if (b == 0)
        return a / b;
    float m = fmodf(a, b);
    float q = (a - m) / b;
    if (m != 0 && ((m < 0) != (b < 0)))
        q -= 1;
    float f = floorf(q);
    if (q - f > 0.5f)
        f += 1;
    return f == 0 ? copysignf(0.0f, a / b) : f;
}
static inline int64_t lt_ew_floordiv_i(int64_t a, int64_t b)
{
    if (b == 0)
        return 0;
    if (b == -1)
        return (int64_t)(0 - (uint64_t)a);
    int64_t q = a / b, r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        q -= 1;
    return q;
}
#define LT_FLOORDIV(a, b) _Generic((a), float: lt_ew_floordiv_f, double: lt_ew_floordiv_d, default: lt_ew_floordiv_i)(a, b)

/* ---- erfinv: |y| > 1 -> NaN, +-1 -> +-inf ----
 * Winitzki's closed form (relative error ~2e-3) refined by Newton steps on
 * erf(x) = y in double, on erfc(x) = 1 - y past 0.5 (1 - y is exact there,
 * so the tail keeps its digits): 4 steps take the guess to double precision.
 * float rounds the double result once. */
static inline double lt_ew_erfinv_d(double y)
{
    double ay = fabs(y);
    if (!(ay <= 1)) return NAN;
    if (ay == 1) return copysign(INFINITY, y);
    if (ay == 0) return y;
    const double a = 0.147, k = 1.1283791670955126;   /* 2 / sqrt(pi) */
    double l = log1p(-ay * ay), t = 2 / (3.14159265358979323846 * a) + l / 2;
    double x = sqrt(sqrt(t * t - l / a) - t);
    double q = 1 - ay;
    for (int i = 0; i < 4; i++) {
        double e = exp(-x * x);
        if (e == 0) break;
        x = ay > 0.5 ? x + (erfc(x) - q) / (k * e) : x - (erf(x) - ay) / (k * e);
    }
    return copysign(x, y);
}
static inline float lt_ew_erfinv_f(float y) { return (float)lt_ew_erfinv_d(y); }
#define LT_ERFINV(a) _Generic((a), float: lt_ew_erfinv_f, default: lt_ew_erfinv_d)(a)

#endif
