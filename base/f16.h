/*
 * base/f16.h — the one bit-level implementation of bf16 <-> float and IEEE
 * half <-> float (round to nearest even, NaN stays a quiet NaN), inline so
 * the kernels' loops vectorise them. Used by base/dtype.c (the public
 * lt_f32_to_bf16 & co), the kernels (lazy/kernels) and the collectives'
 * reductions (spawn/reduce.c). Written without _Float16 so every compiler of
 * the project (gcc, clang 14 for fuzzing) builds the same code.
 */
#ifndef LT_F16_H
#define LT_F16_H

#include <stdint.h>
#include <string.h>

/* bf16 of the float whose bits are u: round to nearest even; a NaN keeps its
 * sign and top payload bits and is made quiet. Branch-free (a select), so
 * loops over it vectorise. */
static inline uint16_t lt_bf16_from_f32_bits(uint32_t u)
{
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t qnan = (u >> 16) | 0x40u;
    return (uint16_t)(nan ? qnan : rne);
}

/* bf16 of f, round to nearest even (lt_bf16_from_f32_bits). */
static inline uint16_t lt_bf16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return lt_bf16_from_f32_bits(u);
}

/* The float of a bf16 (exact). */
static inline float lt_bf16_to_f32_inline(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half of the float whose bits are u, round to nearest even. */
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

/* IEEE half of f, round to nearest even. */
static inline uint16_t lt_f16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return lt_f16_from_f32_bits(u);
}

/* The float of an IEEE half (exact). */
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
