"""The helpers of torch_xla 2.9's distributed_checkpoint that its users and
tests import: which values are sharded, and a state dict's sharded tensors
as their CPU shards (_CpuShards, what save_async writes in torch_xla; the
SPMD save planner puts the shards together into the whole tensor)."""
import dataclasses
from typing import List

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from lazytpu.spmd import ShardingType, XLAShard, XLAShardedTensor, wrap_if_sharded


def _is_sharded_tensor(x):
    """True for an XLAShardedTensor whose data is split over the cores."""
    return isinstance(x, XLAShardedTensor) and x.sharding_type != ShardingType.REPLICATED


def _unwrap_xla_sharded_tensor(x):
    return x.global_tensor if isinstance(x, XLAShardedTensor) else x


@dataclasses.dataclass
class _CpuShards:
    shards: List[XLAShard]
    global_shape: torch.Size


def _cpu_shards_to_tensor(v):
    """The whole CPU tensor that _CpuShards v holds."""
    first = v.shards[0].data
    out = torch.empty(v.global_shape, dtype=first.dtype)
    for s in v.shards:
        if s.indices is Ellipsis:
            out.copy_(s.data)
        else:
            out[tuple(s.indices)] = s.unpadded_data
    return out


def _sharded_cpu_state_dict(state_dict):
    """state_dict with each sharded device tensor as _CpuShards of its
    cores' shards and every other device tensor on the CPU."""
    flat, spec = tree_flatten(state_dict)
    out = []
    for x in flat:
        x = wrap_if_sharded(x)
        if _is_sharded_tensor(x):
            shards = [XLAShard(s.data.cpu(), s.indices, s.shard_device, s.replica_id)
                      for s in x.local_shards]
            out.append(_CpuShards(shards=shards, global_shape=x.global_tensor.shape))
        elif isinstance(x, torch.Tensor):
            out.append(_unwrap_xla_sharded_tensor(x).detach().cpu())
        else:
            out.append(x)
    return tree_unflatten(out, spec)
