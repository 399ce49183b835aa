/*
 * lazy/dtype.c — dtypes (sizes, names, PyTorch promotion), bf16 rounding,
 * element conversion and lt_shape helpers.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "lazytpu.h"
#include "f16.h"

/* ------------------------------------------------------------------ dtypes */

size_t lt_dtype_size(lt_dtype dt)
{
    switch (dt) {
    case LT_F32: case LT_I32: case LT_U32: case LT_C32: return 4;
    case LT_BF16: case LT_F16: case LT_I16: case LT_U16: return 2;
    case LT_F64: case LT_I64: case LT_U64: case LT_C64: return 8;
    case LT_C128: return 16;
    case LT_BOOL: case LT_U8: case LT_I8: return 1;
    default: return 0;
    }
}

const char *lt_dtype_name(lt_dtype dt)
{
    static const char *const names[LT_NUM_DTYPES] = {
        [LT_F32] = "f32", [LT_BF16] = "bf16", [LT_F64] = "f64", [LT_I64] = "i64",
        [LT_I32] = "i32", [LT_BOOL] = "bool", [LT_U8] = "u8", [LT_I8] = "i8",
        [LT_I16] = "i16", [LT_F16] = "f16", [LT_C64] = "c64", [LT_C128] = "c128",
        [LT_C32] = "c32", [LT_U16] = "u16", [LT_U32] = "u32", [LT_U64] = "u64",
    };
    return (unsigned)dt < LT_NUM_DTYPES ? names[dt] : "?";
}

int lt_dtype_is_float(lt_dtype dt)
{
    return dt == LT_F32 || dt == LT_BF16 || dt == LT_F64 || dt == LT_F16;
}

int lt_dtype_is_complex(lt_dtype dt)
{
    return dt == LT_C64 || dt == LT_C128 || dt == LT_C32;
}

int lt_dtype_is_int(lt_dtype dt)
{
    switch (dt) {
    case LT_U8: case LT_I8: case LT_I16: case LT_I32: case LT_I64:
    case LT_U16: case LT_U32: case LT_U64:
        return 1;
    default:
        return 0;
    }
}

int lt_dtype_is_storage_only(lt_dtype dt)
{
    return dt == LT_C128 || dt == LT_C32 || dt == LT_U16 || dt == LT_U32 || dt == LT_U64;
}

/* the float of a complex dtype's parts */
static lt_dtype complex_part(lt_dtype dt)
{
    return dt == LT_C32 ? LT_F16 : dt == LT_C128 ? LT_F64 : dt == LT_C64 ? LT_F32 : dt;
}

static lt_dtype promote_float(lt_dtype a, lt_dtype b)
{
    if (a == b) return a;
    if ((a == LT_F16 && b == LT_BF16) || (a == LT_BF16 && b == LT_F16)) return LT_F32;
    if (a == LT_F64 || b == LT_F64) return LT_F64;
    if (a == LT_F32 || b == LT_F32) return LT_F32;
    return a;   /* not reached for two floats */
}

lt_dtype lt_dtype_promote(lt_dtype a, lt_dtype b)
{
    if ((unsigned)a >= LT_NUM_DTYPES || (unsigned)b >= LT_NUM_DTYPES) return LT_NUM_DTYPES;
    if (a == b) return a;
    if (a == LT_BOOL) return b;
    if (b == LT_BOOL) return a;
    if (a == LT_U16 || a == LT_U32 || a == LT_U64 || b == LT_U16 || b == LT_U32 || b == LT_U64)
        return LT_NUM_DTYPES;
    int ca = lt_dtype_is_complex(a), cb = lt_dtype_is_complex(b);
    if (ca || cb) {
        lt_dtype pa = complex_part(a), pb = complex_part(b);
        if (lt_dtype_is_int(pa)) return b;
        if (lt_dtype_is_int(pb)) return a;
        lt_dtype f = promote_float(pa, pb);
        return f == LT_F64 ? LT_C128 : f == LT_F16 ? LT_C32 : LT_C64;
    }
    int fa = lt_dtype_is_float(a), fb = lt_dtype_is_float(b);
    if (fa && fb) return promote_float(a, b);
    if (fa) return a;
    if (fb) return b;
    /* two integers: signed ones by size; u8 with a signed one -> at least i16 */
    if (a == LT_U8 || b == LT_U8) {
        lt_dtype o = a == LT_U8 ? b : a;
        return o == LT_I8 ? LT_I16 : o;
    }
    return lt_dtype_size(a) >= lt_dtype_size(b) ? a : b;
}

