"""Sharding annotations: partition specs over a mesh, checked like
torch_xla, recorded on the value in the IR (lazytpu.spmd's C op)."""
import dataclasses
import enum
from typing import Optional, Tuple

import numpy as np
import torch

from .. import core as _core
from ..barrier import optimization_barrier_
from .mesh import Mesh, get_global_mesh
from .runtime import global_runtime_device_count, is_spmd


class ShardingType(enum.IntEnum):
    """XLA's OpSharding types, as torch_xla numbers them."""
    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


def _where(t, mesh, spec):
    return "tensor of shape %s, partition_spec %s, mesh %s" % (list(t.shape), spec, mesh)


def _translate(mesh, spec, t=None):
    """Partition spec with names replaced by mesh axis indices; refuses what
    torch_xla refuses, with the same exception types (ValueError for an
    unknown name or a bad entry type, AssertionError for nested tuples, axis
    indices out of range or an axis used twice)."""
    out = []
    for p in spec:
        if isinstance(p, tuple):
            if any(isinstance(x, tuple) for x in p):
                raise AssertionError("Partition spec cannot contain nested tuples: %s"
                                     % (_where(t, mesh, spec) if t is not None else spec,))
            out.append(tuple(_translate(mesh, p, t)))
        elif p is None or (isinstance(p, (int, np.integer)) and not isinstance(p, bool)):
            out.append(None if p is None else int(p))
        elif isinstance(p, str):
            idx = mesh.get_axis_name_idx(p)
            if idx is None:
                raise ValueError("Axis name %s is not defined in the given mesh (%s)"
                                 % (p, _where(t, mesh, spec) if t is not None else mesh))
            out.append(idx)
        else:
            raise ValueError("Spec type %s is not supported in partition spec (%s)"
                             % (type(p), _where(t, mesh, spec) if t is not None else spec))
    return tuple(out)


def _check_axes(mesh, spec, t=None):
    flat = []
    for d in spec:
        if isinstance(d, tuple):
            flat.extend(d)
        elif d is not None:
            flat.append(d)
    def where():
        return _where(t, mesh, spec) if t is not None else "partition_spec %s" % (spec,)
    if not all(0 <= d < len(mesh.mesh_shape) for d in flat):
        raise AssertionError("partition_spec (%s) contains out of bound index into "
                             "mesh_shape %s: %s" % (spec, mesh.mesh_shape, where()))
    if len(flat) != len(set(flat)):
        raise AssertionError("Each device mesh dimension should appear at most once in "
                             "partition_spec %s: %s" % (spec, where()))
    return flat


def _encode(mesh, spec):
    """lt_sharding_new's arguments as one int list (backend/spmd_ops.cpp)."""
    enc = [len(mesh.mesh_shape)] + list(mesh.mesh_shape)
    enc += [mesh.size()] + [int(d) for d in mesh.device_ids.tolist()]
    enc.append(len(spec))
    for d in spec:
        axes = d if isinstance(d, tuple) else (() if d is None else (d,))
        code = 0
        for k, a in enumerate(axes):
            code |= (a + 1) << (4 * k)
        enc.append(code)
    return enc


def _is_manual(enc):
    """True for the encoding of a MANUAL sharding ("{manual}": the C core
    appends -1 after the per-dim axes)."""
    if not enc:
        return False
    k = 1 + enc[0]
    k += 1 + enc[k]
    k += 1 + enc[k]
    return k < len(enc) and enc[k] == -1


def _decode(enc):
    """(mesh_shape, device_ids, per-dim tuples of mesh axes) from an encoding."""
    k = 0
    mnd = enc[k]; k += 1
    mesh_shape = tuple(enc[k:k + mnd]); k += mnd
    n = enc[k]; k += 1
    ids = list(enc[k:k + n]); k += n
    nd = enc[k]; k += 1
    dims = []
    for code in enc[k:k + nd]:
        axes = []
        while code & 0xF:
            axes.append((code & 0xF) - 1)
            code >>= 4
        dims.append(tuple(axes))
    return mesh_shape, ids, dims


def _device_tensor(t, what):
    if not isinstance(t, torch.Tensor) or not _core.is_lazytpu_tensor(t):
        raise RuntimeError("%s: expected a tensor on the device (%s), got %s"
                           % (what, _core.DEVICE_TYPE,
                              t.device if isinstance(t, torch.Tensor) else type(t).__name__))
    return t


