/*
 * backend/world_py.h — lazytpu._C's world functions, implemented in
 * world_py.cpp and listed in module.cpp's method table (plain CPython).
 *
 *   world_info() -> None outside a launcher, else (ordinal, world size)
 *   world_barrier()
 *   world_all_reduce(send_ptr, recv_ptr, n, lt_dtype, lt_reduce_type, scale)
 *   world_all_gather(send_ptr, recv_ptr, outer, block, lt_dtype)
 *   world_reduce_scatter(send_ptr, recv_ptr, outer, block, lt_dtype,
 *                        lt_reduce_type, scale)
 *   world_broadcast(send_ptr, recv_ptr, n, lt_dtype, root)
 *   world_exchange(tag, payload: bytes) -> [bytes of every ordinal]
 *   limit_inflight(depth=0)   (0: LAZYTPU_MAX_INFLIGHT; see lt_limit_inflight)
 *
 * Pointers are data_ptr() of contiguous CPU tensors that the caller keeps
 * alive; the layouts are spawn/world.h's. Outside a launcher (a world of
 * one) a collective is its one-rank result (recv = send, times scale).
 */
#ifndef LT_WORLD_PY_H
#define LT_WORLD_PY_H

#include <Python.h>

PyObject *lazytpu_py_world_info(PyObject *, PyObject *);
PyObject *lazytpu_py_world_barrier(PyObject *, PyObject *);
PyObject *lazytpu_py_world_all_reduce(PyObject *, PyObject *args);
PyObject *lazytpu_py_world_all_gather(PyObject *, PyObject *args);
PyObject *lazytpu_py_world_reduce_scatter(PyObject *, PyObject *args);
PyObject *lazytpu_py_world_broadcast(PyObject *, PyObject *args);
PyObject *lazytpu_py_world_exchange(PyObject *, PyObject *args);
PyObject *lazytpu_py_limit_inflight(PyObject *, PyObject *args);

#endif
