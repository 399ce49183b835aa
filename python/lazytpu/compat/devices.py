"""How many devices torch_xla would see, for spawn and the runtime queries.

PJRT_DEVICE=CPU: CPU_NUM_DEVICES (default 1), read when asked (pytorch/xla's
tests set it between runs); otherwise the simulated cores (8, or
LAZYTPU_NUM_CORES). Inside a world started by ``lazytpu-run -n N`` the world
is already there: None (the launcher's N).
"""
import os

import lazytpu
from lazytpu import _C
from lazytpu import core as _core


def in_launched_world():
    """True in a worker of a world the launcher started (lazytpu-run -n N or
    spawn's workers)."""
    return bool(_C.option("LAZYTPU_SHM_NAME"))


def cpu_devices():
    """CPU_NUM_DEVICES as torch_xla's CPU client reads it (default 1)."""
    v = os.environ.get("CPU_NUM_DEVICES", "").strip()
    try:
        n = int(v) if v else 1
    except ValueError:
        raise ValueError("CPU_NUM_DEVICES=%r is not a number" % v) from None
    if n < 1:
        raise ValueError("CPU_NUM_DEVICES=%d: must be at least 1" % n)
    return n


def spawn_count():
    """Processes xmp.spawn(nprocs=None) starts here: None inside a launched
    world (it runs fn itself), else one per device."""
    if in_launched_world():
        return None
    if _core.device_kind() == "CPU":
        return cpu_devices()
    return lazytpu.device_count()
