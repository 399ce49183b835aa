"""lazytpu.world: this process's place in the world of simulated cores, and
the C library's world API (ctypes over liblazytpu.so, loaded by lazytpu._C).

A world is hosts x cores per host: ``lazytpu-run -n C`` starts C worker
processes on one host (shared memory between them); under ``mpirun -np H`` or
``lazytpu-run --hosts H`` there are H hosts (see docs/multihost.md). The
launcher tells each worker where it is through environment variables:
LAZYTPU_ORDINAL (global), LAZYTPU_WORLD_SIZE (global), LAZYTPU_LOCAL_ORDINAL,
LAZYTPU_LOCAL_WORLD_SIZE, LAZYTPU_HOST_INDEX, LAZYTPU_NUM_HOSTS.
"""
import ctypes
import os

from . import _C

__all__ = ["get_ordinal", "get_local_ordinal", "world_size", "local_world_size",
           "host_index", "num_hosts", "limit_inflight"]


def _env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return int(default)


def get_ordinal():
    """Global ordinal of this process (0 outside a launcher)."""
    return _env_int("LAZYTPU_ORDINAL", 0)


def get_local_ordinal():
    """Ordinal of this process on its host."""
    return _env_int("LAZYTPU_LOCAL_ORDINAL", get_ordinal())


def world_size():
    """Number of processes in the world, all hosts (1 outside a launcher)."""
    return _env_int("LAZYTPU_WORLD_SIZE", 1)


def local_world_size():
    """Number of processes on this host."""
    return _env_int("LAZYTPU_LOCAL_WORLD_SIZE", world_size() // max(num_hosts(), 1))


def host_index():
    """Index of this process's host (0 on a single host)."""
    return _env_int("LAZYTPU_HOST_INDEX", 0)


def num_hosts():
    return _env_int("LAZYTPU_NUM_HOSTS", 1)


# ------------------------------------------------------------ C library ----

_lib = None


def _lib_path():
    """Path of the liblazytpu.so this process loaded (through _C)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if p.endswith("/liblazytpu.so"):
                    return p
    except OSError:
        pass
    return None


def _clib():
    global _lib
    if _lib is None:
        path = _lib_path() or "liblazytpu.so"
        lib = ctypes.CDLL(path)
        vp, i64, i32, dbl = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
        lib.lt_world_default.argtypes = [ctypes.POINTER(vp)]
        lib.lt_world_default.restype = i32
        lib.lt_world_size.argtypes = [vp]
        lib.lt_world_size.restype = i32
        lib.lt_world_rank.argtypes = [vp]
        lib.lt_world_rank.restype = i32
        lib.lt_world_barrier.argtypes = [vp]
        lib.lt_world_barrier.restype = i32
        lib.lt_world_all_reduce.argtypes = [vp, vp, vp, i64, i32, i32, dbl, vp]
        lib.lt_world_all_reduce.restype = i32
        lib.lt_world_all_gather.argtypes = [vp, vp, vp, i64, i64, i32, vp]
        lib.lt_world_all_gather.restype = i32
        lib.lt_world_reduce_scatter.argtypes = [vp, vp, vp, i64, i64, i32, i32, dbl, vp]
        lib.lt_world_reduce_scatter.restype = i32
        lib.lt_world_broadcast.argtypes = [vp, vp, vp, i64, i32, i32, vp]
        lib.lt_world_broadcast.restype = i32
        lib.lt_world_exchange.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_size_t, ctypes.POINTER(vp),
                                          ctypes.POINTER(ctypes.c_size_t)]
        lib.lt_world_exchange.restype = i32
        lib.lt_core_next_seq.argtypes = [i32]
        lib.lt_core_next_seq.restype = ctypes.c_uint64
        lib.lt_core_wait.argtypes = [i32, ctypes.c_uint64]
        lib.lt_core_wait.restype = i32
        lib.lt_last_error.argtypes = []
        lib.lt_last_error.restype = ctypes.c_char_p
        lib.free.argtypes = [vp]
        lib.free.restype = None
        _lib = lib
    return _lib


def _check(st, what):
    if st != 0:
        msg = _clib().lt_last_error().decode("utf-8", "replace")
        raise RuntimeError("lazytpu.%s: %s" % (what, msg))


def _world():
    """The process's world handle (None when not under the launcher)."""
    lib = _clib()
    w = ctypes.c_void_p()
    _check(lib.lt_world_default(ctypes.byref(w)), "world")
    return w.value


# Programs each core may have queued or running after a step boundary before
# the host waits (LAZYTPU_MAX_INFLIGHT, default 2: the core runs step N while
# the host traces step N+1, and no further).
_inflight = {}


def _max_inflight():
    try:
        return max(1, int(os.environ.get("LAZYTPU_MAX_INFLIGHT", "2")))
    except ValueError:
        return 2


def limit_inflight(depth=None):
    """Back-pressure after a step boundary: waits until each used core has at
    most ``depth`` - 1 programs queued or running besides the one just
    submitted. Without it a host that traces faster than its core runs (a
    busy machine, several processes per CPU, a core waiting for its peers in
    a collective) queues steps without limit: every queued program holds its
    output buffers, device memory grows by a step's outputs per step, and
    each step writes fresh pages (page faults) instead of reusing the
    buffer cache. Raises the error of a failed program, like a sync."""
    depth = _max_inflight() if depth is None else max(1, int(depth))
    lib = _clib()
    for core in _C.used_cores():
        last = lib.lt_core_next_seq(core) - 1
        q = _inflight.setdefault(core, [])
        if last > 0 and (not q or q[-1] != last):
            q.append(last)
        while len(q) >= depth:
            seq = q.pop(0)
            if len(q) >= depth:
                continue              # an older one: waiting for a newer suffices
            _check(lib.lt_core_wait(core, seq), "step")


def _quiesce():
    """Host-side collectives share the world with the core's worker thread:
    wait for queued programs (which may contain collectives) first."""
    try:
        _C.wait(-1)
    except Exception:
        pass


# ------------------------------------------------------ host collectives ----
