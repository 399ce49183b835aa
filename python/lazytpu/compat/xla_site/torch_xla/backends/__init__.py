"""torch_xla.backends on lazytpu: the precision of float32 matmuls and
convolutions (torch_xla's ``set_mat_mul_precision``), mapped onto
lazytpu.precision.

With PJRT_DEVICE=TPU (or unset) the level is the TPU's: products run as its
bf16 passes ('default' 1, 'high' 3, 'highest' 6) and the run starts at
'default', as on a TPU. With PJRT_DEVICE=CPU the setting is kept and
reported but products stay full f32, as XLA:CPU computes them.
LAZYTPU_MATMUL_PRECISION sets the starting level in both modes;
LAZYTPU_MATMUL_PRECISION=f32 pins full f32 for the whole run (the setting is
then kept and reported only, as on XLA:CPU), so a script that saves and
restores the level cannot drop a run compared with f32 eager into bf16. Unlike
torch_xla (pytorch/xla#9129) a switched level takes effect in the next
graph: the level is part of the compile-cache key.
"""
import logging

from lazytpu import core as _core
from .. import _env as _xla_env
from lazytpu import precision as _precision

__all__ = ["set_mat_mul_precision", "get_mat_mul_precision"]

logger = logging.getLogger(__name__)
_WARNING_MESSAGE = ("Setting mat mul precision multiple times is not recommended. If you need "
                    "to do so, please empirically verify that the precision setting is "
                    "behaving as expected.")

_NAMES = ("default", "high", "highest")
_env_level = _xla_env.matmul_level or ""       # what torch_xla's import chose
_setting = _env_level if _env_level in _NAMES else "default"


def _levels_apply():
    """True when the torch_xla setting drives the arithmetic: a TPU run whose
    level LAZYTPU_MATMUL_PRECISION did not pin to f32."""
    return _core.device_kind() == "TPU" and _env_level != "f32"


def set_mat_mul_precision(precision):
    """'default', 'high' or 'highest' for the f32 matmuls and convolutions of
    the graphs synced from now on (on PJRT_DEVICE=CPU: recorded only, the
    arithmetic stays f32 as on XLA:CPU). Logs torch_xla's warning; ValueError
    for another value."""
    if precision not in _NAMES:
        raise ValueError("Invalid precision: %s. Must be one of %s." % (precision, ", ".join(_NAMES)))
    logger.warning(_WARNING_MESSAGE)
    _set(precision)


def _set(precision):
    """The setting itself (torch_xla._XLAC._xla_set_mat_mul_precision: no
    warning); precision is one of _NAMES."""
    global _setting
    _setting = precision
    if _levels_apply():
        _precision.set_matmul_precision(precision)


def get_mat_mul_precision():
    """The current setting: 'default', 'high' or 'highest'."""
    level = _precision.get_matmul_precision()
    if _levels_apply() and level in _NAMES:
        return level
    return _setting
