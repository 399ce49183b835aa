"""torch_xla.core.xla_model (``xm``) on lazytpu: torch_xla 2.9's names, each
mapped onto lazytpu's own implementation (lazytpu.core, lazytpu.world,
lazytpu.collectives). Names 2.9 removed (``get_ordinal``, ``xrt_world_size``)
are absent here too: a script that runs here runs on a TPU."""
import contextlib
import hashlib
import io
import os
import sys

import torch
from typing_extensions import deprecated

import lazytpu
import torch_xla
from lazytpu import collectives as _coll
from lazytpu import barrier as _barrier
from lazytpu import core as _core
from lazytpu.compat import devices as _devices

from torch_xla import runtime as _xr
from torch_xla._internal.custom_kernel import XLA_LIB  # noqa: F401,E402  (2.9: xm.XLA_LIB, the "xla" op library)

# ------------------------------------------------------------- devices

is_xla_tensor = _core.is_lazytpu_tensor


def get_xla_supported_devices(max_devices=None):
    """['xla:0', ...]: the devices of this process, at most max_devices
    (['xla:0'] in SPMD mode: the one logical device)."""
    from lazytpu.spmd import is_spmd
    return _core.supported_devices(1 if is_spmd() else (max_devices or None))


@deprecated("Use torch_xla.device instead")
def xla_device(n=None, devkind=None):
    """torch_xla.device(n) (deprecated in torch_xla 2.9)."""
    return torch_xla.device(n)


def _index_of(device):
    text = str(device)
    kind, _, idx = text.partition(":")
    if kind != _core.DEVICE_TYPE or (idx and not idx.isdigit()):
        raise RuntimeError("Invalid device format: {}".format(text))
    i = int(idx or 0)
    if i >= lazytpu.device_count():
        raise IndexError("Device index {} out of range in {}".format(
            i, get_xla_supported_devices()))
    return i


def xla_real_devices(devices=None):
    """['TPU:0', ...] (['CPU:0', ...] with PJRT_DEVICE=CPU) of the devices."""
    devices = devices or get_xla_supported_devices()
    return ["%s:%d" % (_core.device_kind(), _index_of(d)) for d in devices]


def xla_device_hw(device):
    """'TPU', or 'CPU' with PJRT_DEVICE=CPU; RuntimeError for a device that
    is not an xla device."""
    _index_of(device)
    return _core.device_kind()


def xla_device_kind(device=None):
    """The vendor's kind string of the device ('TPU v3' simulated; 'cpu'
    with PJRT_DEVICE=CPU)."""
    if device is not None:
        _index_of(device)
    return "cpu" if _core.device_kind() == "CPU" else "TPU v3"


def xla_replication_devices(local_devices=None):
    """The real devices replication spans: every device of this process."""
    local_devices = local_devices or get_xla_supported_devices()
    if len(local_devices) != len(get_xla_supported_devices()):
        raise RuntimeError("Cannot replicate if number of devices ({}) is different from {}"
                           .format(len(local_devices), len(get_xla_supported_devices())))
    return xla_real_devices(local_devices)


def set_replication(device, devices):
    """Checks a replication set as torch_xla does. lazytpu's replication is
    the launcher's world (one process per device), which needs no set-up."""
    _index_of(device)
    if devices:
        xla_replication_devices([str(d) for d in devices])


def unlazy(tensors):
    """Runs the pending graph and waits until ``tensors`` are materialized."""
    for t in tensors:
        if not is_xla_tensor(t):
            raise RuntimeError("unlazy: %s is not an xla tensor" % (t.device,))
    lazytpu.mark_step(wait=True)


RateTracker = _core.RateTracker

# ------------------------------------------------------------- the world

get_local_ordinal = lazytpu.get_local_ordinal


def is_master_ordinal(local=True):
    return (lazytpu.get_local_ordinal() if local else lazytpu.get_ordinal()) == 0


def master_print(*args, fd=None, local=False, flush=False):
    """print() on the master ordinal only (the global one unless local), to
    fd (default: sys.stdout when called)."""
    if is_master_ordinal(local=local):
        print(*args, file=fd if fd is not None else sys.stdout, flush=flush)


