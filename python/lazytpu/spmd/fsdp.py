"""FSDPv2 on SPMD: every parameter sharded along the mesh's "fsdp" axis,
the forward output sharded along its batch dim (torch_xla's
experimental.spmd_fully_sharded_data_parallel)."""
import warnings

import torch
import torch.nn as nn

from . import sharding as _sh
from .mesh import get_global_mesh


def _partition_spec(t, extra_data_axis=None, shard_maximal=False):
    """"fsdp" on dim 0 (or on the largest dim with shard_maximal), None
    elsewhere; (extra_data_axis, "fsdp") there when given; () for 0-dim."""
    shape = tuple(t.shape)
    spec = [None] * len(shape)
    if not spec:
        return tuple(spec)
    i = shape.index(max(shape)) if shard_maximal else 0
    spec[i] = (extra_data_axis, "fsdp") if extra_data_axis else "fsdp"
    return tuple(spec)


def recursive_wrap(module, auto_wrap_policy, wrapper_cls, ignored_modules=(),
                   ignored_params=(), only_wrap_children=False, **kwargs):
    """Wraps, bottom-up, each submodule that auto_wrap_policy(module=,
    recurse=False, <count>=) accepts in wrapper_cls(sub, **kwargs)
    (recurse=True asks whether to look inside). The parameter count goes by
    the name the policy takes: torch's policies say nonwrapped_numel,
    torch_xla's unwrapped_params. Returns (module, wrapped parameter count)."""
    ignored_params = set(ignored_params)
    ignored_modules = set(ignored_modules)
    import inspect
    try:
        names = inspect.signature(auto_wrap_policy).parameters
    except (TypeError, ValueError):     # a builtin or C callable: torch's name
        names = {}
    count_kw = "unwrapped_params" if "unwrapped_params" in names else "nonwrapped_numel"

    def policy(m, recurse, n):
        return auto_wrap_policy(module=m, recurse=recurse, **{count_kw: n})

    def numel(m):
        return sum(p.numel() for p in m.parameters() if p not in ignored_params)

    def visit(m, is_root):
        if m in ignored_modules:
            return m, 0
        n = numel(m)
        if not policy(m, True, n):
            return m, 0
        total = 0
        for name, child in list(m.named_children()):
            new, k = visit(child, False)
            if new is not child:
                setattr(m, name, new)
            total += k
        remainder = n - total
        if not (only_wrap_children and is_root) and policy(m, False, remainder):
            return wrapper_cls(m, **kwargs), n
        return m, total

    return visit(module, True)


class SpmdFullyShardedDataParallel(nn.Module):
    """``FSDPv2(module, *, mesh=None, shard_output=None, auto_wrap_policy=
    None, auto_wrapper_callable=None, extra_data_axis=None)``: shards each
    parameter of module not yet sharded along the mesh's "fsdp" axis (its
    largest dim), and the forward output along dim 0 (shard_output(output,
    mesh) replaces that). auto_wrap_policy wraps matching submodules first
    (e.g. torch's transformer_auto_wrap_policy). The mesh defaults to the
    global mesh. Errors as torch_xla's."""

    def __init__(self, module, *, mesh=None, shard_output=None, auto_wrap_policy=None,
                 auto_wrapper_callable=None, extra_data_axis=None):
        if isinstance(module, SpmdFullyShardedDataParallel):
            raise RuntimeError("Cannot wrap a module that is already wrapped with FSDP. For "
                               "nested FSDP, first wrap the inner child modules before "
                               "wrapping the outer parent module.")
        fwd = getattr(module, "forward", None)
        if getattr(fwd, "__func__", nn.Module.forward) is nn.Module.forward:
            raise RuntimeError("The module wrapped by FSDP *must define a `forward` method "
                               "and call it during the module's forward pass* (do not wrap "
                               "nn.ModuleList or nn.ModuleDict)")
        if mesh is None:
            mesh = get_global_mesh()
            if mesh is None:
                raise ValueError("No mesh is provided and no global mesh is set. Please "
                                 "provide a mesh.")
        if mesh.axis_names is None or "fsdp" not in mesh.axis_names:
            raise ValueError("The mesh must have an axis named 'fsdp'.")
        if extra_data_axis and extra_data_axis not in mesh.axis_names:
            raise ValueError("The provided %s axis is not in the mesh." % extra_data_axis)
        super().__init__()
        if auto_wrap_policy is not None:
            for name, m in module.named_modules():
                if isinstance(m, SpmdFullyShardedDataParallel):
                    raise ValueError("Expected %s to NOT be SpmdFullyShardedDataParallel if "
                                     "using an `auto_wrap_policy`" % name)
            wrapper_cls = auto_wrapper_callable or SpmdFullyShardedDataParallel
            recursive_wrap(module, auto_wrap_policy, wrapper_cls, only_wrap_children=True,
                           mesh=mesh, shard_output=shard_output)
        from .. import core as _core
        dev = _core.device(0)
        self._orig_module = module.to(dev)
        self._mesh = mesh
        for p in module.parameters():
            if _sh.sharding_spec_text(p) != "":
                continue
            _sh.mark_sharding(p, mesh, _partition_spec(p, shard_maximal=True))
        _sh.apply_backward_optimization_barrier(module)
        if shard_output is None:
            def shard_output(output, mesh):
                real = None
                if isinstance(output, torch.Tensor):
                    real = output
                elif isinstance(output, tuple):
                    real = output[0] if isinstance(output[0], torch.Tensor) else None
                    warnings.warn("The output is a tuple, but only the first element is "
                                  "sharded. If this is not intended, please provide your "
                                  "own shard_output callable.")
                if real is None:
                    raise RuntimeError("The output type is not supported: %s. Please provide "
                                       "your own shard_output callable." % type(output))
                _sh.mark_sharding(real, mesh, _partition_spec(real, extra_data_axis))
        self._shard_output = shard_output

    @property
    def module(self):
        return self._orig_module

    def forward(self, *args, **kwargs):
        output = self.module(*args, **kwargs)
        self._shard_output(output, self._mesh)
        return output

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def __getitem__(self, key):
        return self.module.__getitem__(key)
