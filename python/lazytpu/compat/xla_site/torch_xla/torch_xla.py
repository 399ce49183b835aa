"""torch_xla's top-level functions (torch_xla.device(), sync(), step(), ...)."""
import os

import lazytpu
from lazytpu.step_fn import compile_step

__all__ = ["device", "devices", "device_count", "real_devices", "sync", "step",
           "compile", "manual_seed", "launch"]

devices = lazytpu.devices
device_count = lazytpu.device_count
manual_seed = lazytpu.set_rng_state


def real_devices():
    """["TPU:0", ...]: the kind and index of each core of this process."""
    return ["%s:%d" % (lazytpu.device_kind(), i) for i in range(lazytpu.device_count())]


def step():
    """A training step as a context manager: torch_xla.compile() (a step
    boundary on entry and on exit)."""
    return compile()


def compile(f=None, full_graph=False, name=None, max_different_graphs=None):
    """torch_xla 2.9's compile: f (or the body of ``with compile():``) traced
    lazily as one step, a step boundary before and after it (lazytpu.compile_step).
    full_graph=True: nothing may execute while it is traced (a value read, a
    CPU fallback, a step boundary inside raises RuntimeError naming it and
    the line). max_different_graphs=N: RuntimeError once f has made more
    than N distinct graphs. name: the counters and the "compiled steps"
    section of the metrics report (default f.__name__). A refused execution
    under full_graph=True raises RuntimeError with 2.9's first line,
    "Unexpected execution happens inside the compiled function, exiting",
    then lazytpu's (what would run, and the line)."""
    return compile_step(f, full_graph=full_graph, name=name,
                        max_different_graphs=max_different_graphs, _api="torch_xla.compile",
                        _refused="Unexpected execution happens inside the compiled "
                                 "function, exiting")


def launch(fn, args=(), start_method="spawn", debug_single_process=False):
    """torch_xla 2.9's launch: xmp.spawn(fn, args, nprocs=None) (one worker
    per device: CPU_NUM_DEVICES with PJRT_DEVICE=CPU), nprocs=1 with
    debug_single_process; under torchelastic fn(LOCAL_RANK, *args) here.
    SPMD raises NotImplementedError, as in 2.9."""
    from torch_xla import runtime as xr
    from torch_xla.distributed import xla_multiprocessing as xmp
    import torch.distributed as dist
    if xr.is_spmd():
        raise NotImplementedError("launch function does not support SPMD at this time")
    if dist.is_torchelastic_launched():
        return fn(int(os.environ.get("LOCAL_RANK", "0")), *args)
    return xmp.spawn(fn, args=args, nprocs=1 if debug_single_process else None,
                     start_method=start_method)


def sync(wait=False, reset_scope=True):
    """Ends the step (lazytpu.mark_step); with XLA_METRICS_FILE, appends the
    metrics report there (torch_xla.debug.metrics_saver), as 2.9. With
    reset_scope, RuntimeError while a torch_xla.debug.profiler.Trace is open
    (2.9's "Expecting scope to be empty but it is <scope>")."""
    from torch_xla.debug import metrics_saver, profiler
    if reset_scope:
        profiler.check_scopes_empty()      # a Trace still open: RuntimeError, as 2.9
    lazytpu.mark_step(wait, reset_scope)
    metrics_saver.save_metrics()


def device(index=None):
    """The device xla:index (default: this process's); an index past the
    devices raises IndexError, as 2.9 (it indexes the device list)."""
    if index is not None and not 0 <= index < lazytpu.device_count():
        raise IndexError("list index out of range")
    return lazytpu.device(index)
