"""OpSharding: a sharding as XLA describes it (a tile assignment of device
ids, possibly with a last replicated dim), the object torch_xla 2.9 passes
around as ``torch_xla._XLAC.OpSharding`` (``Mesh.get_op_sharding``), and
the host-side assembly of a sharded device tensor from per-core shards
(``_XLAC._global_tensor_from_cpu_shards``)."""
import numpy as np
import torch

from . import sharding as _sh
from .runtime import global_runtime_device_count


class OpSharding:
    """``OpSharding(tile_assignment, group_assignment, replication_groups,
    sharding_type)``: torch_xla's constructor. tile_assignment is the
    (nested) list of device ids, one entry per tile (a last extra dim lists
    the replicas of a PARTIAL sharding); group_assignment and
    replication_groups are XLA's derived forms and are not needed here.
    REPLICATED takes an empty tile assignment. MANUAL is what
    _mark_manual_sharding gives; as the target of a sharding it is refused."""

    def __init__(self, tile_assignment, group_assignment=(), replication_groups=(),
                 sharding_type=_sh.ShardingType.REPLICATED):
        self.type = _sh.ShardingType(int(sharding_type))
        tiles = np.array(tile_assignment, dtype=np.int64)
        if self.type in (_sh.ShardingType.REPLICATED, _sh.ShardingType.MANUAL):
            n = global_runtime_device_count()
            self.mesh_shape, self.device_ids, self.dims = (n,), list(range(n)), None
            self.tile_assignment = tiles
            return
        if self.type not in (_sh.ShardingType.TILED, _sh.ShardingType.PARTIAL):
            raise RuntimeError("OpSharding: sharding type %s is not supported by lazytpu"
                               % self.type.name)
        if tiles.ndim == 0 or tiles.size == 0:
            raise RuntimeError("OpSharding: a %s sharding needs a tile assignment"
                               % self.type.name)
        # the tile array is the mesh: tensor dim d is split over mesh axis d;
        # a PARTIAL sharding's last axis holds the replicas (no tensor dim)
        self.tile_assignment = tiles
        self.mesh_shape = tuple(int(s) for s in tiles.shape)
        self.device_ids = [int(d) for d in tiles.reshape(-1).tolist()]
        rank = tiles.ndim - (1 if self.type == _sh.ShardingType.PARTIAL else 0)
        self.dims = [(d,) for d in range(rank)]

    @classmethod
    def from_mesh(cls, mesh, partition_spec):
        """The sharding of partition_spec over mesh (checked as
        mark_sharding checks it)."""
        spec = _sh._translate(mesh, partition_spec)
        _sh._check_axes(mesh, spec)
        self = cls.__new__(cls)
        self.mesh_shape = tuple(mesh.mesh_shape)
        self.device_ids = [int(d) for d in mesh.device_ids.tolist()]
        self.dims = [d if isinstance(d, tuple) else (() if d is None else (d,))
                     for d in spec]
        used = [a for axes in self.dims for a in axes]
        unused = [a for a in range(len(self.mesh_shape)) if a not in used]
        logical = np.array(self.device_ids).reshape(self.mesh_shape)
        tile_shape = [int(np.prod([self.mesh_shape[a] for a in axes])) for axes in self.dims]
        rep = int(np.prod([self.mesh_shape[a] for a in unused]))
        if not spec or not used or len(self.device_ids) == 1:
            self.type = _sh.ShardingType.REPLICATED
            self.tile_assignment = np.array([], dtype=np.int64)
            self.dims = [()] * len(spec)
            return self
        self.type = _sh.ShardingType.PARTIAL if rep > 1 else _sh.ShardingType.TILED
        self.tile_assignment = logical.transpose(used + unused).reshape(
            tile_shape + ([rep] if rep > 1 else []))
        return self

    def encoding(self, rank):
        """lazytpu's sharding encoding for a tensor of this rank (what
        mark_sharding records); RuntimeError for MANUAL or a rank that does
        not fit."""
        if self.type == _sh.ShardingType.MANUAL:
            raise RuntimeError("OpSharding {manual} is not a layout of a whole tensor: "
                               "mark manual values with _mark_manual_sharding")
        replicated = self.dims is None or not any(self.dims)
        dims = [()] * rank if replicated else self.dims
        if len(dims) != rank:
            raise RuntimeError("OpSharding %s does not fit a tensor of rank %d"
                               % (self, rank))
        mesh = _FlatMesh(self.mesh_shape, self.device_ids)
        return _sh._encode(mesh, tuple(None if not a else (a[0] if len(a) == 1 else a)
                                       for a in dims))

    def __str__(self):
        if self.type == _sh.ShardingType.REPLICATED:
            return "{replicated}"
        if self.type == _sh.ShardingType.MANUAL:
            return "{manual}"
        shape = ",".join(str(s) for s in self.tile_assignment.shape)
        ids = ",".join(str(int(d)) for d in self.tile_assignment.reshape(-1).tolist())
        tail = " last_tile_dim_replicate" if self.type == _sh.ShardingType.PARTIAL else ""
        return "{devices=[%s]%s%s}" % (shape, ids, tail)

    __repr__ = __str__