def _is_pending(g):
    """True when device tensor g's value is still a computation (not device
    data)."""
    return "pending=1" in torch.ops.lazytpu.tensor_info(g)


def _check_reshard(g, mesh, partition_spec):
    """torch_xla 2.9's rule for device data that already has a sharding
    (ShardingUtil::XlaMarkSharding): the same sharding again is a no-op,
    another one raises RuntimeError("Existing annotation must be cleared
    first: ...") unless the existing one is replicated. A computed (pending)
    value may be annotated again (torch_xla's custom sharding node)."""
    if _is_pending(g):
        return
    old = list(torch.ops.lazytpu.spmd_get_sharding(g))
    if not old or _is_manual(old):
        return
    old_text = sharding_spec_text(g)
    if old_text == "{replicated}":
        return
    from .op_sharding import OpSharding
    if str(OpSharding.from_mesh(mesh, partition_spec)) == old_text:
        return
    raise RuntimeError("Existing annotation must be cleared first: %s (new sharding %s, %s)"
                       % (old_text, OpSharding.from_mesh(mesh, partition_spec),
                          _where(g, mesh, partition_spec)))


def mark_sharding(t, mesh, partition_spec):
    """Annotates t (a device tensor or XLAShardedTensor) with how it is laid
    out over `mesh`: partition_spec has one entry per dim of t, a mesh axis
    (name or index), a tuple of axes (split over their product, the first
    the major), or None (not split). Returns an XLAShardedTensor wrapping t.
    Checks like torch_xla: the mesh must span every core and the spec must
    have t's rank (AssertionError), axis names must exist (ValueError), each
    mesh axis is used once; the message names t's shape, the spec and the
    mesh. A dim that its axes do not divide is padded as XLA pads it (each
    shard ceil(size / shards) long; local_shards shows the padding).
    Requires SPMD mode (use_spmd()), like torch_xla."""
    if torch.compiler.is_compiling():
        # inside torch.compile / torch_xla.compile(full_graph=True): the
        # recorded graph keeps no annotation (values are unaffected: the
        # compiled graph runs whole); docs/spmd.md
        return t
    partition_spec = _annotate(t, mesh, partition_spec)
    # the mesh shape and spec ride along for the DTensor view (torch_xla 2.9)
    return wrap_as_sharded_tensor(t, mesh_shape=mesh.mesh_shape, partition_spec=partition_spec)


def _annotate(t, mesh, partition_spec):
    """mark_sharding without the returned wrapper (the loader's batches,
    the replicated rest of a batch: called per tensor per step). Returns
    the spec as a tuple."""
    from .sharded_tensor import XLAShardedTensor
    g = t.global_tensor if isinstance(t, XLAShardedTensor) else t
    _device_tensor(g, "mark_sharding")
    if not is_spmd():
        raise RuntimeError("mark_sharding: SPMD is not enabled; call "
                           "torch_xla.runtime.use_spmd() (lazytpu.spmd.use_spmd()) first")
    if not isinstance(mesh, Mesh):
        raise ValueError("mark_sharding: mesh must be a Mesh, got %s" % type(mesh).__name__)
    partition_spec = tuple(partition_spec)
    n = global_runtime_device_count()
    if mesh.size() != n:
        raise AssertionError("%s is not mappable over %d devices (%s)"
                             % (mesh.mesh_shape, n, _where(g, mesh, partition_spec)))
    if len(g.shape) != len(partition_spec):
        raise AssertionError("Partition spec length (%d) should be equal to the input rank "
                             "(%d): %s" % (len(partition_spec), len(g.shape),
                                           _where(g, mesh, partition_spec)))
    spec = _translate(mesh, partition_spec, g)
    _check_axes(mesh, spec, g)
    _check_reshard(g, mesh, partition_spec)
    torch.ops.lazytpu.spmd_set_sharding(g, _encode(mesh, spec), _core._caller(2) or "")
    return partition_spec


def clear_sharding(t):
    """Removes t's annotation (in place); returns the plain tensor."""
    from .sharded_tensor import XLAShardedTensor
    g = t.global_tensor if isinstance(t, XLAShardedTensor) else t
    torch.ops.lazytpu.spmd_set_sharding(_device_tensor(g, "clear_sharding"), [], "")
    return g


