"""lazytpu.barrier: the optimization barrier (torch_xla's
``xm.optimization_barrier_``).

``optimization_barrier(tensors)`` returns, for each device tensor, a tensor of
the same value computed by an ``opt_barrier`` IR node over ALL of the given
tensors (XLA's tuple-wide barrier). The compiler (lazy/compile_view.c) reads
each result in place (no copy) but orders every computation on it after all
of the barrier's inputs exist, and never merges a barrier or the computation
on its results with the same computation on its inputs (CSE).
``optimization_barrier_(tensors)`` replaces the tensors' values by those, in
place, as torch_xla does.

Gradient checkpointing relies on it: the backward pass puts the saved inputs
and the incoming gradients behind one barrier and recomputes the forward from
the results, so the recomputation is neither merged with the forward (which
would keep the forward's activations alive until the backward) nor scheduled
before the gradient it serves arrives.
"""
import torch

from . import core as _core


def _check(tensors, name):
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type not in _core.DEVICE_TYPES:
            raise ValueError("lazytpu.%s: %s is not a device tensor"
                             % (name, t.device if isinstance(t, torch.Tensor) else type(t)))
    return tensors


def optimization_barrier(tensors):
    """New tensors with the values of ``tensors`` (device tensors, one
    device), each available only once all of them are; no autograd history."""
    tensors = _check(tensors, "optimization_barrier")
    if not tensors:
        return []
    with torch.no_grad():
        return list(torch.ops.lazytpu.optimization_barrier([t.detach() for t in tensors]))


def optimization_barrier_(tensors, skip_host=False):
    """Puts the device tensors of ``tensors`` behind one barrier, in place
    (values and autograd history unchanged). A host tensor is refused, or
    with ``skip_host`` left alone (torch_xla 2.9's ``xm.optimization_barrier_``
    ignores non-XLA tensors); anything else raises TypeError."""
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError("optimization_barrier_: expected a list of tensors, got %s"
                            % type(t).__name__)
    if skip_host:
        tensors = [t for t in tensors if t.device.type in _core.DEVICE_TYPES]
    tensors = _check(tensors, "optimization_barrier_")
    with torch.no_grad():
        for t, b in zip(tensors, optimization_barrier(tensors)):
            t.copy_(b)