class _FlatMesh:
    """The two attributes of a Mesh that _encode reads."""

    def __init__(self, mesh_shape, device_ids):
        self.mesh_shape = tuple(mesh_shape)
        self.device_ids = np.array(device_ids)

    def size(self):
        return int(np.prod(self.mesh_shape))


def global_tensor_from_cpu_shards(shards, op_sharding, global_shape=None):
    """A device tensor with op_sharding whose shard on core i is shards[i]
    (torch_xla's _XLAC._global_tensor_from_cpu_shards). One CPU shard per
    core, all of one shape and dtype; global_shape (default: the shards
    put together, or one shard when replicated) must give exactly that
    shard shape, the last shards being padding (ceil-sized shards, as XLA
    pads). Raises RuntimeError otherwise."""
    from .. import core as _core
    n = global_runtime_device_count()
    shards = list(shards)
    if len(shards) != n:
        raise RuntimeError("_global_tensor_from_cpu_shards: %d shards for %d devices (one "
                           "per device)" % (len(shards), n))
    if any(not isinstance(s, torch.Tensor) or s.device.type != "cpu" for s in shards):
        raise RuntimeError("_global_tensor_from_cpu_shards: shards must be CPU tensors")
    shape = tuple(shards[0].shape)
    if any(tuple(s.shape) != shape or s.dtype != shards[0].dtype for s in shards):
        raise RuntimeError("_global_tensor_from_cpu_shards: shards differ in shape or dtype "
                           "(%s)" % [(tuple(s.shape), s.dtype) for s in shards])
    enc = op_sharding.encoding(len(shape))
    mesh_shape, ids, dims = _sh._decode(enc)
    splits = [int(np.prod([mesh_shape[a] for a in axes])) for axes in dims]
    padded = tuple(s * k for s, k in zip(shape, splits))
    if global_shape is None:
        global_shape = padded
    global_shape = tuple(int(s) for s in global_shape)
    if len(global_shape) != len(shape) or any(
            -(-g // k) != s for g, k, s in zip(global_shape, splits, shape)):
        raise RuntimeError("_global_tensor_from_cpu_shards: global shape %s does not fit "
                           "shards of shape %s split %s (sharding %s)"
                           % (list(global_shape), list(shape), splits, op_sharding))
    from .sharded_tensor import _shard_layout
    host = torch.zeros(padded, dtype=shards[0].dtype)
    for dev, (idx, _pshape, _replica) in _shard_layout(padded, mesh_shape, ids,
                                                       dims).items():
        if idx is Ellipsis:
            host.copy_(shards[dev])
        else:
            host[tuple(idx)] = shards[dev]
    host = host[tuple(slice(0, g) for g in global_shape)].clone()
    t = host.to(_core.device())
    torch.ops.lazytpu.spmd_set_sharding(t, enc, _core._caller(2) or "")
    return t
