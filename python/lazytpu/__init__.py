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

The names follow torch_xla's, one implementation each: devices and steps
(lazytpu.core), the world (lazytpu.world), collectives
(lazytpu.collectives), multi-process launch (lazytpu.launch: ``spawn``),
input pipelines (lazytpu.loader), metrics and debugging. Under
``lazytpu-run`` / ``python -m lazytpu`` the same functions also serve
``import torch_xla`` (lazytpu.compat).
"""
import _lazytpu_device

_lazytpu_device.register()

from . import _C  # noqa: E402

_C._init()

from .core import *  # noqa: F401,F403,E402
from .world import (get_ordinal, get_local_ordinal, world_size,  # noqa: E402,F401
                    local_world_size, host_index, num_hosts)
from .collectives import *  # noqa: F401,F403,E402
from .launch import spawn, WorkerError  # noqa: E402,F401
from .step_fn import compile_step  # noqa: E402,F401
from . import core  # noqa: E402
from . import metrics  # noqa: E402
from . import debug  # noqa: E402
from . import _patches  # noqa: E402
from . import loader  # noqa: E402,F401
from . import _exit  # noqa: E402,F401  (autograd device threads at exit)
from . import amp, compat, distributed, utils  # noqa: E402,F401
from .precision import set_matmul_precision, get_matmul_precision  # noqa: E402,F401
from .compile_cache import set_compile_cache_dir, compile_cache_info  # noqa: E402,F401
from . import hf, hop, step_guard  # noqa: E402,F401

if hf._device_env_is_lazytpu():
    hf.enable()   # ACCELERATE_TORCH_DEVICE=lazytpu: Trainer/Accelerate on lazytpu

# torch_xla-style module names: lazytpu.xm.xla_device(), lazytpu.met.*
xm = core
met = metrics

_lazytpu_device._engine_loaded()  # a torch.manual_seed made before the engine

__version__ = "0.2.0"
