/*
 * backend/options_py.h — lazytpu._C's view of the options table
 * (base/options.def), implemented in options_py.cpp and listed in
 * module.cpp's method table:
 *
 *   options() -> tuple of dicts, one per row: name, alias, type ("bool",
 *       "int", "size", "seconds", "string", "enum"), default (as written in
 *       the environment, or None), range, when ("init", "process", "call"),
 *       who ("user", "launcher"), shown (docs' default text or None), doc
 *   option(name) -> the value as the core reads it under the row's `when`:
 *       bool, int, float (seconds) or str; the default when unset or
 *       malformed (None when the table has none). KeyError for a name
 *       outside the table.
 *   option_state(name) -> 1 set to a valid value, 0 unset, -1 malformed
 */
#ifndef LT_OPTIONS_PY_H
#define LT_OPTIONS_PY_H

#include <Python.h>

PyObject *lazytpu_py_options(PyObject *, PyObject *);
PyObject *lazytpu_py_option(PyObject *, PyObject *args);
PyObject *lazytpu_py_option_state(PyObject *, PyObject *args);

#endif
