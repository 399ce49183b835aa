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

from .. import _C

SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla_site")


def enabled():
    """True when this process runs in torch_xla compatibility mode."""
    return bool(_C.option("LAZYTPU_XLA_COMPAT"))


_NOTED = set()


def note(msg):
    """A one-line note on stderr, once per message per process."""
    if msg not in _NOTED:
        _NOTED.add(msg)
        sys.stderr.write("lazytpu: %s\n" % msg)


def submodules_on_access(package, names):
    """A module __getattr__ for the torch_xla package `package` that imports
    its submodules `names` on first attribute access (2.9 has them loaded
    once torch_xla is imported; here they cost nothing until used)."""
    def __getattr__(name):
        if name in names:
            import importlib
            return importlib.import_module("." + name, package)
        raise AttributeError("module %r has no attribute %r" % (package, name))
    return __getattr__
