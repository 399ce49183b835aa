/*
 * lazy/kernels/fused_tmpl.h — the per-compute-type body of the fused
 * interpreter. Included by fused.c once per type with
 *   T   the compute type (float, double, int64_t)
 *   S   a suffix token (f32, f64, i64)
 *   T_IS_INT  1 for int64_t
 *   T_FAST_GELU  1 for float: gelu / gelu_backward via vmath.h lt_vphif
 * Defines load_S, exec_S (one block) and store_S.
 * Integer arithmetic wraps (two's complement, as in PyTorch): fused.c is
 * compiled with -fwrapv. Float <-> integer conversions saturate
 * (lt_fz_f2i), NaN -> 0.
 */
#define LT_CAT2(a, b) a##_##b
#define LT_CAT(a, b) LT_CAT2(a, b)
#define FN(name) LT_CAT(name, S)

/* dst[0..n) = (T) src[k * s] for storage dtype dt. */
static void FN(load_run)(T *restrict dst, const char *src, lt_dtype dt,
                         int64_t s, int n)
{
    switch (dt) {
#define LT_LOAD_CASE(DT, CT, CONV)                                         \
    case DT: {                                                             \
        const CT *p = (const CT *)src;                                     \
        if (s == 1)                                                        \
            for (int i = 0; i < n; i++) dst[i] = (T)(CONV(p[i]));          \
        else if (s == 0) {                                                 \
            T v = (T)(CONV(p[0]));                                         \
            for (int i = 0; i < n; i++) dst[i] = v;                        \
        } else                                                             \
            for (int i = 0; i < n; i++) dst[i] = (T)(CONV(p[i * s]));      \
        break;                                                             \
    }
#define LT_ID(x) (x)
#if T_IS_INT                 /* float storage -> integer compute: saturate */
#define LT_FI(x) lt_fz_f2i(x)
#define LT_BFI(x) lt_fz_f2i(lt_bf16_to_f32_inline(x))
#define LT_HFI(x) lt_fz_f2i(lt_f16_to_f32_inline(x))
#else
#define LT_FI(x) (x)
#define LT_BFI(x) lt_bf16_to_f32_inline(x)
#define LT_HFI(x) lt_f16_to_f32_inline(x)
#endif
        LT_LOAD_CASE(LT_F32, float, LT_FI)
        LT_LOAD_CASE(LT_F64, double, LT_FI)
        LT_LOAD_CASE(LT_I64, int64_t, LT_ID)
        LT_LOAD_CASE(LT_I32, int32_t, LT_ID)
        LT_LOAD_CASE(LT_BOOL, uint8_t, LT_ID)
        LT_LOAD_CASE(LT_BF16, uint16_t, LT_BFI)
        LT_LOAD_CASE(LT_F16, uint16_t, LT_HFI)
        LT_LOAD_CASE(LT_U8, uint8_t, LT_ID)
        LT_LOAD_CASE(LT_I8, int8_t, LT_ID)
        LT_LOAD_CASE(LT_I16, int16_t, LT_ID)
#undef LT_ID
#undef LT_FI
#undef LT_BFI
#undef LT_HFI
#undef LT_LOAD_CASE
    default:
        for (int i = 0; i < n; i++) dst[i] = 0;
    }
}

/* Loads positions [i0, i0 + n) of load l. */
static void FN(load)(T *restrict dst, const lt_fload *l, int64_t i0, int n)
{
    if (l->kind == LT_FL_CONTIG) {
        FN(load_run)(dst, l->base + (size_t)i0 * l->esize, l->dtype, 1, n);
        return;
    }
    if (l->kind == LT_FL_BCAST) {
        FN(load_run)(dst, l->base, l->dtype, 0, n);
        return;
    }
    if (l->kind == LT_FL_STRIDED) {
        FN(load_run)(dst, l->base + (ptrdiff_t)(i0 * l->strides[0]) *
                     (ptrdiff_t)l->esize, l->dtype, l->strides[0], n);
        return;
    }
    /* general: runs along the innermost dim, carry over the outer ones */
    int nd = l->ndim;
    int64_t D = l->dims[nd - 1], s = l->strides[nd - 1];
    int64_t j = i0 % D, outer = i0 / D;
    int64_t idx[LT_MAX_DIMS], off = 0;
    for (int k = nd - 2; k >= 0; k--) {
        idx[k] = outer % l->dims[k];
        outer /= l->dims[k];
        off += idx[k] * l->strides[k];
    }
    int done = 0;
    while (done < n) {
        int seg = (int)((D - j) < (n - done) ? (D - j) : (n - done));
        FN(load_run)(dst + done, l->base + (ptrdiff_t)(off + j * s) *
                     (ptrdiff_t)l->esize, l->dtype, s, seg);
        done += seg;
        j = 0;
        for (int k = nd - 2; k >= 0; k--) {
            off += l->strides[k];
            if (++idx[k] < l->dims[k])
                break;
            off -= idx[k] * l->strides[k];
            idx[k] = 0;
        }
    }
}

