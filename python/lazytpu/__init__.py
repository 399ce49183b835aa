"""lazytpu: a lazy tensor backend for PyTorch 1.13 with a C core.

    import lazytpu
    dev = lazytpu.device()              # torch.device('privateuseone:0')
    model = model.to(dev)
    ...
    loss.backward()
    lazytpu.optimizer_step(opt)         # opt.step() (+ all-reduce under spawn)
    lazytpu.mark_step()                 # compile (cached) and run the step
    print(lazytpu.metrics.metrics_report())
"""
import types as _types

import torch

from . import _C

_C._init()

from .core import *  # noqa: F401,F403
from .core import (device, devices, device_count, mark_step, wait_device_ops,
                   optimizer_step, get_ordinal, world_size, is_master_ordinal,
                   master_print, add_step_closure, save, set_rng_state,
                   get_rng_state)
from . import core
from . import metrics
from . import debug
from . import _patches

# torch_xla-style module names: lazytpu.xm.xla_device(), lazytpu.met.*
xm = core
met = metrics

try:  # helper modules that may be absent in a partial tree
    from . import spawn  # noqa: F401
except ImportError:
    spawn = None
try:
    from . import loader  # noqa: F401
except ImportError:
    loader = None


def _make_device_module():
    m = _types.ModuleType("torch.privateuseone")
    m.__doc__ = "lazytpu's runtime module (torch.privateuseone)."
    m.is_available = lambda: True
    m.device_count = device_count
    m.current_device = lambda: 0
    m.synchronize = lambda device=None: wait_device_ops()
    m.manual_seed = lambda seed: set_rng_state(seed)
    m.manual_seed_all = lambda seed: set_rng_state(seed)
    m.set_rng_state = set_rng_state
    m.get_rng_state = get_rng_state
    m.mark_step = mark_step
    return m


if not hasattr(torch, "privateuseone"):
    torch._register_device_module("privateuseone", _make_device_module())

__version__ = "0.1.0"
