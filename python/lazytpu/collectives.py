"""lazytpu.collectives: collectives over all ordinals of the world (every
host), with torch_xla's names and signatures.

Tensor collectives on device tensors are IR ops (torch.ops.lazytpu.*): they
are traced into the step's graph like any op, so a gradient all-reduce runs
inside the compiled step. On CPU tensors they run at once through the world's
shared memory (and MPI between hosts). Outside a launcher the world has one
ordinal and every collective is the identity.
"""
import pickle

import torch

from . import _C
from .world import _quiesce, _world, world_size

__all__ = ["REDUCE_SUM", "REDUCE_MUL", "REDUCE_MIN", "REDUCE_MAX", "REDUCE_AND",
           "REDUCE_OR", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
           "broadcast", "collective_broadcast", "collective_permute", "rendezvous",
           "mesh_reduce", "broadcast_master_param", "reduce_gradients", "gradients"]

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_MIN = "min"
REDUCE_MAX = "max"
REDUCE_AND = "and"
REDUCE_OR = "or"
# reduce type -> lt_reduce_type, torch dtype -> lt_dtype: the codes are the C
# core's, exported by _C (backend/constants_py.h)
_REDUCE = {"sum": _C.REDUCE_SUM, "mul": _C.REDUCE_MUL, "min": _C.REDUCE_MIN,
           "max": _C.REDUCE_MAX, "and": _C.REDUCE_AND, "or": _C.REDUCE_OR}
_DTYPE = {torch.float32: _C.DTYPE_F32, torch.bfloat16: _C.DTYPE_BF16,
          torch.float64: _C.DTYPE_F64, torch.int64: _C.DTYPE_I64,
          torch.int32: _C.DTYPE_I32, torch.bool: _C.DTYPE_BOOL}


def rendezvous(tag, payload=b"", replicas=None):
    """Waits until every ordinal reached ``rendezvous(tag)``; returns the list
    of every ordinal's ``payload`` (bytes), in ordinal order. Ordinals that
    use different tags all raise RuntimeError naming both tags."""
    if replicas:
        raise NotImplementedError("lazytpu.rendezvous: replica groups")
    if isinstance(payload, str):
        payload = payload.encode()
    payload = bytes(payload)
    if _world() is None:
        return [payload]
    _quiesce()
    return _C.world_exchange(tag, payload)


def _to_cpu(data):
    if isinstance(data, torch.Tensor):
        return data.cpu() if data.device.type != "cpu" else data
    if isinstance(data, dict):
        return type(data)((k, _to_cpu(v)) for k, v in data.items())
    if isinstance(data, (list, tuple)) and not hasattr(data, "_fields"):
        return type(data)(_to_cpu(v) for v in data)
    return data


def mesh_reduce(tag, data, reduce_fn):
    """Gathers ``data`` (any picklable value; device tensors are moved to the
    CPU) from every ordinal and returns ``reduce_fn(list_of_values)``."""
    blobs = rendezvous(tag, pickle.dumps(_to_cpu(data)))
    return reduce_fn([pickle.loads(b) for b in blobs])


# ---------------------------------------------------- tensor collectives ----

def _reduce_code(reduce_type):
    if isinstance(reduce_type, int):
        return reduce_type
    try:
        return _REDUCE[reduce_type]
    except KeyError:
        raise ValueError("lazytpu.all_reduce: unknown reduce type %r (one of %s)"
                         % (reduce_type, ", ".join(_REDUCE))) from None


def _device_op(name):
    """torch.ops.lazytpu.<name> if the backend registered it, else None."""
    try:
        return getattr(torch.ops.lazytpu, name)
    except (AttributeError, RuntimeError):
        return None


def _host_call(fn_name, t, out_shape, *args):
    """Runs a world collective on a contiguous CPU copy of t; returns a CPU
    tensor of out_shape (same dtype)."""
    if t.dtype not in _DTYPE:
        raise TypeError("lazytpu.%s: dtype %s not supported" % (fn_name, t.dtype))
    src = t.detach()
    if src.device.type != "cpu":
        src = src.cpu()
    src = src.contiguous()
    out = torch.empty(out_shape, dtype=src.dtype)
    _quiesce()
    getattr(_C, "world_" + fn_name)(src.data_ptr(), out.data_ptr(), *args)
    return out


def _put(result_cpu, like):
    """result on like's device (a new tensor)."""
    if like.device.type == "cpu":
        return result_cpu
    return result_cpu.to(like.device)