def sharding_spec_text(t):
    """XLA's text of t's sharding ("{devices=[8,1]0,1,...}",
    "{replicated}"), "" when t has none (torch_xla's
    _XLAC._get_xla_sharding_spec)."""
    from .sharded_tensor import XLAShardedTensor
    g = t.global_tensor if isinstance(t, XLAShardedTensor) else t
    if not _core.is_lazytpu_tensor(g):
        return ""
    enc = list(torch.ops.lazytpu.spmd_get_sharding(g))
    if not enc:
        # in SPMD mode every output of a step has a sharding: torch_xla's
        # partitioner gives an unannotated one "{replicated}"
        return "{replicated}" if _replicated_output(g) else ""
    if _is_manual(enc):
        return "{manual}"
    if len(_decode(enc)[1]) == 1:
        return "{replicated}"        # one device holds all of it (torch_xla's text)
    return torch.ops.lazytpu.spmd_sharding_text(g)


def _replicated_output(g):
    """True when g (no sharding of its own) is the output of a step run in
    SPMD mode: torch_xla 2.9 then gives it the computation's output sharding,
    replicated (PrepareOutputShardingPropagation)."""
    return is_spmd() and bool(torch.ops.lazytpu.spmd_from_step(g))


def _sharding_of(t):
    from .sharded_tensor import XLAShardedTensor
    g = t.global_tensor if isinstance(t, XLAShardedTensor) else t
    if not _core.is_lazytpu_tensor(g):
        return None
    enc = list(torch.ops.lazytpu.spmd_get_sharding(g))
    return _decode(enc) if enc else None


def partition_spec_of(t):
    """(mesh_shape, device_ids, spec) of t's sharding, spec as per-dim mesh
    axis indices (int, tuple or None); None when t has no sharding."""
    d = _sharding_of(t)
    if d is None:
        return None
    mesh_shape, ids, dims = d
    spec = tuple(None if not a else (a[0] if len(a) == 1 else tuple(a)) for a in dims)
    return mesh_shape, ids, spec


def sharding_type_of(t):
    """ShardingType of t's sharding as an int, None when t has none
    (torch_xla's _XLAC._get_xla_sharding_type)."""
    g = unwrap_sharded_tensor(t)
    if not _core.is_lazytpu_tensor(g):
        return None
    enc = list(torch.ops.lazytpu.spmd_get_sharding(g))
    if not enc:
        return int(ShardingType.REPLICATED) if _replicated_output(g) else None
    if _is_manual(enc):
        return int(ShardingType.MANUAL)
    mesh_shape, ids, dims = _decode(enc)
    used = {a for axes in dims for a in axes}
    if not used or len(ids) == 1:       # a mesh of one device: replicated, as torch_xla
        return int(ShardingType.REPLICATED)
    if any(mesh_shape[a] > 1 for a in range(len(mesh_shape)) if a not in used):
        return int(ShardingType.PARTIAL)
    return int(ShardingType.TILED)


def wrap_as_sharded_tensor(t, mesh_shape=None, partition_spec=None):
    """t as an XLAShardedTensor; mesh_shape / partition_spec, when given,
    are recorded on it (its DTensor placements follow them)."""
    from .sharded_tensor import XLAShardedTensor
    if not isinstance(t, XLAShardedTensor):
        return XLAShardedTensor(t, mesh_shape=mesh_shape, partition_spec=partition_spec)
    if mesh_shape is not None:
        t.mesh_shape = mesh_shape
    if partition_spec is not None:
        t.partition_spec = partition_spec
    if mesh_shape is not None or partition_spec is not None:
        t.invalidate_spec_cache()
    return t


def unwrap_sharded_tensor(t):
    from .sharded_tensor import XLAShardedTensor
    return t.global_tensor if isinstance(t, XLAShardedTensor) else t


def wrap_if_sharded(x):
    """x as an XLAShardedTensor when it is a device tensor with a sharding."""
    from .sharded_tensor import XLAShardedTensor
    if (isinstance(x, torch.Tensor) and not isinstance(x, XLAShardedTensor)
            and _core.is_lazytpu_tensor(x) and _sharding_of(x) is not None):
        return XLAShardedTensor(x)
    return x


