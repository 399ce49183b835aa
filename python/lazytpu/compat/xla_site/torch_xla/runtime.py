"""torch_xla.runtime (``xr``) on lazytpu: the world and the runtime's device."""
import lazytpu
from lazytpu import core as _core

world_size = lazytpu.world_size
global_ordinal = lazytpu.get_ordinal
local_ordinal = lazytpu.get_local_ordinal
host_index = lazytpu.host_index
process_index = lazytpu.host_index
process_count = lazytpu.num_hosts
local_process_count = lazytpu.local_world_size
device_type = _core.device_kind


def addressable_device_count():
    """Cores this process drives: its own one in a world of several
    processes, all of them otherwise."""
    return 1 if lazytpu.world_size() > 1 else lazytpu.device_count()


local_device_count = addressable_device_count
addressable_runtime_device_count = addressable_device_count


def global_device_count():
    """Cores over all processes and hosts."""
    n = lazytpu.world_size()
    return n if n > 1 else lazytpu.device_count()


global_runtime_device_count = global_device_count


def using_pjrt():
    return True


def is_bf16_supported():
    return True


def is_spmd():
    return False


def use_spmd(auto=False):
    """SPMD (GSPMD sharding) is not simulated by lazytpu."""
    raise RuntimeError("torch_xla.runtime.use_spmd: lazytpu does not simulate SPMD "
                       "sharding; run data-parallel with xmp.spawn / torch_xla.launch "
                       "(one process per core) instead")


def initialize_cache(path, readonly=False):
    """Graphs are cached in memory per process (LAZYTPU_COMPILE_CACHE_SIZE);
    a persistent cache directory is accepted and not used."""
    lazytpu.compat.note("torch_xla.runtime.initialize_cache(%r): lazytpu keeps its "
                        "compile cache in memory; nothing is written there" % path)


def get_num_cached_compilation_graph():
    return lazytpu.metrics.counter_value("UncachedCompile") or 0


def set_device_type(pjrt_device):
    if pjrt_device.upper() not in ("TPU", "CPU"):
        raise RuntimeError("torch_xla.runtime.set_device_type(%r): lazytpu simulates TPU "
                           "cores (TPU or CPU accepted)" % pjrt_device)
    import os
    os.environ["PJRT_DEVICE"] = pjrt_device.upper()


# ---- SPMD (lazytpu.spmd): these replace the definitions above ----
from lazytpu.spmd import use_spmd, is_spmd  # noqa: E402,F401,F811
from lazytpu.spmd import global_runtime_device_count  # noqa: E402,F401,F811