# ------------------------------------------------------------- steps

add_step_closure = lazytpu.add_step_closure
set_rng_state = lazytpu.set_rng_state
get_rng_state = lazytpu.get_rng_state
_fetch_gradients = _coll.gradients


@deprecated("Use torch_xla.sync instead")
def mark_step(wait=False, reset_scope=True):
    """torch_xla.sync() (deprecated in torch_xla 2.9)."""
    torch_xla.sync(wait, reset_scope)


def wait_device_ops(devices=[]):
    lazytpu.wait_device_ops(devices or None)


def optimizer_step(optimizer, barrier=False, optimizer_args={}, groups=None,
                   pin_layout=True):
    """Reduces the gradients (mean over the world or ``groups``), runs
    optimizer.step(**optimizer_args); barrier=True also ends the step."""
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    loss = optimizer.step(**optimizer_args)
    if barrier:
        torch_xla.sync()
    return loss


def reduce_gradients(optimizer, groups=None, pin_layout=True):
    """Mean of every gradient over the world (or ``groups``); buckets of
    ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB when set, last layer first."""
    count = _xr.world_size()
    if count <= 1:
        return
    bucket_mb = int(os.getenv("ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB", 0))
    if bucket_mb > 0:
        all_reduce_bucketized_gradients(list(reversed(_fetch_gradients(optimizer))),
                                        1.0 / count, groups, pin_layout, bucket_mb)
    else:
        _coll.reduce_gradients(optimizer, groups=groups)


@contextlib.contextmanager
def fork_rng(device=None, enabled=True):
    """Restores the device random state on exit."""
    if not enabled:
        yield
        return
    state = get_rng_state(device)
    try:
        yield
    finally:
        set_rng_state(state, device)


def get_memory_info(device=None):
    """{'bytes_used', 'bytes_limit', 'peak_bytes_used'} of a device (the
    core's buffer accounting, LAZYTPU_HBM_BYTES), plus the older 'kb_free'
    and 'kb_total' keys Lightning still reads."""
    return _core.get_memory_info(device)


MemoryInfo = dict


def optimization_barrier_(tensors):
    """One barrier over the xla tensors of the list, in place, values
    unchanged (lazytpu.barrier); other tensors are left alone, as in 2.9."""
    _barrier.optimization_barrier_(tensors, skip_host=True)


# ------------------------------------------------------------- data

class ToXlaTensorArena:
    """Collects the values select_fn picks from nested data (dicts, lists,
    tuples, sets, a DataWrapper's get_tensors() (rebuilt by its
    from_tensors), objects' attributes; select_fn sees every value, as in
    2.9: xser.load selects its TensorReference objects), converts them in
    one call of convert_fn (a list -> list; each object once) and puts the
    results back in the same structure (container types kept)."""

    def __init__(self, convert_fn, select_fn):
        self._convert_fn = convert_fn
        self._select_fn = select_fn

    def transform(self, data):
        from torch_xla.utils.utils import DataWrapper
        found, seen = [], set()

        def collect(x):
            if id(x) in seen:
                return
            if self._select_fn(x):
                seen.add(id(x))
                found.append(x)
            elif isinstance(x, dict):
                for v in x.values():
                    collect(v)
            elif isinstance(x, (list, tuple, set)):
                for v in x:
                    collect(v)
            elif isinstance(x, DataWrapper):       # its tensors only (a PackedSequence's data)
                for v in x.get_tensors():
                    collect(v)
            elif hasattr(x, "__dict__") and not isinstance(x, type) and \
                    not callable(x) and not isinstance(x, torch.Tensor):
                for v in vars(x).values():
                    collect(v)

        collect(data)
        converted = self._convert_fn(found) if found else []
        by_id = {id(t): c for t, c in zip(found, converted)}

        def rebuild(x):
            if id(x) in by_id:
                return by_id[id(x)]
            if isinstance(x, torch.Tensor):
                return x
            if isinstance(x, dict):
                return type(x)((k, rebuild(v)) for k, v in x.items())
            if isinstance(x, tuple) and hasattr(x, "_fields"):
                return type(x)(*[rebuild(v) for v in x])
            if isinstance(x, (list, tuple, set)):
                return type(x)(rebuild(v) for v in x)
            if isinstance(x, DataWrapper):
                return x.from_tensors([rebuild(v) for v in x.get_tensors()])
            if hasattr(x, "__dict__") and not isinstance(x, type) and not callable(x):
                import copy
                y = copy.copy(x)
                for k, v in vars(x).items():
                    setattr(y, k, rebuild(v))
                return y
            return x

        return rebuild(data)


