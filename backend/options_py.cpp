/*
 * backend/options_py.cpp — lazytpu._C's options functions (options_py.h):
 * Python reads LAZYTPU_* variables through the C table, never os.environ.
 */
#define PY_SSIZE_T_CLEAN
#include "options_py.h"

#include "../base/options.h"

namespace {

PyObject *str_or_none(const char *s) {
  if (!s) Py_RETURN_NONE;
  return PyUnicode_FromString(s);
}

/* The row named by args' one string, or -1 with KeyError set. */
int row_of(PyObject *args) {
  const char *name = nullptr;
  if (!PyArg_ParseTuple(args, "s", &name)) return -1;
  int o = lt_opt_find(name);
  if (o < 0) PyErr_Format(PyExc_KeyError, "lazytpu: %s is not in the options table "
                          "(base/options.def)", name);
  return o;
}

}  // namespace

PyObject *lazytpu_py_options(PyObject *, PyObject *) {
  PyObject *t = PyTuple_New(LT_OPT_COUNT);
  if (!t) return nullptr;
  for (int o = 0; o < LT_OPT_COUNT; o++) {
    const lt_opt_info *f = lt_opt_info_of((lt_opt)o);
    PyObject *d = Py_BuildValue(
        "{s:s,s:N,s:s,s:N,s:s,s:s,s:s,s:N,s:s}", "name", f->name, "alias",
        str_or_none(f->alias), "type", lt_opt_type_name(f->type), "default",
        str_or_none(f->dflt), "range", f->range, "when", lt_opt_when_name(f->when), "who",
        lt_opt_who_name(f->who), "shown", str_or_none(f->shown), "doc", f->doc);
    if (!d) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, o, d);
  }
  return t;
}

PyObject *lazytpu_py_option(PyObject *, PyObject *args) {
  int o = row_of(args);
  if (o < 0) return nullptr;
  switch (lt_opt_info_of((lt_opt)o)->type) {
  case LT_OPT_BOOL:
    return PyBool_FromLong((long)lt_opt_int((lt_opt)o));
  case LT_OPT_INT:
  case LT_OPT_SIZE:
    if (lt_opt_state((lt_opt)o) != 1 && !lt_opt_info_of((lt_opt)o)->dflt) Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)lt_opt_int((lt_opt)o));
  case LT_OPT_SECONDS:
    return PyFloat_FromDouble(lt_opt_seconds((lt_opt)o));
  case LT_OPT_STRING:
  case LT_OPT_ENUM:
    return str_or_none(lt_opt_str((lt_opt)o));
  }
  Py_RETURN_NONE;
}

PyObject *lazytpu_py_option_state(PyObject *, PyObject *args) {
  int o = row_of(args);
  if (o < 0) return nullptr;
  return PyLong_FromLong(lt_opt_state((lt_opt)o));
}
