"""torch_xla.runtime (``xr``) on lazytpu: the world and the runtime's device.

One process per device (spawn's workers): in a worker the world is the
launcher's (world_size() processes, one addressable device each); outside
spawn the world is this process alone (world_size() == 1) and its devices are
the simulated cores (CPU_NUM_DEVICES of them with PJRT_DEVICE=CPU).
"""
import os

import lazytpu
# SPMD mode and the cores a mesh spans (lazytpu.spmd)
from lazytpu.spmd import use_spmd, is_spmd, global_runtime_device_count  # noqa: F401

global_ordinal = lazytpu.get_ordinal
host_index = lazytpu.host_index
process_index = lazytpu.host_index
process_count = lazytpu.num_hosts


def device_type():
    """PJRT_DEVICE's device type ('TPU' when unset: lazytpu's default; None
    when unset and PJRT_SELECT_DEFAULT_DEVICE=0 turns default selection off,
    as in 2.9)."""
    v = os.environ.get("PJRT_DEVICE", "").strip()
    if not v and os.environ.get("PJRT_SELECT_DEFAULT_DEVICE", "1") == "0":
        return None
    return v.split("_")[0].upper() if v else "TPU"


def set_device_type(pjrt_device):
    """Sets PJRT_DEVICE; RuntimeError once the device is in use with
    another type (as torch_xla). lazytpu's devices behave as TPU devices
    unless the type is CPU (then xla_device_hw says CPU)."""
    if _runtime_initialized() and os.environ.get("PJRT_DEVICE") != pjrt_device:
        raise RuntimeError("Can't change device type after XLA runtime is initialized")
    os.environ["PJRT_DEVICE"] = pjrt_device


def _runtime_initialized():
    import torch_xla
    return torch_xla._XLAC._xla_runtime_is_initialized()


# fixed for the process (the launcher's world is set before it starts); a
# module global, as torch_xla keeps it, so code traced by torch.compile
# (xm.all_reduce's one-replica test) reads a constant
_WORLD_SIZE = lazytpu.world_size()


def world_size():
    """Processes (= devices) in the job: the launcher's world, else 1."""
    return _WORLD_SIZE


def local_process_count():
    return lazytpu.local_world_size()


def local_ordinal():
    """Ordinal of this process on its host."""
    return lazytpu.get_local_ordinal()


def _runtime_device_count():
    """Devices of the runtime: the launcher's world, else this process's
    cores."""
    n = lazytpu.world_size()
    return n if n > 1 else lazytpu.device_count()


def addressable_device_count():
    """Devices this process drives: its own one in a world of several
    processes, all of them otherwise; in SPMD mode 1, the one logical
    device every tensor lives on (torch_xla's SPMD virtual device)."""
    if is_spmd():
        return 1
    return 1 if lazytpu.world_size() > 1 else lazytpu.device_count()


def addressable_runtime_device_count():
    """Runtime devices this process drives (SPMD mode or not)."""
    return 1 if lazytpu.world_size() > 1 else lazytpu.device_count()


def local_device_count():
    """Devices on this host."""
    return local_process_count() * addressable_device_count()


def global_device_count():
    """Devices over all processes and hosts (1 in SPMD mode: the logical
    device; global_runtime_device_count() counts the cores)."""
    return 1 if is_spmd() else _runtime_device_count()


def runtime_device_attributes(device):
    """Attributes of a runtime device ('TPU:0', 'CPU:0')."""
    kind, _, idx = str(device).partition(":")
    if kind != device_type() or not idx.isdigit() or int(idx) >= _runtime_device_count():
        raise RuntimeError("runtime_device_attributes: no device %r (devices: %s)"
                           % (device, ", ".join("%s:%d" % (device_type(), i)
                                                for i in range(_runtime_device_count()))))
    return {"name": "%s:%s" % (kind, idx), "kind": kind, "core": int(idx),
            "num_cores": 1}


def global_runtime_device_attributes():
    return [runtime_device_attributes("%s:%d" % (device_type(), i))
            for i in range(_runtime_device_count())]


def using_pjrt():
    return True


def is_bf16_supported():
    return True


def get_master_ip():
    """'127.0.0.1': every simulated host of lazytpu runs on this machine
    (torch_xla raises for a device without IP discovery; lazytpu's TPU
    devices have one)."""
    if device_type() != "TPU":
        raise RuntimeError("IP discovery not supported for device: %s" % device_type())
    return "127.0.0.1"


def initialize_cache(path, readonly=False):
    """torch_xla's persistent compile cache, on lazytpu's
    (lazytpu.set_compile_cache_dir): compiled programs are stored under
    `path` and loaded by later processes (counters PersistentCacheHit /
    PersistentCacheMiss). Must come before the first computation
    (AssertionError after, as in torch_xla)."""
    import torch_xla
    assert not torch_xla._XLAC._xla_computation_cache_is_initialized(), \
        "Computation cache has already been initialized"
    os.environ["XLA_PERSISTENT_CACHE_PATH"] = path
    os.environ["XLA_PERSISTENT_CACHE_READ_ONLY"] = "1" if readonly else "0"
    lazytpu.set_compile_cache_dir(path, readonly)


def get_num_cached_compilation_graph():
    """Graphs held by the in-memory compile cache (a program loaded from the
    persistent cache is held there too)."""
    return lazytpu.compile_cache_info()["programs"]