@dataclasses.dataclass
class ShardingSpec:
    """A (mesh, partition_spec) pair applied to tensors later, e.g. by
    ``MpDeviceLoader(..., input_sharding=ShardingSpec(mesh, ("data", None)))``.
    ``minibatch``: the host loads only its part of the global batch (one
    host here: the whole batch)."""
    mesh: Mesh
    partition_spec: Tuple
    minibatch: Optional[bool] = False

    def __post_init__(self):
        self.partition_spec = tuple(self.partition_spec)
        spec = _translate(self.mesh, self.partition_spec)
        _check_axes(self.mesh, spec)
        self._spec = spec

    def can_apply(self, t):
        """True when the spec fits t's rank."""
        return len(t.shape) == len(self.partition_spec)

    def apply(self, t):
        """mark_sharding(t, mesh, partition_spec). With minibatch=True the
        batch dim (0) must divide by the devices of this host (all of
        them: one host), or RuntimeError (torch_xla's message)."""
        if self.minibatch and t.dim() > 0 and t.size()[0] % global_runtime_device_count():
            raise RuntimeError(
                "When minibatch is configured, the per-host batch size must be divisible by "
                "local runtime device count. Per host input data shape = %s, "
                "local_runtime_device_count = %d" % (t.size(), global_runtime_device_count()))
        if not torch.compiler.is_compiling():
            _annotate(t, self.mesh, self.partition_spec)


class MarkShardingFunction(torch.autograd.Function):
    """``MarkShardingFunction.apply(t, mesh, partition_spec)``: a copy of t
    annotated with the sharding, whose gradient is annotated alike in the
    backward pass (t itself is left as it is). Values are t's and its
    gradient's. Both annotations go through the custom op
    ``lazytpu::aot_mark_sharding`` (with a fake implementation), so that
    AOTAutograd (functorch.compile.aot_function) can trace it into its
    forward and backward graphs."""

    @staticmethod
    def forward(ctx, t, mesh, spec):
        ctx.mesh, ctx.spec = mesh, spec
        return _aot_mark_sharding(unwrap_sharded_tensor(t), str(mesh), str(tuple(spec)))

    @staticmethod
    def backward(ctx, grad):
        if grad is None:
            return None, None, None
        return (_aot_mark_sharding(unwrap_sharded_tensor(grad), str(ctx.mesh),
                                   str(tuple(ctx.spec))), None, None)


@torch.library.custom_op("lazytpu::aot_mark_sharding", mutates_args=())
def _aot_mark_sharding(t: torch.Tensor, mesh: str, partition_spec: str) -> torch.Tensor:
    """A copy of t annotated with partition_spec over the mesh, both given
    as text (str(Mesh), str(tuple)) so that the op has a plain schema."""
    import ast
    m = Mesh.from_str(mesh)
    if m is None:
        raise ValueError("aot_mark_sharding: cannot read the mesh %r" % mesh)
    out = t.clone()
    mark_sharding(out, m, ast.literal_eval(partition_spec))
    return out


@_aot_mark_sharding.register_fake
def _aot_mark_sharding_fake(t, mesh, partition_spec):
    return torch.empty_like(t)


def mark_sharding_with_gradients(t, mesh, partition_spec):
    """mark_sharding for t and, in the backward pass, for t's gradient;
    returns the annotated tensor (use it instead of t)."""
    if len(t.shape) != len(partition_spec):
        raise AssertionError("Partition spec length (%d) should be equal to the input rank "
                             "(%d)." % (len(partition_spec), len(t.shape)))
    return MarkShardingFunction.apply(unwrap_sharded_tensor(t), mesh, tuple(partition_spec))


def enable_manual_sharding(t, partition_spec, *, mesh=None):
    """torch_xla's manual sharding: annotates t with partition_spec over mesh
    (the global mesh when None) and returns, as an XLAShardedTensor, the
    per-core view of it: its shape is one shard's, and the ops on it (and on
    what is computed from it) run on every core of the mesh on that core's
    own block, until disable_manual_sharding puts the blocks together. A dim
    its shards do not divide is refused (RuntimeError; XLA would pad)."""
    mesh = get_global_mesh() if mesh is None else mesh
    if mesh is None:
        raise ValueError("enable_manual_sharding: no mesh given and no global mesh set")
    t = mark_sharding(unwrap_sharded_tensor(t), mesh, partition_spec)
    out = torch.ops.lazytpu.spmd_full_to_shard(unwrap_sharded_tensor(t))
    return wrap_as_sharded_tensor(out, mesh_shape=mesh.mesh_shape,
                                  partition_spec=tuple(partition_spec))