/* -------------------------------------------------------------------- bf16 */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline uint16_t bits_to_bf16(uint32_t u)
{
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t qnan = (u >> 16) | 0x40u;   /* keep sign and payload top, quiet */
    return (uint16_t)(nan ? qnan : rne);
}

uint16_t lt_f32_to_bf16(float f) { return bits_to_bf16(f32_bits(f)); }

float lt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Fast paths, written branch-free so the compiler vectorises them. */
__attribute__((optimize("O3")))
static void f32_to_bf16_n(const uint32_t *restrict src, uint16_t *restrict dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bits_to_bf16(src[i]);
}

__attribute__((optimize("O3")))
static void bf16_to_f32_n(const uint16_t *restrict src, uint32_t *restrict dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint32_t)src[i] << 16;
}

uint16_t lt_f32_to_f16(float f) { return lt_f16_from_f32(f); }
float lt_f16_to_f32(uint16_t h) { return lt_f16_to_f32_inline(h); }

/* -------------------------------------------------------------- conversion */

static double load_f(const void *p, lt_dtype dt, size_t i)
{
    switch (dt) {
    case LT_F32: return ((const float *)p)[i];
    case LT_BF16: return lt_bf16_to_f32(((const uint16_t *)p)[i]);
    case LT_F16: return lt_f16_to_f32_inline(((const uint16_t *)p)[i]);
    case LT_F64: return ((const double *)p)[i];
    case LT_I64: return (double)((const int64_t *)p)[i];
    case LT_I32: return ((const int32_t *)p)[i];
    case LT_I16: return ((const int16_t *)p)[i];
    case LT_I8: return ((const int8_t *)p)[i];
    case LT_U8: return ((const uint8_t *)p)[i];
    case LT_U16: return ((const uint16_t *)p)[i];
    case LT_U32: return ((const uint32_t *)p)[i];
    case LT_U64: return (double)((const uint64_t *)p)[i];
    case LT_BOOL: return ((const uint8_t *)p)[i] != 0;
    case LT_C64: return ((const float *)p)[2 * i];
    case LT_C128: return ((const double *)p)[2 * i];
    case LT_C32: return lt_f16_to_f32_inline(((const uint16_t *)p)[2 * i]);
    default: return 0;
    }
}

static double load_imag(const void *p, lt_dtype dt, size_t i)
{
    switch (dt) {
    case LT_C64: return ((const float *)p)[2 * i + 1];
    case LT_C128: return ((const double *)p)[2 * i + 1];
    case LT_C32: return lt_f16_to_f32_inline(((const uint16_t *)p)[2 * i + 1]);
    default: return 0;
    }
}

