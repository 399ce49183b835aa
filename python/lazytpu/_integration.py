"""What lazytpu.lightning and lazytpu.keras share: running a callable on N
cores through the launcher and getting ordinal 0's result back, and the
world operations they need, named once here over lazytpu's own functions.

``run_on_cores(fn, args, nprocs)`` pickles ``fn`` and ``args`` into a job
file (``fn`` may be a bound method: its object is pickled with it, as
Lightning's spawn launchers require), starts ``nprocs`` workers with
:func:`lazytpu.spawn`, and returns what ``fn(ordinal, *args)``
returned on ordinal 0 (pickled back through a file). A worker's exception
fails the whole job: ``spawn`` raises ``WorkerError`` naming the ordinal.
"""
import os
import pickle
import shutil
import tempfile

import torch

from . import _C, collectives, core, launch, world

__all__ = ["run_on_cores", "in_world", "world_size", "ordinal", "reduce_gradients",
           "all_reduce", "all_gather", "rendezvous", "broadcast_object",
           "broadcast_parameters", "mark_step"]


def in_world():
    """True in a process started by lazytpu-run (or lazytpu.spawn) with
    more than one ordinal."""
    return core.world_size() > 1


def world_size():
    return core.world_size()


def ordinal():
    return core.get_ordinal()


def mark_step():
    """The step boundary the integrations put at an optimizer step and after
    an evaluation step: compile (cached) and launch the pending graph."""
    core.mark_step()
    # bounded pipelining, like the loaders: at most LAZYTPU_MAX_INFLIGHT
    # programs per core queued after a step
    world.limit_inflight()


def reduce_gradients(optimizer):
    """Every parameter gradient replaced by its mean over the world, traced
    into the step's graph (nothing happens in a world of one)."""
    collectives.reduce_gradients(optimizer)


def all_reduce(reduce_type, tensor, scale=1.0):
    return collectives.all_reduce(reduce_type, tensor, scale=scale)


def all_gather(tensor, dim=0):
    return collectives.all_gather(tensor, dim=dim)


def rendezvous(tag, payload=b""):
    return collectives.rendezvous(tag, payload)


def broadcast_object(obj, src=0, tag="lazytpu.broadcast_object"):
    """``obj`` of ordinal ``src`` on every ordinal (pickled through the
    world's exchange; device tensors travel as CPU tensors and come back on
    this process's device)."""
    if not in_world():
        return obj
    blob = _pickle_cpu(obj) if ordinal() == src else b""
    blobs = rendezvous(tag, blob)
    return _unpickle_to(blobs[src], obj)


def broadcast_parameters(module):
    """Ordinal 0's parameters and buffers copied into every ordinal's module
    (traced collectives; they run with the next step)."""
    collectives.broadcast_master_param(module)


def _pickle_cpu(obj):
    import io
    buf = io.BytesIO()
    torch.save(core._to_cpu(obj), buf)
    return buf.getvalue()


def _unpickle_to(blob, like):
    import io
    obj = torch.load(io.BytesIO(blob), weights_only=False)
    if isinstance(like, torch.Tensor) and isinstance(obj, torch.Tensor):
        obj = obj.to(like.device)
    return obj


# ------------------------------------------------------------- launching ----

def _job_worker(index, job_path, result_path):
    """Runs in every worker: fn(index, *args); ordinal 0 writes the result."""
    with open(job_path, "rb") as f:
        main_path = pickle.load(f)
        if main_path:
            # the job may name classes of the user's script (__main__)
            launch._load_main(main_path)
        fn, args = pickle.load(f)
    result = fn(index, *args)
    _C.wait(-1)
    if index == 0:
        tmp = result_path + ".part"
        with open(tmp, "wb") as f:
            pickle.dump(result, f)
        os.replace(tmp, result_path)


def run_on_cores(fn, args=(), nprocs=8, timeout=None, metrics_file=None):
    """Runs ``fn(ordinal, *args)`` on ``nprocs`` simulated cores (one worker
    process each, through lazytpu-run) and returns ordinal 0's result."""
    tmp = tempfile.mkdtemp(prefix="lazytpu-job-")
    try:
        job = os.path.join(tmp, "job.pkl")
        result = os.path.join(tmp, "result.pkl")
        with open(job, "wb") as f:
            pickle.dump(launch._main_path(), f)
            pickle.dump((fn, tuple(args)), f)
        launch.spawn(_job_worker, args=(job, result), nprocs=nprocs, timeout=timeout,
                     metrics_file=metrics_file)
        with open(result, "rb") as f:
            return pickle.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