/* Runs every instruction of f on positions [i0, i0 + n). Op loops carry
 * "ivdep": a destination register may be one of its operands (in place,
 * same index), which is safe to vectorise but defeats GCC's alias check.
 * An op whose value is stored to an output of the compute type writes
 * there directly (no copy). rp[r] receives
 * where register r's values are: its own block in regs, or straight in the
 * input's memory for a contiguous load already of the compute type.
 * Returns 0, or the op of the first integer division (floor_divide,
 * remainder, fmod of an integer node) that met a zero divisor: eager
 * raises ZeroDivisionError there; the register holds 0. */
static int FN(exec)(const lt_fused *f, const lt_fload *ld,
                    const lt_view *out, const uint8_t *dok, int64_t i0,
                    int n, int stride, T *regs, T **rp)
{
    int fault = 0;
    for (int k = 0; k < f->n_ins; k++) {
        const lt_fused_ins *in = &f->ins[k];
        T *d = regs + (size_t)in->dst * stride;
        if (in->direct && dok && dok[in->direct - 1])
            d = (T *)out[in->direct - 1].data + out[in->direct - 1].offset + i0;
        if (in->op == LT_FUSED_LOAD) {
            const lt_fload *l = &ld[in->a];
            if (l->kind == LT_FL_CONTIG && !f->compute_bound) {
                /* the next block of this stream: overlap memory with math */
                const char *nx = l->base + (size_t)(i0 + n) * l->esize;
                for (size_t o = 0; o < (size_t)n * l->esize; o += 64)
                    __builtin_prefetch(nx + o, 0, 3);
            }
            if (l->kind == LT_FL_CONTIG && l->dtype == T_DT) {
                rp[in->dst] = (T *)(void *)l->base + i0;
                continue;
            }
            if (l->block) {          /* broadcast, spread at bind time */
                rp[in->dst] = (T *)l->block;
                continue;
            }
            FN(load)(d, l, i0, n);
            rp[in->dst] = d;
            continue;
        }
        const T *pa = rp[in->a];
        const T *pb = in->b >= 0 ? rp[in->b] : pa;
        const T *pc = in->c >= 0 ? rp[in->c] : pa;
        /* an integer node (any node of an i64 group, a narrowed one else):
         * its divisors, read before d (which may be b's register) is written */
        if (!fault && (T_IS_INT || in->narrow == LT_I64 || in->narrow == LT_I32) &&
            lt_op_checks_of((lt_op)in->op) == LT_CHECKS_divisor)
            for (int i = 0; i < n; i++)
                if (pb[i] == 0) {
                    fault = in->op;
                    break;
                }
        rp[in->dst] = d;
#if T_FAST_GELU
        /* exact GELU and its backward in f32: one shared exponential for
         * the CDF and the density (vmath.h lt_vphif) instead of the
         * expression's erf + exp */
        if (in->op == LT_OP_gelu) {
            for (int i = 0; i < n; i++) {
                float e;
                d[i] = pa[i] * lt_vphif(pa[i], &e);
            }
            goto narrow;
        }
        if (in->op == LT_OP_gelu_backward) {      /* (grad, x) */
            _Pragma("GCC ivdep")
            for (int i = 0; i < n; i++) {
                float e, x = pb[i];
                float phi = lt_vphif(x, &e);
                d[i] = pa[i] * (phi + x * 0.39894228040143267794f * e);
            }
            goto narrow;
        }
#endif
        switch (in->op) {
#if T_IS_INT    /* float math on integers (exp in silu_backward, ...): saturate */
#define LT_TO_T(x) _Generic((x), float: lt_fz_f2i, double: lt_fz_f2i, default: lt_ew_id_i)(x)
#else
#define LT_TO_T(x) ((T)(x))
#endif
#define LT_OP(name, in_min, in_max, kind, shape, dtype, kernel, spmd, cost, checks, ident, expr) \
        case LT_OP_##name:                                                 \
            _Pragma("GCC ivdep")                                           \
            for (int i = 0; i < n; i++) {                                  \
                const T a = pa[i], b = pb[i], c = pc[i];                   \
                (void)a; (void)b; (void)c;                                 \
                d[i] = LT_TO_T(expr);                                      \
            }                                                              \
            break;
#include "../ops.def"
#undef LT_OP
#undef LT_TO_T
        default:
            break;
        }
#if T_FAST_GELU
    narrow:
#endif
        switch (in->narrow) {
        case LT_BOOL:
            for (int i = 0; i < n; i++) d[i] = (T)(d[i] != 0);
            break;
#if !T_IS_INT
        case LT_I64:
            for (int i = 0; i < n; i++) d[i] = LT_TRUNC(d[i]);
            break;
        case LT_I32:
            for (int i = 0; i < n; i++) d[i] = (T)(int32_t)lt_fz_f2i(d[i]);
            break;
        case LT_I16:
            for (int i = 0; i < n; i++) d[i] = (T)(int16_t)lt_fz_f2i(d[i]);
            break;
        case LT_I8:
            for (int i = 0; i < n; i++) d[i] = (T)(int8_t)lt_fz_f2i(d[i]);
            break;
        case LT_U8:
            for (int i = 0; i < n; i++) d[i] = (T)(uint8_t)lt_fz_f2i(d[i]);
            break;
        case LT_F16:
            for (int i = 0; i < n; i++)
                d[i] = (T)lt_f16_to_f32_inline(lt_f16_from_f32((float)d[i]));
            break;
        case LT_F32:
            if (sizeof(T) == 8)
                for (int i = 0; i < n; i++) d[i] = (T)(float)d[i];
            break;
        case LT_BF16:       /* explicit cast: round to nearest even */
            for (int i = 0; i < n; i++)
                d[i] = (T)lt_bf16_to_f32_inline(lt_bf16_from_f32((float)d[i]));
            break;
#else
        case LT_I32:
            for (int i = 0; i < n; i++) d[i] = (T)(int32_t)d[i];
            break;
        case LT_I16:
            for (int i = 0; i < n; i++) d[i] = (T)(int16_t)d[i];
            break;
        case LT_I8:
            for (int i = 0; i < n; i++) d[i] = (T)(int8_t)d[i];
            break;
        case LT_U8:
            for (int i = 0; i < n; i++) d[i] = (T)(uint8_t)d[i];
            break;
#endif
        default:
            break;
        }
    }
    return fault;
}