def disable_manual_sharding(t, partition_spec, full_shape, *, mesh=None):
    """Ends a manual region: t's per-core values (each core's block) as one
    tensor of full_shape laid out by partition_spec over mesh (the global
    mesh when None); replicated (no split dim): the first core's value is
    the tensor's. Returns an XLAShardedTensor."""
    mesh = get_global_mesh() if mesh is None else mesh
    if mesh is None:
        raise ValueError("disable_manual_sharding: no mesh given and no global mesh set")
    t = _mark_manual_sharding(unwrap_sharded_tensor(t))
    out = spmd_shard_to_full_shape(unwrap_sharded_tensor(t),
                                   mesh.get_op_sharding(partition_spec), full_shape,
                                   unwrap_sharded_tensor(t).dtype)
    return wrap_as_sharded_tensor(out, mesh_shape=mesh.mesh_shape,
                                  partition_spec=tuple(partition_spec))


def spmd_full_to_shard_shape(t):
    """torch_xla's _XLAC._spmd_full_to_shard_shape: the per-core (manual)
    view of sharded t (RuntimeError when t has no sharding)."""
    return torch.ops.lazytpu.spmd_full_to_shard(_device_tensor(unwrap_sharded_tensor(t),
                                                               "_spmd_full_to_shard_shape"))


def spmd_shard_to_full_shape(t, op_sharding, full_shape, dtype):
    """torch_xla's _XLAC._spmd_shard_to_full_shape: manual t's per-core
    values as one tensor of full_shape with op_sharding (an OpSharding;
    RuntimeError when t is not manual-sharded)."""
    g = _device_tensor(unwrap_sharded_tensor(t), "_spmd_shard_to_full_shape")
    if dtype is not None and dtype != g.dtype:
        raise RuntimeError("_spmd_shard_to_full_shape: output dtype %s differs from the "
                           "tensor's %s (lazytpu does not convert here)" % (dtype, g.dtype))
    shape = [int(s) for s in full_shape]
    enc = [] if op_sharding is None else list(op_sharding.encoding(len(shape)))
    return torch.ops.lazytpu.spmd_shard_to_full(g, enc, shape, _core._caller(2) or "")


def apply_backward_optimization_barrier(m):
    """Registers a full backward hook on module m that puts its parameters'
    gradients (those already set) and its input gradients behind one
    optimization barrier (``lazytpu.barrier.optimization_barrier_``), as
    torch_xla's FSDPv2 does: values unchanged; the step computes nothing
    that reads them before all of them exist, and the partitioned step
    keeps each one's layout (no collective, no replicated op)."""

    def barrier(module, grad_input, grad_output):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        tensors = [g for g in grads + list(grad_input) if isinstance(g, torch.Tensor)]
        if tensors:
            optimization_barrier_(tensors, skip_host=True)

    m.register_full_backward_hook(barrier)


def annotate_custom_sharding(t, mesh, partition_spec):
    """Gives t's value a new sharding from here on, whatever sharding it
    had (torch_xla's custom sharding node: mark_sharding refuses to
    re-shard data that is already sharded, this does not). Consumers of t
    are laid out after it; values are unchanged. Same checks as
    mark_sharding; returns t as an XLAShardedTensor."""
    g = unwrap_sharded_tensor(t)
    _device_tensor(g, "annotate_custom_sharding")
    partition_spec = tuple(partition_spec)
    if len(g.shape) != len(partition_spec):
        raise AssertionError("Partition spec length (%d) should be equal to the input rank "
                             "(%d): %s" % (len(partition_spec), len(g.shape),
                                           _where(g, mesh, partition_spec)))
    if not isinstance(mesh, Mesh):
        raise ValueError("annotate_custom_sharding: mesh must be a Mesh, got %s"
                         % type(mesh).__name__)
    n = global_runtime_device_count()
    if mesh.size() != n:
        raise AssertionError("%s is not mappable over %d devices (%s)"
                             % (mesh.mesh_shape, n, _where(g, mesh, partition_spec)))
    spec = _translate(mesh, partition_spec, g)
    _check_axes(mesh, spec, g)
    torch.ops.lazytpu.spmd_set_sharding(g, _encode(mesh, spec), _core._caller(2) or "")
    return wrap_as_sharded_tensor(t, mesh_shape=mesh.mesh_shape, partition_spec=partition_spec)


