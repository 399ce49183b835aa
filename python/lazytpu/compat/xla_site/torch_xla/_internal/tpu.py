"""torch_xla._internal.tpu: what libraries (Lightning) ask about the TPU."""
import lazytpu


def num_available_devices():
    """Cores on this host."""
    return lazytpu.device_count() if lazytpu.world_size() <= 1 else lazytpu.local_world_size()


num_available_chips = num_available_devices


def num_logical_cores_per_chip():
    return 1


def num_local_processes():
    return lazytpu.local_world_size()


def num_expected_global_devices():
    return lazytpu.world_size() if lazytpu.world_size() > 1 else lazytpu.device_count()


def version():
    """The TPU generation simulated: a v3-8-like board of 8 cores."""
    return 3


def worker_id():
    return lazytpu.host_index()


def task_id():
    return lazytpu.host_index()
