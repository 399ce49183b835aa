"""lazytpu.spawn: data-parallel training on N processes, one simulated core each
(like ``torch_xla.distributed.xla_multiprocessing`` on a TPU v3-8).

    import lazytpu, lazytpu.spawn as lsp

    def train(index, lr):
        dev = lazytpu.device()            # this process's core
        ...
        lazytpu.optimizer_step(opt)       # gradients all-reduced (mean)
        lazytpu.mark_step()

    if __name__ == "__main__":
        lsp.spawn(train, args=(0.1,), nprocs=8)

Workers run through the ``lazytpu-run`` launcher (shared-memory world,
supervision: if one worker fails every other one is stopped and ``spawn``
raises :class:`WorkerError` naming the ordinal and the cause). ``fn`` is
pickled by reference, so it must be importable (a module-level function; for
a script, guard the call with ``if __name__ == "__main__":``).

Collectives: :func:`all_reduce`, :func:`all_gather`, :func:`reduce_scatter`,
:func:`broadcast` on tensors (traced into the step's graph as IR ops when the
backend exposes ``torch.ops.lazytpu.*``; otherwise computed on host copies),
and :func:`rendezvous` / :func:`mesh_reduce` on Python values.
"""
import ctypes
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import traceback

import torch

from . import _C  # noqa: F401  (loads liblazytpu.so)

__all__ = ["spawn", "WorkerError", "REDUCE_SUM", "REDUCE_MUL", "REDUCE_MIN",
           "REDUCE_MAX", "REDUCE_AND", "REDUCE_OR", "all_reduce", "all_gather",
           "reduce_scatter", "broadcast", "rendezvous", "mesh_reduce",
           "broadcast_master_param", "get_ordinal", "world_size"]

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_MIN = "min"
REDUCE_MAX = "max"
REDUCE_AND = "and"
REDUCE_OR = "or"
_REDUCE = {"sum": 0, "mul": 1, "min": 2, "max": 3, "and": 4, "or": 5}

# torch dtype -> lt_dtype (include/lazytpu.h)
_DTYPE = {torch.float32: 0, torch.bfloat16: 1, torch.float64: 2,
          torch.int64: 3, torch.int32: 4, torch.bool: 5}


class WorkerError(RuntimeError):
    """A worker failed. ``ordinal`` (-1 if the launcher itself stopped, e.g.
    timeout or interrupt), ``exit_code`` (the launcher's) and ``cause``."""

    def __init__(self, message, ordinal=-1, exit_code=1, cause=""):
        super().__init__(message)
        self.ordinal = ordinal
        self.exit_code = exit_code
        self.cause = cause


def get_ordinal():
    return int(os.environ.get("LAZYTPU_ORDINAL", "0"))


def world_size():
    return int(os.environ.get("LAZYTPU_WORLD_SIZE", "1"))


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

def rendezvous(tag, payload=b"", replicas=None):
    """Waits until every ordinal reached ``rendezvous(tag)``; returns the list
    of every ordinal's ``payload`` (bytes), in ordinal order. Ordinals that
    use different tags all raise RuntimeError naming both tags."""
    if replicas:
        raise NotImplementedError("lazytpu.rendezvous: replica groups")
    if isinstance(payload, str):
        payload = payload.encode()
    payload = bytes(payload)
    w = _world()
    if w is None:
        return [payload]
    _quiesce()
    lib = _clib()
    n = lib.lt_world_size(w)
    lens = (ctypes.c_size_t * n)()
    out = ctypes.c_void_p()
    _check(lib.lt_world_exchange(w, tag.encode(), payload, len(payload),
                                 ctypes.byref(out), lens), "rendezvous")
    res, off = [], 0
    try:
        for k in range(n):
            res.append(ctypes.string_at(out.value + off, lens[k]) if lens[k] else b"")
            off += lens[k]
    finally:
        if out.value:
            lib.free(out.value)
    return res


def _to_cpu(data):
    if isinstance(data, torch.Tensor):
        return data.cpu() if data.device.type != "cpu" else data
    if isinstance(data, dict):
        return type(data)((k, _to_cpu(v)) for k, v in data.items())
    if isinstance(data, (list, tuple)) and not hasattr(data, "_fields"):
        return type(data)(_to_cpu(v) for v in data)
    return data


