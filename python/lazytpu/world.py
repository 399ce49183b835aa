"""lazytpu.world: this process's place in the world of simulated cores (the
C library's world API, spawn/world.h, through lazytpu._C).

A world is hosts x cores per host: ``lazytpu-run -n C`` starts C worker
processes on one host (shared memory between them); under ``mpirun -np H`` or
``lazytpu-run --hosts H`` there are H hosts (see docs/multihost.md). The
launcher tells each worker where it is through environment variables:
LAZYTPU_ORDINAL (global), LAZYTPU_WORLD_SIZE (global), LAZYTPU_LOCAL_ORDINAL,
LAZYTPU_LOCAL_WORLD_SIZE, LAZYTPU_HOST_INDEX, LAZYTPU_NUM_HOSTS, read (as the
C core reads them) through the options table, ``_C.option``.
"""
from . import _C

__all__ = ["get_ordinal", "get_local_ordinal", "world_size", "local_world_size",
           "host_index", "num_hosts", "limit_inflight"]


def get_ordinal():
    """Global ordinal of this process (0 outside a launcher)."""
    return _C.option("LAZYTPU_ORDINAL")


def get_local_ordinal():
    """Ordinal of this process on its host."""
    v = _C.option("LAZYTPU_LOCAL_ORDINAL")
    return get_ordinal() if v is None else v


def world_size():
    """Number of processes in the world, all hosts (1 outside a launcher)."""
    return _C.option("LAZYTPU_WORLD_SIZE")


def local_world_size():
    """Number of processes on this host."""
    v = _C.option("LAZYTPU_LOCAL_WORLD_SIZE")
    return world_size() // max(num_hosts(), 1) if v is None else v


def host_index():
    """Index of this process's host (0 on a single host)."""
    return _C.option("LAZYTPU_HOST_INDEX")


def num_hosts():
    return _C.option("LAZYTPU_NUM_HOSTS")


# ------------------------------------------------------------ the world ----

def _world():
    """(ordinal, world size) of the process's world, or None when not under
    the launcher (a world of one)."""
    return _C.world_info()


def limit_inflight(depth=None):
    """Back-pressure after a step boundary: waits until each used core has at
    most ``depth`` - 1 earlier steps queued or running besides the one just
    ended (default LAZYTPU_MAX_INFLIGHT, 2: the core runs step N while the
    host traces step N+1, and no further). Without it a host that traces
    faster than its core runs (a busy machine, several processes per CPU, a
    core waiting for its peers in a collective) queues steps without limit:
    every queued program holds its output buffers, device memory grows by a
    step's outputs per step, and each step writes fresh pages (page faults)
    instead of reusing the buffer cache. Raises the error of a failed
    program, like a step boundary."""
    _C.limit_inflight(0 if depth is None else max(1, int(depth)))


def _quiesce():
    """Host-side collectives share the world with the core's worker thread:
    wait for queued programs (which may contain collectives) first."""
    try:
        _C.wait(-1)
    except Exception:
        pass
