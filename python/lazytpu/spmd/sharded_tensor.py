"""XLAShardedTensor: a device tensor seen with its sharding, and its
per-core shards (computed from the global value: torch_xla's shards
without per-core buffers)."""
import dataclasses
from typing import List, Union

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_map

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
            idx.append(slice(start, min(start + size, shape[d]), 1))
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


def _dtensor_types():
    """torch.distributed's DTensor classes (imported once, on first use of
    this module)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    from torch.distributed.tensor.placement_types import Partial, Replicate, Shard
    return DTensor, DeviceMesh, DTensorSpec, TensorMeta, Partial, Replicate, Shard


(_DTensor, _DeviceMesh, _DTensorSpec, _TensorMeta, _Partial, _Replicate,
 _Shard) = _dtensor_types()


class XLAShardedTensor(_DTensor):
    """A device tensor (``global_tensor``) with its sharding: behaves as
    the whole (unpartitioned) tensor; ``local_shards`` gives each core's
    part, ``sharding_spec`` XLA's text of the sharding. A DTensor, as in
    torch_xla 2.9: ``placements`` / ``_spec`` / ``device_mesh`` describe the
    sharding over a DeviceMesh("xla") of the mesh's shape, from the
    ``mesh_shape`` and ``partition_spec`` that mark_sharding (or
    wrap_as_sharded_tensor) recorded; a tensor wrapped without them (an
    op's result) has none, and its placements raise ValueError. Operations
    run on the global tensor (lazytpu's partitioner lays them out), not
    through DTensor's sharding propagation."""

    __slots__ = ["global_tensor", "_mesh_shape", "_partition_spec", "_cached_spec"]

    @staticmethod
    def __new__(cls, elem, mesh_shape=None, partition_spec=None, *args, **kwargs):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=kwargs.get("requires_grad", False))
        if isinstance(elem, XLAShardedTensor):
            mesh_shape = mesh_shape or elem._mesh_shape
            partition_spec = partition_spec or elem._partition_spec
            elem = elem.global_tensor
        r.global_tensor = elem.detach() if r.requires_grad else elem
        r._mesh_shape = None if mesh_shape is None else tuple(mesh_shape)
        r._partition_spec = None if partition_spec is None else tuple(partition_spec)
        r._cached_spec = None
        return r

    def __init__(self, *args, **kwargs):
        torch.Tensor.__init__(self)

    @property
    def mesh_shape(self):
        """The mesh's shape given by mark_sharding / wrap_as_sharded_tensor
        (None for a tensor wrapped without it, e.g. an op's result)."""
        return self._mesh_shape

    @mesh_shape.setter
    def mesh_shape(self, value):
        self._mesh_shape = None if value is None else tuple(value)

    @property
    def partition_spec(self):
        """The partition spec given by mark_sharding /
        wrap_as_sharded_tensor, as given (names or indices); None for a
        tensor wrapped without it."""
        return self._partition_spec

    @partition_spec.setter
    def partition_spec(self, value):
        self._partition_spec = None if value is None else tuple(value)

    def invalidate_spec_cache(self):
        """Forgets the DTensorSpec computed from mesh_shape /
        partition_spec (after either changed)."""
        self._cached_spec = None

    @property
    def _spec(self):
        """The sharding as a DTensorSpec: a DeviceMesh("xla") of the mesh's
        shape, one placement per mesh axis (Shard(d) for the tensor dim d
        split over it, else Replicate()). ValueError without a sharding."""
        if self._cached_spec is not None:
            return self._cached_spec
        mesh_shape, spec = self.mesh_shape, self.partition_spec
        if mesh_shape is None or spec is None:
            raise ValueError("mesh_shape and partition_spec must be specified to create "
                             "DTensorSpec. If this tensor was created through torch "
                             "operations, it may be auto-wrapped. Use "
                             "wrap_as_sharded_tensor() to set them before accessing _spec.")
        p = _sh.partition_spec_of(self.global_tensor)
        ids = p[1] if p is not None and tuple(p[0]) == tuple(mesh_shape) else \
            list(range(int(np.prod(mesh_shape))))
        mesh = _DeviceMesh("xla", torch.tensor(ids).reshape(tuple(mesh_shape)))
        axis_of = {}
        for d, entry in enumerate(spec):
            for a in (entry if isinstance(entry, tuple) else (entry,)):
                if a is not None:
                    axis_of.setdefault(a, d)
        # named entries (given via wrap_as_sharded_tensor) are matched by the
        # IR's indices when the two agree in shape
        if any(isinstance(a, str) for a in axis_of) and p is not None:
            axis_of = {}
            for d, entry in enumerate(p[2]):
                for a in (entry if isinstance(entry, tuple) else (entry,)):
                    if a is not None:
                        axis_of.setdefault(a, d)
        placements = tuple(_Shard(axis_of[m]) if m in axis_of else _Replicate()
                           for m in range(len(mesh_shape)))
        g = self.global_tensor
        self._cached_spec = _DTensorSpec(
            mesh=mesh, placements=placements,
            tensor_meta=_TensorMeta(shape=g.shape, stride=g.stride(), dtype=g.dtype))
        return self._cached_spec

    @property
    def placements(self):
        """The DTensor placements of the sharding (see _spec); ValueError
        when the tensor has no sharding."""
        try:
            return self._spec.placements
        except ValueError:
            raise ValueError(
                "Placements not available: XLAShardedTensor requires mesh_shape and "
                "partition_spec to be set. Use mark_sharding() to properly initialize "
                "sharding information.") from None

    def redistribute(self, device_mesh, placements, *, async_op=False):
        """The tensor re-annotated with placements over device_mesh (a Mesh
        or DeviceMesh of all cores): Shard(d) on mesh axis m splits tensor
        dim d over m. Partial placements raise NotImplementedError (as
        torch_xla 2.9). Values are unchanged; async_op=True annotates a
        copy instead of the tensor itself."""
        mesh = _as_mesh(device_mesh)
        if len(placements) != len(mesh.mesh_shape):
            raise ValueError("Number of placements (%d) must match mesh dimensions (%d)"
                             % (len(placements), len(mesh.mesh_shape)))
        spec = [None] * self.global_tensor.dim()
        for m, pl in enumerate(placements):
            if isinstance(pl, _Partial):
                raise NotImplementedError("Partial placement is not yet implemented and "
                                          "may have unexpected behavior. Use Shard or "
                                          "Replicate placements instead.")
            if isinstance(pl, _Shard):
                if pl.dim >= self.global_tensor.dim():
                    raise IndexError("Shard dimension %d is out of bounds for tensor with "
                                     "%d dimensions" % (pl.dim, self.global_tensor.dim()))
                spec[pl.dim] = m if spec[pl.dim] is None else \
                    (spec[pl.dim] if isinstance(spec[pl.dim], tuple)
                     else (spec[pl.dim],)) + (m,)
        t = self.global_tensor.clone() if async_op else self.global_tensor
        _sh.annotate_custom_sharding(t, mesh, tuple(spec))
        return XLAShardedTensor(t, mesh_shape=mesh.mesh_shape, partition_spec=tuple(spec))

    def to_local(self, *args, **kwargs):
        raise RuntimeError("XLAShardedTensor.to_local: the tensor lives on the logical "
                           "device as a whole; use .global_tensor, or .local_shards for "
                           "each core's part")

    @property
    def local_shards(self):
        """Each core's shard, in core order (a snapshot on the host)."""
        return _local_shards(self.global_tensor)

    def load_local_shards_(self, shards):
        """Writes the shards (one per core, in any order, each the shape of
        that core's shard) into the tensor. RuntimeError, as in torch_xla,
        when the tensor is replicated (no shards of its own) or the shards
        do not cover every core with the right shape."""
        d = _sh._sharding_of(self.global_tensor)
        if d is None or sharding_is_replicated(d):
            raise RuntimeError("load_local_shards_: the tensor is replicated; only a sharded "
                               "tensor's shards can be loaded")
        mesh_shape, ids, dims = d
        layout = _shard_layout(tuple(self.global_tensor.shape), mesh_shape, ids, dims)
        kind = _core.device_kind()
        by_dev = {}
        for s in shards:
            dev = s.shard_device
            k = int(str(dev).rsplit(":", 1)[1]) if ":" in str(dev) else -1
            by_dev[k] = s
        if sorted(by_dev) != sorted(layout):
            raise RuntimeError("load_local_shards_: shards for devices %s, the tensor has one "
                               "per device %s (%s:N)" % (sorted(by_dev), sorted(layout), kind))
        host = self.global_tensor.detach().cpu().clone()
        for dev, (idx, pshape, _replica) in layout.items():
            s = by_dev[dev]
            if tuple(s.data.shape) != tuple(pshape):
                raise RuntimeError("load_local_shards_: the shard of %s:%d has shape %s, "
                                   "expected %s" % (kind, dev, list(s.data.shape),
                                                    list(pshape)))
            part = s.data[tuple(slice(0, x.stop - x.start) for x in idx)]
            host[tuple(idx)] = part.to(host.dtype)
        enc = list(torch.ops.lazytpu.spmd_get_sharding(self.global_tensor))
        with torch.no_grad():
            self.global_tensor.copy_(host.to(self.global_tensor.device))
        torch.ops.lazytpu.spmd_set_sharding(self.global_tensor, enc, _core._caller(2) or "")
        self.invalidate_spec_cache()

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

        kwargs = kwargs or {}
        with torch._C._DisableTorchDispatch():
            out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        # an op mixing this wrapper with plain device tensors runs here below
        # functionalization (they arrive unwrapped: not functional), which
        # wraps the results again: they go back plain, else each would be a
        # functional tensor around an XLAShardedTensor (__torch_function__
        # completes the wrapper it makes of it)
        if any(_core.is_lazytpu_tensor(a) and not isinstance(a, XLAShardedTensor) and
               not torch._is_functional_tensor(a) for a in tree_flatten((args, kwargs))[0]):
            return out
        return tree_map(wrap, out)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # torch.Tensor's, not DTensor's (no DTensor op dispatch); a result it
        # turned into this class (as_subclass) holds itself as global_tensor
        return tree_map(_completed, super(_DTensor, cls).__torch_function__(func, types, args,
                                                                             kwargs))


def _completed(r):
    """r, an XLAShardedTensor made by as_subclass (torch.Tensor's
    __torch_function__ converting a plain result), given the attributes
    __new__ sets: global_tensor a plain alias of it, no recorded sharding."""
    if isinstance(r, XLAShardedTensor) and not hasattr(r, "global_tensor"):
        with torch._C._DisableTorchDispatch():      # not through __torch_dispatch__
            r.global_tensor = r.as_subclass(torch.Tensor)
        r._mesh_shape = r._partition_spec = r._cached_spec = None
    return r


def sharding_is_replicated(d):
    """True for a decoded sharding that splits no dim."""
    return not any(axes for axes in d[2])


def _as_mesh(device_mesh):
    """A lazytpu Mesh of a Mesh or a torch DeviceMesh("xla")."""
    from .mesh import Mesh
    if isinstance(device_mesh, Mesh):
        return device_mesh
    if isinstance(device_mesh, _DeviceMesh):
        ids = device_mesh.mesh.reshape(-1).tolist()
        return Mesh(np.array(ids), tuple(device_mesh.mesh.shape),
                    device_mesh.mesh_dim_names)
    raise TypeError("expected a Mesh or DeviceMesh, got %s" % type(device_mesh).__name__)
