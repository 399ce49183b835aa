"""SPMDSavePlanner / SPMDLoadPlanner: torch.distributed.checkpoint's default
planners over the CPU values of the state dict's device tensors.

Save: each device tensor (an XLAShardedTensor: its global tensor) is read
to the CPU as the whole logical tensor and planned as a CPU tensor (the
_CpuShards of _helpers._sharded_cpu_state_dict: put together into one). Load:
each device tensor is planned as a CPU tensor of its shape and dtype that
the storage reader fills; every filled chunk is copied into the device
tensor in place (copy_), which keeps its sharding annotation."""
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner

from lazytpu.core import DEVICE_TYPES as _TYPES


def _global(v):
    g = getattr(v, "global_tensor", None)     # XLAShardedTensor
    return g if g is not None else v


def _is_device(v):
    import torch
    v = _global(v)
    return isinstance(v, torch.Tensor) and v.device.type in _TYPES


def _map(obj, fn, path=()):
    """obj with each device tensor t at key path `path` replaced by fn(path, t)
    (dicts, lists and tuples copied; everything else kept)."""
    if isinstance(obj, dict):
        return type(obj)((k, _map(v, fn, path + (k,))) for k, v in obj.items()) \
            if type(obj) is not dict else {k: _map(v, fn, path + (k,)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_map(v, fn, path + (i,)) for i, v in enumerate(obj))
    if _is_device(obj):
        return fn(path, _global(obj))
    from ._helpers import _CpuShards, _cpu_shards_to_tensor
    if isinstance(obj, _CpuShards):       # _sharded_cpu_state_dict's value
        return _cpu_shards_to_tensor(obj)
    return obj


class SPMDSavePlanner(DefaultSavePlanner):
    """DefaultSavePlanner over the state dict with its device tensors read
    to the CPU (whole logical tensors)."""

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        cpu = _map(state_dict, lambda path, t: t.detach().cpu())
        super().set_up_planner(cpu, storage_meta, is_coordinator)


class SPMDLoadPlanner(DefaultLoadPlanner):
    """DefaultLoadPlanner that reads device tensors into CPU tensors of their
    shape and dtype and copies them into the device tensors."""

    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        import torch
        self._device_of = {}                  # id(CPU stand-in) -> device tensor

        def stand_in(path, t):
            c = torch.empty(t.shape, dtype=t.dtype)
            self._device_of[id(c)] = (c, t)
            return c
        cpu = _map(state_dict, stand_in)
        super().set_up_planner(cpu, metadata, is_coordinator)

    def commit_tensor(self, read_item, tensor):
        super().commit_tensor(read_item, tensor)
        fqn = read_item.dest_index.fqn
        whole = self.state_dict.get(fqn)
        pair = self._device_of.get(id(whole))
        if pair is not None:
            import torch
            with torch.no_grad():
                pair[1].copy_(pair[0])