def mesh_reduce(tag, data, reduce_fn):
    """Gathers ``data`` (any picklable value; device tensors are moved to the
    CPU) from every ordinal and returns ``reduce_fn(list_of_values)``."""
    blobs = rendezvous(tag, pickle.dumps(_to_cpu(data)))
    return reduce_fn([pickle.loads(b) for b in blobs])


# ---------------------------------------------------- tensor collectives ----

def _reduce_code(reduce_type):
    if isinstance(reduce_type, int):
        return reduce_type
    try:
        return _REDUCE[reduce_type]
    except KeyError:
        raise ValueError("lazytpu.all_reduce: unknown reduce type %r (one of %s)"
                         % (reduce_type, ", ".join(_REDUCE))) from None


def _device_op(name):
    """torch.ops.lazytpu.<name> if the backend registered it, else None."""
    try:
        return getattr(torch.ops.lazytpu, name)
    except (AttributeError, RuntimeError):
        return None


def _host_call(fn_name, t, out_shape, *args):
    """Runs a world collective on a contiguous CPU copy of t; returns a CPU
    tensor of out_shape (same dtype)."""
    if t.dtype not in _DTYPE:
        raise TypeError("lazytpu.%s: dtype %s not supported" % (fn_name, t.dtype))
    src = t.detach()
    if src.device.type != "cpu":
        src = src.cpu()
    src = src.contiguous()
    out = torch.empty(out_shape, dtype=src.dtype)
    w = _world()
    _quiesce()
    lib = _clib()
    fn = getattr(lib, "lt_world_" + fn_name)
    _check(fn(w, src.data_ptr(), out.data_ptr(), *args), fn_name)
    return out


def _put(result_cpu, like):
    """result on like's device (a new tensor)."""
    if like.device.type == "cpu":
        return result_cpu
    return result_cpu.to(like.device)


def _all_reduce_one(t, code, scale):
    op = _device_op("all_reduce")
    if op is not None and t.device.type != "cpu":
        return op(t, code, float(scale))
    out = _host_call("all_reduce", t, t.shape, t.numel(), _DTYPE[t.dtype], code,
                     float(scale), None)
    return _put(out, t)


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """Reduces over all ordinals ('sum', 'mul', 'min', 'max', 'and', 'or'),
    times ``scale``. A single tensor: returns the result. A list of tensors:
    reduces them (one collective for all of them when they live on the host
    path) and updates each in place; returns the list."""
    if groups:
        raise NotImplementedError("lazytpu.all_reduce: replica groups")
    code = _reduce_code(reduce_type)
    if isinstance(inputs, torch.Tensor):
        return _all_reduce_one(inputs, code, scale)
    inputs = list(inputs)
    groups = {}
    for t in inputs:
        groups.setdefault((t.device, t.dtype), []).append(t)
    for (dev, _), ts in groups.items():
        _all_reduce_group(ts, dev, code, scale)
    return inputs


def _all_reduce_group(ts, dev, code, scale):
    """One collective for tensors of one device and dtype: flatten, reduce,
    split, copy back in place."""
    sizes = [t.numel() for t in ts]
    op = _device_op("all_reduce")
    with torch.no_grad():
        if op is not None and dev.type != "cpu":
            flat = ts[0].reshape(-1) if len(ts) == 1 else torch.cat(
                [t.reshape(-1) for t in ts])
            red = op(flat, code, float(scale))
        else:
            if dev.type != "cpu":
                # one graph for all of them instead of one sync per tensor
                _C.sync(-1, getattr(_C, "SYNC_OPTIMIZER_STEP", 1), 0)
            flat = torch.cat([t.detach().reshape(-1).cpu() for t in ts])
            red = _host_call("all_reduce", flat, flat.shape, flat.numel(),
                             _DTYPE[flat.dtype], code, float(scale), None)
        off = 0
        for t, n in zip(ts, sizes):
            t.copy_(red[off:off + n].view(t.shape))
            off += n


