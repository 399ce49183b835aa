/*
 * tests/c/kt_test.h — helpers for the kernel tests (test_kernels*.c): views
 * over malloc'd arrays with chosen strides, deterministic random values,
 * comparison against double references with tolerances.
 */
#ifndef KT_TEST_H
#define KT_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernel.h"

#define KT_MAX_ALLOCS 512
static void *kt_allocs[KT_MAX_ALLOCS];
static int kt_nallocs;

static inline void *kt_talloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    assert_non_null(p);
    assert_true(kt_nallocs < KT_MAX_ALLOCS);
    kt_allocs[kt_nallocs++] = p;
    return p;
}

static inline void kt_tfree_all(void)
{
    for (int i = 0; i < kt_nallocs; i++) free(kt_allocs[i]);
    kt_nallocs = 0;
}

static inline int kt_teardown(void **state)
{
    (void)state;
    kt_tfree_all();
    return 0;
}

/* Test-local bf16 rounding (nearest even), independent of the kernels. */
static inline double kt_round_bf16(double v)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return v;
    uint32_t lsb = (u >> 16) & 1u;
    u = (u + 0x7fffu + lsb) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static inline double kt_round_to(lt_dtype dt, double v)
{
    if (dt == LT_F32) return (float)v;
    if (dt == LT_BF16) return kt_round_bf16(v);
    return v;
}

static inline size_t kt_esize(lt_dtype dt)
{
    switch (dt) {
    case LT_F32: case LT_I32: return 4;
    case LT_BF16: return 2;
    case LT_BOOL: return 1;
    default: return 8;
    }
}

static inline void kt_put(void *base, lt_dtype dt, int64_t i, double v)
{
    switch (dt) {
    case LT_F32: ((float *)base)[i] = (float)v; break;
    case LT_F64: ((double *)base)[i] = v; break;
    case LT_BF16: { float f = (float)kt_round_bf16(v); uint32_t u; memcpy(&u, &f, 4);
                    ((uint16_t *)base)[i] = (uint16_t)(u >> 16); break; }
    case LT_I64: ((int64_t *)base)[i] = (int64_t)v; break;
    case LT_I32: ((int32_t *)base)[i] = (int32_t)v; break;
    case LT_BOOL: ((uint8_t *)base)[i] = v != 0; break;
    default: break;
    }
}

static inline double kt_get(const void *base, lt_dtype dt, int64_t i)
{
    switch (dt) {
    case LT_F32: return ((const float *)base)[i];
    case LT_F64: return ((const double *)base)[i];
    case LT_BF16: { uint32_t u = (uint32_t)((const uint16_t *)base)[i] << 16; float f;
                    memcpy(&f, &u, 4); return f; }
    case LT_I64: return (double)((const int64_t *)base)[i];
    case LT_I32: return ((const int32_t *)base)[i];
    case LT_BOOL: return ((const uint8_t *)base)[i];
    default: return 0;
    }
}

/* Deterministic values in [-1, 1). */
static uint64_t kt_rng_state = 88172645463325252ull;
static inline double kt_rand(void)
{
    kt_rng_state ^= kt_rng_state << 13;
    kt_rng_state ^= kt_rng_state >> 7;
    kt_rng_state ^= kt_rng_state << 17;
    return (double)(kt_rng_state >> 11) * 0x1p-52 - 1.0;
}

/* Random logical values (rounded to what dt holds). */
static inline double *kt_rvals(int64_t n, lt_dtype dt)
{
    double *v = kt_talloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = kt_round_to(dt, kt_rand());
    return v;
}

static inline int64_t kt_numel_of(int nd, const int64_t *dims)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= dims[d];
    return n;
}

/* Offset of the logical element `lin` of a view (its own strides). */
static inline int64_t kt_off(const lt_view *v, int64_t lin)
{
    int64_t off = v->offset;
    for (int d = v->shape.ndim - 1; d >= 0; d--) {
        off += (lin % v->shape.dims[d]) * v->strides[d];
        lin /= v->shape.dims[d];
    }
    return off;
}

/* A view of logical `vals` (row-major, may be NULL = zeros) with the given
 * strides (NULL = contiguous) and offset; storage not covered by the view is
 * filled with 777 so reading a wrong element shows. */
static inline lt_view kt_view(lt_dtype dt, int nd, const int64_t *dims, const int64_t *strides,
                       int64_t offset, const double *vals)
{
    lt_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.shape.ndim = nd;
    int64_t st = 1, ext = offset;
    for (int d = nd - 1; d >= 0; d--) {
        v.shape.dims[d] = dims[d];
        v.strides[d] = strides ? strides[d] : st;
        st *= dims[d];
    }
    for (int d = 0; d < nd; d++)
        if (dims[d] > 0) ext += (dims[d] - 1) * v.strides[d];
    int64_t cap = ext + 1;
    v.offset = offset;
    v.data = kt_talloc((size_t)cap * kt_esize(dt));
    for (int64_t i = 0; i < cap; i++) kt_put(v.data, dt, i, dt == LT_BOOL ? 1 : 777);
    int64_t n = kt_numel_of(nd, dims);
    for (int64_t i = 0; i < n; i++) kt_put(v.data, dt, kt_off(&v, i), vals ? vals[i] : 0);
    return v;
}

/* A [R,C] view whose storage is the transpose ([C,R] contiguous). */
static inline lt_view kt_view_t(lt_dtype dt, int64_t R, int64_t C, const double *vals)
{
    int64_t dims[2] = {R, C}, st[2] = {1, R};
    return kt_view(dt, 2, dims, st, 0, vals);
}

/* Contiguous output filled with garbage. */
static inline lt_view kt_out(lt_dtype dt, int nd, const int64_t *dims)
{
    lt_view v = kt_view(dt, nd, dims, NULL, 0, NULL);
    int64_t n = kt_numel_of(nd, dims);
    for (int64_t i = 0; i < n; i++) kt_put(v.data, dt, i, dt == LT_BOOL ? 1 : -555);
    return v;
}

static inline lt_attrs kt_attrs_arr(int n, const int64_t *v)
{
    lt_attrs a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < n; i++) a.i[i] = v[i];
    a.n = n;
    return a;
}
/* KATTR(1, 2, 3) -> lt_attrs with n = 3 */
#define KATTR(...) kt_attrs_arr((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
                                (int64_t[]){__VA_ARGS__})
#define DIMS(...) ((int64_t[]){__VA_ARGS__})

/* Compares out (contiguous) with ref (n doubles): |a-b| <= atol + rtol*|b|;
 * NaN matches NaN. Prints the first mismatch. */
static inline void kt_check(const char *what, const lt_view *out, const double *ref, int64_t n,
                     double atol, double rtol)
{
    for (int64_t i = 0; i < n; i++) {
        double a = kt_get(out->data, out->dtype, out->offset + i), b = ref[i];
        int ok = (isnan(a) && isnan(b)) || (a == b) || fabs(a - b) <= atol + rtol * fabs(b);
        if (!ok) {
            fprintf(stderr, "%s: element %lld: got %.9g expected %.9g\n", what, (long long)i, a, b);
            fail();
        }
    }
}

static const lt_kernel_ctx kt_ctx1 = {0, 1};
static const lt_kernel_ctx kt_ctx2 = {0, 2};

#endif