def shard_as(a, b):
    """(a, b), two pytrees of the same structure whose corresponding
    tensors end up with one sharding: where one side has a sharding and
    the other none, the other gets it; equal shardings stay. Raises
    AssertionError for different structures, RuntimeError when both sides
    have different shardings, or neither has one (lazytpu fixes a value's
    layout where it is annotated; it has no deferred "same as" constraint)."""
    from torch.utils._pytree import tree_flatten, tree_unflatten
    a_flat, a_spec = tree_flatten(a)
    b_flat, b_spec = tree_flatten(b)
    assert a_spec == b_spec, "a and b must have the same structure. got %s and %s" % (
        a_spec, b_spec)
    out_a, out_b = [], []
    for x, y in zip(a_flat, b_flat):
        if x is None or y is None:
            assert x is None and y is None
        else:
            gx, gy = unwrap_sharded_tensor(x), unwrap_sharded_tensor(y)
            _device_tensor(gx, "shard_as")
            _device_tensor(gy, "shard_as")
            ex = list(torch.ops.lazytpu.spmd_get_sharding(gx))
            ey = list(torch.ops.lazytpu.spmd_get_sharding(gy))
            if ex and ey and ex != ey:
                raise RuntimeError("shard_as: the tensors already have different shardings "
                                   "(%s and %s)" % (sharding_spec_text(gx),
                                                    sharding_spec_text(gy)))
            if not ex and not ey:
                raise RuntimeError("shard_as: neither tensor (shapes %s, %s) has a sharding; "
                                   "annotate one of them with mark_sharding first"
                                   % (list(gx.shape), list(gy.shape)))
            if len(gx.shape) != len(gy.shape):
                raise RuntimeError("shard_as: tensors of rank %d and %d cannot share a "
                                   "sharding" % (len(gx.shape), len(gy.shape)))
            if not ey:
                torch.ops.lazytpu.spmd_set_sharding(gy, ex, _core._caller(2) or "")
            elif not ex:
                torch.ops.lazytpu.spmd_set_sharding(gx, ey, _core._caller(2) or "")
        out_a.append(x)
        out_b.append(y)
    return tree_unflatten(out_a, a_spec), tree_unflatten(out_b, b_spec)


def _mark_manual_sharding(t, op_sharding=None):
    """torch_xla's _mark_manual_sharding: marks t's computed value
    "{manual}" (the per-core values of a manual region, before
    _spmd_shard_to_full_shape). RuntimeError for device data (torch_xla:
    "Marking any data tensors as manual is not supported")."""
    g = _device_tensor(unwrap_sharded_tensor(t), "_mark_manual_sharding")
    mesh = get_global_mesh()
    enc = _encode(mesh, (None,)) if mesh is not None and mesh.size() == \
        global_runtime_device_count() else []
    torch.ops.lazytpu.spmd_mark_manual(g, enc)
    return wrap_as_sharded_tensor(t)


def _replicate(t):
    """t annotated as replicated over every core (torch_xla's SPMD data
    without a sharding: every core holds all of it)."""
    n = global_runtime_device_count()
    mesh = _REPLICATE_MESH.get(n)
    if mesh is None:
        from .mesh import get_1d_mesh
        mesh = _REPLICATE_MESH[n] = get_1d_mesh()
    if not torch.compiler.is_compiling():
        _annotate(t, mesh, (None,) * t.dim())


_REPLICATE_MESH = {}    # _replicate's 1-D mesh per core count


def shard_batch(data, spec):
    """Lays out a batch already on the device as MpDeviceLoader /
    send_cpu_data_to_device(input_sharding=) do in torch_xla 2.9: spec a
    ShardingSpec applies to every tensor whose rank it fits; a dict of
    ShardingSpecs applies by key to a dict batch (ValueError when the batch
    is not a dict, KeyError naming the batch keys the dict lacks). In SPMD
    mode every tensor given no sharding is annotated replicated."""
    spmd = is_spmd()
    if isinstance(spec, dict):
        if not isinstance(data, dict):
            raise ValueError("input batch should be a dict when input sharding is a dict.")
        missing = [k for k in data if k not in spec]
        if missing:
            raise KeyError("Keys: %s are missing from input_sharding." % missing)
        for k, v in data.items():
            shard_batch(v, spec[k])
        return
    if isinstance(data, torch.Tensor):
        if _core.is_lazytpu_tensor(data):
            if spec is not None and spec.can_apply(data):
                spec.apply(data)
            elif spmd and not list(torch.ops.lazytpu.spmd_get_sharding(data)):
                _replicate(data)
    elif isinstance(data, dict):
        for v in data.values():
            shard_batch(v, spec)
    elif isinstance(data, (list, tuple)):
        for v in data:
            shard_batch(v, spec)