def _maybe_convert_to_cpu(data, convert=True):
    """data with every xla tensor copied to the CPU (after the pending graph
    ran); convert=False only runs the graph."""
    def convert_fn(tensors):
        lazytpu.mark_step(wait=True)
        return [t.cpu() for t in tensors] if convert else tensors

    return ToXlaTensorArena(convert_fn, lambda v: type(v) == torch.Tensor and
                            is_xla_tensor(v)).transform(data)


def send_cpu_data_to_device(datas, device, input_sharding=None):
    """Every CPU tensor of datas moved to device; a single tensor comes back
    as a one-element list (as in torch_xla). input_sharding (a ShardingSpec)
    annotates each moved tensor whose rank it fits (ShardingSpec.apply:
    with minibatch=True the batch dim must divide by the device count); in
    SPMD mode the others are annotated replicated (lazytpu.spmd.sharding.
    shard_batch)."""

    def convert_fn(tensors):
        out = [t.to(device) for t in tensors]
        if input_sharding is not None or _xr.is_spmd():
            from lazytpu.spmd.sharding import shard_batch
            shard_batch(out, input_sharding)
        return out

    if type(datas) is torch.Tensor:
        datas = [datas]
    return ToXlaTensorArena(convert_fn, lambda v: type(v) == torch.Tensor and
                            v.device.type == "cpu").transform(datas)


def save(data, file_or_path, master_only=True, global_master=False):
    """torch.save of data with device tensors moved to the CPU, by the
    master ordinal only (of each host, or the global one), unless
    master_only=False."""
    write = not master_only or is_master_ordinal(local=not global_master)
    cpu = _maybe_convert_to_cpu(data, convert=write)
    if write:
        torch.save(cpu, file_or_path)


# ------------------------------------------------------------- collectives

REDUCE_SUM = _coll.REDUCE_SUM
REDUCE_MUL = _coll.REDUCE_MUL
REDUCE_AND = _coll.REDUCE_AND
REDUCE_OR = _coll.REDUCE_OR
REDUCE_MIN = _coll.REDUCE_MIN
REDUCE_MAX = _coll.REDUCE_MAX

all_to_all = _coll.all_to_all
collective_permute = _coll.collective_permute
collective_broadcast = _coll.collective_broadcast


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """A tensor: its reduction over the world (or its group); a list: each
    reduced in place, the list returned. With one replica a tensor comes
    back as a copy and a list unchanged, as in torch_xla."""
    if _xr.world_size() == 1 and not _env_flag("XLA_ALWAYS_ALLREDUCE"):
        return inputs.clone() if isinstance(inputs, torch.Tensor) else inputs
    return _coll.all_reduce(reduce_type, inputs, scale=scale, groups=groups)


def _env_flag(name):
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on", "y")


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True, channel_id=None,
               use_global_device_ids=None):
    """Every replica's value concatenated along dim (a list of tensors:
    each gathered, pin_layout must then be False as in torch_xla)."""
    if isinstance(value, torch.Tensor):
        return _into(output, _coll.all_gather(value, dim=dim, groups=groups))
    if not (isinstance(value, list) and all(isinstance(v, torch.Tensor) for v in value)):
        raise TypeError("`value` needs to be a Tensor or a list of Tensors, but given {}."
                        .format(type(value)))
    if pin_layout:
        raise RuntimeError("For xm.all_gather with list of tensors input, pin_layout=True "
                           "is not yet supported.")
    outs = _check_outputs(output, value)
    res = [_into(o, _coll.all_gather(v, dim=dim, groups=groups))
           for v, o in zip(value, outs)]
    return output if output is not None else res


