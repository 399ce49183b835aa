"""torch_xla._internal.pjrt on lazytpu.launch: running a function on every
device and collecting its results.

torch_xla on CPU runs one thread per device in one process; on a TPU host
one process per chip. lazytpu runs one process per device in both cases (a
worker's device is ``xla:0``, its ordinal ``xr.global_ordinal()``), so
results are keyed by global ordinal as torch_xla keys them.
"""
import os
import pickle
import shutil
import tempfile

import lazytpu
from lazytpu import launch as _launch

from lazytpu.compat import devices as _devices


def _merge_replica_results(replica_results):
    """{ordinal: result} from [(ordinal, result)]; AssertionError on a
    duplicate ordinal."""
    out = {}
    for ordinal, result in replica_results:
        assert ordinal not in out, "2 results for replica %d" % ordinal
        out[ordinal] = result
    return out


class _SpawnFn:
    """fn(global ordinal, *args) (picklable when fn is)."""

    def __init__(self, fn, *args, **kwargs):
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def __call__(self):
        return self.fn(lazytpu.get_ordinal(), *self.args, **self.kwargs)


class _Collect:
    """Worker side of run_multiprocess: runs fn() and writes its pickled
    result to DIR/<ordinal> (an exception it raised to DIR/<ordinal>.error,
    re-raised in the parent, as torch_xla's process pool does)."""

    def __init__(self, fn, args, kwargs, out_dir):
        self.fn, self.args, self.kwargs, self.out_dir = fn, args, kwargs, out_dir

    def _write(self, name, obj):
        path = os.path.join(self.out_dir, name)
        with open(path + ".tmp", "wb") as f:
            pickle.dump(obj, f)
        os.replace(path + ".tmp", path)

    def __call__(self, index):
        initialize_multiprocess(lazytpu.get_local_ordinal(), lazytpu.local_world_size())
        me = str(lazytpu.get_ordinal())
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as e:
            try:
                pickle.dumps(e)
            except Exception:
                e = RuntimeError("%s: %s" % (type(e).__name__, e))
            self._write(me + ".error", e)
            raise
        self._write(me, result)


def _worker_error(out_dir):
    """The exception of the lowest ordinal that raised one, or None."""
    errs = sorted((int(n.split(".")[0]), n) for n in os.listdir(out_dir)
                  if n.endswith(".error"))
    if not errs:
        return None
    with open(os.path.join(out_dir, errs[0][1]), "rb") as f:
        return pickle.load(f)


def _check_not_initialized():
    if lazytpu._C.used_cores():
        raise RuntimeError("Runtime is already initialized. Do not use the XLA device "
                           "before calling xmp.spawn.")


def run_multiprocess(fn, *args, start_method="spawn", **kwargs):
    """fn(*args, **kwargs) on every device (one process each); returns
    {global ordinal: result}. Results must be picklable."""
    _check_not_initialized()
    n = _devices.spawn_count()
    if n is None:
        # a worker of a launched world: every worker runs fn, results are
        # exchanged between them
        initialize_multiprocess(lazytpu.get_local_ordinal(), lazytpu.local_world_size())
        mine = (lazytpu.get_ordinal(), fn(*args, **kwargs))
        return _merge_replica_results(lazytpu.mesh_reduce(
            "torch_xla._internal.pjrt.run_multiprocess", mine, list))
    # as 2.9, fn runs in worker processes even for one device (this process
    # never initializes the runtime, so run_multiprocess can be called again)
    out_dir = tempfile.mkdtemp(prefix="lazytpu-pjrt-")
    try:
        try:
            _launch.spawn(_Collect(fn, args, kwargs, out_dir), nprocs=n,
                          start_method=start_method, in_process=False)
        except _launch.WorkerError as failure:
            err = _worker_error(out_dir)
            if err is None:
                raise
            raise err from failure
        results = []
        for name in os.listdir(out_dir):
            if name.isdigit():
                with open(os.path.join(out_dir, name), "rb") as f:
                    results.append((int(name), pickle.load(f)))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return _merge_replica_results(results)


def _run_singleprocess(fn, *args, **kwargs):
    initialize_singleprocess()
    return fn(*args, **kwargs)


def initialize_singleprocess():
    os.environ.setdefault("PJRT_LOCAL_PROCESS_COUNT", "1")


def initialize_multiprocess(local_rank, local_world_size):
    os.environ.setdefault("PJRT_LOCAL_PROCESS_RANK", str(local_rank))
    os.environ.setdefault("PJRT_LOCAL_PROCESS_COUNT", str(local_world_size))


def spawn(fn, nprocs=None, start_method="spawn", args=()):
    """xmp.spawn: fn(index, *args) on every device. nprocs is 1 (in this
    process) or None (all devices: CPU_NUM_DEVICES with PJRT_DEVICE=CPU,
    else the cores); any other value raises ValueError, as in torch_xla 2.9."""
    spawn_fn = _SpawnFn(fn, *args)
    if nprocs == 1:
        return _run_singleprocess(spawn_fn)
    if nprocs is not None:
        raise ValueError(
            "Unsupported nprocs (%d). Please use nprocs=1 or None (default). If None, "
            "spawn will use all available devices. Use the environment variable "
            "X_NUM_DEVICES (where X is CPU, TPU, NEURONCORE, etc) to limit the number "
            "of devices used." % nprocs)
    _check_not_initialized()
    n = _devices.spawn_count()
    if n == 1:
        return _run_singleprocess(spawn_fn)
    _launch.spawn(fn, args=args, nprocs=n, start_method=start_method)
    return None


def spawn_threads(fn, args=()):
    """torch_xla runs fn(index, *args) on one thread per device of this
    process; lazytpu's devices are processes, so this is spawn()."""
    spawn(fn, args=args)
