"""torch_xla on lazytpu (lazytpu's compatibility layer, not PyTorch/XLA).

Active only under ``lazytpu-run`` / ``python -m lazytpu``. Each module of this
tree maps torch_xla's names onto lazytpu's implementation; see
docs/torch_xla.md for the table and what differs.
"""

from . import _env

_env.translate_env()       # before the engine loads: it reads its settings once

import lazytpu as _lazytpu  # noqa: E402,F401

# the engine may have started before this import (a device tensor made
# first): the starting matmul precision _env chose applies either way
_lazytpu.set_matmul_precision(_env.matmul_level)

from .version import __version__  # noqa: E402,F401
from .torch_xla import *  # noqa: E402,F401,F403
from . import _exit  # noqa: E402,F401
# what `import torch_xla` makes reachable in torch_xla 2.9 (scripts use
# torch_xla.runtime.*, torch_xla.experimental.eager_mode without importing them)
from . import _XLAC, runtime, experimental  # noqa: E402,F401
from .core import xla_model as _xla_model  # noqa: E402,F401
from .utils import utils as _utils  # noqa: E402,F401
from ._internal import tpu as _tpu  # noqa: E402,F401
# the device-plugin registry, filled as 2.9's import fills it
from .experimental import plugins as _plugins  # noqa: E402

_plugins._register_at_import()
from ._internal import custom_kernel as _custom_kernel  # noqa: E402,F401  (torch.ops.xla.*)
from ._dynamo import dynamo_bridge as _dynamo_bridge  # noqa: E402,F401  (openxla backend)
# and what 2.9's own module imports load with it: torch_xla.debug.metrics /
# metrics_saver / profiler, torch_xla.distributed.xla_backend (the 'xla'
# torch.distributed backend is registered), torch_xla._dynamo.config
# (torch_xla.distributed.spmd, torch_xla.core.xla_builder and
# torch_xla.experimental.scan load on first attribute access: their
# packages' __getattr__)
from .debug import metrics as _metrics, metrics_saver as _metrics_saver  # noqa: E402,F401
from .debug import profiler as _profiler  # noqa: E402,F401
from .distributed import xla_backend as _xla_backend  # noqa: E402,F401
from ._dynamo import config as _dynamo_config  # noqa: E402,F401
# PT_XLA_DEBUG / PT_XLA_DEBUG_LEVEL: torch_xla's compilation and execution analysis
from lazytpu.compat import debug_analysis as _debug_analysis  # noqa: E402

_debug_analysis.install()
# 2.9's `from .torch_xla import *` (no __all__) also exports the module
# aliases its torch_xla.py imports: torch_xla.xm, xr, xu, xenv, xmp
from .core import xla_model as xm, xla_env_vars as xenv  # noqa: E402,F401
from . import runtime as xr  # noqa: E402,F401
from .utils import utils as xu  # noqa: E402,F401
from .distributed import xla_multiprocessing as xmp  # noqa: E402,F401
