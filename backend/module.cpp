/*
 * backend/module.cpp — the Python extension lazytpu._C (plain CPython API).
 *
 * Exposes the C core's step, metrics and rng functions to python/lazytpu.
 * Tensor-level helpers live in the dispatcher as torch.ops.lazytpu.* (see
 * debug_ops.cpp), so this file needs no libtorch_python. Errors from the core
 * become RuntimeError with lt_last_error().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "lazytpu.h"
#include "lazytpu_events.h"
#include "lazytpu_cache.h"
#include "lt_shim.h"
#include "world_py.h"
#include "constants_py.h"
#include "options_py.h"
#include "../base/options.h"

namespace {

PyObject *raise_status(lt_status st) {
  const char *m = lt_last_error();
  PyErr_SetString(PyExc_RuntimeError, (m && *m) ? m : "lazytpu: error");
  return nullptr;
}

/* An execution error reported by a step boundary or a wait (docs/errors.md):
 * an index or class id out of range (LT_ERR_ARG) is an IndexError, as in
 * eager PyTorch (and as a read of the tensor raises it, tensor_impl.cpp);
 * everything else a RuntimeError. */
PyObject *raise_exec_status(lt_status st, const std::string &msg) {
  PyErr_SetString(st == LT_ERR_ARG ? PyExc_IndexError : PyExc_RuntimeError,
                  msg.empty() ? "lazytpu: error" : msg.c_str());
  return nullptr;
}

PyObject *take_cstr(char *s) {
  if (!s) Py_RETURN_NONE;
  PyObject *o = PyUnicode_FromString(s);
  free(s);
  return o;
}

