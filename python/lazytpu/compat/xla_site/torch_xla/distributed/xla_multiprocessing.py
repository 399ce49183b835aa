"""torch_xla.distributed.xla_multiprocessing (``xmp``) on lazytpu.launch.

``spawn`` is torch_xla 2.9's: nprocs is 1 (fn runs in this process) or None
(one worker per device); any other value raises ValueError, as on a TPU, so
a script that passes here does not fail there. join and daemon are accepted
and ignored (2.9 always waits). lazytpu's own ``lazytpu.spawn`` takes any
nprocs and join=False.
"""
from lazytpu.launch import MpModelWrapper, MpSerialExecutor  # noqa: F401

from torch_xla._internal import pjrt as _pjrt


def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="spawn"):
    """fn(index, *args) on every device (nprocs=None) or here (nprocs=1)."""
    return _pjrt.spawn(fn, nprocs, start_method, args)
