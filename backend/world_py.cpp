/*
 * backend/world_py.cpp — lazytpu._C's world functions (plain CPython API):
 * the host-path collectives of python/lazytpu/collectives.py over the
 * process's world (spawn/world.h) and the pipeline bound of the loaders
 * (lt_limit_inflight). Registered in module.cpp's method table.
 *
 * Tensors cross as (data pointer, element count) of contiguous CPU tensors
 * the caller keeps alive for the call. The GIL is released while a
 * collective waits for its peers. Failures raise RuntimeError
 * "lazytpu.<op>: <message>" (the world's own message names ranks, shapes
 * and dtypes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "lazytpu.h"
#include "lt_shim.h"
#include "world_py.h"
extern "C" {
#include "world.h"
}

namespace {

PyObject *raise_world(const char *what) {
  const char *m = lt_last_error();
  PyErr_Format(PyExc_RuntimeError, "lazytpu.%s: %s", what, (m && *m) ? m : "error");
  return nullptr;
}

/* The process's world (nullptr outside a launcher); false with the error set
 * when attaching failed. */
bool default_world(lt_world **w, const char *what) {
  if (lt_world_default(w) != LT_OK) {
    raise_world(what);
    return false;
  }
  return true;
}

void *as_ptr(unsigned long long p) { return reinterpret_cast<void *>(static_cast<uintptr_t>(p)); }

}  // namespace

PyObject *lazytpu_py_world_info(PyObject *, PyObject *) {
  lt_world *w;
  if (!default_world(&w, "world")) return nullptr;
  if (!w) Py_RETURN_NONE;
  return Py_BuildValue("(ii)", lt_world_rank(w), lt_world_size(w));
}

PyObject *lazytpu_py_world_barrier(PyObject *, PyObject *) {
  lt_world *w;
  if (!default_world(&w, "barrier")) return nullptr;
  lt_status st;
  Py_BEGIN_ALLOW_THREADS
  st = lt_world_barrier(w);
  Py_END_ALLOW_THREADS
  if (st != LT_OK) return raise_world("barrier");
  Py_RETURN_NONE;
}

PyObject *lazytpu_py_world_all_reduce(PyObject *, PyObject *args) {
  unsigned long long send, recv;
  long long n;
  int dtype, reduce;
  double scale;
  if (!PyArg_ParseTuple(args, "KKLiid", &send, &recv, &n, &dtype, &reduce, &scale))
    return nullptr;
  lt_world *w;
  if (!default_world(&w, "all_reduce")) return nullptr;
  lt_status st;
  Py_BEGIN_ALLOW_THREADS
  st = lt_world_all_reduce(w, as_ptr(send), as_ptr(recv), n, (lt_dtype)dtype,
                           (lt_reduce_type)reduce, scale, nullptr);
  Py_END_ALLOW_THREADS
  if (st != LT_OK) return raise_world("all_reduce");
  Py_RETURN_NONE;
}

PyObject *lazytpu_py_world_all_gather(PyObject *, PyObject *args) {
  unsigned long long send, recv;
  long long outer, block;
  int dtype;
  if (!PyArg_ParseTuple(args, "KKLLi", &send, &recv, &outer, &block, &dtype)) return nullptr;
  lt_world *w;
  if (!default_world(&w, "all_gather")) return nullptr;
  lt_status st;
  Py_BEGIN_ALLOW_THREADS
  st = lt_world_all_gather(w, as_ptr(send), as_ptr(recv), outer, block, (lt_dtype)dtype,
                           nullptr);
  Py_END_ALLOW_THREADS
  if (st != LT_OK) return raise_world("all_gather");
  Py_RETURN_NONE;
}

PyObject *lazytpu_py_world_reduce_scatter(PyObject *, PyObject *args) {
  unsigned long long send, recv;
  long long outer, block;
  int dtype, reduce;
  double scale;
  if (!PyArg_ParseTuple(args, "KKLLiid", &send, &recv, &outer, &block, &dtype, &reduce,
                        &scale))
    return nullptr;
  lt_world *w;
  if (!default_world(&w, "reduce_scatter")) return nullptr;
  lt_status st;
  Py_BEGIN_ALLOW_THREADS
  st = lt_world_reduce_scatter(w, as_ptr(send), as_ptr(recv), outer, block, (lt_dtype)dtype,
                               (lt_reduce_type)reduce, scale, nullptr);
  Py_END_ALLOW_THREADS
  if (st != LT_OK) return raise_world("reduce_scatter");
  Py_RETURN_NONE;
}

PyObject *lazytpu_py_world_broadcast(PyObject *, PyObject *args) {
  unsigned long long send, recv;
  long long n;
  int dtype, root;
  if (!PyArg_ParseTuple(args, "KKLii", &send, &recv, &n, &dtype, &root)) return nullptr;
  lt_world *w;
  if (!default_world(&w, "broadcast")) return nullptr;
  lt_status st;
  Py_BEGIN_ALLOW_THREADS
  st = lt_world_broadcast(w, as_ptr(send), as_ptr(recv), n, (lt_dtype)dtype, root, nullptr);
  Py_END_ALLOW_THREADS
  if (st != LT_OK) return raise_world("broadcast");
  Py_RETURN_NONE;
}

/* world_exchange(tag, payload) -> [payload of every ordinal, in order] */
PyObject *lazytpu_py_world_exchange(PyObject *, PyObject *args) {
  const char *tag;
  Py_buffer payload;
  if (!PyArg_ParseTuple(args, "sy*", &tag, &payload)) return nullptr;
  lt_world *w;
  if (!default_world(&w, "rendezvous")) {
    PyBuffer_Release(&payload);
    return nullptr;
  }
  std::vector<size_t> lens((size_t)lt_world_size(w));
  void *all = nullptr;
  lt_status st;
  Py_BEGIN_ALLOW_THREADS
  st = lt_world_exchange(w, tag, payload.buf, (size_t)payload.len, &all, lens.data());
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&payload);
  if (st != LT_OK) {
    free(all);
    return raise_world("rendezvous");
  }
  PyObject *out = PyList_New((Py_ssize_t)lens.size());
  size_t off = 0;
  for (size_t k = 0; out && k < lens.size(); k++) {
    PyObject *b = PyBytes_FromStringAndSize(
        lens[k] ? static_cast<const char *>(all) + off : "", (Py_ssize_t)lens[k]);
    if (!b) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(out, (Py_ssize_t)k, b);
    off += lens[k];
  }
  free(all);
  return out;
}

/* limit_inflight(depth=0): lt_limit_inflight on every core that holds
 * tensors; every core is bounded even when one reports an error, the first
 * error is raised like a step's (IndexError for an index out of range). */
PyObject *lazytpu_py_limit_inflight(PyObject *, PyObject *args) {
  int depth = 0;
  if (!PyArg_ParseTuple(args, "|i", &depth)) return nullptr;
  uint32_t mask = lazytpu_used_cores_mask();
  lt_status first = LT_OK;
  std::string msg;
  Py_BEGIN_ALLOW_THREADS
  for (int c = 0; c < 32; c++) {
    if (!(mask & (1u << c))) continue;
    lt_status st = lt_limit_inflight(c, depth);
    if (st != LT_OK && first == LT_OK) {
      first = st;
      msg = lt_last_error();
    }
  }
  Py_END_ALLOW_THREADS
  if (first != LT_OK) {
    PyErr_SetString(first == LT_ERR_ARG ? PyExc_IndexError : PyExc_RuntimeError,
                    msg.empty() ? "lazytpu: error" : msg.c_str());
    return nullptr;
  }
  Py_RETURN_NONE;
}
