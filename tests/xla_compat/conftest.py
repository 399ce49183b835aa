"""Tests that run INSIDE lazytpu's torch_xla compatibility mode (this pytest
is started by tests/python/test_torch_xla.py through `python -m lazytpu -m
pytest tests/xla_compat`): `import torch_xla` is lazytpu's layer and device
tensors are "xla" tensors."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

if os.environ.get("LAZYTPU_XLA_COMPAT") != "1":
    pytest.exit("tests/xla_compat must run in compatibility mode: "
                "python -m lazytpu -m pytest tests/xla_compat", returncode=4)

import torch  # noqa: E402
import torch_xla  # noqa: E402,F401

torch.set_num_threads(1)


@pytest.fixture
def spmd_mode():
    """SPMD mode (torch_xla.runtime.use_spmd()) for one test, XLA_USE_SPMD
    restored after it."""
    import torch_xla.runtime as xr
    prev = os.environ.get("XLA_USE_SPMD")
    xr.use_spmd()
    yield
    if prev is None:
        os.environ.pop("XLA_USE_SPMD", None)
    else:
        os.environ["XLA_USE_SPMD"] = prev


@pytest.fixture
def highest_precision():
    """torch_xla's HIGHEST matmul precision for one test (pytorch/xla's own
    kernel tests run at it), the previous level restored after it."""
    import torch_xla.backends
    prev = torch_xla.backends.get_mat_mul_precision()
    torch_xla.backends.set_mat_mul_precision("highest")
    yield
    torch_xla.backends.set_mat_mul_precision(prev)
