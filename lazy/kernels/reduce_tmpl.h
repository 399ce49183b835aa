/*
 * lazy/kernels/reduce_tmpl.h — per-type accumulation loops of reduce.c.
 * Included with VT (value type of the fused result), AT (accumulator type),
 * S (suffix), AT_IS_INT, and optionally SUM8 (a vectorised form of the sum
 * lanes' main loop).
 */
#define LT_RCAT2(a, b) a##_##b
#define LT_RCAT(a, b) LT_RCAT2(a, b)
#define FN(name) LT_RCAT(name, S)

/* acc = reduce(acc, v[0..n)) for one output. 8 lanes keep sums vectorisable. */
static AT FN(acc_run)(lt_op op, AT acc, const VT *v, int n)
{
    int i = 0;
    switch (op) {
    case LT_OP_sum:
    case LT_OP_mean: {
        AT l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#ifdef SUM8
        i = SUM8(v, n, l);             /* the same lanes, vectorised (reduce.c) */
#endif
        for (; i + 8 <= n; i += 8)
            for (int j = 0; j < 8; j++)
                l[j] += (AT)v[i + j];
        for (; i < n; i++)
            l[0] += (AT)v[i];
        return acc + (((l[0] + l[1]) + (l[2] + l[3])) +
                      ((l[4] + l[5]) + (l[6] + l[7])));
    }
    case LT_OP_prod:
        for (; i < n; i++)
            acc *= (AT)v[i];
        return acc;
    case LT_OP_amax:
        for (; i < n; i++) {
            AT x = (AT)v[i];
            acc = (x != x || x > acc) ? x : acc;
        }
        return acc;
    case LT_OP_amin:
        for (; i < n; i++) {
            AT x = (AT)v[i];
            acc = (x != x || x < acc) ? x : acc;
        }
        return acc;
    case LT_OP_any: {
        int any = acc != 0;
        for (; i < n; i++)
            any |= v[i] != 0;
        return (AT)any;
    }
    case LT_OP_all: {
        int all = acc != 0;
        for (; i < n; i++)
            all &= v[i] != 0;
        return (AT)all;
    }
    default:
        return acc;
    }
}

/* acc[i] = reduce(acc[i], v[i]) for i < n. */
static void FN(acc_vec)(lt_op op, AT *restrict acc, const VT *restrict v,
                        int n)
{
    switch (op) {
    case LT_OP_sum:
    case LT_OP_mean:
        for (int i = 0; i < n; i++) acc[i] += (AT)v[i];
        break;
    case LT_OP_prod:
        for (int i = 0; i < n; i++) acc[i] *= (AT)v[i];
        break;
    case LT_OP_amax:
        for (int i = 0; i < n; i++) {
            AT x = (AT)v[i];
            acc[i] = (x != x || x > acc[i]) ? x : acc[i];
        }
        break;
    case LT_OP_amin:
        for (int i = 0; i < n; i++) {
            AT x = (AT)v[i];
            acc[i] = (x != x || x < acc[i]) ? x : acc[i];
        }
        break;
    case LT_OP_any:
        for (int i = 0; i < n; i++) acc[i] = (AT)((acc[i] != 0) | (v[i] != 0));
        break;
    case LT_OP_all:
        for (int i = 0; i < n; i++) acc[i] = (AT)((acc[i] != 0) & (v[i] != 0));
        break;
    default:
        break;
    }
}

/* First index of the extreme of v[0..n) merged into (*best, *bi) (*bi < 0:
 * nothing yet); NaN is the extreme for both argmax and argmin. base =
 * index of v[0]. Two vectorisable passes over the block: the extreme (and
 * whether there is a NaN), then the first position holding it; an earlier
 * equal value keeps its index. */
__attribute__((noinline))
static void FN(arg_run)(int is_max, VT *best, int64_t *bi, const VT *v, int n,
                        int64_t base)
{
    if (n <= 0 || (*bi >= 0 && *best != *best))
        return;
    /* "omp simd" reductions may reorder: fine, NaN is handled apart and
     * equal values (+-0 too) resolve to the first position below */
    int nan = 0;
    VT m = v[0];
    if (is_max) {
        _Pragma("omp simd reduction(max : m) reduction(| : nan)")
        for (int i = 0; i < n; i++) {
            nan |= v[i] != v[i];
            m = v[i] > m ? v[i] : m;
        }
    } else {
        _Pragma("omp simd reduction(min : m) reduction(| : nan)")
        for (int i = 0; i < n; i++) {
            nan |= v[i] != v[i];
            m = v[i] < m ? v[i] : m;
        }
    }
    if (nan) {
        int i = 0;
        while (i < n - 1 && v[i] == v[i])
            i++;
        *best = v[i];
        *bi = base + i;
        return;
    }
    /* m may be the simd reduction's identity rather than an element: for
     * floats clang starts max at -FLT_MAX, so for a block of only -inf no
     * element equals m. Then find the extreme with a plain pass. */
    int i = 0;
    while (i < n && v[i] != m)
        i++;
    if (i == n) {
        i = 0;
        for (int k = 1; k < n; k++)
            if (is_max ? v[k] > v[i] : v[k] < v[i])
                i = k;
        m = v[i];
    }
    if (*bi >= 0 && !(is_max ? m > *best : m < *best))
        return;
    *best = m;
    *bi = base + i;
}

#undef FN
#undef LT_RCAT
#undef LT_RCAT2