/* dst (storage dt) = src[0..n) converted. */
static void FN(store)(const T *restrict src, void *dst, lt_dtype dt, int n)
{
    switch (dt) {
    case LT_F32: { float *p = dst; for (int i = 0; i < n; i++) p[i] = (float)src[i]; break; }
    case LT_F64: { double *p = dst; for (int i = 0; i < n; i++) p[i] = (double)src[i]; break; }
#if T_IS_INT
    case LT_I64: { int64_t *p = dst; for (int i = 0; i < n; i++) p[i] = (int64_t)src[i]; break; }
    case LT_I32: { int32_t *p = dst; for (int i = 0; i < n; i++) p[i] = (int32_t)(int64_t)src[i]; break; }
    case LT_I16: { int16_t *p = dst; for (int i = 0; i < n; i++) p[i] = (int16_t)(int64_t)src[i]; break; }
    case LT_I8: { int8_t *p = dst; for (int i = 0; i < n; i++) p[i] = (int8_t)(int64_t)src[i]; break; }
    case LT_U8: { uint8_t *p = dst; for (int i = 0; i < n; i++) p[i] = (uint8_t)(int64_t)src[i]; break; }
#else
    case LT_I64: { int64_t *p = dst; for (int i = 0; i < n; i++) p[i] = lt_fz_f2i(src[i]); break; }
    case LT_I32: { int32_t *p = dst; for (int i = 0; i < n; i++) p[i] = (int32_t)lt_fz_f2i(src[i]); break; }
    case LT_I16: { int16_t *p = dst; for (int i = 0; i < n; i++) p[i] = (int16_t)lt_fz_f2i(src[i]); break; }
    case LT_I8: { int8_t *p = dst; for (int i = 0; i < n; i++) p[i] = (int8_t)lt_fz_f2i(src[i]); break; }
    case LT_U8: { uint8_t *p = dst; for (int i = 0; i < n; i++) p[i] = (uint8_t)lt_fz_f2i(src[i]); break; }
#endif
    case LT_BOOL: { uint8_t *p = dst; for (int i = 0; i < n; i++) p[i] = src[i] != 0; break; }
    case LT_BF16: { uint16_t *p = dst; for (int i = 0; i < n; i++) p[i] = lt_bf16_from_f32((float)src[i]); break; }
    case LT_F16: { uint16_t *p = dst; for (int i = 0; i < n; i++) p[i] = lt_f16_from_f32((float)src[i]); break; }
    default: break;
    }
}

#undef FN
#undef LT_CAT
#undef LT_CAT2
