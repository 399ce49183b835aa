"""XlaFullyShardedDataParallel (FSDP v1) over lazytpu's collectives.

Each FSDP instance owns the parameters of its module that no nested FSDP
instance owns. At construction they are (optionally flattened into one
vector per requires_grad kind,) padded so every replica's shard is a
multiple of 128 elements, and cut into world-size shards: the replica keeps
its shard as an ``nn.Parameter`` registered on the FSDP module (what
``parameters()`` yields and the optimizer steps). The module's own
parameters are deregistered and kept as size-1 placeholders
(``full_params``, ``_has_full_param`` False).

Forward: the shards are all-gathered (an autograd function whose backward
reduce-scatters the full gradient into the shard's gradient, mean over the
replicas), cut into the parameters' shapes, set on the module for the
call, and the placeholders put back after it. Nested instances gather
their own parameters in their own forward. Every collective is a lazytpu
IR op, so the step stays one graph.

What differs from torch_xla: the gathered parameters stay alive until the
backward pass has used them (autograd keeps them), instead of being freed
after forward and gathered again (reshard_after_forward is accepted; the
memory saving is not simulated); the optimization barriers are not needed
(lazytpu's compiler does not move collectives).
"""
import math

import torch
import torch.nn as nn

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla import runtime as xr
from torch_xla.utils.checkpoint import checkpoint as _checkpoint

from .wrap import recursive_wrap

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_SEP = "_FSDP_SHARD_SEPARATOR_"


class _FlattenWrapper(nn.Module):
    """torch_xla's XlaFlattenParamsWrapper role: holds the wrapped module as
    ``_fpw_module`` (``.module``); ``flat_param_K`` names live here."""

    def __init__(self, module):
        super().__init__()
        self._fpw_module = module
        self.flat_meta = []          # per flat param: (names, shapes, numels)

    @property
    def module(self):
        return self._fpw_module

    def metadata(self, i):
        return self.flat_meta[i]

    def forward(self, *args, **kwargs):
        return self._fpw_module(*args, **kwargs)


class _Gather(torch.autograd.Function):
    """full = all_gather(shard)[:numel] (in compute dtype); backward:
    reduce-scatter of the padded gradient, mean over the sharding group."""

    @staticmethod
    def forward(ctx, shard, fsdp, idx):
        ctx.fsdp, ctx.idx = fsdp, idx
        full = xm.all_gather(shard.detach(), dim=0, groups=fsdp.sharding_groups,
                             pin_layout=False)
        full = full[:fsdp._numels[idx]]
        return full.to(fsdp.compute_dtype) if fsdp.compute_dtype != full.dtype else full

    @staticmethod
    def backward(ctx, grad):
        f, i = ctx.fsdp, ctx.idx
        shard = f.sharded_params[i]
        if f.fp32_reduce_scatter:
            grad = grad.float()
        pad = f._padded[i] - grad.numel()
        if pad:
            grad = torch.cat([grad, grad.new_zeros(pad)])
        g = xm.reduce_scatter(xm.REDUCE_SUM, grad, scale=1.0 / f.world_size, scatter_dim=0,
                              shard_count=f.world_size, groups=f.sharding_groups,
                              pin_layout=False)
        f._mark_freed(i)
        if f._is_root and f.sync_on_finalization:
            torch.autograd.Variable._execution_engine.queue_callback(torch_xla.sync)
        return g.to(shard.dtype), None, None


