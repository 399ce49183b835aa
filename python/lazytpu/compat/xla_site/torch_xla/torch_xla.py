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
    """torch_xla.compile: f run as one lazily traced step (mark_step before and
    after). full_graph=True raises if f forced a sync of its own in between
    (a value read or a graph cut): the step would not be one graph."""
    if f is None:
        return lambda fn: compile(fn, full_graph, name, num_different_graphs_allowed)

    def wrapped(*args, **kwargs):
        lazytpu.mark_step()
        before = _met.counter_value("SyncCause::value_read") or 0
        cut = _met.counter_value("GraphSizeLimitSync") or 0
        out = f(*args, **kwargs)
        if full_graph:
            reads = (_met.counter_value("SyncCause::value_read") or 0) - before
            cuts = (_met.counter_value("GraphSizeLimitSync") or 0) - cut
            if reads or cuts:
                raise RuntimeError(
                    "torch_xla.compile(%s, full_graph=True): the function did not trace as "
                    "one graph (%d value reads, %d graph-size cuts inside it); move host "
                    "reads (.item(), .cpu(), print) out of it" % (name or getattr(f, "__name__", "fn"),
                                                                   reads, cuts))
        lazytpu.mark_step()
        return out

    wrapped.__name__ = getattr(f, "__name__", "compiled")
    wrapped.__wrapped__ = f
    return wrapped
