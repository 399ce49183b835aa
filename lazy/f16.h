/*
 * lazy/f16.h — IEEE half <-> float conversions (bit level, round to nearest
 * even, NaN stays a quiet NaN), shared by lazy/dtype.c and the kernels.
 * Written without _Float16 so every compiler of the project (gcc, clang 14
 * for fuzzing) builds the same code.
 */
#ifndef LT_F16_H
#define LT_F16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t lt_f16_from_f32_bits(uint32_t u)
{
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x47800000u)               /* |f| >= 65536, inf or NaN */
        return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a < 0x38800000u) {              /* below 2^-14: subnormal half or 0 */
        /* adding 0.5f puts the 10 kept bits at the bottom of the mantissa,
         * rounded to nearest even by the float addition itself */
        float f, half = 0.5f;
        memcpy(&f, &a, 4);
        f += half;
        uint32_t r;
        memcpy(&r, &f, 4);
        return (uint16_t)(sign | (r - 0x3f000000u));
    }
    uint32_t odd = (a >> 13) & 1u;
    a += 0xc8000fffu + odd;             /* rebias (-112 << 23), round */
    return (uint16_t)(sign | (a >> 13));
}

static inline uint16_t lt_f16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return lt_f16_from_f32_bits(u);
}

static inline float lt_f16_to_f32_inline(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t u;
    float f;
    if (em >= 0x7c00u) {
        u = 0x7f800000u | ((em & 0x3ffu) << 13);
    } else if (em >= 0x0400u) {
        u = (em << 13) + 0x38000000u;   /* rebias (+112 << 23) */
    } else {                            /* subnormal: em * 2^-24 */
        f = (float)em * 5.9604644775390625e-8f;
        memcpy(&u, &f, 4);
    }
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
}

#endif
