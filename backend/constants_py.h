/*
 * backend/constants_py.h — the C core's enums as lazytpu._C constants, so
 * that Python never copies a number from include/lazytpu.h by hand:
 *
 *   SYNC_<CAUSE>        lt_sync_cause (SYNC_MARK_STEP, ..., SYNC_DYNAMIC_SHAPE)
 *   SYNC_CAUSE_NAMES    tuple, index = cause: lt_sync_cause_name ("mark_step", ...)
 *   DTYPE_<NAME>        lt_dtype (DTYPE_F32, DTYPE_BF16, ..., DTYPE_U64)
 *   DTYPE_NAMES         tuple, index = dtype: lt_dtype_name ("f32", ...)
 *   REDUCE_<OP>         lt_reduce_type (REDUCE_SUM, _MUL, _MIN, _MAX, _AND, _OR)
 *   UNIT_<UNIT>         lt_metric_unit (UNIT_NS, UNIT_BYTES, UNIT_COUNT)
 *   TRACE_TID_HOST, TRACE_TID_LOADER   the trace rows of lt_trace_event
 *   MATMUL_<LEVEL>      lt_matmul_precision (MATMUL_F32, _DEFAULT, _HIGH, _HIGHEST)
 *   MATMUL_PRECISIONS   tuple of the level names, in enum order
 *                       (lt_matmul_precision_name: "f32", "default", ...)
 *
 * Names are made from the core's own name functions where it has one, so a
 * new cause or dtype appears in Python without an edit here.
 */
#ifndef LT_CONSTANTS_PY_H
#define LT_CONSTANTS_PY_H

#include <Python.h>

/* Adds the constants above to module m. Returns 0, or -1 with a Python
 * exception set. */
int lazytpu_py_add_constants(PyObject *m);

#endif
