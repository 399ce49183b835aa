"""torch_xla.experimental.plugins on lazytpu: torch_xla 2.9's registry of
device plugins (PJRT plugin descriptions, keyed by device type).

`import torch_xla` fills it as 2.9 does (unless XLA_REGISTER_INSTALLED_PLUGINS
is "0"): dynamic plugins on, the TPU plugin, then every plugin installed under
the entry-point group "torch_xla.plugins". lazytpu's TPU plugin
(torch_xla._internal.tpu.TpuPlugin) describes the simulated cores: host index,
the processes xmp.spawn starts on this host. lazytpu never loads a PJRT
library: a registered plugin of another device type is listed, and selecting
its device (PJRT_DEVICE) is refused at `import torch_xla`, as every device
type but TPU and CPU is.
"""
import importlib.metadata as _metadata
import os
import warnings

import torch_xla
import torch_xla.core.xla_env_vars as xenv
import torch_xla.runtime as xr
import torch_xla.utils.utils as xu


class DevicePlugin:
    """Base class of device plugins (one device, one local process unless a
    subclass says otherwise)."""

    def library_path(self) -> str:
        """Path of the PJRT plugin library."""
        raise NotImplementedError()

    def host_index(self) -> int:
        return 0

    def configure_single_process(self):
        """Sets this process up as a world of one (debugging)."""
        raise NotImplementedError()

    def configure_multiprocess(self, local_rank, local_world_size):
        """Sets this process up as local_rank of local_world_size processes
        (xmp.spawn, torchrun)."""

    def physical_chip_count(self):
        """Processes xmp.spawn / torchrun are expected to start on this host."""
        return 1

    def client_create_options(self) -> dict:
        return {}

    def requires_xla_coordinator(self) -> bool:
        """Whether the XLA coordinator must start before the client."""
        return False


_plugin_registry = {}


def use_dynamic_plugins():
    """Turns the registry on (PJRT_DYNAMIC_PLUGINS=1); RuntimeError once the
    runtime is initialized (a device tensor exists), as in 2.9."""
    if torch_xla._XLAC._xla_runtime_is_initialized():
        raise RuntimeError("Can't enable dynamic plugins after XLA runtime is initialized")
    os.environ[xenv.PJRT_DYNAMIC_PLUGINS] = "1"


def using_dynamic_plugins():
    """True when the registry is on and the device type is not CPU (2.9 has
    no CPU plugin)."""
    return xu.getenv_as(xenv.PJRT_DYNAMIC_PLUGINS, bool, False) and xr.device_type() != "CPU"


def default() -> DevicePlugin:
    """The plugin of the current device type (KeyError when none is
    registered: CPU, or after XLA_REGISTER_INSTALLED_PLUGINS=0)."""
    return _plugin_registry[xr.device_type()]


def register_plugin(name: str, device_plugin: DevicePlugin):
    """Registers device_plugin for device type name (upper-cased)."""
    _plugin_registry[name.upper()] = device_plugin


def register_installed_plugins():
    """Registers every plugin class of the entry-point group
    "torch_xla.plugins" (an instance each, under the entry's name)."""
    for ep in _metadata.entry_points(group="torch_xla.plugins"):
        register_plugin(ep.name.upper(), ep.load()())


def _register_at_import():
    """What `import torch_xla` does in 2.9 (XLA_REGISTER_INSTALLED_PLUGINS,
    default "1"): dynamic plugins on, the built-in TPU plugin (2.9 gets it
    from its own entry point), the installed ones. Unlike use_dynamic_plugins
    it does not refuse when lazytpu's engine started before this import, and
    an installed plugin that fails to load is a warning naming it, not a
    failed import."""
    if os.getenv("XLA_REGISTER_INSTALLED_PLUGINS", "1") != "1":
        return
    os.environ[xenv.PJRT_DYNAMIC_PLUGINS] = "1"
    from torch_xla._internal.tpu import TpuPlugin
    register_plugin("TPU", TpuPlugin())
    for ep in _metadata.entry_points(group="torch_xla.plugins"):
        if ep.name.upper() == "TPU":
            continue
        try:
            register_plugin(ep.name.upper(), ep.load()())
        except Exception as e:  # a foreign plugin must not break the import
            warnings.warn("lazytpu: the installed torch_xla plugin %r (%s) could not be "
                          "loaded: %s: %s" % (ep.name, ep.value, type(e).__name__, e))
