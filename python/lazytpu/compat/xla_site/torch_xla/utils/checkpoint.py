"""torch_xla.utils.checkpoint: activation checkpointing for xla tensors.

As torch.utils.checkpoint, plus what a lazy device needs (as torch_xla 2.9):
in the backward, the saved inputs AND the incoming gradients go through one
optimization barrier before the forward is recomputed from the barrier's
results. The compiler then sees the recomputation as new values that it
does not merge (CSE) with the forward of the same step, and cannot run
before the gradient it serves arrives, so the forward's activations are
not kept until the backward: only the checkpointed inputs are. The device
random state (dropout) is restored for the recomputation, like the CPU one.
(torch_xla also puts the parameters of a bound module method behind the
barrier; on lazytpu a parameter is a program input, there from the start,
so it would add nothing to the fence.)

use_reentrant=False is refused with ValueError, as torch_xla 2.9 does.
"""
import torch
import torch.utils.checkpoint as _tc

import torch_xla.core.xla_model as xm
from lazytpu import barrier as _barrier


class CheckpointStatus:
    """in_chkpt_bwd: True while a checkpointed function is recomputed."""

    def __init__(self):
        self.in_chkpt_bwd = False


chkpt_status = CheckpointStatus()


def _autocast_state(device_type):
    return {"device_type": device_type,
            "enabled": torch.is_autocast_enabled(device_type),
            "dtype": torch.get_autocast_dtype(device_type),
            "cache_enabled": torch.is_autocast_cache_enabled()}


def get_device_states(*args):
    """(devices, states) of the xla devices among the tensor args."""
    devices = sorted({a.device for a in args if isinstance(a, torch.Tensor)
                      and a.device.type == "xla"}, key=str)
    return devices, [xm.get_rng_state(d) for d in devices]


def set_device_states(devices, states):
    for d, s in zip(devices, states):
        xm.set_rng_state(s, device=d)


def _on_xla(t):
    return torch.is_tensor(t) and t.device.type == "xla"


def _saved_inputs(ctx):
    inputs = list(ctx.inputs)
    for i, t in zip(ctx.tensor_idx, ctx.saved_tensors):
        inputs[i] = t
    return inputs


class CheckpointFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        _tc.check_backward_validity(args)
        ctx.run_function = run_function
        ctx.preserve_rng_state = preserve_rng_state
        ctx.autocast = [_autocast_state("xla"), _autocast_state("cpu")]
        if preserve_rng_state:
            ctx.cpu_state = torch.get_rng_state()
            ctx.devices, ctx.device_states = get_device_states(*args)
        ctx.inputs, tensor_idx, tensors = [], [], []
        for i, a in enumerate(args):
            if torch.is_tensor(a):
                tensor_idx.append(i)
                tensors.append(a)
                ctx.inputs.append(None)
            else:
                ctx.inputs.append(a)
        ctx.tensor_idx = tensor_idx
        ctx.save_for_backward(*tensors)
        with torch.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError("Checkpointing is not compatible with .grad() or when an "
                               "`inputs` parameter is passed to .backward(). Please use "
                               ".backward() and do not pass its `inputs` argument.")
        saved = _saved_inputs(ctx)
        grads = list(grads)
        # one barrier over the device inputs and gradients: the recomputation
        # and its backward read its results (same values, no history)
        fenced = [(0, i) for i, x in enumerate(saved) if _on_xla(x)] + \
                 [(1, i) for i, g in enumerate(grads) if _on_xla(g)]
        vals = _barrier.optimization_barrier(
            [saved[i] if w == 0 else grads[i] for w, i in fenced])
        detached = [x.detach() if torch.is_tensor(x) else x for x in saved]
        for (w, i), v in zip(fenced, vals):
            (detached if w == 0 else grads)[i] = v
        detached = [x.requires_grad_(s.requires_grad) if torch.is_tensor(x) else x
                    for x, s in zip(detached, saved)]
        with torch.random.fork_rng(devices=[], enabled=ctx.preserve_rng_state):
            if ctx.preserve_rng_state:
                torch.set_rng_state(ctx.cpu_state)
                saved = [xm.get_rng_state(d) for d in ctx.devices]
                set_device_states(ctx.devices, ctx.device_states)
            chkpt_status.in_chkpt_bwd = True
            try:
                with torch.enable_grad(), torch.autocast(**ctx.autocast[0]), \
                        torch.autocast(**ctx.autocast[1]):
                    outputs = ctx.run_function(*detached)
            finally:
                chkpt_status.in_chkpt_bwd = False
                if ctx.preserve_rng_state:
                    set_device_states(ctx.devices, saved)
        if torch.is_tensor(outputs):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads)
                 if torch.is_tensor(o) and o.requires_grad]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() "
                               "is not necessary")
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(x.grad if torch.is_tensor(x) else None
                                    for x in detached)


def checkpoint(function, *args, use_reentrant=True, **kwargs):
    """function(*args) without keeping its activations: they are recomputed
    in the backward pass (see the module's doc)."""
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if not use_reentrant:
        raise ValueError("XLA currently does not support use_reentrant==False")
    return CheckpointFunction.apply(function, preserve, *args)
