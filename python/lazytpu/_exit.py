"""Interpreter exit with autograd's device threads still holding a backward.

Every ``backward()`` stashes a Python object (a contextvars copy) in the
thread-local state its GraphTask captures. The autograd engine runs a
device's nodes on its own thread (``pt_autograd_<index>``), and that thread
drops its last reference to the GraphTask a moment after the caller's
``backward()`` has returned. When Python finalisation starts inside that
moment (a busy machine, a backward near the end of a script), the drop needs
the GIL, finalisation kills the thread, the unwind crosses a noexcept
destructor and the process aborts: "terminate called without an active
exception".

At exit, while threads can still take the GIL, each used core gets one tiny
backward through the C++ engine directly (no stashed object): the device
thread can only take it after finishing the previous task, the caller waits
for it with the GIL released, and its own GraphTask holds no Python object.
"""
import atexit

import torch

from . import _C
from .core import device


@atexit.register
def _drain_autograd_device_threads():
    try:
        cores = list(_C.used_cores())
        engine = torch.autograd.Variable._execution_engine
    except Exception:  # noqa: BLE001 - exit path: never raise here
        return
    for k in cores:
        try:
            with torch.enable_grad():
                x = torch.zeros((), device=device(k), requires_grad=True)
                y = x * 1.0
                engine.run_backward((y,), (torch.ones((), device=device(k)),),
                                    False, False, (), True, True)
        except Exception:  # noqa: BLE001 - a failed core has nothing to drain
            pass