class XlaFullyShardedDataParallel(nn.Module):
    """FSDP v1: see the module doc. Arguments as torch_xla 2.9's;
    auto_wrap_policy (torch_xla.distributed.fsdp.wrap) wraps submodules in
    FSDP instances of their own (auto_wrapper_callable instead of the class,
    e.g. to add checkpoint_module); param_init_fn materializes modules built
    on the meta device (default: to_empty + reset_parameters())."""

    def __init__(self, module, reshard_after_forward=True, flatten_parameters=False,
                 execute_sharding_on_init=True, optimization_barrier_in_forward=True,
                 optimization_barrier_in_backward=True, sync_on_finalization=False,
                 disable_reshard_on_root=True, compute_dtype=None, buffer_dtype=None,
                 fp32_reduce_scatter=False, sharding_groups=None, sharding_rank=None,
                 sharding_world_size=None, shard_param_on_dim_0=False,
                 pin_layout_in_collective_ops=True, reduce_scatter_bucket_size_mb=0,
                 coalesce_all_gather_ops=False, auto_wrap_policy=None,
                 auto_wrapper_callable=None, param_init_fn=None, _shard_size_multiple=128,
                 **_debug):
        if isinstance(module, XlaFullyShardedDataParallel):
            raise RuntimeError(
                "Cannot wrap a module that is already wrapped with FSDP. For nested FSDP, "
                "first wrap the inner child modules before wrapping the outer parent module.")
        fwd = getattr(type(module), "forward", None)
        if fwd is None or fwd is nn.Module.forward:
            raise RuntimeError(
                "The module wrapped by FSDP *must define a `forward` method and call it "
                "during the module's forward pass for FSDP to work correctly.* Hence, do "
                "not wrap `nn.ModuleList` or `nn.ModuleDict` with FSDP.")
        super().__init__()
        for dt, what in ((compute_dtype, "compute_dtype"), (buffer_dtype, "buffer_dtype")):
            if dt is not None and dt not in FLOAT_DTYPES:
                raise ValueError("%s must be one of %s, not %s" % (what, FLOAT_DTYPES, dt))
        kwargs = dict(reshard_after_forward=reshard_after_forward,
                      flatten_parameters=flatten_parameters,
                      execute_sharding_on_init=execute_sharding_on_init,
                      sync_on_finalization=sync_on_finalization,
                      compute_dtype=compute_dtype, buffer_dtype=buffer_dtype,
                      fp32_reduce_scatter=fp32_reduce_scatter,
                      sharding_groups=sharding_groups, sharding_rank=sharding_rank,
                      sharding_world_size=sharding_world_size,
                      shard_param_on_dim_0=shard_param_on_dim_0,
                      param_init_fn=param_init_fn,
                      _shard_size_multiple=_shard_size_multiple)
        if auto_wrap_policy is not None:
            recursive_wrap(module, auto_wrap_policy,
                           auto_wrapper_callable or XlaFullyShardedDataParallel,
                           only_wrap_children=True, **kwargs)
        self.reshard_after_forward = reshard_after_forward
        self.flatten_parameters = flatten_parameters
        self.sync_on_finalization = sync_on_finalization
        self.compute_dtype = compute_dtype or torch.float32
        self.buffer_dtype = buffer_dtype or self.compute_dtype
        self.fp32_reduce_scatter = fp32_reduce_scatter
        self.sharding_groups = sharding_groups
        if sharding_groups is None:
            self.rank, self.world_size = xr.global_ordinal(), xr.world_size()
        else:
            if sharding_rank is None or sharding_world_size is None:
                raise ValueError("sharding_rank and sharding_world_size must be provided "
                                 "when sharding_groups is specified")
            self.rank, self.world_size = sharding_rank, sharding_world_size
        self._shard_size_multiple = 1 if shard_param_on_dim_0 else _shard_size_multiple
        self.xla_device = torch_xla.device()
        self._is_root = None
        self._materialize(module, param_init_fn)
        self._fsdp_wrapped_module = _FlattenWrapper(module)
        self._shard(module)
        # buffers are rebound, as 2.9 does (setattr): a CPU buffer's .data
        # cannot take a device tensor (another TensorImpl type)
        moved = {}
        for owner, name, b in self._own_buffers(module):
            if id(b) not in moved:
                moved[id(b)] = b.to(self.xla_device, dtype=self.buffer_dtype
                                    if buffer_dtype is not None and b.is_floating_point()
                                    else b.dtype)
            owner._buffers[name] = moved[id(b)]

    # ------------------------------------------------------------ set-up

    @property
    def module(self):
        """The flatten wrapper; ``.module.module`` is the wrapped module."""
        return self._fsdp_wrapped_module

    def _owned(self, module):
        """(submodule, name, param) of module's parameters outside nested
        FSDP instances (shared parameters once, every location kept)."""
        seen, out = {}, []

        def walk(m):
            for n, p in list(m._parameters.items()):
                if p is None:
                    continue
                if id(p) in seen:
                    seen[id(p)][2].append((m, n))
                else:
                    rec = (p, n, [(m, n)])
                    seen[id(p)] = rec
                    out.append(rec)
            for c in m.children():
                if not isinstance(c, XlaFullyShardedDataParallel):
                    walk(c)

        walk(module)
        return out

    def _own_buffers(self, module):
        def walk(m):
            for name, b in m._buffers.items():
                if b is not None:
                    yield m, name, b
            for c in m.children():
                if not isinstance(c, XlaFullyShardedDataParallel):
                    yield from walk(c)
        return list(walk(module))

    def _materialize(self, module, param_init_fn):
        """Modules built on the meta device get real parameters on the xla
        device: param_init_fn(module), or to_empty + reset_parameters()."""
        if not any(p.is_meta for p, _, _ in self._owned(module)):
            return
        if param_init_fn is not None:
            param_init_fn(module)
            return
        module.to_empty(device=self.xla_device, recurse=True)
        for m in module.modules():
            if not isinstance(m, XlaFullyShardedDataParallel) and \
                    callable(getattr(m, "reset_parameters", None)):
                with torch.no_grad():
                    m.reset_parameters()

    def _names(self, module):
        """{id(param): qualified name inside module} (first location)."""
        names = {}
        for mname, m in module.named_modules(remove_duplicate=False):
            for n, p in m._parameters.items():
                if p is not None and id(p) not in names:
                    names[id(p)] = (mname + "." if mname else "") + n
        return names

    @torch.no_grad()
    def _shard(self, module):
        owned = self._owned(module)
        names = self._names(module)
        for p, _, _ in owned:
            if p.dtype != torch.float32:
                raise TypeError("only fp32 parameters are supported")
        # one vector per requires_grad kind (flatten), or one per parameter
        if self.flatten_parameters and owned:
            kinds = [[r for r in owned if r[0].requires_grad],
                     [r for r in owned if not r[0].requires_grad]]
            units = [k for k in kinds if k]
        else:
            units = [[r] for r in owned]
        self.full_params, self.sharded_params = [], []
        self._units, self._numels, self._padded = [], [], []
        for ui, unit in enumerate(units):
            vec = torch.cat([p.detach().to(self.xla_device).reshape(-1)
                             for p, _, _ in unit]) if unit else None
            n = vec.numel()
            step = self.world_size * self._shard_size_multiple
            padded = max(step, math.ceil(n / step) * step)
            if padded > n:
                vec = torch.cat([vec, vec.new_zeros(padded - n)])
            shard = vec.chunk(self.world_size)[self.rank].clone()
            sp = nn.Parameter(shard, requires_grad=unit[0][0].requires_grad)
            sp._is_sharded = True
            if self.flatten_parameters:
                sp._orig_name = "_fsdp_wrapped_module.flat_param_%d" % ui
                sp._orig_size = torch.Size([n])
                self._fsdp_wrapped_module.flat_meta.append(
                    ([names[id(p)] for p, _, _ in unit],
                     [tuple(p.shape) for p, _, _ in unit],
                     [p.numel() for p, _, _ in unit]))
            else:
                p0 = unit[0][0]
                sp._orig_name = "_fsdp_wrapped_module._fpw_module." + names[id(p0)]
                sp._orig_size = p0.shape
            sp._name = ("_fsdp_shard." + sp._orig_name).replace(".", _SEP)
            self.register_parameter(sp._name, sp)
            self.sharded_params.append(sp)
            self._numels.append(n)
            self._padded.append(padded)
            self._units.append([(tuple(p.shape), locs) for p, _, locs in unit])
            for p, _, locs in unit:
                holder = nn.Parameter(p.new_zeros(1, device=self.xla_device),
                                      requires_grad=p.requires_grad)
                holder._sharded_param = sp
                holder._has_full_param = False
                self.full_params.append(holder)
                for m, nm in locs:
                    del m._parameters[nm]
                    object.__setattr__(m, nm, holder)
        self._holders = list(self.full_params)

    def _mark_freed(self, idx):
        k = sum(len(u) for u in self._units[:idx])
        for h in self._holders[k:k + len(self._units[idx])]:
            h._has_full_param = False

    # ------------------------------------------------------------ forward

    def _set_full(self, fulls):
        k = 0
        for full, unit in zip(fulls, self._units):
            off = 0
            for shape, locs in unit:
                n = 1
                for d in shape:
                    n *= d
                view = full[off:off + n].view(shape)
                self._holders[k]._has_full_param = True
                for m, nm in locs:
                    object.__setattr__(m, nm, view)
                off += n
                k += 1

    def _restore(self):
        k = 0
        for unit in self._units:
            for _, locs in unit:
                for m, nm in locs:
                    object.__setattr__(m, nm, self._holders[k])
                k += 1

    def forward(self, *args, **kwargs):
        if self._is_root is None:
            self._is_root = True
            for m in self.modules():
                if m is not self and isinstance(m, XlaFullyShardedDataParallel):
                    m._is_root = False
        if self.compute_dtype != torch.float32:
            args, kwargs = _cast_floats(self.compute_dtype, args, kwargs)
        inner = self._fsdp_wrapped_module._fpw_module
        plain = getattr(inner, "_xla_checkpointed_forward_original", None)
        flat = args + tuple(kwargs.values())
        if plain is not None and torch.is_grad_enabled() and any(
                torch.is_tensor(t) and t.requires_grad
                for t in tuple(self.sharded_params) + flat):
            # FSDP(checkpoint_module(m)): the gather goes inside the
            # checkpoint, so the recomputation in the backward gathers the
            # parameters again (2.9 regathers them before the backward)
            out = _checkpoint(self._gather_and_run, len(self.sharded_params), len(args),
                              tuple(kwargs), plain, *self.sharded_params, *flat)
        else:
            out = self._gather_and_run(len(self.sharded_params), len(args), tuple(kwargs),
                                       None, *self.sharded_params, *flat)
        if not torch.is_grad_enabled():
            for i in range(len(self.sharded_params)):
                self._mark_freed(i)
        else:
            for i, sp in enumerate(self.sharded_params):
                if not sp.requires_grad:
                    self._mark_freed(i)
        return out

    def _gather_and_run(self, nsp, nargs, keys, plain, *flat):
        """The wrapped module on the gathered parameters (flat: shards, then
        the call's arguments); plain: the forward to run in place of a
        checkpoint_module's checkpointed one."""
        shards, rest = flat[:nsp], flat[nsp:]
        self._set_full([_Gather.apply(sp, self, i) for i, sp in enumerate(shards)])
        inner = self._fsdp_wrapped_module._fpw_module
        if plain is not None:
            ckpt_forward, inner.forward = inner.forward, plain
        try:
            return self._fsdp_wrapped_module(*rest[:nargs], **dict(zip(keys, rest[nargs:])))
        finally:
            if plain is not None:
                inner.forward = ckpt_forward
            self._restore()

    def __getattr__(self, name):
        """Attributes of the wrapped module are reachable on the wrapper."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_fsdp_wrapped_module":
                raise
            return getattr(self._fsdp_wrapped_module._fpw_module, name)

    # ------------------------------------------------------------ utilities

    @property
    def params_with_grad(self):
        return [p for p in self.parameters() if p.grad is not None]

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm, norm_type=2.0, groups=None):
        """Scales every shard's gradient so the norm over the whole model
        (all replicas' shards) is at most max_norm; returns that norm."""
        assert self._is_root is not False, \
            "clip_grad_norm should only be called on the root (parent) instance"
        norm_type = float(norm_type)
        grads = [p.grad.detach() for p in self.params_with_grad]
        if not grads:
            return torch.tensor(0.0, device=self.xla_device)
        if norm_type == math.inf:
            local = torch.stack([g.abs().max() for g in grads]).max()
            total = xm.all_reduce(xm.REDUCE_MAX, local, groups=groups)
        else:
            local = torch.stack([g.float().pow(norm_type).sum() for g in grads]).sum()
            total = xm.all_reduce(xm.REDUCE_SUM, local, groups=groups) ** (1.0 / norm_type)
        coef = torch.clip(float(max_norm) / (total + 1e-6), 0.0, 1.0)
        for g in grads:
            g.mul_(coef)
        return total

    def get_original_names_and_sharded_parameters(self):
        """[(original parameter name, shard)] of this and nested instances."""
        out = []
        for mname, m in self.named_modules():
            if isinstance(m, XlaFullyShardedDataParallel):
                prefix = mname + "." if mname else ""
                for p in m.sharded_params:
                    n = (prefix + p._orig_name).replace("_fsdp_wrapped_module.", "")
                    out.append((n.replace("_fpw_module.", ""), p))
        return out

    def get_shard_metadata(self):
        """What consolidate_sharded_model_checkpoints needs besides the
        state dicts: per instance the shards' original names and sizes, per
        flat parameter its members, world size and rank."""
        shard_info, flatten_info = {}, {}
        for mname, m in self.named_modules(remove_duplicate=False):
            if isinstance(m, XlaFullyShardedDataParallel):
                shard_info[mname] = {p._name: {"_orig_size": p._orig_size,
                                               "_orig_name": p._orig_name}
                                     for p in m.sharded_params}
                for i in range(len(m._fsdp_wrapped_module.flat_meta)):
                    key = (mname + "." if mname else "") + \
                        "_fsdp_wrapped_module.flat_param_%d" % i
                    flatten_info[key] = m._fsdp_wrapped_module.metadata(i)
        return {"shard_info": shard_info, "flatten_info": flatten_info, "buffer_info": {},
                "world_size": self.world_size, "rank": self.rank}


def _cast_floats(dtype, args, kwargs):
    def cast(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.to(dtype)
        if isinstance(x, (list, tuple)):
            return type(x)(cast(v) for v in x)
        if isinstance(x, dict):
            return {k: cast(v) for k, v in x.items()}
        return x
    return cast(args), cast(kwargs)
