"""torch_xla's top-level functions (torch_xla.device(), sync(), step(), ...)."""
import contextlib

import lazytpu
import lazytpu.metrics as _met

__all__ = ["device", "devices", "device_count", "real_devices", "sync", "step",
           "compile", "manual_seed", "launch"]

device = lazytpu.device
devices = lazytpu.devices
device_count = lazytpu.device_count
sync = lazytpu.mark_step
manual_seed = lazytpu.set_rng_state
launch = lazytpu.launch.launch


def real_devices():
    """["TPU:0", ...]: the kind and index of each core of this process."""
    return ["%s:%d" % (lazytpu.device_kind(), i) for i in range(lazytpu.device_count())]


@contextlib.contextmanager
def step():
    """A training step: ends the step (mark_step) on entry and on exit."""
    lazytpu.mark_step()
    try:
        yield
    finally:
        lazytpu.mark_step()


def compile(f=None, full_graph=False, name=None, num_different_graphs_allowed=None):
    """torch_xla.compile: f run as one step (mark_step before and after).
    full_graph=False: f is traced lazily, op by op. full_graph=True: f goes
    through torch.compile(f, backend="lazytpu", fullgraph=True) (compiled
    once, then replayed without tracing); anything that would split it (a
    value read, a graph break) raises."""
    if f is None:
        return lambda fn: compile(fn, full_graph, name, num_different_graphs_allowed)
    fname = name or getattr(f, "__name__", "fn")
    if full_graph:
        import torch
        from lazytpu import compile as _backend  # noqa: F401  (registers it)
        cf = torch.compile(f, backend="lazytpu", fullgraph=True)

        msg = ("torch_xla.compile(%s, full_graph=True): the function did not trace as "
               "one graph (%s inside it); move host reads (.item(), .cpu(), print) out of it")

        def run(*args, **kwargs):
            reads = _met.counter_value("SyncCause::value_read") or 0
            try:
                out = cf(*args, **kwargs)
            except torch._dynamo.exc.Unsupported as e:
                raise RuntimeError(msg % (fname, "value reads or graph breaks: %s"
                                          % str(e).split("\n")[0])) from e
            reads = (_met.counter_value("SyncCause::value_read") or 0) - reads
            if reads:
                raise RuntimeError(msg % (fname, "%d value reads" % reads))
            return out
    else:
        run = f

    def wrapped(*args, **kwargs):
        lazytpu.mark_step()
        out = run(*args, **kwargs)
        lazytpu.mark_step()
        return out

    wrapped.__name__ = getattr(f, "__name__", "compiled")
    wrapped.__wrapped__ = f
    return wrapped