/* "file.py:42 in fn" of the innermost frame outside torch and lazytpu. */
std::string python_caller(void) {
  if (!Py_IsInitialized()) return std::string();
  PyGILState_STATE g = PyGILState_Ensure();
  std::string out;
  PyFrameObject *f = PyEval_GetFrame();
  if (f) Py_INCREF(f);
  int depth = 0;
  while (f && depth++ < 64) {
    PyCodeObject *code = PyFrame_GetCode(f);
    const char *file = PyUnicode_AsUTF8(code->co_filename);
    bool internal = file && (strstr(file, "/torch/") || strstr(file, "/lazytpu/") ||
                             strstr(file, "<frozen"));
    if (file && !internal) {
      const char *name = PyUnicode_AsUTF8(code->co_name);
      const char *base = strrchr(file, '/');
      out = std::string(base ? base + 1 : file) + ":" +
            std::to_string(PyFrame_GetLineNumber(f)) + " in " + (name ? name : "?");
      Py_DECREF(code);
      break;
    }
    Py_DECREF(code);
    PyFrameObject *back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  if (f) Py_DECREF(f);
  if (PyErr_Occurred()) PyErr_Clear();
  PyGILState_Release(g);
  return out;
}

PyObject *py_init(PyObject *, PyObject *) {
  lt_status st = lt_init();
  if (st != LT_OK) return raise_status(st);
  Py_RETURN_NONE;
}

PyObject *py_num_cores(PyObject *, PyObject *) {
  lt_init();
  return PyLong_FromLong(lt_num_cores());
}

PyObject *py_bf16_mode(PyObject *, PyObject *) {
  lt_init();
  return PyBool_FromLong(lt_bf16_mode());
}

/* keep_f32_storage(on) -> previous: lt_trace_keep_f32 on this thread. */
PyObject *py_keep_f32_storage(PyObject *, PyObject *args) {
  int on;
  if (!PyArg_ParseTuple(args, "p", &on)) return nullptr;
  return PyBool_FromLong(lt_trace_keep_f32(on));
}

/* matmul precision (lt_matmul_precision) by name: "f32", "default", "high",
 * "highest"; another name raises ValueError. */
PyObject *py_set_matmul_precision(PyObject *, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return nullptr;
  lt_matmul_precision p;
  if (lt_matmul_precision_parse(name, &p) != LT_OK) {
    PyErr_SetString(PyExc_ValueError, lt_last_error());
    return nullptr;
  }
  lt_status st = lt_set_matmul_precision(p);
  if (st != LT_OK) return raise_status(st);
  Py_RETURN_NONE;
}

PyObject *py_matmul_precision(PyObject *, PyObject *) {
  const char *n = lt_matmul_precision_name(lt_get_matmul_precision());
  return PyUnicode_FromString(n ? n : "f32");
}

/* compile_cache_set_dir(path or None, readonly): the persistent compile
 * cache (lazy/pcache.h). RuntimeError once the compile cache is in use or
 * when the directory cannot be created. */
PyObject *py_compile_cache_set_dir(PyObject *, PyObject *args) {
  const char *dir = nullptr;
  int readonly = 0;
  if (!PyArg_ParseTuple(args, "zp", &dir, &readonly)) return nullptr;
  lt_status st;
  Py_BEGIN_ALLOW_THREADS st = lt_compile_cache_set_dir(dir, readonly);
  Py_END_ALLOW_THREADS
  if (st != LT_OK) return raise_status(st);
  Py_RETURN_NONE;
}

/* compile_cache_info() -> (initialized, path or None, readonly, programs in memory). */
PyObject *py_compile_cache_info(PyObject *, PyObject *) {
  char dir[4096];
  int readonly = 0;
  int64_t n = 0;
  int started = lt_compile_cache_info(dir, sizeof dir, &readonly, &n);
  PyObject *path = dir[0] ? PyUnicode_DecodeFSDefault(dir) : (Py_INCREF(Py_None), Py_None);
  if (!path) return nullptr;
  return Py_BuildValue("(NNNL)", PyBool_FromLong(started), path, PyBool_FromLong(readonly),
                       (long long)n);
}

PyObject *py_used_cores(PyObject *, PyObject *) {
  uint32_t m = lazytpu_used_cores_mask();
  PyObject *l = PyList_New(0);
  for (int i = 0; i < 32; i++)
    if (m & (1u << i)) {
      PyObject *v = PyLong_FromLong(i);
      PyList_Append(l, v);
      Py_DECREF(v);
    }
  return l;
}

/* sync_core(core, cause, wait): core -1 = every core that has tensors.
 * With core -1 every such core is synced even when an earlier one reports
 * an error (a failed program on core 0 must not leave core 1's step
 * unlaunched). The first error is raised; the errors other cores reported
 * in the same call (claimed by their sync: no later wait repeats them) are
 * appended to its message as " (also: <message>)". */
PyObject *py_sync(PyObject *, PyObject *args) {
  int core, cause, wait;
  const char *caller = nullptr;
  if (!PyArg_ParseTuple(args, "iii|z", &core, &cause, &wait, &caller)) return nullptr;
  if (cause < 0 || cause >= LT_NUM_SYNC_CAUSES) {
    PyErr_SetString(PyExc_ValueError, "lazytpu: bad sync cause");
    return nullptr;
  }
  lt_set_caller(caller);
  lt_status st = LT_OK;
  std::string msg;
  auto note = [&](lt_status s) {
    if (s == LT_OK) return;
    if (st == LT_OK) {
      st = s;
      msg = lt_last_error();
    } else {
      msg += std::string(" (also: ") + lt_last_error() + ")";
    }
  };
  Py_BEGIN_ALLOW_THREADS
  if (core >= 0) {
    note(lt_sync_core(core, (lt_sync_cause)cause, wait));
  } else {
    /* every core that holds tensors; the core counts MarkStep per core
     * synced, a user's mark_step is one step. A used core whose tensors
     * are all gone has nothing to launch; waiting, it still reports its
     * programs' unread errors (lt_wait, as lt_sync_core would). */
    uint32_t m = lazytpu_used_cores_mask();
    int synced = 0;
    for (int i = 0; i < 32; i++) {
      if (!(m & (1u << i))) continue;
      if (lt_live_tensors(i) > 0) {
        note(lt_sync_core(i, (lt_sync_cause)cause, wait));
        synced++;
      } else if (wait) {
        note(lt_wait(i));
      }
    }
    if (synced == 0) {
      note(lt_sync_core(0, (lt_sync_cause)cause, wait));  /* count the step anyway */
      synced = 1;
    }
    if (cause == LT_SYNC_MARK_STEP && synced > 1) lt_counter_inc_name("MarkStep", 1 - synced);
  }
  Py_END_ALLOW_THREADS
  lt_set_caller(nullptr);
  if (st != LT_OK) return raise_exec_status(st, msg);
  Py_RETURN_NONE;
}

PyObject *py_wait(PyObject *, PyObject *args) {
  int core = -1;
  if (!PyArg_ParseTuple(args, "|i", &core)) return nullptr;
  lt_status st;
  Py_BEGIN_ALLOW_THREADS
  st = lt_wait(core);
  Py_END_ALLOW_THREADS
  if (st != LT_OK) return raise_exec_status(st, lt_last_error());
  Py_RETURN_NONE;
}

PyObject *py_set_caller(PyObject *, PyObject *args) {
  const char *s = nullptr;
  if (!PyArg_ParseTuple(args, "z", &s)) return nullptr;
  lt_set_caller(s);
  Py_RETURN_NONE;
}

PyObject *py_pending_ops(PyObject *, PyObject *args) {
  int core = 0;
  if (!PyArg_ParseTuple(args, "|i", &core)) return nullptr;
  return PyLong_FromLongLong(lt_pending_ops(core));
}

/* set_no_execution(owner or None) -> the previous owner or None: the
 * execution guard of a function traced as one graph (lt_set_no_execution). */
PyObject *py_set_no_execution(PyObject *, PyObject *args) {
  const char *owner = nullptr;
  if (!PyArg_ParseTuple(args, "z", &owner)) return nullptr;
  char *prev = lt_no_execution();
  lt_set_no_execution(owner);
  return take_cstr(prev);
}

/* synced_graphs(since) -> (latest number, [graph keys of the syncs numbered
 * after since, oldest first]) (lt_synced_graphs; the log keeps 256). */
PyObject *py_synced_graphs(PyObject *, PyObject *args) {
  unsigned long long since = 0;
  if (!PyArg_ParseTuple(args, "K", &since)) return nullptr;
  uint64_t keys[256];
  int n = 0;
  uint64_t seq = lt_synced_graphs(since, keys, 256, &n);
  PyObject *l = PyList_New(n);
  if (!l) return nullptr;
  for (int i = 0; i < n; i++) PyList_SET_ITEM(l, i, PyLong_FromUnsignedLongLong(keys[i]));
  return Py_BuildValue("(KN)", (unsigned long long)seq, l);
}

PyObject *py_live_tensors(PyObject *, PyObject *args) {
  int core = 0;
  if (!PyArg_ParseTuple(args, "|i", &core)) return nullptr;
  return PyLong_FromLongLong(lt_live_tensors(core));
}

PyObject *py_metrics_report(PyObject *, PyObject *) { return take_cstr(lt_metrics_report()); }
PyObject *py_metrics_json(PyObject *, PyObject *) { return take_cstr(lt_metrics_json()); }
PyObject *py_counter_names(PyObject *, PyObject *) { return take_cstr(lt_counter_names()); }
PyObject *py_metric_names(PyObject *, PyObject *) { return take_cstr(lt_metric_names()); }

PyObject *py_counter_value(PyObject *, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return nullptr;
  return PyLong_FromLongLong(lt_counter_value(name));
}

PyObject *py_counter_inc(PyObject *, PyObject *args) {
  const char *name;
  long long d = 1;
  if (!PyArg_ParseTuple(args, "s|L", &name, &d)) return nullptr;
  lt_counter_inc_name(name, d);
  Py_RETURN_NONE;
}

PyObject *py_metric_data(PyObject *, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return nullptr;
  int64_t n = 0;
  double acc = 0;
  if (lt_metric_data(name, &n, &acc) != 0) Py_RETURN_NONE;
  return Py_BuildValue("(Ld)", (long long)n, acc);
}

/* metric_samples(name) -> [(time_ns, value), ...] (oldest first) or None */
PyObject *py_metric_samples(PyObject *, PyObject *args) {
  const char *name;
  if (!PyArg_ParseTuple(args, "s", &name)) return nullptr;
  std::vector<double> v(1024);
  std::vector<int64_t> ts(1024);
  int n = lt_metric_samples(name, v.data(), ts.data(), (int)v.size());
  if (n < 0) Py_RETURN_NONE;
  PyObject *out = PyList_New(n);
  if (!out) return nullptr;
  for (int i = 0; i < n; i++) {
    PyObject *t = Py_BuildValue("(Ld)", (long long)ts[i], v[i]);
    if (!t) { Py_DECREF(out); return nullptr; }
    PyList_SET_ITEM(out, i, t);
  }
  return out;
}

PyObject *py_metric_add(PyObject *, PyObject *args) {
  const char *name;
  int unit;
  double v;
  if (!PyArg_ParseTuple(args, "sid", &name, &unit, &v)) return nullptr;
  lt_metric_add(lt_metric_get(name, (lt_metric_unit)unit), v);
  /* lazytpu.loader adds each wait for a batch right after it ended: with
   * LAZYTPU_TRACE it is also a "loader_wait" span on the loader thread. */
  if (v > 0 && lt_trace_enabled() && strcmp(name, "LoaderWaitTime") == 0) {
    int64_t now = lt_now_ns();
    lt_trace_event("loader_wait", "loader", now - (int64_t)v, (int64_t)v, LT_TRACE_TID_LOADER);
  }
  Py_RETURN_NONE;
}

PyObject *py_metrics_note(PyObject *, PyObject *args) {
  const char *section, *line;
  if (!PyArg_ParseTuple(args, "ss", &section, &line)) return nullptr;
  lt_metrics_note(section, line);
  Py_RETURN_NONE;
}

PyObject *py_clear_all(PyObject *, PyObject *) {
  lt_metrics_clear_all();
  Py_RETURN_NONE;
}

PyObject *py_clear_counters(PyObject *, PyObject *) {
  lt_metrics_clear_counters();
  Py_RETURN_NONE;
}

PyObject *py_clear_metrics(PyObject *, PyObject *) {
  lt_metrics_clear_metrics();
  Py_RETURN_NONE;
}

PyObject *py_set_rng_state(PyObject *, PyObject *args) {
  unsigned long long seed;
  int core = 0;
  if (!PyArg_ParseTuple(args, "K|i", &seed, &core)) return nullptr;
  lazytpu_rng_set_state(core, seed);
  Py_RETURN_NONE;
}

PyObject *py_get_rng_state(PyObject *, PyObject *args) {
  int core = 0;
  if (!PyArg_ParseTuple(args, "|i", &core)) return nullptr;
  return PyLong_FromUnsignedLongLong(lazytpu_rng_get_state(core));
}

PyObject *py_get_rng_seed(PyObject *, PyObject *args) {
  int core = 0;
  if (!PyArg_ParseTuple(args, "|i", &core)) return nullptr;
  return PyLong_FromUnsignedLongLong(lazytpu_rng_get_seed(core));
}

PyObject *py_rng_restore(PyObject *, PyObject *args) {
  int core;
  unsigned long long seed, state;
  if (!PyArg_ParseTuple(args, "iKK", &core, &seed, &state)) return nullptr;
  lazytpu_rng_restore(core, seed, state);
  Py_RETURN_NONE;
}

/* memory_info(core) -> (bytes_in_use, peak_bytes_in_use, bytes_limit, buffers_in_use) */
PyObject *py_memory_info(PyObject *, PyObject *args) {
  int core = 0;
  if (!PyArg_ParseTuple(args, "|i", &core)) return nullptr;
  lt_memory_info mi;
  lt_status st = lt_memory_info_get(core, &mi);
  if (st != LT_OK) return raise_status(st);
  return Py_BuildValue("(LLLL)", (long long)mi.bytes_in_use, (long long)mi.peak_bytes_in_use,
                       (long long)mi.bytes_limit, (long long)mi.buffers_in_use);
}

PyObject *py_xla_compat(PyObject *, PyObject *) {
  return PyBool_FromLong(lt_opt_int(LT_OPT_XLA_COMPAT) != 0);
}

PyObject *py_caller(PyObject *, PyObject *) {
  return PyUnicode_FromString(python_caller().c_str());
}

/* ------------------------------------------------------------ graph hook */

/* The Python callable given to set_graph_hook (owned), or NULL. */
PyObject *g_graph_hook = nullptr;

/* lt_graph_hook_fn: calls the Python hook with one tuple (kind, core,
 * cause, replay, key, n_params, n_outputs, input_bytes, output_bytes,
 * aliased_bytes, scratch_bytes, n_kernels) on the syncing thread, its
 * Python frames above (the hook reads them). A hook that raises is
 * reported as unraisable: a debugging aid never fails the program. */
void graph_hook_trampoline(const lt_graph_event *ev) {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *fn = g_graph_hook;
  if (fn) {
    Py_INCREF(fn);
    PyObject *r = PyObject_CallFunction(
        fn, "((iiiiKiiLLLLi))", ev->kind, ev->core, ev->cause, ev->replay,
        (unsigned long long)ev->key, ev->n_params, ev->n_outputs,
        (long long)ev->input_bytes, (long long)ev->output_bytes,
        (long long)ev->aliased_bytes, (long long)ev->scratch_bytes, ev->n_kernels);
    if (!r) PyErr_WriteUnraisable(fn);
    Py_XDECREF(r);
    Py_DECREF(fn);
  }
  PyGILState_Release(g);
}

PyObject *py_set_graph_hook(PyObject *, PyObject *args) {
  PyObject *fn;
  if (!PyArg_ParseTuple(args, "O", &fn)) return nullptr;
  if (fn != Py_None && !PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "set_graph_hook: expected a callable or None");
    return nullptr;
  }
  PyObject *old = g_graph_hook;
  g_graph_hook = fn == Py_None ? nullptr : (Py_INCREF(fn), fn);
  lt_set_graph_hook(g_graph_hook ? graph_hook_trampoline : nullptr);
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

/* ------------------------------------------------------------ diagnosis */

PyObject *py_fallback_report(PyObject *, PyObject *) { return take_cstr(lt_fallback_report()); }
PyObject *py_take_warnings(PyObject *, PyObject *) { return take_cstr(lt_diagnose_take_warnings()); }
PyObject *py_debug_enabled(PyObject *, PyObject *) { return PyBool_FromLong(lt_debug_enabled()); }

PyObject *py_debug_set(PyObject *, PyObject *args) {
  int mode;
  if (!PyArg_ParseTuple(args, "i", &mode)) return nullptr;
  lt_debug_set(mode);
  Py_RETURN_NONE;
}

PyObject *py_now_ns(PyObject *, PyObject *) { return PyLong_FromLongLong(lt_now_ns()); }
PyObject *py_set_eager_op_scope(PyObject *, PyObject *args) {
  int on;
  if (!PyArg_ParseTuple(args, "p", &on)) return nullptr;
  return PyBool_FromLong(lt_set_eager_op_scope(on));
}
PyObject *py_trace_enabled(PyObject *, PyObject *) { return PyBool_FromLong(lt_trace_enabled()); }

PyObject *py_trace_flush(PyObject *, PyObject *) {
  Py_BEGIN_ALLOW_THREADS
  lt_trace_flush();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

/* trace_event(name, cat, start_ns, dur_ns, tid): tid = core, -1 host, -2 loader. */
PyObject *py_trace_event(PyObject *, PyObject *args) {
  const char *name, *cat;
  long long start, dur;
  int tid;
  if (!PyArg_ParseTuple(args, "ssLLi", &name, &cat, &start, &dur, &tid)) return nullptr;
  lt_trace_event(name, cat, start, dur, tid);
  Py_RETURN_NONE;
}

/* capture_start(): lt_trace_capture_start; RuntimeError while one runs. */
PyObject *py_capture_start(PyObject *, PyObject *) {
  lt_status st = lt_trace_capture_start();
  if (st != LT_OK) return raise_status(st);
  Py_RETURN_NONE;
}

PyObject *py_capture_active(PyObject *, PyObject *) { return PyBool_FromLong(lt_trace_capture_active()); }

/* capture_stop(logdir or None) -> the run directory written (None when
 * logdir is None); RuntimeError without a session or when writing fails. */
PyObject *py_capture_stop(PyObject *, PyObject *args) {
  const char *logdir = nullptr;
  if (!PyArg_ParseTuple(args, "z", &logdir)) return nullptr;
  char dir[4096] = "";
  lt_status st;
  Py_BEGIN_ALLOW_THREADS
  st = lt_trace_capture_stop(logdir, dir, sizeof dir);
  Py_END_ALLOW_THREADS
  if (st != LT_OK) return raise_status(st);
  if (!logdir) Py_RETURN_NONE;
  return PyUnicode_FromString(dir);
}

PyMethodDef methods[] = {
    {"_init", py_init, METH_NOARGS, "Initialise the core (idempotent)."},
    {"num_cores", py_num_cores, METH_NOARGS, "Number of simulated cores."},
    {"bf16_mode", py_bf16_mode, METH_NOARGS, "1 when f32 is stored as bf16."},
    {"keep_f32_storage", py_keep_f32_storage, METH_VARARGS,
     "keep_f32_storage(on) -> previous: in bf16 mode this thread's traced f32 results stay f32."},
    {"used_cores", py_used_cores, METH_NOARGS, "Cores that hold tensors."},
    {"compile_cache_set_dir", py_compile_cache_set_dir, METH_VARARGS,
     "compile_cache_set_dir(path or None, readonly): the persistent compile cache."},
    {"compile_cache_info", py_compile_cache_info, METH_NOARGS,
     "(initialized, path or None, readonly, programs in memory)."},
    {"set_matmul_precision", py_set_matmul_precision, METH_VARARGS,
     "set_matmul_precision(name): f32, default, high or highest."},
    {"matmul_precision", py_matmul_precision, METH_NOARGS, "The matmul precision's name."},
    {"sync", py_sync, METH_VARARGS, "sync(core, cause, wait[, caller])."},
    {"wait", py_wait, METH_VARARGS, "wait(core=-1): wait for queued programs."},
    {"set_caller", py_set_caller, METH_VARARGS, "Set the caller frame string."},
    {"set_no_execution", py_set_no_execution, METH_VARARGS,
     "set_no_execution(owner or None) -> previous owner: the execution guard."},
    {"synced_graphs", py_synced_graphs, METH_VARARGS,
     "synced_graphs(since) -> (latest, [graph keys synced after since])."},
    {"live_tensors", py_live_tensors, METH_VARARGS, "Live tensors on a core."},
    {"pending_ops", py_pending_ops, METH_VARARGS, "Ops traced on a core since its last step boundary."},
    {"metrics_report", py_metrics_report, METH_NOARGS, "Text metrics report."},
    {"metrics_json", py_metrics_json, METH_NOARGS, "JSON metrics dump."},
    {"counter_names", py_counter_names, METH_NOARGS, "Newline-separated names."},
    {"metric_names", py_metric_names, METH_NOARGS, "Newline-separated names."},
    {"counter_value", py_counter_value, METH_VARARGS, "Counter value (0 if absent)."},
    {"counter_inc", py_counter_inc, METH_VARARGS, "Increment a counter."},
    {"metric_data", py_metric_data, METH_VARARGS, "(samples, accumulator) or None."},
    {"metric_add", py_metric_add, METH_VARARGS, "metric_add(name, unit, value)."},
    {"metrics_note", py_metrics_note, METH_VARARGS, "Append an analysis line."},
    {"clear_all", py_clear_all, METH_NOARGS, "Reset all counters and metrics."},
    {"clear_counters", py_clear_counters, METH_NOARGS, "Reset the counters only."},
    {"clear_metrics", py_clear_metrics, METH_NOARGS, "Reset the metrics only."},
    {"metric_samples", py_metric_samples, METH_VARARGS,
     "[(time_ns, value)] kept samples of a metric, or None."},
    {"set_rng_state", py_set_rng_state, METH_VARARGS, "set_rng_state(seed, core=0)."},
    {"get_rng_state", py_get_rng_state, METH_VARARGS, "get_rng_state(core=0)."},
    {"get_rng_seed", py_get_rng_seed, METH_VARARGS, "get_rng_seed(core=0): the seed set last."},
    {"rng_restore", py_rng_restore, METH_VARARGS, "rng_restore(core, seed, state)."},
    {"memory_info", py_memory_info, METH_VARARGS,
     "memory_info(core=0) -> (bytes_in_use, peak_bytes_in_use, bytes_limit, buffers_in_use)."},
    {"xla_compat", py_xla_compat, METH_NOARGS,
     "True when device tensors are torch_xla's (LAZYTPU_XLA_COMPAT=1)."},
    {"caller", py_caller, METH_NOARGS, "The user frame as the shim sees it."},
    /* the options table (options_py.cpp) */
    {"options", lazytpu_py_options, METH_NOARGS,
     "The LAZYTPU_* options table: a tuple of dicts (base/options.def)."},
    {"option", lazytpu_py_option, METH_VARARGS,
     "option(name) -> the variable's value as the core reads it (its default when unset)."},
    {"option_state", lazytpu_py_option_state, METH_VARARGS,
     "option_state(name) -> 1 set, 0 unset, -1 malformed."},
    {"fallback_report", py_fallback_report, METH_NOARGS, "The fallback section text."},
    {"set_graph_hook", py_set_graph_hook, METH_VARARGS,
     "set_graph_hook(fn or None): fn(event tuple) before each program is queued "
     "(include/lazytpu_events.h)."},
    {"take_warnings", py_take_warnings, METH_NOARGS, "Debug warnings since the last call."},
    {"debug_enabled", py_debug_enabled, METH_NOARGS, "True when step warnings are on."},
    {"debug_set", py_debug_set, METH_VARARGS, "debug_set(mode): 0 off, 1 stderr, 2 quiet."},
    {"now_ns", py_now_ns, METH_NOARGS, "The core's monotonic clock (ns)."},
    {"set_eager_op_scope", py_set_eager_op_scope, METH_VARARGS,
     "set_eager_op_scope(on): this thread's programs count as eager ops (no ExecuteTime); "
     "returns the previous setting."},
    {"trace_enabled", py_trace_enabled, METH_NOARGS, "True with LAZYTPU_TRACE."},
    {"trace_flush", py_trace_flush, METH_NOARGS, "Write buffered trace events."},
    {"capture_start", py_capture_start, METH_NOARGS, "Start a trace capture session."},
    {"capture_active", py_capture_active, METH_NOARGS, "True while a capture session runs."},
    {"capture_stop", py_capture_stop, METH_VARARGS, "End the capture; write it under logdir."},
    {"trace_event", py_trace_event, METH_VARARGS,
     "trace_event(name, cat, start_ns, dur_ns, tid)."},
    /* the world and the pipeline bound (world_py.cpp) */
    {"world_info", lazytpu_py_world_info, METH_NOARGS,
     "None outside a launcher, else (ordinal, world size)."},
    {"world_barrier", lazytpu_py_world_barrier, METH_NOARGS, "Barrier over all ordinals."},
    {"world_all_reduce", lazytpu_py_world_all_reduce, METH_VARARGS,
     "world_all_reduce(send_ptr, recv_ptr, n, dtype, reduce, scale)."},
    {"world_all_gather", lazytpu_py_world_all_gather, METH_VARARGS,
     "world_all_gather(send_ptr, recv_ptr, outer, block, dtype)."},
    {"world_reduce_scatter", lazytpu_py_world_reduce_scatter, METH_VARARGS,
     "world_reduce_scatter(send_ptr, recv_ptr, outer, block, dtype, reduce, scale)."},
    {"world_broadcast", lazytpu_py_world_broadcast, METH_VARARGS,
     "world_broadcast(send_ptr, recv_ptr, n, dtype, root)."},
    {"world_exchange", lazytpu_py_world_exchange, METH_VARARGS,
     "world_exchange(tag, payload) -> every ordinal's payload."},
    {"limit_inflight", lazytpu_py_limit_inflight, METH_VARARGS,
     "limit_inflight(depth=0): bound the programs queued per core (0: LAZYTPU_MAX_INFLIGHT)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "lazytpu._C",
                      "lazytpu C extension: the PyTorch PrivateUse1 backend.", -1,
                      methods};

}  // namespace

/* Before a sync the core starts by itself (graph size limit): the user's
 * frame for the recompilation notes. */
static void core_caller_hook(void) {
  std::string s = python_caller();
  lt_set_caller(s.empty() ? nullptr : s.c_str());
}

extern "C" PyMODINIT_FUNC PyInit__C(void) {
  std::string bad = lazytpu_registration_errors();
  if (!bad.empty()) {
    PyErr_Format(PyExc_ImportError,
                 "lazytpu: kernels do not match this torch's operator schemas "
                 "(built against another torch?):\n%s", bad.c_str());
    return nullptr;
  }
  lt_status st = lt_init();
  if (st != LT_OK) return raise_status(st);
  lazytpu_set_caller_hook(python_caller);
  lt_set_caller_hook(core_caller_hook);
  lazytpu_register_late();
  PyObject *m = PyModule_Create(&moddef);
  if (!m) return nullptr;
  if (lazytpu_py_add_constants(m) < 0) {  /* the core's enums (constants_py.h) */
    Py_DECREF(m);
    return nullptr;
  }
  if (PyModule_AddIntConstant(m, "GRAPH_COMPILE", LT_GRAPH_COMPILE) < 0 ||
      PyModule_AddIntConstant(m, "GRAPH_EXECUTE", LT_GRAPH_EXECUTE) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
