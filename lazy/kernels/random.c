/*
 * lazy/kernels/random.c — rand_uniform and rand_normal, counter-based.
 *
 * Element k of the output is a pure function of (seed, k): a 64-bit hash of
 * the two, so results are deterministic and independent of the thread count
 * and of how the output is split. uniform: [0, 1) with as many random bits as
 * the output's precision holds (so rounding can never produce 1.0); normal:
 * Box-Muller on the pair (k / 2), cos for even k, sin for odd k.
 *
 * An optional second input (an integer 0-dim tensor) is a counter offset:
 * element k of the output is then element offset + k of the stream, so a
 * core of a partitioned step generates its block of a split value with the
 * values the whole value has there (spmd_exec.c).
 */
#include "kutil.h"

static inline uint64_t mix64(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    z ^= z >> 31;
    return z;
}

/* 64 random bits for (key, counter, lane). */
static inline uint64_t rnd_bits(uint64_t key, uint64_t ctr, uint64_t lane)
{
    return mix64(key ^ mix64(ctr * 2 + lane + 0x9e3779b97f4a7c15ull));
}

/* Uniform in [0,1) with `bits` bits of precision (exactly representable). */
static inline double rnd_unit(uint64_t h, int bits)
{
    return (double)(h >> (64 - bits)) * ldexp(1.0, -bits);
}

/* rand_uniform / rand_normal (seed[, offset]) into contiguous out (float
 * dtypes): out[k] = element offset + k of the seed's stream (offset 0 when
 * absent). */
lt_status lt_kernel_random(lt_op op, const lt_attrs *attrs, const lt_view *in, int n_in,
                           const lt_view *out, const lt_kernel_ctx *ctx)
{
    int nt = kt_nthreads(ctx);
    if (n_in < 1 || n_in > 2 || (op != LT_OP_rand_uniform && op != LT_OP_rand_normal))
        return lt_set_error(LT_ERR_INTERNAL, "random kernel: op %d with %d inputs", (int)op, n_in);
    if (!kt_is_float(out->dtype) || !(kt_is_index(in[0].dtype) || kt_is_float(in[0].dtype)) ||
        (n_in == 2 && !kt_is_index(in[1].dtype)))
        return lt_kutil_dtype_error(op, in, n_in, out);
    uint64_t key = mix64((uint64_t)kt_load_i(in[0].data, in[0].dtype, in[0].offset) ^
                         0x243f6a8885a308d3ull);
    uint64_t base = n_in == 2 ? (uint64_t)kt_load_i(in[1].data, in[1].dtype, in[1].offset) : 0;
    int bits = out->dtype == LT_F64 ? 53 : out->dtype == LT_F32 ? 24 : out->dtype == LT_F16 ? 11 : 8;
    int64_t n = kt_numel(&out->shape);
    void *o = kt_ptr(out);
    if (op == LT_OP_rand_uniform) {
        #pragma omp parallel for num_threads(nt) schedule(static) if (n > 16384)
        for (int64_t k = 0; k < n; k++)
            kt_store(o, out->dtype, k, rnd_unit(rnd_bits(key, base + (uint64_t)k, 0), bits));
    } else {
        #pragma omp parallel for num_threads(nt) schedule(static) if (n > 16384)
        for (int64_t k = 0; k < n; k++) {
            uint64_t c = base + (uint64_t)k, pair = c >> 1;
            /* u1 in (0, 1] so log never sees 0 */
            double u1 = ((double)(rnd_bits(key, pair, 0) >> 11) + 1.0) * 0x1p-53;
            double u2 = rnd_unit(rnd_bits(key, pair, 1), 53);
            double r = sqrt(-2.0 * log(u1));
            double a = 6.283185307179586476925 * u2;
            kt_store(o, out->dtype, k, (c & 1) ? r * sin(a) : r * cos(a));
        }
    }
    return LT_OK;
}
