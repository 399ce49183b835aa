/*
 * lazy/kernels/vmath.h — vectorisable f32 transcendentals (exp, log,
 * log1p, tanh, erf) shared by the fused interpreter and the library
 * kernels.
 *
 * Each function is branch-free straight-line arithmetic (selects, bit
 * casts, FMAs, one division at most), so GCC vectorises loops that call it
 * without -ffast-math and without libmvec; it inlines into the caller's loop.
 * Keep every arithmetic operation unconditional and select only finished
 * values: GCC will not if-convert a conditional FP operation (it may trap
 * under the default -ftrapping-math), and the loop then stays scalar.
 * No errno, no global state.
 *
 * Accuracy, max error vs the double libm rounded to f32, measured over
 * every 7th f32 bit pattern (~6e8 inputs): exp 0.94 ulp, log 1.18 ulp,
 * log1p 2.81 ulp, tanh 1.37 ulp, erf 2.41 ulp (tests/c/test_fused.c
 * test_vmath_accuracy checks a sparser sweep against 2/2/4/3/4 ulp).
 * Special values follow C99/PyTorch: exp(-inf) = 0, exp(+inf) = +inf,
 * overflow -> +inf, underflow -> subnormal/0; log(0) = -inf, log(<0) = NaN,
 * log(+inf) = +inf, subnormal inputs handled; log1p(-1) = -inf,
 * log1p(< -1) = NaN, log1p(tiny) = tiny; tanh(+-inf) = +-1,
 * tanh(-0) = -0; erf(+-inf) = +-1; NaN propagates through all of them.
 *
 * Polynomial coefficients are least-squares/minimax fits computed in
 * double precision (iteratively reweighted towards equal ripple) on the
 * reduced intervals given with each function; exp uses its Taylor series.
 */
#ifndef LT_VMATH_H
#define LT_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float lt_vm_bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t lt_vm_f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* c ? a : b as a bit blend: GCC cannot turn it back into a branch (a
 * plain ?: on a value computed above may be sunk into a branch by the
 * optimizer, and the loop then stays scalar). */
static inline float lt_vm_sel(int c, float a, float b)
{
    uint32_t m = (uint32_t)0 - (uint32_t)(c != 0);
    return lt_vm_bits_f((lt_vm_f_bits(a) & m) | (lt_vm_f_bits(b) & ~m));
}

/* exp(r) for |r| <= ln2/2 as its degree-7 Taylor polynomial (Horner):
 * the core of lt_vexpf and lt_vphif. */
static inline float lt_vm_exp_poly(float r)
{
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    return p * r + 1.0f;
}

/* exp(x). x = n*ln2 + r with |r| <= ln2/2 (ln2 split in an exact 8-bit
 * high part and a low part), e^r by its degree-7 Taylor polynomial
 * (truncation < 6e-9 relative), then * 2^n as two factors 2^(n/2) so the
 * whole range [-104, 89] (subnormal results and overflow to inf) needs no
 * branch. */
static inline float lt_vexpf(float x)
{
    float xc = lt_vm_sel(x < -104.0f, -104.0f, x);
    xc = lt_vm_sel(xc > 89.0f, 89.0f, xc);
    xc = lt_vm_sel(x != x, 0.0f, xc);     /* NaN: no float->int of NaN below (UB) */
    float n = __builtin_rintf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = lt_vm_exp_poly(r);
    int32_t ni = (int32_t)n;
    int32_t n1 = ni >> 1, n2 = ni - n1;          /* n1, n2 in [-75, 64] */
    float s1 = lt_vm_bits_f((uint32_t)(n1 + 127) << 23);
    float s2 = lt_vm_bits_f((uint32_t)(n2 + 127) << 23);
    float y = (p * s1) * s2;
    return lt_vm_sel(x != x, x, y);
}

/* log(x). x = 2^e * m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by
 * 2^23 first), f = m - 1 (exact), s = f / (2 + f), log(m) = 2 atanh(s) =
 * 2s + s^3 P(s^2) with |s| <= 0.1716 (series to s^9, truncation < 2e-9),
 * plus e*ln2 with ln2 split hi/lo. */
static inline float lt_vlogf(float x)
{
    /* subnormal (or <= 0, fixed below): scale by 2^23; blended with a bit
     * mask, since a branch here is duplicated by jump threading and the
     * loop then stays scalar */
    uint32_t sub = (uint32_t)0 - (uint32_t)(x < 1.17549435e-38f);
    uint32_t xb = (lt_vm_f_bits(x * 8388608.0f) & sub) |
                  (lt_vm_f_bits(x) & ~sub);
    uint32_t u = xb - 0x3f3504f3u;                /* bits of sqrt(1/2) */
    int32_t e = ((int32_t)u >> 23) - (int32_t)(sub & 23u);
    float m = lt_vm_bits_f((u & 0x007fffffu) + 0x3f3504f3u);
    float ef = (float)e;
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float p = 2.0f / 9;
    p = p * z + 2.0f / 7;
    p = p * z + 2.0f / 5;
    p = p * z + 2.0f / 3;
    /* 2s = f - s*f exactly in real arithmetic; f - s*f keeps the leading
     * term exact-ish (|s*f| small) */
    float hi = f - s * f;
    float y = ef * 0.693359375f + ((hi + s * z * p) - ef * 2.12194440e-4f);
    float sp = lt_vm_sel(x == 0.0f, -INFINITY, x);   /* inf, NaN: x */
    sp = lt_vm_sel(x < 0.0f, NAN, sp);
    return lt_vm_sel((x > 0.0f) & (x < INFINITY), y, sp);
}

/* log1p(x) = log(1 + x) without losing small x: with u = 1 + x rounded,
 * log1p(x) = log(u) * x / (u - 1) (the rounding of u cancels to first
 * order); u == 1 gives x itself, x = +inf gives +inf. */