def _into(output, res):
    """res, or output holding res: torch_xla's ``output=`` of the collectives
    gives the output tensor the result's value, shape included (an output
    of the input's full size comes back as the shard)."""
    if output is None:
        return res
    with torch.no_grad():
        if output.shape == res.shape and output.dtype == res.dtype:
            output.copy_(res)
        else:
            output.data = res
    return output


def _check_outputs(output, inputs):
    if output is None:
        return [None] * len(inputs)
    if not isinstance(output, list) or any(not isinstance(v, torch.Tensor) for v in output):
        raise TypeError("`output` needs to be a list of Tensors, but given {}."
                        .format(type(output)))
    if len(output) != len(inputs):
        raise ValueError("`output` length doesn't match `input` length: {} vs {}."
                         .format(len(output), len(inputs)))
    return output


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None,
                   output=None, pin_layout=True, channel_id=None,
                   use_global_device_ids=None):
    """This replica's shard (along scatter_dim) of the reduction over the
    world or its group; a list: each input reduced and scattered."""
    if isinstance(input, torch.Tensor):
        return _into(output, _coll.reduce_scatter(reduce_type, input, scale, scatter_dim,
                                                  shard_count, groups=groups))
    if not (isinstance(input, list) and all(isinstance(v, torch.Tensor) for v in input)):
        raise TypeError("`input` needs to be a Tensor or a list of Tensors, but given {}."
                        .format(type(input)))
    outs = _check_outputs(output, input)
    res = [_into(o, _coll.reduce_scatter(reduce_type, v, scale, scatter_dim, shard_count,
                                         groups=groups)) for v, o in zip(input, outs)]
    return output if output is not None else res


class CoalescingBuckets:
    """Runs func over the inputs in buckets of about bucket_cap_mb
    megabytes (a tensor alone when it is bigger), in order."""

    def __init__(self, func, input_list, output_list=None, bucket_cap_mb=160):
        if not isinstance(input_list, list) or any(
                not isinstance(v, torch.Tensor) for v in input_list):
            raise TypeError("`input_list` needs to be a list of Tensors, but given {}."
                            .format(type(input_list)))
        if output_list is not None:
            _check_outputs(output_list, input_list)
        self._func = func
        self._inputs = input_list
        self._outputs = output_list
        self._cap = bucket_cap_mb * 1024 * 1024

    def __call__(self):
        results, bucket, total = [], [], 0

        def flush():
            if not bucket:
                return
            ins = [self._inputs[i] for i in bucket]
            outs = [self._outputs[i] for i in bucket] if self._outputs is not None else None
            if len(ins) == 1:
                results.append(self._func(ins[0], outs[0] if outs else None))
            else:
                results.extend(self._func(ins, outs))

        for i, t in enumerate(self._inputs):
            nbytes = t.numel() * t.element_size()
            new_total = total + nbytes
            if nbytes > self._cap and total < 0.5 * self._cap and new_total <= 2 * self._cap:
                bucket.append(i)
                flush()
                bucket, total = [], 0
                continue
            if new_total > self._cap:
                flush()
                bucket, total = [], 0
            bucket.append(i)
            total += nbytes
        flush()
        return results


def all_gather_bucketized(input_list, dim=0, groups=None, output=None, pin_layout=False,
                          bucket_cap_mb=160):
    """all_gather of each tensor of input_list, in buckets."""
    if pin_layout:
        raise RuntimeError("For xm.all_gather_bucketized, pin_layout=True is not yet "
                           "supported.")
    return CoalescingBuckets(
        lambda i, o: all_gather(i, dim=dim, groups=groups, output=o, pin_layout=False),
        input_list, output, bucket_cap_mb)()


def reduce_scatter_bucketized(reduce_type, input_list, scale, scatter_dim, shard_count,
                              groups=None, output=None, pin_layout=False,
                              bucket_cap_mb=160):
    """reduce_scatter of each tensor of input_list, in buckets."""
    return CoalescingBuckets(
        lambda i, o: reduce_scatter(reduce_type, i, scale, scatter_dim, shard_count,
                                    groups=groups, output=o, pin_layout=pin_layout),
        input_list, output, bucket_cap_mb)()