def _all_reduce_one(t, code, scale):
    op = _device_op("all_reduce")
    if op is not None and t.device.type != "cpu":
        return op(t, code, float(scale))
    out = _host_call("all_reduce", t, t.shape, t.numel(), _DTYPE[t.dtype], code,
                     float(scale))
    return _put(out, t)


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """Reduces over all ordinals ('sum', 'mul', 'min', 'max', 'and', 'or'),
    times ``scale``. A single tensor: returns the result. A list of tensors:
    reduces them (one collective for all of them when they live on the host
    path) and updates each in place; returns the list."""
    code = _reduce_code(reduce_type)
    if groups:
        group = _my_group(groups, "all_reduce")
        if isinstance(inputs, torch.Tensor):
            return _group_reduce(inputs, code, scale, group)
        with torch.no_grad():
            for t in inputs:
                t.copy_(_group_reduce(t, code, scale, group))
        return inputs
    if isinstance(inputs, torch.Tensor):
        return _all_reduce_one(inputs, code, scale)
    inputs = list(inputs)
    groups = {}
    for t in inputs:
        groups.setdefault((t.device, t.dtype), []).append(t)
    for (dev, _), ts in groups.items():
        _all_reduce_group(ts, dev, code, scale)
    return inputs


def _all_reduce_group(ts, dev, code, scale):
    """One collective for tensors of one device and dtype: flatten, reduce,
    split, copy back in place."""
    sizes = [t.numel() for t in ts]
    op = _device_op("all_reduce")
    with torch.no_grad():
        if op is not None and dev.type != "cpu":
            flat = ts[0].reshape(-1) if len(ts) == 1 else torch.cat(
                [t.reshape(-1) for t in ts])
            red = op(flat, code, float(scale))
        else:
            if dev.type != "cpu":
                # one graph for all of them instead of one sync per tensor
                _C.sync(-1, _C.SYNC_OPTIMIZER_STEP, 0)
            flat = torch.cat([t.detach().reshape(-1).cpu() for t in ts])
            red = _host_call("all_reduce", flat, flat.shape, flat.numel(),
                             _DTYPE[flat.dtype], code, float(scale))
        off = 0
        for t, n in zip(ts, sizes):
            t.copy_(red[off:off + n].view(t.shape))
            off += n


