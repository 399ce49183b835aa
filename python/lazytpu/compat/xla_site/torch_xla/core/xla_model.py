"""torch_xla.core.xla_model (``xm``) on lazytpu: each name is lazytpu's own
implementation (lazytpu.core, lazytpu.world, lazytpu.collectives)."""
import sys

import torch

import lazytpu
from lazytpu import collectives as _coll
from lazytpu import core as _core

# devices
xla_device = lazytpu.device
xla_device_hw = _core.device_kind
get_xla_supported_devices = lambda devkind=None, max_devices=None: _core.supported_devices(max_devices)  # noqa: E731
is_xla_tensor = _core.is_lazytpu_tensor

# the world
get_ordinal = lazytpu.get_ordinal
get_local_ordinal = lazytpu.get_local_ordinal
xrt_world_size = lazytpu.world_size
is_master_ordinal = lazytpu.is_master_ordinal

# steps
mark_step = lazytpu.mark_step
wait_device_ops = lazytpu.wait_device_ops
optimizer_step = lazytpu.optimizer_step
add_step_closure = lazytpu.add_step_closure
save = lazytpu.save
set_rng_state = lazytpu.set_rng_state
get_rng_state = lazytpu.get_rng_state
get_memory_info = _core.get_memory_info
RateTracker = _core.RateTracker
_maybe_convert_to_cpu = lambda data, convert=True: _core.to_cpu(data) if convert else data  # noqa: E731
_fetch_gradients = _coll.gradients

# collectives
REDUCE_SUM = _coll.REDUCE_SUM
REDUCE_MUL = _coll.REDUCE_MUL
REDUCE_AND = _coll.REDUCE_AND
REDUCE_OR = _coll.REDUCE_OR
REDUCE_MIN = _coll.REDUCE_MIN
REDUCE_MAX = _coll.REDUCE_MAX
all_reduce = _coll.all_reduce
all_gather = _coll.all_gather
reduce_scatter = _coll.reduce_scatter
all_to_all = _coll.all_to_all
collective_broadcast = _coll.collective_broadcast
broadcast_master_param = _coll.broadcast_master_param
reduce_gradients = _coll.reduce_gradients
rendezvous = _coll.rendezvous
mesh_reduce = _coll.mesh_reduce


def master_print(*args, fd=None, finalize=False, **kwargs):
    """print() on the master ordinal only (fd: the stream to print to)."""
    if lazytpu.is_master_ordinal(local=False):
        print(*args, file=fd if fd is not None else sys.stdout, **kwargs)