def all_reduce_bucketized_gradients(gradients, scale, groups, pin_layout, bucket_cap_mb=0):
    """Sum-reduces gradients in place (times scale), one all_reduce per
    bucket of bucket_cap_mb megabytes."""
    cap = bucket_cap_mb * 1024 * 1024
    bucket, total = [], 0
    for g in gradients:
        nbytes = g.numel() * g.element_size()
        total += nbytes
        if total > cap and bucket:
            all_reduce(REDUCE_SUM, bucket, scale=scale, groups=groups)
            bucket, total = [], nbytes
        bucket.append(g)
    if bucket:
        all_reduce(REDUCE_SUM, bucket, scale=scale, groups=groups)


_SEND_RECV_REFUSAL = (
    "xm.%s(channel_id=%r): XLA Send/Recv cannot run here. torch_xla 2.9 lowers it to an "
    "XLA Send/Recv whose only pairing is the channel id, and the program fails to compile "
    "(ValueError): XLA:CPU has no Send/Recv (\"HLO opcode `%s` is not supported by XLA:CPU "
    "ThunkEmitter\"), and in a world of one process per device no program holds both "
    "ends of the channel. Use xm.collective_permute(value, pairs) with the "
    "[source, target] pairs, called by every replica (torch_xla's own dist.send / "
    "dist.recv do this)")


def send(value, channel_id):
    """XLA Send of value on channel_id: refused, as torch_xla 2.9's program
    fails to compile (ValueError) on this world; refused at the call here."""
    raise ValueError(_SEND_RECV_REFUSAL % ("send", channel_id, "send"))


def recv(output, channel_id):
    """XLA Recv into output's shape from channel_id: refused, as send."""
    raise ValueError(_SEND_RECV_REFUSAL % ("recv", channel_id, "recv"))


def xla_rendezvous(payload=b"", ordinals=None, tag=None):
    """Every replica's payload (bytes), in ordinal order; only global
    rendezvous (ordinals None or all of them), as in torch_xla."""
    if ordinals and len(ordinals) != _xr.global_device_count():
        raise ValueError("Only global rendezvous is supported")
    if not isinstance(payload, bytes):
        raise TypeError("`payload` must be bytes, not {}".format(type(payload)))
    torch_xla.sync()
    return _coll.rendezvous(_rendezvous_tag(tag), payload)


def _rendezvous_tag(tag):
    """lazytpu's rendezvous name for a torch_xla tag: 2.9 uses the tag only
    for logging, so any length is accepted; a long one is shortened to a
    prefix plus a digest of the whole (lazytpu's world takes 47 chars)."""
    tag = tag or "torch_xla.xla_rendezvous"
    if len(tag) <= 47:
        return tag
    return tag[:30] + "#" + hashlib.sha1(tag.encode()).hexdigest()[:16]


def rendezvous(tag, payload=b"", replicas=[]):
    """Waits until every replica reached rendezvous(tag); returns every
    replica's payload."""
    return xla_rendezvous(payload, replicas or None, tag=tag)


def do_on_ordinals(target, data=(), ordinals=(0,)):
    """target(*data with device tensors on the CPU) on the given ordinals
    only; a rendezvous of every ordinal afterwards."""
    running = lazytpu.get_ordinal() in ordinals
    cpu = _maybe_convert_to_cpu(data, convert=running)
    result = target(*cpu) if running else None
    rendezvous("torch_xla.core.xla_model.do_on_ordinals")
    return result


def mesh_reduce(tag, data, reduce_fn):
    """reduce_fn(list of every replica's data) (device tensors moved to the
    CPU), outside the graph."""
    cpu = _maybe_convert_to_cpu(data)
    bio = io.BytesIO()
    torch.save(cpu, bio)
    blobs = rendezvous(tag, bio.getvalue())
    values = [torch.load(io.BytesIO(b), weights_only=False) for b in blobs]
    return reduce_fn(values) if values else cpu


def broadcast_master_param(model):
    """Ordinal 0's parameters and buffers copied into every replica's model."""
    collective_broadcast(list(model.parameters()) + list(model.buffers()))
    torch_xla.sync()
