"""lazytpu.barrier: the optimization barrier (torch_xla's
``xm.optimization_barrier_``).

``optimization_barrier_(tensors)`` replaces each device tensor's value, in
place, by ``opt_barrier(value)``: an IR op that computes the identity but is
a value of its own to the compiler. Computation done on the barrier's
output is never merged (CSE) with the same computation done on its input.
Gradient checkpointing relies on it: the backward pass recomputes the
forward from barrier outputs, so the recomputation is not folded back into
the forward's activations (which would keep them alive until the backward
and undo the memory saving).
"""
import torch

from . import core as _core


def optimization_barrier_(tensors):
    """Puts every device tensor of ``tensors`` behind a barrier, in place
    (values and autograd history unchanged)."""
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type not in _core.DEVICE_TYPES:
            raise ValueError("lazytpu.optimization_barrier_: %s is not a device tensor"
                             % (t.device if isinstance(t, torch.Tensor) else type(t)))
    with torch.no_grad():
        for t in tensors:
            t.copy_(torch.ops.lazytpu.optimization_barrier(t))
