"""torch_xla.distributed.fsdp.utils: checkpoint_module, the nn.Linear patch
whose backward reads the weight parameter itself, the reduce-scatter
helpers FSDP uses (bucketed, and stand-ins of the collectives' shapes for
debugging)."""
from types import MethodType

import torch

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.utils.checkpoint import checkpoint


def _checkpointed_no_kwargs(m, nargs, nkw, *packed):
    """m's original forward on (args..., kw names..., kw values...)."""
    assert nargs + 2 * nkw == len(packed)
    args, rest = packed[:nargs], packed[nargs:]
    return m._xla_checkpointed_forward_original(*args, **dict(zip(rest[:nkw], rest[nkw:])))


def _checkpointed_forward(m, *args, **kwargs):
    packed = args + tuple(kwargs) + tuple(kwargs.values())
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in packed):
        return checkpoint(m._xla_checkpointed_forward_no_kwargs, len(args), len(kwargs),
                          *packed)
    # nothing to recompute for: no input requires grad
    return m._xla_checkpointed_forward_original(*args, **kwargs)


def checkpoint_module(module):
    """Replaces module.forward by a gradient-checkpointed one
    (torch_xla.utils.checkpoint): its activations are recomputed in the
    backward pass. Keyword arguments are passed through; a call none of whose
    inputs requires grad runs plainly. The original forward is kept as
    ``module._xla_checkpointed_forward_original`` and looked up at each call
    (apply_xla_patch_to_nn_linear patches it there)."""
    assert isinstance(module, torch.nn.Module)
    module._xla_checkpointed_forward_original = module.forward
    module._xla_checkpointed_forward_no_kwargs = MethodType(_checkpointed_no_kwargs, module)
    module.forward = MethodType(_checkpointed_forward, module)
    return module


def dummy_all_gather(value, dim=0, groups=None):
    """all_gather's result shape without communicating: value repeated
    world-size times along dim (for debugging)."""
    reps = [1] * value.dim()
    reps[dim] = xr.world_size()
    return value.repeat(tuple(reps))


def dummy_all_reduce(reduce_type, inputs, scale=1.0, groups=None):
    """all_reduce's result shape without communicating: the input times
    scale (a list: each one scaled in place)."""
    if isinstance(inputs, torch.Tensor):
        return inputs * scale
    return [t.mul_(scale) for t in inputs]


class DummyReduceScatter:
    """reduce_scatter's result shape without communicating: this rank's
    slice of dim 0, handed to the callback (for debugging)."""

    def __init__(self, shard_count):
        assert shard_count == xr.world_size()
        self.scale = 1.0

    def __call__(self, input, callback):
        n = input.size(0) // xr.world_size()
        lo = n * xr.global_ordinal()
        callback(input.narrow(0, lo, n))

    def flush(self):
        pass


class BucketizedReduceScatter:
    """Sum reduce-scatters along dim 0, the inputs grouped until they exceed
    bucket_size_mb megabytes (0: each one on its own); each result goes to
    its input's callback when its bucket is flushed."""

    def __init__(self, bucket_size_mb, shard_count, groups, pin_layout):
        self.bucket_size_bytes = bucket_size_mb * 1024 * 1024
        self.shard_count = shard_count
        self.groups = groups
        self.pin_layout = pin_layout
        self.scale = 1.0
        self.bucket, self.callbacks = [], []
        self.bucket_watermark = 0

    def __call__(self, input, callback):
        self.bucket.append(input)
        self.callbacks.append(callback)
        self.bucket_watermark += input.element_size() * input.numel()
        if self.bucket_watermark > self.bucket_size_bytes:
            self.flush()

    def flush(self):
        if not self.bucket:
            return
        single = len(self.bucket) == 1
        res = xm.reduce_scatter(xm.REDUCE_SUM, self.bucket[0] if single else self.bucket,
                                scale=self.scale, scatter_dim=0,
                                shard_count=self.shard_count, groups=self.groups,
                                pin_layout=self.pin_layout)
        for cb, r in zip(self.callbacks, [res] if single else res):
            cb(r)
        self.bucket, self.callbacks = [], []
        self.bucket_watermark = 0


class XLAPatchedLinear(torch.autograd.Function):
    """nn.functional.linear whose backward uses the weight passed in (the
    parameter itself, which FSDP frees and gathers again) instead of a
    tensor autograd saved from the forward. Same values as linear."""

    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        with torch.no_grad():
            return torch._C._nn.linear(input, weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        # as [rows, features] (a 1-D input is one row; 2.9's backward
        # fails on it)
        x2 = input.reshape(-1, input.shape[-1])
        g2 = grad_output.reshape(-1, grad_output.shape[-1])
        gi = gw = gb = None
        if ctx.needs_input_grad[0]:
            gi = g2.mm(weight).view(input.shape)
        if ctx.needs_input_grad[1]:
            gw = g2.t().mm(x2)
        if bias is not None and ctx.needs_input_grad[2]:
            gb = g2.sum(0)
        return gi, gw, gb


def _xla_patched_nn_linear_forward(m, input):
    return XLAPatchedLinear.apply(input, m.weight, m.bias)


def apply_xla_patch_to_nn_linear(module, patched_function=_xla_patched_nn_linear_forward):
    """Points the forward of every nn.Linear in module (module included) at
    patched_function (default: XLAPatchedLinear), and the original forward
    a checkpoint_module wrapper calls, unless that forward was replaced
    already; the original is kept as ``_nn_linear_forward_original``.
    Returns module."""

    def patch(m, attr):
        fwd = getattr(m, attr, None)
        if fwd is None or getattr(fwd, "__func__", None) is not torch.nn.Linear.forward:
            return
        m._nn_linear_forward_original = fwd
        setattr(m, attr, MethodType(patched_function, m))

    for m in module.modules():
        if isinstance(m, torch.nn.Linear):
            patch(m, "forward")
            patch(m, "_xla_checkpointed_forward_original")
    return module
