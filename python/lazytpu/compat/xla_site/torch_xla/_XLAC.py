"""torch_xla._XLAC on lazytpu: the few entry points of torch_xla's C
extension that libraries and tests call directly, each on lazytpu's
implementation. Everything else of _XLAC is XLA's own machinery (HLO text,
PJRT handles, buffer donation, ...): asking for it raises AttributeError
naming the missing name.
"""
import torch

import lazytpu
from lazytpu import _C
from lazytpu import barrier as _barrier
from lazytpu import core as _core
from lazytpu import debug as _debug


def _xla_runtime_is_initialized():
    """True once a device tensor was created in this process."""
    return bool(_C.used_cores())


def _xla_computation_cache_is_initialized():
    """True once a graph went through the compile cache in this process
    (torch_xla.runtime.initialize_cache refuses afterwards)."""
    return _C.compile_cache_info()[0]


def _init_computation_client():
    """Starts the runtime of this process's device (in lazytpu a core starts
    with its first tensor); afterwards _xla_runtime_is_initialized() is True
    and xmp.spawn refuses to start, as in torch_xla."""
    torch.empty(0, device=lazytpu.device())


def _xla_get_devices():
    """This process's devices as real devices ('TPU:0', ...)."""
    return ["%s:%d" % (_core.device_kind(), i) for i in range(lazytpu.device_count())]


def _xla_real_devices(devices):
    """The real device of each xla device string ('xla:1' -> 'TPU:1');
    RuntimeError for a device this process does not have."""
    out = []
    for d in devices:
        kind, _, idx = str(d).partition(":")
        if kind != "xla" or not idx.isdigit() or int(idx) >= lazytpu.device_count():
            raise RuntimeError("_xla_real_devices: %r is not a device of this process "
                               "(xla:0 .. xla:%d)" % (str(d), lazytpu.device_count() - 1))
        out.append("%s:%s" % (_core.device_kind(), idx))
    return out


def _xla_get_all_devices():
    """Every device of the job (all processes)."""
    n = lazytpu.world_size()
    n = n if n > 1 else lazytpu.device_count()
    return ["%s:%d" % (_core.device_kind(), i) for i in range(n)]


def _xla_num_devices():
    return lazytpu.device_count()


def _xla_get_default_device():
    return str(lazytpu.device())


def _xla_get_default_device_ordinal():
    return lazytpu.get_ordinal()


def _xla_get_replication_devices_count():
    n = lazytpu.world_size()
    return n if n > 1 else 0


def _xla_sync_multi(tensors, devices=(), wait=True, sync_xla_data=True):
    """Runs the pending graph (of every core) so that tensors hold values."""
    lazytpu.mark_step(wait=wait)


def _xla_wait_device_ops(devices=()):
    lazytpu.wait_device_ops()


def _xla_get_tensor_id(tensor):
    """An id shared by every reference to the same device tensor, its
    detached copies and views (its storage's identity): tied weights have one
    id also in a state_dict, whose entries are detached (transformers'
    save_pretrained finds tied weights so on xla)."""
    if not _core.is_lazytpu_tensor(tensor):
        raise RuntimeError("_xla_get_tensor_id: not an xla tensor (%s)" % tensor.device)
    return tensor.untyped_storage().data_ptr()


def _get_xla_tensors_text(tensors):
    """The pending graph of tensors in lazytpu's IR text (not XLA's)."""
    return _debug.graph_text(*tensors)


def _xla_counter_names():
    return lazytpu.metrics.counter_names()


def _xla_counter_value(name):
    return lazytpu.metrics.counter_value(name)


def _xla_metric_names():
    return lazytpu.metrics.metric_names()


def _xla_metrics_report():
    return lazytpu.metrics.metrics_report()


def _xla_increment_counter(name, value=1):
    """Adds value to counter `name` (torch_xla's name: CreateXlaTensor is
    lazytpu's CreateLtTensor, xla::op lazytpu::op), creating it if needed."""
    _C.counter_inc(lazytpu.metrics._core(name), int(value))


_NO_EXEC_OWNER = ("Unexpected execution happens inside the compiled function, exiting "
                  "(torch_xla._XLAC._set_allow_execution(False))")


def _set_allow_execution(allow):
    """False: any execution (a step boundary, a value read) raises
    RuntimeError "Unexpected execution happens inside the compiled
    function, exiting ..." until it is allowed again; what was traced stays
    pending (lazytpu's execution guard, the one torch_xla.compile(
    full_graph=True) uses). torch_xla's debugging switch."""
    _C.set_no_execution(None if allow else _NO_EXEC_OWNER)