def _outer_block(shape, dim):
    outer = 1
    for d in shape[:dim]:
        outer *= d
    block = 1
    for d in shape[dim:]:
        block *= d
    return outer, block


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    """Concatenation of every ordinal's ``value`` along ``dim`` (of the
    ordinals of this ordinal's group, with ``groups``)."""
    if groups:
        group = _my_group(groups, "all_gather", same_size=True)
        res = _gather_group(value, dim % max(value.dim(), 1), group)
        if output is not None:
            with torch.no_grad():
                output.copy_(res)
            return output
        return res
    dim = dim % max(value.dim(), 1)
    op = _device_op("all_gather")
    if op is not None and value.device.type != "cpu":
        res = op(value, dim)
    else:
        n = world_size() if _world() is not None else 1
        shape = list(value.shape)
        outer, block = _outer_block(shape, dim)
        out_shape = shape[:dim] + [shape[dim] * n] + shape[dim + 1:]
        res = _put(_host_call("all_gather", value, out_shape, outer, block,
                              _DTYPE[value.dtype]), value)
    if output is not None:
        with torch.no_grad():
            output.copy_(res)
        return output
    return res


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count,
                   groups=None, output=None, pin_layout=True):
    """Reduces ``input`` over all ordinals (over this ordinal's group, with
    ``groups``) and returns this ordinal's shard along ``scatter_dim``
    (``shard_count`` must equal the world or group size)."""
    if groups:
        group = _my_group(groups, "reduce_scatter", same_size=True)
        if shard_count != len(group):
            raise ValueError("lazytpu.reduce_scatter: shard_count %d but groups of %d"
                             % (shard_count, len(group)))
        dim = scatter_dim % max(input.dim(), 1)
        if input.shape[dim] % shard_count:
            raise ValueError("lazytpu.reduce_scatter: size %d of dim %d is not divisible "
                             "by shard_count %d" % (input.shape[dim], dim, shard_count))
        red = _group_reduce(input, _reduce_code(reduce_type), scale, group)
        res = red.chunk(shard_count, dim)[group.index(_ordinal())]
        if output is not None:
            with torch.no_grad():
                output.copy_(res)
            return output
        return res
    n = world_size() if _world() is not None else 1
    if shard_count != n:
        raise ValueError("lazytpu.reduce_scatter: shard_count %d but world size %d"
                         % (shard_count, n))
    code = _reduce_code(reduce_type)
    dim = scatter_dim % max(input.dim(), 1)
    shape = list(input.shape)
    if shape[dim] % n:
        raise ValueError("lazytpu.reduce_scatter: size %d of dim %d is not "
                         "divisible by world size %d" % (shape[dim], dim, n))
    op = _device_op("reduce_scatter")
    if op is not None and input.device.type != "cpu":
        res = op(input, code, dim, float(scale))
    else:
        out_shape = shape[:dim] + [shape[dim] // n] + shape[dim + 1:]
        outer, _ = _outer_block(shape, dim)
        block = 1
        for d in out_shape[dim:]:
            block *= d
        res = _put(_host_call("reduce_scatter", input, out_shape, outer, block,
                              _DTYPE[input.dtype], code, float(scale)), input)
    if output is not None:
        with torch.no_grad():
            output.copy_(res)
        return output
    return res


def broadcast(value, root=0):
    """``root``'s value on every ordinal."""
    op = _device_op("broadcast")
    if op is not None and value.device.type != "cpu":
        return op(value, int(root))
    out = _host_call("broadcast", value, value.shape, value.numel(),
                     _DTYPE[value.dtype], int(root))
    return _put(out, value)


def broadcast_master_param(model):
    """Copies ordinal 0's parameters and buffers into every ordinal's model."""
    if world_size() <= 1 or _world() is None:
        return
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            t.copy_(broadcast(t, 0))


def all_to_all(value, split_dimension, concat_dimension, split_count, groups=None,
               pin_layout=True):
    """Ordinal k splits ``value`` into ``split_count`` (= world size) chunks
    along ``split_dimension`` and sends chunk j to ordinal j; each ordinal
    returns the chunks it received, in ordinal order, concatenated along
    ``concat_dimension``. Built from all_gather, so on the device it is traced
    into the step's graph. With ``groups``: among this ordinal's group
    (``split_count`` = the group size)."""
    if groups:
        group = _my_group(groups, "all_to_all", same_size=True)
        if split_count != len(group):
            raise ValueError("lazytpu.all_to_all: split_count %d but groups of %d"
                             % (split_count, len(group)))
        sd = split_dimension % max(value.dim(), 1)
        cd = concat_dimension % max(value.dim(), 1)
        if value.shape[sd] % split_count:
            raise ValueError("lazytpu.all_to_all: size %d of dim %d is not divisible "
                             "by split_count %d" % (value.shape[sd], sd, split_count))
        every = _every(value)
        me = group.index(_ordinal())
        return torch.cat([every[j].chunk(split_count, sd)[me] for j in group], dim=cd)
    n = world_size() if _world() is not None else 1
    if split_count != n:
        raise ValueError("lazytpu.all_to_all: split_count %d but world size %d"
                         % (split_count, n))
    sd = split_dimension % max(value.dim(), 1)
    cd = concat_dimension % max(value.dim(), 1)
    if value.shape[sd] % n:
        raise ValueError("lazytpu.all_to_all: size %d of dim %d is not divisible "
                         "by split_count %d" % (value.shape[sd], sd, n))
    from .world import get_ordinal
    me = get_ordinal() if n > 1 else 0
    every = all_gather(value.unsqueeze(0), dim=0)          # [n, *value.shape]
    mine = every.chunk(n, dim=sd + 1)[me] if n > 1 else every
    return torch.cat(list(mine.unbind(0)), dim=cd)


def collective_broadcast(tensors, root_ordinal=0, groups=None, pin_layout=True):
    """Overwrites each tensor of ``tensors`` in place with ``root_ordinal``'s
    (with ``groups``: root_ordinal is an ordinal of this ordinal's group;
    the other groups do the same with their own members)."""
    if groups:
        group = _my_group(groups, "collective_broadcast")
        if root_ordinal not in group:
            raise ValueError("lazytpu.collective_broadcast: root_ordinal %d is not in "
                             "this ordinal's group %s" % (root_ordinal, group))
        with torch.no_grad():
            for t in tensors:
                t.copy_(_every(t)[root_ordinal])
        return
    with torch.no_grad():
        for t in tensors:
            t.copy_(broadcast(t, root_ordinal))


def gradients(optimizer):
    """The gradients of the optimizer's parameters (those that have one)."""
    return [p.grad for group in optimizer.param_groups
            for p in group["params"] if p.grad is not None]


def reduce_gradients(optimizer, groups=None, pin_layout=True):
    """Replaces every parameter's gradient with its mean over the world
    (lazytpu.optimizer_step calls this before optimizer.step()); with
    ``groups``, over this ordinal's group."""
    n = world_size()
    if n <= 1 or _world() is None:
        return
    grads = gradients(optimizer)
    if not grads:
        return
    if groups:
        all_reduce(REDUCE_SUM, grads, scale=1.0 / len(_my_group(groups, "reduce_gradients")),
                   groups=groups)
        return
    by_dtype = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    for gs in by_dtype.values():
        all_reduce(REDUCE_SUM, gs, scale=1.0 / n)


# ------------------------------------------------ replica groups, permute ----
#
# The world's collectives span every ordinal. Replica groups, permutations
# and all_to_all over groups are composed from one world all_gather (an IR op
# on device tensors, so they stay inside the step's graph): each ordinal
# gathers every ordinal's value and keeps what its group or source sent.
# Bandwidth is the world's, not the group's.

def _ordinal():
    from .world import get_ordinal
    return get_ordinal() if world_size() > 1 and _world() is not None else 0


def _world_n():
    return world_size() if _world() is not None else 1


def _my_group(groups, what, same_size=False):
    """This ordinal's group of ``groups`` (a partition of the world's
    ordinals); ValueError naming the groups otherwise."""
    n = _world_n()
    groups = [[int(o) for o in g] for g in groups]
    seen = sorted(o for g in groups for o in g)
    if seen != list(range(n)):
        raise ValueError("lazytpu.%s: replica groups %s must hold every ordinal 0..%d "
                         "exactly once" % (what, groups, n - 1))
    if same_size and len({len(g) for g in groups}) != 1:
        raise ValueError("lazytpu.%s: replica groups %s must have the same size"
                         % (what, groups))
    me = _ordinal()
    return next(g for g in groups if me in g)


def _every(value):
    """[n, *value.shape]: every ordinal's value, in ordinal order."""
    return all_gather(value.unsqueeze(0), dim=0)


_COMBINE = {_C.REDUCE_SUM: torch.add, _C.REDUCE_MUL: torch.mul,
            _C.REDUCE_MIN: torch.minimum, _C.REDUCE_MAX: torch.maximum,
            _C.REDUCE_AND: torch.bitwise_and, _C.REDUCE_OR: torch.bitwise_or}


def _group_reduce(value, code, scale, group):
    """The reduction of the group members' values (in group order), times
    scale."""
    if code not in _COMBINE:
        raise ValueError("lazytpu.all_reduce: unknown reduce code %r" % code)
    every = _every(value)
    fn = _COMBINE[code]
    acc = every[group[0]]
    for o in group[1:]:
        acc = fn(acc, every[o])
    if scale != 1.0:
        acc = acc * scale
    return acc


def _gather_group(value, dim, group):
    every = _every(value)
    return torch.cat([every[o] for o in group], dim=dim)


def collective_permute(value, pairs):
    """Each ordinal receives the value of the ordinal that ``pairs``
    ([[source, target], ...]) names as its source, zeros when none does (as
    XLA's CollectivePermute). Every ordinal must call it with the same
    pairs."""
    n = _world_n()
    src = {}
    for p in pairs:
        s_, t_ = int(p[0]), int(p[1])
        if not (0 <= s_ < n and 0 <= t_ < n):
            raise ValueError("lazytpu.collective_permute: pair %s names an ordinal outside "
                             "0..%d" % (list(p), n - 1))
        if t_ in src:
            raise ValueError("lazytpu.collective_permute: ordinal %d is the target of two "
                             "pairs (%d and %d)" % (t_, src[t_], s_))
        src[t_] = s_
    if len(set(src.values())) != len(src):
        raise ValueError("lazytpu.collective_permute: an ordinal is the source of two "
                         "pairs in %s" % [list(p) for p in pairs])
    every = _every(value)
    s_ = src.get(_ordinal())
    if s_ is not None:
        return every[s_]
    zeros = torch.zeros_like(value)
    if value.device.type == "cpu":
        return zeros
    # no source: zeros, but read through the gather, which every ordinal's
    # graph must run (the others wait for this one's value); the condition
    # is device data (False), so the compiler cannot drop the gather
    never = torch.tensor(False).to(value.device)
    return torch.where(never, every[_ordinal()], zeros)


# Shapes of the collective ops for torch.compile's fake tensors (dynamo traces
# xm.all_reduce & co. into the graph it hands to the lazytpu backend).
@torch.library.register_fake("lazytpu::all_reduce")
def _all_reduce_fake(t, reduce_type, scale):
    return torch.empty_like(t)


@torch.library.register_fake("lazytpu::all_gather")
def _all_gather_fake(t, dim):
    shape = list(t.shape)
    shape[dim % max(t.dim(), 1)] *= max(world_size(), 1)
    return t.new_empty(shape)


@torch.library.register_fake("lazytpu::reduce_scatter")
def _reduce_scatter_fake(t, reduce_type, dim, scale):
    shape = list(t.shape)
    shape[dim % max(t.dim(), 1)] //= max(world_size(), 1)
    return t.new_empty(shape)


@torch.library.register_fake("lazytpu::broadcast")
def _broadcast_fake(t, root):
    return torch.empty_like(t)
