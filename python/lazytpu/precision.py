"""lazytpu.precision: how float32 matrix products multiply.

A TPU multiplies bf16 on its MXU: an f32 matmul or convolution runs as bf16
passes with f32 accumulation, 1 at XLA's DEFAULT precision (~8 mantissa
bits), 3 at HIGH (~14), 6 at HIGHEST (~22). lazytpu reproduces the passes
(lazy/kernels/mxu.c) so a loss curve is the one the TPU draws:

    lazytpu.set_matmul_precision("default")   # a TPU-faithful run
    lazytpu.set_matmul_precision("f32")       # plain f32 (lazytpu's default)

Levels: "f32" (full f32, as XLA:CPU), "default", "high", "highest". The
level applies to mm, bmm, addmm/linear, convolutions and their gradients
whose operands are not both bf16, in the graphs synced after the call (a
graph takes the level when its step ends: set it before the step). A graph
holding products keys on the level: switching compiles anew.
LAZYTPU_MATMUL_PRECISION sets the initial level; torch_xla's
``torch_xla.backends.set_mat_mul_precision`` maps onto this (docs/bf16.md).
"""
from . import _C

__all__ = ["LEVELS", "set_matmul_precision", "get_matmul_precision"]

LEVELS = _C.MATMUL_PRECISIONS   # ("f32", "default", "high", "highest"), the core's


def set_matmul_precision(level):
    """Sets the level ("f32", "default", "high" or "highest") for the graphs
    synced from now on; ValueError for another value."""
    if level not in LEVELS:
        raise ValueError("lazytpu.set_matmul_precision(%r): expected one of %s"
                         % (level, ", ".join(LEVELS)))
    _C.set_matmul_precision(level)


def get_matmul_precision():
    """The current level: "f32", "default", "high" or "highest"."""
    return _C.matmul_precision()
