"""torch_xla.distributed.zero_redundancy_optimizer: ZeRO-1 over lazytpu's
collectives.

Each replica keeps the optimizer state of one shard (dim 0, padded to a
multiple of the group size) of every parameter. A step reduce-scatters the
gradients (mean over the sharding group), optionally clips them by the
global norm, steps the wrapped optimizer on the shards, and all-gathers the
updated shards back into the full parameters. The state dict has
torch_xla's layout: the wrapper's ``param_groups`` / ``state``, plus
``base_state`` (the shards' optimizer state), ``shape_info`` and, with
save_master_weights, ``sharded_master_weights``.
"""
import copy
import logging

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Optimizer

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla import runtime as xr


class ZeroRedundancyOptimizer(Optimizer):
    """ZeRO-1 wrapper of optimizer_class (see the module doc). Arguments as
    torch_xla 2.9's: optimizer_dtype (state dtype, default float32),
    grad_clipping / max_norm (global-norm clipping, default on, 1.0),
    sharding_groups / grad_norm_groups (replica groups), lazy_init (call
    init_zero() yourself), bucket_cap_mb_all_gather /
    bucket_cap_mb_reduce_scatter (bucketed collectives when > 0),
    use_grad_acc_hook (accumulate gradients in optimizer_dtype),
    save_master_weights, higher_cc_precision; other keyword arguments go to
    optimizer_class."""

    def __init__(self, params, optimizer_class, optimizer_dtype=None, grad_clipping=True,
                 max_norm=None, pin_layout=True, sharding_groups=None,
                 grad_norm_groups=None, lazy_init=False, bucket_cap_mb_all_gather=0,
                 bucket_cap_mb_reduce_scatter=0, use_grad_acc_hook=False,
                 save_master_weights=False, higher_cc_precision=False, **defaults):
        if not save_master_weights:
            logging.warning("Not saving master weights may have accuracy issues when "
                            "resuming training!")
        super().__init__(params, defaults)
        # the replicas: xr.world_size() (= global_device_count() under spawn;
        # 1 in a process of its own, which then keeps every shard)
        self.global_world_size = xr.world_size()
        self.global_rank = xr.global_ordinal()
        self._sharding_groups = ([list(range(self.global_world_size))]
                                 if sharding_groups is None else sharding_groups)
        self._grad_norm_groups = grad_norm_groups
        self.optimizer_class = optimizer_class
        self.defaults = defaults
        self.optimizer_dtype = optimizer_dtype if optimizer_dtype is not None else torch.float32
        self.grad_clipping = grad_clipping
        self.max_norm = max_norm if max_norm is not None else 1.0
        self.pin_layout = pin_layout
        self.bucket_cap_mb_all_gather = bucket_cap_mb_all_gather
        self.bucket_cap_mb_reduce_scatter = bucket_cap_mb_reduce_scatter
        self.save_master_weights = save_master_weights
        self.higher_cc_precision = higher_cc_precision
        self.use_grad_acc_hook = use_grad_acc_hook
        self.grad_acc_hooks, self.grad_accs = [], []
        self._grad_norm = None
        self.inited = False
        if not lazy_init:
            self.init_zero()

    # ------------------------------------------------------------ set-up

    @property
    def grad_norm(self):
        return self._grad_norm

    @property
    def sharding_groups(self):
        return self._sharding_groups

    @sharding_groups.setter
    def sharding_groups(self, groups):
        assert not self.inited, "already inited, cannot change sharding_groups"
        self._sharding_groups = groups

    def init_zero(self):
        """Shards the parameters and creates the wrapped optimizer on them."""
        self.remove_hooks()
        self.local_world_size = len(self.sharding_groups[0])
        self.local_rank = None
        for group in self.sharding_groups:
            group = list(group)
            if self.global_rank in group:
                self.local_rank = group.index(self.global_rank)
        if self.local_rank is None:
            raise ValueError("Current rank {} is missing from the sharding_groups {}"
                             .format(self.global_rank, self.sharding_groups))
        self.base_optimizer = self.optimizer_class(self._shard_parameters(), **self.defaults)
        self._sync_param_groups(self.param_groups, self.base_optimizer.param_groups)
        self.inited = True

    @staticmethod
    def _sync_param_groups(src, dst):
        """Copies every attribute but "params" from src's groups to dst's."""
        assert len(src) == len(dst), \
            "Mismatch between number of source and destination parameter groups"
        for s, d in zip(src, dst):
            for k, v in s.items():
                if k != "params":
                    d[k] = v

    def _pad(self, t):
        rem = t.size(0) % self.local_world_size
        if rem:
            t = F.pad(t, [0, 0] * (t.dim() - 1) + [0, self.local_world_size - rem])
        return t

    def _shard_tensor(self, t):
        return self._pad(t).chunk(self.local_world_size)[self.local_rank]

    def _all_params(self):
        for group, sgroup in zip(self.param_groups, self.base_optimizer.param_groups):
            for p, s in zip(group["params"], sgroup["params"]):
                yield p, s

    def _shard_parameters(self):
        self.device = None
        for g in self.param_groups:
            for p in g["params"]:
                if self.device is None:
                    self.device = p.device
                assert self.device == p.device, "Params should on the same device."
        assert self.device is not None and self.device.type == "xla"
        groups = []
        for g in self.param_groups:
            shards = []
            for p in g["params"]:
                data = self._shard_tensor(p.detach().cpu()).to(self.optimizer_dtype)
                shard = nn.Parameter(data.to(self.device), requires_grad=p.requires_grad)
                if self.use_grad_acc_hook:
                    self._register_hook(p, shard)
                shards.append(shard)
            sg = copy.copy(g)
            sg["params"] = shards
            groups.append(sg)
        return groups

    def _register_hook(self, param, shard):
        acc = param.expand_as(param).grad_fn.next_functions[0][0]

        def hook(*unused):
            if param.grad is None:
                return
            if not hasattr(shard, "main_grad"):
                shard.main_grad = torch.zeros(param.shape, dtype=self.optimizer_dtype,
                                              device=self.device)
                param.main_grad = shard.main_grad
            shard.main_grad.add_(param.grad.detach().to(self.optimizer_dtype))
            param.grad = None

        self.grad_acc_hooks.append(acc.register_hook(hook))
        self.grad_accs.append(acc)

    def remove_hooks(self):
        for h in self.grad_acc_hooks:
            h.remove()
        self.grad_acc_hooks, self.grad_accs = [], []

    # ------------------------------------------------------------ step

    def _has_grad(self, p, s):
        return p.grad is not None or (self.use_grad_acc_hook and hasattr(s, "main_grad"))

    def _scheme(self, kwargs):
        return kwargs.get("sharding_scheme") or [
            {"scale_factor": 1.0, "sharding_group": self.sharding_groups,
             "group_size": self.local_world_size}]

    def _reduce_gradients(self, **kwargs):
        scheme = self._scheme(kwargs)
        self._sync_param_groups(self.param_groups, self.base_optimizer.param_groups)
        todo = []
        for p, s in self._all_params():
            if self._has_grad(p, s):
                g = self._pad(s.main_grad if self.use_grad_acc_hook else p.grad)
                if self.higher_cc_precision:
                    g = g.to(self.optimizer_dtype)
                todo.append((s, g))
        grads = [g for _, g in todo]
        for step in scheme:
            kw = dict(scale=step["scale_factor"] / step["group_size"], scatter_dim=0,
                      shard_count=step["group_size"], pin_layout=self.pin_layout,
                      groups=step["sharding_group"])
            if self.bucket_cap_mb_reduce_scatter > 0:
                grads = xm.reduce_scatter_bucketized(
                    xm.REDUCE_SUM, grads, bucket_cap_mb=self.bucket_cap_mb_reduce_scatter,
                    **kw)
            else:
                grads = [xm.reduce_scatter(xm.REDUCE_SUM, g, **kw) for g in grads]
        for (s, _), g in zip(todo, grads):
            s.grad = g.to(self.optimizer_dtype) if g.dtype != self.optimizer_dtype else g

    @torch.no_grad()
    def _calc_grad_norm(self, norm_type=2.0):
        if norm_type != 2.0:
            raise RuntimeError("only norm type 2 is supported, getting {}".format(norm_type))
        total = torch.zeros([], dtype=self.optimizer_dtype, device=self.device)
        for g in self.base_optimizer.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    total += (p.grad * p.grad).sum()
        xm.all_reduce(xm.REDUCE_SUM, [total], groups=self._sharding_groups,
                      pin_layout=self.pin_layout)
        if self._grad_norm_groups is not None:
            xm.all_reduce(xm.REDUCE_SUM, [total], groups=self._grad_norm_groups,
                          pin_layout=self.pin_layout)
        return torch.pow(total, 1.0 / norm_type)

    @torch.no_grad()
    def _clip_grad_norm(self, max_norm, norm_type=2.0):
        self._grad_norm = self._calc_grad_norm(float(norm_type))
        coeff = torch.tensor(float(max_norm), device=self.device,
                             dtype=self.optimizer_dtype) / (self._grad_norm + 1e-6)
        coeff = torch.where(coeff < 1, coeff, torch.ones_like(coeff))
        for g in self.base_optimizer.param_groups:
            for p in g["params"]:
                if p.grad is not None:
                    p.grad.detach().mul_(coeff)

    def _update_parameters(self, **kwargs):
        scheme = self._scheme(kwargs)
        kwargs.pop("sharding_scheme", None)
        self.base_optimizer.step(closure=None, **kwargs)
        self.base_optimizer.zero_grad(set_to_none=True)
        self.allgather_weights_and_update_full_parameter(scheme)
        self._sync_param_groups(self.base_optimizer.param_groups, self.param_groups)

    @torch.no_grad()
    def step(self, closure=None, **kwargs):
        """Reduce-scatter the gradients, clip, step the shards, all-gather
        the parameters."""
        assert self.inited, "must call init_zero() first"
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._reduce_gradients(**kwargs)
        if self.grad_clipping:
            self._clip_grad_norm(max_norm=self.max_norm)
        self._update_parameters(**kwargs)
        return loss

    def allgather_weights_and_update_full_parameter(self, sharding_scheme=None):
        """Every full parameter (that had a gradient) from the gathered
        shards."""
        scheme = sharding_scheme or self._scheme({})
        todo = [(p, s.detach().to(p.dtype)) for p, s in self._all_params()
                if self._has_grad(p, s)]
        data = [d for _, d in todo]
        for step in reversed(scheme):
            if self.bucket_cap_mb_all_gather > 0:
                data = xm.all_gather_bucketized(data, dim=0, groups=step["sharding_group"],
                                                pin_layout=False,
                                                bucket_cap_mb=self.bucket_cap_mb_all_gather)
            else:
                data = [xm.all_gather(d, dim=0, groups=step["sharding_group"],
                                      pin_layout=self.pin_layout) for d in data]
        with torch.no_grad():
            for (p, _), d in zip(todo, data):
                p.data.copy_(d[:p.size(0)])

    def zero_grad(self, set_to_none=False):
        super().zero_grad(set_to_none=set_to_none)
        if self.use_grad_acc_hook:
            for g in self.base_optimizer.param_groups:
                for s in g["params"]:
                    if hasattr(s, "main_grad"):
                        s.main_grad.zero_()

    # ------------------------------------------------------------ state

    def state_dict(self):
        sd = super().state_dict()
        sd["base_state"] = self.base_optimizer.state_dict()["state"]
        sd["shape_info"] = self.get_shape_info()
        if self.save_master_weights:
            shards = [s for g in self.base_optimizer.param_groups for s in g["params"]]
            sd["sharded_master_weights"] = {i: s.data for i, s in enumerate(shards)}
        return sd

    def load_state_dict(self, state_dict):
        state_dict = copy.deepcopy(state_dict)
        base_state = state_dict.pop("base_state")
        super().load_state_dict(state_dict)
        self.init_zero()
        tmp = self.base_optimizer.state_dict()
        tmp["state"] = base_state
        tmp["param_groups"] = state_dict["param_groups"]
        self.base_optimizer.load_state_dict(tmp)
        if "sharded_master_weights" not in state_dict:
            return
        master = state_dict["sharded_master_weights"]
        for group, sgroup, loaded in zip(self.param_groups, self.base_optimizer.param_groups,
                                         state_dict["param_groups"]):
            for p, s, idx in zip(group["params"], sgroup["params"], loaded["params"]):
                with torch.no_grad():
                    s.data.copy_(master[idx])
                # a gradient marks the parameter for the gather below
                if self.use_grad_acc_hook:
                    s.main_grad = torch.zeros(p.shape, dtype=self.optimizer_dtype,
                                              device=self.device)
                    p.main_grad = s.main_grad
                else:
                    p.grad = torch.zeros_like(p.data)
        torch_xla.sync()
        self.allgather_weights_and_update_full_parameter()
        torch_xla.sync()

    def get_shape_info(self):
        """{index: shape} of every parameter, in parameter-group order."""
        shapes = [p.shape for g in self.param_groups for p in g["params"]]
        return dict(enumerate(shapes))
