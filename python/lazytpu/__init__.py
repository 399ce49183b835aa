"""lazytpu: a lazy tensor backend for PyTorch 2.x with a C core.

    import torch, lazytpu
    dev = torch.device("lazytpu")       # or lazytpu.device(): lazytpu:0
    model = model.to(dev)
    ...
    loss.backward()
    lazytpu.optimizer_step(opt)         # opt.step() (+ all-reduce under spawn)
    lazytpu.mark_step()                 # compile (cached) and run the step
    print(lazytpu.metrics.metrics_report())

``import torch`` alone registers the device (PyTorch's backend autoloading,
see _lazytpu_device); this package is the engine, loaded on first use.
"""
import _lazytpu_device

_lazytpu_device.register()

from . import _C  # noqa: E402

_C._init()

from .core import *  # noqa: F401,F403,E402
from .core import (device, devices, device_count, mark_step, wait_device_ops,  # noqa: E402
                   optimizer_step, get_ordinal, world_size, is_master_ordinal,
                   master_print, add_step_closure, save, set_rng_state,
                   get_rng_state)
from . import core  # noqa: E402
from . import metrics  # noqa: E402
from . import debug  # noqa: E402
from . import _patches  # noqa: E402
from . import spawn  # noqa: E402,F401
from . import loader  # noqa: E402,F401

# torch_xla-style module names: lazytpu.xm.xla_device(), lazytpu.met.*
xm = core
met = metrics

__version__ = "0.2.0"
