/*
 * base/shape.c — lt_shape helpers (make, numel, equal, text), declared in
 * include/lazytpu.h.
 */
#include <stdio.h>
#include <string.h>
#include "lazytpu.h"

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
