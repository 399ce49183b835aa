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


def get_tpu_env():
    """The TPU VM's `tpu-env` metadata, as torch_xla reads it on a TPU: the
    simulated board (ACCELERATOR_TYPE "v3-8", one per host), the process
    bounds of the hosts, this host's WORKER_ID. TYPE is "LAZYTPU": libraries
    that look the chip's peak FLOPs up by it (Lightning's ThroughputMonitor)
    find none, so they report no utilisation figure instead of one against a
    real v3's peak."""
    hosts = max(1, int(lazytpu.num_hosts() or 1))
    return {"ACCELERATOR_TYPE": "v3-8", "TYPE": "LAZYTPU",
            "TPU_PROCESS_BOUNDS": "%d,1,1" % hosts, "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
            "WORKER_ID": lazytpu.host_index()}


def get_tpu_type():
    """The accelerator type's generation ("v3")."""
    return get_tpu_env()["ACCELERATOR_TYPE"].split("-")[0]


def get_worker_ips():
    """One name per host of the world (torch_xla lists the TPU workers'
    addresses; a single host is ['localhost'])."""
    hosts = max(1, int(lazytpu.num_hosts() or 1))
    return ["localhost"] if hosts == 1 else ["host-%d" % i for i in range(hosts)]


def num_tpu_workers():
    return len(get_worker_ips())


def worker_id():
    return lazytpu.host_index()


def task_id():
    return lazytpu.host_index()


def _device_plugin_base():
    from torch_xla.experimental.plugins import DevicePlugin
    return DevicePlugin


class TpuPlugin(_device_plugin_base()):
    """The TPU's device plugin (torch_xla.experimental.plugins.default() on
    a TPU): lazytpu's simulated board. It loads no library and creates no
    PJRT client, so it has no client options; the world is set up by
    lazytpu's launcher, so configuring it is nothing to do."""

    def library_path(self):
        raise EnvironmentError("libtpu not found: lazytpu simulates the TPU cores in this "
                               "process and loads no PJRT plugin library")

    def host_index(self):
        return worker_id()

    def configure_single_process(self):
        return None

    def configure_multiprocess(self, local_rank, local_world_size):
        return None

    def physical_chip_count(self):
        """Processes xmp.spawn starts on this host (one per core)."""
        from lazytpu.compat import devices
        return devices.spawn_count()