def _outer_block(shape, dim):
    outer = 1
    for d in shape[:dim]:
        outer *= d
    block = 1
    for d in shape[dim:]:
        block *= d
    return outer, block


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    """Concatenation of every ordinal's ``value`` along ``dim``."""
    if groups:
        raise NotImplementedError("lazytpu.all_gather: replica groups")
    dim = dim % max(value.dim(), 1)
    op = _device_op("all_gather")
    if op is not None and value.device.type != "cpu":
        res = op(value, dim)
    else:
        n = world_size() if _world() is not None else 1
        shape = list(value.shape)
        outer, block = _outer_block(shape, dim)
        out_shape = shape[:dim] + [shape[dim] * n] + shape[dim + 1:]
        res = _put(_host_call("all_gather", value, out_shape, outer, block,
                              _DTYPE[value.dtype], None), value)
    if output is not None:
        with torch.no_grad():
            output.copy_(res)
        return output
    return res


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count,
                   groups=None, output=None, pin_layout=True):
    """Reduces ``input`` over all ordinals and returns this ordinal's shard
    along ``scatter_dim`` (``shard_count`` must equal the world size)."""
    if groups:
        raise NotImplementedError("lazytpu.reduce_scatter: replica groups")
    n = world_size() if _world() is not None else 1
    if shard_count != n:
        raise ValueError("lazytpu.reduce_scatter: shard_count %d but world size %d"
                         % (shard_count, n))
    code = _reduce_code(reduce_type)
    dim = scatter_dim % max(input.dim(), 1)
    shape = list(input.shape)
    if shape[dim] % n:
        raise ValueError("lazytpu.reduce_scatter: size %d of dim %d is not "
                         "divisible by world size %d" % (shape[dim], dim, n))
    op = _device_op("reduce_scatter")
    if op is not None and input.device.type != "cpu":
        res = op(input, code, dim, float(scale))
    else:
        out_shape = shape[:dim] + [shape[dim] // n] + shape[dim + 1:]
        outer, _ = _outer_block(shape, dim)
        block = 1
        for d in out_shape[dim:]:
            block *= d
        res = _put(_host_call("reduce_scatter", input, out_shape, outer, block,
                              _DTYPE[input.dtype], code, float(scale), None), input)
    if output is not None:
        with torch.no_grad():
            output.copy_(res)
        return output
    return res


def broadcast(value, root=0):
    """``root``'s value on every ordinal."""
    op = _device_op("broadcast")
    if op is not None and value.device.type != "cpu":
        return op(value, int(root))
    out = _host_call("broadcast", value, value.shape, value.numel(),
                     _DTYPE[value.dtype], int(root), None)
    return _put(out, value)


def broadcast_master_param(model):
    """Copies ordinal 0's parameters and buffers into every ordinal's model."""
    if world_size() <= 1 or _world() is None:
        return
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            t.copy_(broadcast(t, 0))


def _all_reduce_gradients(optimizer):
    """Mean of every parameter's gradient over the world (used by
    lazytpu.optimizer_step)."""
    n = world_size()
    if n <= 1 or _world() is None:
        return
    params = [p for group in optimizer.param_groups
              for p in group["params"] if p.grad is not None]
    if not params:
        return
    grads = [p.grad for p in params]
    by_dtype = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    for gs in by_dtype.values():
        all_reduce(REDUCE_SUM, gs, scale=1.0 / n)


# ------------------------------------------------------------------ spawn ----

def _find_launcher():
    cands = []
    if os.environ.get("LAZYTPU_BIN_DIR"):
        cands.append(os.path.join(os.environ["LAZYTPU_BIN_DIR"], "lazytpu-run"))
    lp = _lib_path()
    if lp:
        cands.append(os.path.join(os.path.dirname(lp), "lazytpu-run"))
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    w = shutil.which("lazytpu-run")
    if w:
        return w
    raise RuntimeError("lazytpu.spawn: cannot find the lazytpu-run launcher "
                       "(looked in %s and PATH; set LAZYTPU_BIN_DIR)" % ", ".join(cands))


def _main_path():
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and os.path.exists(path) and not path.endswith("pytest"):
        return os.path.abspath(path)
    return None


class _SpawnContext:
    """What spawn(join=False) returns: join() waits and raises on failure."""

    def __init__(self, proc, tmpdir, nprocs):
        self.proc = proc
        self.tmpdir = tmpdir
        self.nprocs = nprocs

    def pids(self):
        return [self.proc.pid]

    def join(self, timeout=None):
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        status = os.path.join(self.tmpdir, "status")
        ordinal, msg = -1, ""
        try:
            with open(status) as f:
                parts = f.read().rstrip("\n").split("\t", 2)
            code, ordinal, msg = int(parts[0]), int(parts[1]), parts[2]
        except (OSError, ValueError, IndexError):
            pass
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        if code != 0:
            if not msg:
                msg = "lazytpu-run exited with code %d" % code
            cause = msg.split(": ", 1)[1] if ": " in msg else msg
            raise WorkerError("lazytpu.spawn: " + msg, ordinal, code, cause)
        return True


def spawn(fn, args=(), nprocs=None, join=True, daemon=False,
          start_method="spawn", timeout=None, metrics_file=None):
    """Runs ``fn(index, *args)`` in ``nprocs`` worker processes (default 8),
    each driving one simulated core (``lazytpu.device()`` in the worker).
    Blocks until all exit (``join=True``) and raises :class:`WorkerError`
    naming the ordinal and cause if any fails; with ``join=False`` returns a
    context whose ``join()`` does that. ``nprocs=1`` runs ``fn(0, *args)`` in
    this process. ``timeout`` (seconds) stops a hanging job; ``metrics_file``
    collects every worker's metrics report (merged)."""
    if start_method not in ("spawn", "fork", "forkserver"):
        raise ValueError("lazytpu.spawn: unknown start_method %r" % start_method)
    n = 8 if nprocs is None else int(nprocs)
    if n == 1:
        fn(0, *args)
        return None
    tmpdir = tempfile.mkdtemp(prefix="lazytpu-spawn-")
    head = {
        "sys_path": list(sys.path),
        "main_path": _main_path() if getattr(fn, "__module__", "") == "__main__" else None,
    }
    job = os.path.join(tmpdir, "job.pkl")
    try:
        with open(job, "wb") as f:
            pickle.dump(head, f)
            pickle.dump((fn, tuple(args)), f)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise ValueError("lazytpu.spawn: fn and args must be picklable (fn by "
                         "reference: a module-level function): %s" % e) from None
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"]
                                    if env.get("PYTHONPATH") else "")
    cmd = [_find_launcher(), "-n", str(n), "--quiet",
           "--status-file", os.path.join(tmpdir, "status")]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    if metrics_file:
        cmd += ["--metrics", os.path.abspath(metrics_file)]
    cmd += ["--", sys.executable, "-c",
            "import lazytpu.spawn as s; s._worker_main(%r)" % job]
    proc = subprocess.Popen(cmd, env=env)
    ctx = _SpawnContext(proc, tmpdir, n)
    if not join:
        return ctx
    try:
        ctx.join()
    except KeyboardInterrupt:
        proc.send_signal(2)
        proc.wait()
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    return None


