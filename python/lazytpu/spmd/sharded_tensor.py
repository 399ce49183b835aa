"""XLAShardedTensor: a device tensor seen with its sharding, and its
per-core shards (computed from the global value: torch_xla's shards
without per-core buffers)."""
import dataclasses
from typing import List, Union

import numpy as np
import torch
from torch.utils._pytree import tree_map

from .. import core as _core
from . import sharding as _sh


@dataclasses.dataclass
class XLAShard:
    """One core's shard: data (padded to the shard size as XLA pads it),
    indices into the global tensor (a list of slices, Ellipsis when
    replicated; padding not included), the core and the replica id."""
    data: torch.Tensor
    indices: Union[type(Ellipsis), List[slice]]
    shard_device: str
    replica_id: int

    @property
    def unpadded_data(self):
        if self.indices is Ellipsis:
            return self.data
        return self.data[tuple(slice(0, s.stop - s.start) for s in self.indices)]


def _shard_layout(shape, mesh_shape, ids, dims):
    """Per device id: (indices or Ellipsis, padded shard shape, replica id)."""
    logical = np.array(ids).reshape(mesh_shape)
    used = [a for axes in dims for a in axes]
    rep_axes = [a for a in range(len(mesh_shape)) if a not in used]
    out = {}
    for pos in np.ndindex(*mesh_shape):
        dev = int(logical[pos])
        if not used:
            out[dev] = (Ellipsis, tuple(shape), dev)
            continue
        idx, pshape = [], []
        for d, axes in enumerate(dims):
            n = 1
            k = 0
            for a in axes:           # the first axis is the major one
                n *= mesh_shape[a]
                k = k * mesh_shape[a] + pos[a]
            size = -(-shape[d] // n) if n > 1 else shape[d]
            start = min(k * size, shape[d])
            idx.append(slice(start, min(start + size, shape[d])))
            pshape.append(size)
        replica = 0
        for a in rep_axes:
            replica = replica * mesh_shape[a] + pos[a]
        out[dev] = (idx, tuple(pshape), replica)
    return out


def _local_shards(t):
    d = _sh._sharding_of(t)
    kind = _core.device_kind()
    host = t.detach().cpu()
    if d is None:                      # no sharding: every core holds all of it
        from .runtime import global_runtime_device_count
        return [XLAShard(host.clone(), Ellipsis, "%s:%d" % (kind, k), k)
                for k in range(global_runtime_device_count())]
    mesh_shape, ids, dims = d
    layout = _shard_layout(tuple(t.shape), mesh_shape, ids, dims)
    shards = []
    for dev in sorted(layout):
        idx, pshape, replica = layout[dev]
        if idx is Ellipsis:
            data = host.clone()
        else:
            part = host[tuple(idx)]
            data = torch.zeros(pshape, dtype=host.dtype)
            data[tuple(slice(0, s) for s in part.shape)] = part
        shards.append(XLAShard(data, idx, "%s:%d" % (kind, dev), replica))
    return shards


class XLAShardedTensor(torch.Tensor):
    """A device tensor (``global_tensor``) with its sharding: behaves as
    the whole (unpartitioned) tensor; ``local_shards`` gives each core's
    part, ``sharding_spec`` XLA's text of the sharding."""

    __slots__ = ["global_tensor"]

    @staticmethod
    def __new__(cls, elem, *args, **kwargs):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=kwargs.get("requires_grad", False))
        r.global_tensor = elem.detach() if r.requires_grad else elem
        return r

    @property
    def local_shards(self):
        """Each core's shard, in core order (a snapshot on the host)."""
        return _local_shards(self.global_tensor)

    def load_local_shards_(self, shards):
        """Writes the shards' data (padding dropped) into the tensor."""
        d = _sh._sharding_of(self.global_tensor)
        host = self.global_tensor.detach().cpu().clone()
        for s in shards:
            if s.indices is Ellipsis:
                host.copy_(s.data)
            else:
                host[tuple(s.indices)] = s.unpadded_data
        spec = _sh.partition_spec_of(self.global_tensor)
        with torch.no_grad():
            self.global_tensor.copy_(host.to(self.global_tensor.device))
        if d is not None:
            mesh_shape, ids, pspec = spec
            from .mesh import Mesh
            _sh.mark_sharding(self.global_tensor, Mesh(ids, mesh_shape), pspec)

    @property
    def sharding_spec(self):
        return _sh.sharding_spec_text(self.global_tensor)

    @property
    def sharding_type(self):
        t = _sh.sharding_type_of(self.global_tensor)
        return None if t is None else _sh.ShardingType(t)

    def __repr__(self):
        if not hasattr(self, "global_tensor"):
            return str(self.cpu())
        return "XLAShardedTensor(%s)" % (self.global_tensor,)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(e):
            return e.global_tensor if isinstance(e, XLAShardedTensor) else e

        def wrap(e):
            return XLAShardedTensor(e) if isinstance(e, torch.Tensor) else e

        with torch._C._DisableTorchDispatch():
            return tree_map(wrap, func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {})))

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs)
