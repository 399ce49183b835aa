/*
 * lazy/finite.c — LAZYTPU_CHECK_FINITE's scan of a step's values (finite.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "finite.h"

/* Index (row-major over the view's shape) of the first NaN/Inf of a float
 * view, -1 if none; *nan = 1 when it is a NaN. */
static int64_t first_nonfinite(const lt_view *v, int *nan)
{
    if (v->dtype != LT_F32 && v->dtype != LT_F64 && v->dtype != LT_BF16)
        return -1;
    int nd = v->shape.ndim;
    int64_t total = lt_shape_numel(&v->shape);
    int64_t idx[LT_MAX_DIMS] = {0};
    for (int64_t i = 0; i < total; i++) {
        int64_t off = v->offset;
        for (int d = 0; d < nd; d++)
            off += idx[d] * v->strides[d];
        double x;
        if (v->dtype == LT_F32) {
            x = ((const float *)v->data)[off];
        } else if (v->dtype == LT_F64) {
            x = ((const double *)v->data)[off];
        } else {
            uint32_t u = (uint32_t)((const uint16_t *)v->data)[off] << 16;
            float f;
            memcpy(&f, &u, sizeof f);
            x = f;
        }
        if (!isfinite(x)) {
            *nan = isnan(x) != 0;
            return i;
        }
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < v->shape.dims[d])
                break;
            idx[d] = 0;
        }
    }
    return -1;
}

lt_status lt_finite_check(const lt_step *step, lt_op op, const lt_view *in,
                          const lt_view *out)
{
    for (int k = 0; k < step->n_out; k++) {
        int nan = 0;
        int64_t i = first_nonfinite(&out[k], &nan);
        if (i < 0)
            continue;
        int from = -1, dummy;
        for (int j = 0; j < step->n_in && from < 0; j++)
            if (first_nonfinite(&in[j], &dummy) >= 0)
                from = j;
        char sh[160], note[160] = "";
        lt_shape_str(&out[k].shape, sh, sizeof sh);
        if (from >= 0)
            snprintf(note, sizeof note, "; its input %d already held a "
                     "non-finite value (data the step was given)", from);
        return lt_set_error(LT_ERR_VALUE, "LAZYTPU_CHECK_FINITE: %s produced "
                            "%s (element %lld of %s%s), the first op of the "
                            "step to do so%s",
                            lt_op_name(op), nan ? "NaN" : "Inf",
                            (long long)i, lt_dtype_name(out[k].dtype), sh, note);
    }
    return LT_OK;
}