def _get_xla_tensor_dimension_size(tensor, dim):
    """Size of tensor's dim as a 0-dim int32 device tensor (torch_xla's
    dynamic-shape query; shapes here are always static)."""
    if not _core.is_lazytpu_tensor(tensor):
        raise RuntimeError("_get_xla_tensor_dimension_size: not an xla tensor (%s)"
                           % tensor.device)
    return torch.tensor(tensor.size(dim), dtype=torch.int32, device=tensor.device)


def _set_use_eager_mode(enable):
    from lazytpu.compat import eager
    eager.set_enabled(enable)


def _get_use_eager_mode():
    from lazytpu.compat import eager
    return eager.is_enabled()


def _xla_optimization_barrier_(tensors):
    _barrier.optimization_barrier_(tensors, skip_host=True)


def _xla_memory_info(device):
    import torch_xla.core.xla_model as xm
    return xm.get_memory_info(torch.device(device))



def _get_xla_sharding_spec(t):
    """XLA's text of t's sharding, "" when it has none (lazytpu.spmd, imported
    on first use: it needs numpy, which `import torch_xla` must not)."""
    from lazytpu.spmd import sharding_spec_text
    return sharding_spec_text(t)


def _get_xla_sharding_type(t):
    """t's ShardingType as an int, None when it has no sharding."""
    from lazytpu.spmd import sharding_type_of
    return sharding_type_of(t)


def _spmd_full_to_shard_shape(t):
    """The per-core (manual) view of sharded t (lazytpu.spmd.sharding)."""
    from lazytpu.spmd.sharding import spmd_full_to_shard_shape
    return spmd_full_to_shard_shape(t)


def _spmd_shard_to_full_shape(t, op_sharding, full_shape, dtype):
    """Manual t's per-core values as one tensor of full_shape with
    op_sharding (lazytpu.spmd.sharding)."""
    from lazytpu.spmd.sharding import spmd_shard_to_full_shape
    return spmd_shard_to_full_shape(t, op_sharding, full_shape, dtype)


def _mark_manual_sharding(t, op_sharding=None):
    """Marks t's computed value {manual} (lazytpu.spmd.sharding)."""
    from lazytpu.spmd.sharding import _mark_manual_sharding as mark
    mark(t, op_sharding)


def _global_tensor_from_cpu_shards(shards, op_sharding, global_shape=None):
    """A sharded device tensor put together from one CPU shard per core
    (lazytpu.spmd.op_sharding.global_tensor_from_cpu_shards)."""
    from lazytpu.spmd.op_sharding import global_tensor_from_cpu_shards
    return global_tensor_from_cpu_shards(shards, op_sharding, global_shape)


def _ensure_xla_coordinator_initialized(global_rank, world_size, master_addr,
                                        master_port=None):
    """torch_xla starts its distributed runtime's coordinator here (for the
    preemption sync manager of distributed_checkpoint.CheckpointManager).
    lazytpu's processes need none (the manager catches SIGTERM itself): the
    call checks that global_rank and world_size are this process's."""
    from lazytpu import world
    rank, size = world.get_ordinal(), world.world_size()
    if not (0 <= int(global_rank) < int(world_size)) or \
            (int(world_size), int(global_rank)) not in ((size, rank), (1, 0)):
        raise RuntimeError("_ensure_xla_coordinator_initialized: global_rank %s of world_size "
                           "%s, this process is rank %d of %d"
                           % (global_rank, world_size, rank, size))


def _xla_set_mat_mul_precision(precision):
    """The entry point under torch_xla.backends.set_mat_mul_precision
    (which adds the warning): 'default', 'high' or 'highest'."""
    from . import backends
    if precision not in backends._NAMES:
        raise RuntimeError("_xla_set_mat_mul_precision: unknown precision %r (one of %s)"
                           % (precision, ", ".join(backends._NAMES)))
    backends._set(precision)


def _xla_get_mat_mul_precision():
    from . import backends
    return backends.get_mat_mul_precision()


def _xla_get_auto_sharding():
    """False: lazytpu does not simulate auto-sharding (use_spmd(auto=True)
    raises)."""
    return False


def __getattr__(name):
    if name == "OpSharding":
        # lazytpu.spmd needs numpy, which `import torch_xla` must not
        from lazytpu.spmd.op_sharding import OpSharding
        return OpSharding

    raise AttributeError(
        "torch_xla._XLAC.%s: XLA's internal entry point is not part of lazytpu's "
        "torch_xla layer (lazytpu has no XLA/HLO runtime)" % name)
