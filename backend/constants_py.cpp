/*
 * backend/constants_py.cpp — the C core's enums as lazytpu._C constants
 * (see constants_py.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cctype>
#include <string>

#include "lazytpu.h"
#include "constants_py.h"

namespace {

/* m.<PREFIX><NAME upper-cased> = value; 0 or -1 (exception set). */
int add_named(PyObject *m, const char *prefix, const char *name, long value) {
  std::string key(prefix);
  for (const char *p = name; *p; p++) key += (char)std::toupper((unsigned char)*p);
  return PyModule_AddIntConstant(m, key.c_str(), value);
}

/* m.<attr> = tuple of names[0..n) (steals the tuple); 0 or -1. */
int add_tuple(PyObject *m, const char *attr, PyObject *tuple) {
  if (!tuple) return -1;
  if (PyModule_AddObject(m, attr, tuple) < 0) {
    Py_DECREF(tuple);
    return -1;
  }
  return 0;
}

}  // namespace

int lazytpu_py_add_constants(PyObject *m) {
  PyObject *causes = PyTuple_New(LT_NUM_SYNC_CAUSES);
  if (!causes) return -1;
  for (int c = 0; c < LT_NUM_SYNC_CAUSES; c++) {
    const char *name = lt_sync_cause_name((lt_sync_cause)c);
    PyObject *s = PyUnicode_FromString(name);
    if (!s || add_named(m, "SYNC_", name, c) < 0) {
      Py_XDECREF(s);
      Py_DECREF(causes);
      return -1;
    }
    PyTuple_SET_ITEM(causes, c, s);
  }
  if (add_tuple(m, "SYNC_CAUSE_NAMES", causes) < 0) return -1;

  PyObject *dtypes = PyTuple_New(LT_NUM_DTYPES);
  if (!dtypes) return -1;
  for (int d = 0; d < LT_NUM_DTYPES; d++) {
    const char *name = lt_dtype_name((lt_dtype)d);
    PyObject *s = PyUnicode_FromString(name);
    if (!s || add_named(m, "DTYPE_", name, d) < 0) {
      Py_XDECREF(s);
      Py_DECREF(dtypes);
      return -1;
    }
    PyTuple_SET_ITEM(dtypes, d, s);
  }
  if (add_tuple(m, "DTYPE_NAMES", dtypes) < 0) return -1;

  /* the core has no name function for these: spelled once, here */
  static const struct { const char *name; long value; } plain[] = {
      {"REDUCE_SUM", LT_REDUCE_SUM}, {"REDUCE_MUL", LT_REDUCE_MUL},
      {"REDUCE_MIN", LT_REDUCE_MIN}, {"REDUCE_MAX", LT_REDUCE_MAX},
      {"REDUCE_AND", LT_REDUCE_AND}, {"REDUCE_OR", LT_REDUCE_OR},
      {"UNIT_NS", LT_UNIT_NS},       {"UNIT_BYTES", LT_UNIT_BYTES},
      {"UNIT_COUNT", LT_UNIT_COUNT},
      {"TRACE_TID_HOST", LT_TRACE_TID_HOST}, {"TRACE_TID_LOADER", LT_TRACE_TID_LOADER},
  };
  for (const auto &c : plain)
    if (PyModule_AddIntConstant(m, c.name, c.value) < 0) return -1;

  static const lt_matmul_precision levels[] = {LT_MATMUL_F32, LT_MATMUL_DEFAULT,
                                               LT_MATMUL_HIGH, LT_MATMUL_HIGHEST};
  const int n_levels = (int)(sizeof levels / sizeof levels[0]);
  PyObject *names = PyTuple_New(n_levels);
  if (!names) return -1;
  for (int i = 0; i < n_levels; i++) {
    const char *name = lt_matmul_precision_name(levels[i]);
    PyObject *s = PyUnicode_FromString(name);
    if (!s || add_named(m, "MATMUL_", name, levels[i]) < 0) {
      Py_XDECREF(s);
      Py_DECREF(names);
      return -1;
    }
    PyTuple_SET_ITEM(names, i, s);
  }
  return add_tuple(m, "MATMUL_PRECISIONS", names);
}