static inline float lt_vlog1pf(float x)
{
    float u = 1.0f + x;
    float d = u - 1.0f;
    float ds = lt_vm_sel(d == 0.0f, 1.0f, d);      /* keep the division finite */
    float y = lt_vlogf(u) * (x / ds);
    y = lt_vm_sel(d == 0.0f, x, y);
    y = lt_vm_sel(x == INFINITY, x, y);
    return lt_vm_sel(x != x, x, y);
}

/* tanh(x). |x| < 0.625: x + x^3 P(x^2) (degree-4 fit, rel. error 4e-9);
 * else sign(x) (1 - 2 / (e^{2|x|} + 1)), which is 1 once e^{2|x|}
 * overflows. */
static inline float lt_vtanhf(float x)
{
    float ax = fabsf(x);
    float t = x * x;
    float p = -0.00571697713829652f;
    p = p * t + 0.02065052092920101f;
    p = p * t + -0.053743475485625775f;
    p = p * t + 0.13331490978037427f;
    p = p * t + -0.33333283911637224f;
    float small = copysignf(x + x * t * p, x);   /* keeps tanh(-0) = -0 */
    float e = lt_vexpf(2.0f * ax);
    float big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
    return lt_vm_sel(ax < 0.625f, small, big);     /* NaN: big is NaN */
}

/* erf(x). |x| < 1: x P(x^2) (degree-6 fit, rel. error 1e-9); 1 <= |x| <
 * 3.92: 1 - e^{-x^2} Q(1/|x|) where Q fits erfc(x) e^{x^2} (degree 6,
 * absolute erf error 4e-9); beyond, +-1. */
static inline float lt_verff(float x)
{
    float ax = fabsf(x);
    float t = x * x;
    float p = 7.889093411445407e-05f;
    p = p * t + -0.0008020833460113614f;
    p = p * t + 0.00518953446189413f;
    p = p * t + -0.02685444413840252f;
    p = p * t + 0.11283600165672564f;
    p = p * t + -0.37612627135063614f;
    p = p * t + 1.1283791659136269f;
    float small = x * p;
    float axc = lt_vm_sel(ax < 1.0f, 1.0f, ax);
    axc = lt_vm_sel(axc > 3.92f, 3.92f, axc);
    float u = 1.0f / axc;
    float q = 0.02537554220265266f;
    q = q * u + -0.1387388530190769f;
    q = q * u + 0.3086313364914909f;
    q = q * u + -0.3099456248139643f;
    q = q * u + -0.033956127146021114f;
    q = q * u + 0.5778791140994943f;
    q = q * u + -0.0016618012077568665f;
    float big = 1.0f - lt_vexpf(-axc * axc) * q;
    big = copysignf(lt_vm_sel(ax >= 3.92f, 1.0f, big), x);
    float y = lt_vm_sel(ax < 1.0f, small, big);
    return lt_vm_sel(x != x, x, y);
}

/* The standard normal CDF for GELU: returns Phi(x) = (1 + erf(x/sqrt2))/2
 * and sets *pdf_e = exp(-x^2/2) (the density without 1/sqrt(2 pi)), both
 * from one exponential: with z = |x|/sqrt2, erfc(z) = exp(-z^2) R(z), R
 * (the scaled erfc) fitted as t P(t), t = 1/(1 + z/2), degree 8 (relative
 * error 4e-8 over z in [0, 10], 3e-7 evaluated in f32); Phi = erfc(z)/2
 * for x < 0, 1 - erfc(z)/2 else. exp(-z^2) is taken of the exactly
 * split z^2 = hi + lo as exp(-hi) (1 - lo), so the tail keeps its relative
 * accuracy (~1e-6 at x = -12, where (1 + erf) in f32 has none); below
 * exp(-87.3) it is 0. About half the work of 1 + lt_verff(x/sqrt2) (one
 * polynomial, one division, a range-limited exp, no clamps for huge
 * arguments). x = +-inf: Phi = 1 / 0, pdf 0; NaN propagates to Phi
 * (through t). */
static inline float lt_vphif(float x, float *pdf_e)
{
    float q = x * x;
    float ql = __builtin_fmaf(x, x, -q);         /* x^2 = q + ql exactly */
    float hi = 0.5f * q, lo = 0.5f * ql;
    float z = fabsf(x) * 0.70710678118654752f;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = -5.906780437e-02f;
    p = p * t + 2.845701277e-01f;
    p = p * t + -4.871914685e-01f;
    p = p * t + 2.780592442e-01f;
    p = p * t + -2.662133239e-02f;
    p = p * t + 2.026854753e-01f;
    p = p * t + 2.431040108e-01f;
    p = p * t + 2.823752761e-01f;
    p = p * t + 2.820864320e-01f;
    float r = p * t;
    /* exp(-hi), hi in [0, 87.3] (larger: selected to 0 below) */
    float hc = lt_vm_sel(hi < 87.3f, hi, 87.3f);
    float n = __builtin_rintf(hc * -1.44269504088896341f);
    float f = __builtin_fmaf(n, -0.693359375f, -hc);
    f = __builtin_fmaf(n, 2.12194440e-4f, f);
    float e = lt_vm_exp_poly(f);
    float sc = lt_vm_bits_f((uint32_t)((int32_t)n + 127) << 23);
    float ex = e * sc;
    ex = ex - ex * lo;
    ex = lt_vm_sel(hi < 87.3f, ex, 0.0f);
    *pdf_e = ex;
    float h = 0.5f * ex * r;                     /* erfc(z) / 2 */
    return lt_vm_sel(x < 0.0f, h, 1.0f - h);    /* NaN: 1 - NaN */
}

#endif