def _load_main(path):
    """Makes a script's functions importable as __main__ in the worker (the
    script runs as __mp_main__, so its `if __name__ == "__main__"` block
    does not)."""
    import types
    mod = types.ModuleType("__mp_main__")
    mod.__file__ = path
    sys.modules["__mp_main__"] = mod
    sys.modules["__main__"] = mod
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    exec(code, mod.__dict__)


def _write_metrics():
    path = os.environ.get("LAZYTPU_METRICS_FILE")
    if not path:
        return
    path = path.replace("{ordinal}", str(get_ordinal()))
    try:
        from . import metrics
        with open(path, "w") as f:
            f.write(metrics.metrics_report())
    except Exception as e:  # metrics are best effort at exit
        sys.stderr.write("lazytpu: could not write metrics to %s: %s\n" % (path, e))


def _worker_main(job):
    """Entry point of a worker process (run by lazytpu-run): restores
    sys.path and the parent's __main__ script, then runs fn(ordinal, *args).
    An exception prints its traceback (forwarded by the launcher with an
    "[ordinal k]" prefix) and exits 1."""
    try:
        with open(job, "rb") as f:
            head = pickle.load(f)
            for p in reversed(head.get("sys_path", [])):
                if p not in sys.path:
                    sys.path.insert(0, p)
            if head.get("main_path"):
                _load_main(head["main_path"])
            fn, args = pickle.load(f)
        fn(get_ordinal(), *args)
        _C.wait(-1)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        _write_metrics()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        _write_metrics()
        os._exit(1)
    _write_metrics()
    sys.stdout.flush()
    sys.stderr.flush()
    # skip interpreter teardown: the world and cores need no cleanup
    os._exit(0)
