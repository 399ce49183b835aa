"""SPMD mode: one process, one logical device (core 0), every core in the
mesh. torch_xla's ``xr.use_spmd()`` / ``xr.is_spmd()`` /
``xr.global_runtime_device_count()`` point here."""
import os

from .. import _C
from ..world import world_size


def use_spmd(auto=False):
    """Turns SPMD mode on for this process: tensors live on the logical
    device (core 0) and sharding annotations lay them out over all
    ``global_runtime_device_count()`` cores. Auto-sharding (``auto=True``)
    is not simulated: it raises. Under a world of several processes
    (lazytpu.spawn / xmp.spawn) SPMD cannot run: it raises too."""
    if auto:
        raise NotImplementedError("lazytpu.spmd.use_spmd(auto=True): auto-sharding is not "
                                  "simulated; annotate tensors with mark_sharding")
    if world_size() > 1:
        raise RuntimeError("lazytpu.spmd.use_spmd(): SPMD drives every core from one "
                           "process, but this process is one of %d (spawned with "
                           "lazytpu.spawn / xmp.spawn); run the script without spawning"
                           % world_size())
    os.environ["XLA_USE_SPMD"] = "1"


def is_spmd():
    """True in SPMD mode: after use_spmd(), or with XLA_USE_SPMD=1 in the
    environment (torch_xla 2.9 reads the same flag: deleting it turns SPMD
    mode off again)."""
    return os.environ.get("XLA_USE_SPMD", "0").lower() in ("1", "true")


def global_runtime_device_count():
    """Cores a mesh may span: all the simulated cores of this process
    (LAZYTPU_NUM_CORES, 8 by default), or the world's size under spawn."""
    n = world_size()
    return n if n > 1 else _C.num_cores()