static int64_t load_i(const void *p, lt_dtype dt, size_t i)
{
    switch (dt) {
    case LT_I64: return ((const int64_t *)p)[i];
    case LT_I32: return ((const int32_t *)p)[i];
    case LT_I16: return ((const int16_t *)p)[i];
    case LT_I8: return ((const int8_t *)p)[i];
    case LT_U8: return ((const uint8_t *)p)[i];
    case LT_U16: return ((const uint16_t *)p)[i];
    case LT_U32: return ((const uint32_t *)p)[i];
    case LT_U64: return (int64_t)((const uint64_t *)p)[i];
    case LT_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}

/* Float -> integer: truncation toward zero, NaN -> 0, saturating. */
static int64_t f_to_i64(double d)
{
    if (d != d) return 0;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
}

static void store_i(void *p, lt_dtype dt, size_t i, int64_t v);

static void store_f(void *p, lt_dtype dt, size_t i, double v)
{
    switch (dt) {
    case LT_F32: ((float *)p)[i] = (float)v; break;
    case LT_BF16: ((uint16_t *)p)[i] = lt_f32_to_bf16((float)v); break;
    case LT_F16: ((uint16_t *)p)[i] = lt_f16_from_f32((float)v); break;
    case LT_F64: ((double *)p)[i] = v; break;
    case LT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case LT_C64: ((float *)p)[2 * i] = (float)v; ((float *)p)[2 * i + 1] = 0; break;
    case LT_C128: ((double *)p)[2 * i] = v; ((double *)p)[2 * i + 1] = 0; break;
    case LT_C32:
        ((uint16_t *)p)[2 * i] = lt_f16_from_f32((float)v);
        ((uint16_t *)p)[2 * i + 1] = 0;
        break;
    case LT_U64:
        ((uint64_t *)p)[i] = v >= 9.2233720368547758e18 && v < 1.8446744073709552e19
                             ? (uint64_t)v : (uint64_t)f_to_i64(v);
        break;
    default: store_i(p, dt, i, f_to_i64(v)); break;
    }
}

static void store_i(void *p, lt_dtype dt, size_t i, int64_t v)
{
    switch (dt) {
    case LT_I64: ((int64_t *)p)[i] = v; break;
    case LT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case LT_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case LT_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case LT_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case LT_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case LT_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case LT_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case LT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: store_f(p, dt, i, (double)v); break;
    }
}

static void store_c(void *p, lt_dtype dt, size_t i, double re, double im)
{
    switch (dt) {
    case LT_C64: ((float *)p)[2 * i] = (float)re; ((float *)p)[2 * i + 1] = (float)im; break;
    case LT_C128: ((double *)p)[2 * i] = re; ((double *)p)[2 * i + 1] = im; break;
    case LT_C32:
        ((uint16_t *)p)[2 * i] = lt_f16_from_f32((float)re);
        ((uint16_t *)p)[2 * i + 1] = lt_f16_from_f32((float)im);
        break;
    default: break;
    }
}

void lt_convert(const void *src, lt_dtype src_dt, void *dst, lt_dtype dst_dt,
                size_t n)
{
    if (n == 0 || lt_dtype_size(src_dt) == 0 || lt_dtype_size(dst_dt) == 0)
        return;
    if (src_dt == dst_dt) {
        if (src != dst) memmove(dst, src, n * lt_dtype_size(src_dt));
        return;
    }
    if (src_dt == LT_F32 && dst_dt == LT_BF16) {
        f32_to_bf16_n(src, dst, n);
        return;
    }
    if (src_dt == LT_BF16 && dst_dt == LT_F32) {
        bf16_to_f32_n(src, dst, n);
        return;
    }
    if (lt_dtype_is_complex(dst_dt)) {      /* real or complex -> complex */
        for (size_t i = 0; i < n; i++)
            store_c(dst, dst_dt, i, load_f(src, src_dt, i), load_imag(src, src_dt, i));
        return;
    }
    int fs = lt_dtype_is_float(src_dt) || lt_dtype_is_complex(src_dt);
    int fd = lt_dtype_is_float(dst_dt);
    if (!fs && !fd) {
        for (size_t i = 0; i < n; i++) store_i(dst, dst_dt, i, load_i(src, src_dt, i));
        return;
    }
    if (!fs) {     /* int -> float (i64 exactly rounded once) */
        for (size_t i = 0; i < n; i++) {
            if (src_dt == LT_U64)
                store_f(dst, dst_dt, i, (double)((const uint64_t *)src)[i]);
            else
                store_f(dst, dst_dt, i, (double)load_i(src, src_dt, i));
        }
        return;
    }
    /* float or complex (its real part) -> anything. f64 -> bf16/f16 goes
     * through f32: double rounding is what PyTorch does too. */
    for (size_t i = 0; i < n; i++) {
        double v = load_f(src, src_dt, i);
        if (dst_dt == LT_BF16 || dst_dt == LT_F16) v = (float)v;
        store_f(dst, dst_dt, i, v);
    }
}

/* ------------------------------------------------------------------ shapes */

lt_shape lt_shape_make(int ndim, const int64_t *dims)
{
    lt_shape s;
    memset(&s, 0, sizeof s);
    if (ndim < 0) ndim = 0;
    if (ndim > LT_MAX_DIMS) ndim = LT_MAX_DIMS;
    s.ndim = ndim;
    for (int d = 0; d < ndim; d++) s.dims[d] = dims ? dims[d] : 0;
    return s;
}

int64_t lt_shape_numel(const lt_shape *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->dims[d];
    return n;
}

int lt_shape_equal(const lt_shape *a, const lt_shape *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

char *lt_shape_str(const lt_shape *s, char *buf, size_t cap)
{
    if (!buf || cap == 0) return buf;
    size_t k = 0;
    buf[0] = 0;
    int w = snprintf(buf, cap, "[");
    k = w > 0 ? (size_t)w : 0;
    for (int d = 0; d < s->ndim && k < cap; d++) {
        w = snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)s->dims[d]);
        if (w < 0) break;
        k += (size_t)w;
    }
    if (k < cap) snprintf(buf + k, cap - k, "]");
    buf[cap - 1] = 0;
    return buf;
}

