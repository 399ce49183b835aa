"""lazytpu.compat: torch_xla programs run unchanged on lazytpu.

``lazytpu-run [-n 8] python train.py`` and ``python -m lazytpu train.py``
turn the compatibility mode on for that run (see :func:`activate_env`):

- ``import torch_xla`` resolves to the package tree in ``xla_site/``, whose
  modules (``torch_xla.core.xla_model``, ``torch_xla.distributed.*``,
  ``torch_xla.runtime``, ``torch_xla.debug.*``, ``torch_xla.amp``, ...) are
  thin mappings onto lazytpu's own functions: one implementation each;
- ``importlib.metadata.version("torch_xla")`` answers :data:`TORCH_XLA_VERSION`
  (libraries such as Lightning select their code paths from it);
- device tensors are ``xla`` tensors (LAZYTPU_XLA_COMPAT=1: the backend
  registers its kernels on the XLA dispatch keys), because libraries build
  ``torch.device("xla", i)`` and compare ``device.type == "xla"``;
- torch_xla's environment variables are honoured (:func:`translate_env`).

It never shadows a real torch_xla: when one is installed, the launcher says
so and keeps it, unless asked explicitly (``--xla-compat=force``).
"""
import os
import sys

from _lazytpu_cli import TORCH_XLA_VERSION, activate_env, real_torch_xla  # noqa: F401

SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla_site")


def enabled():
    """True when this process runs in torch_xla compatibility mode."""
    return os.environ.get("LAZYTPU_XLA_COMPAT") == "1"


_NOTED = set()


def note(msg):
    """A one-line note on stderr, once per message per process."""
    if msg not in _NOTED:
        _NOTED.add(msg)
        sys.stderr.write("lazytpu: %s\n" % msg)


def translate_env():
    """Maps torch_xla's environment variables onto lazytpu's, before the
    engine starts (called by the torch_xla package on import):

    XLA_USE_BF16, XLA_DOWNCAST_BF16 -> LAZYTPU_USE_BF16 (f32 stored as bf16);
    PT_XLA_DEBUG, PT_XLA_DEBUG_LEVEL -> LAZYTPU_DEBUG (step warnings);
    XLA_SAVE_TENSORS_FILE (+ XLA_SAVE_TENSORS_FMT text|dot) -> LAZYTPU_SAVE_GRAPHS;
    XLA_METRICS_FILE -> the report is written there at exit;
    XLA_IR_DEBUG -> user frames in graph dumps (always on in lazytpu);
    PJRT_DEVICE: TPU or CPU accepted (the device kind reported), else an error;
    XLA_FLAGS: ignored, with a one-line note."""
    e = os.environ
    for k in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16"):
        if e.get(k, "0") not in ("", "0"):
            e.setdefault("LAZYTPU_USE_BF16", "1")
    if e.get("PT_XLA_DEBUG", "0") not in ("", "0") or \
            e.get("PT_XLA_DEBUG_LEVEL", "0") not in ("", "0"):
        e.setdefault("LAZYTPU_DEBUG", "1")
    if e.get("XLA_SAVE_TENSORS_FILE"):
        path = e["XLA_SAVE_TENSORS_FILE"]
        fmt = e.get("XLA_SAVE_TENSORS_FMT", "text").lower()
        if fmt == "dot" and not path.endswith(".dot"):
            path += ".dot"
        e.setdefault("LAZYTPU_SAVE_GRAPHS", path)
    pjrt = e.get("PJRT_DEVICE", "TPU").upper()
    if pjrt not in ("TPU", "CPU"):
        raise RuntimeError("lazytpu: PJRT_DEVICE=%s is not available; lazytpu simulates "
                           "TPU cores (PJRT_DEVICE=TPU or CPU)" % e["PJRT_DEVICE"])
    if e.get("XLA_FLAGS"):
        note("XLA_FLAGS=%s is ignored (lazytpu is not XLA)" % e["XLA_FLAGS"])
