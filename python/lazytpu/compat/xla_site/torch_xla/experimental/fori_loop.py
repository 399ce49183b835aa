"""torch_xla.experimental.fori_loop on lazytpu: fori_loop and while_loop,
and torch's while_loop higher-order op on xla tensors.

lazytpu has no loop in its IR. A while loop's trip count is a device value:
each iteration reads cond_fn's result on the host (one value read, which
runs the pending graph) and traces body_fn once more; the carried values
stay on the device. fori_loop's bounds are device scalars too.
"""
import torch
from torch._C import DispatchKey
from torch._higher_order_ops.while_loop import while_loop_op

from lazytpu import hop


def _as_tuple(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def _run(cond_fn, body_fn, carried_inputs, additional_inputs=()):
    carried = _as_tuple(carried_inputs)
    extra = tuple(additional_inputs or ())
    while bool(cond_fn(*carried, *extra)):
        carried = _as_tuple(body_fn(*carried, *extra))
    return carried


def while_loop(cond_fn, body_fn, carried_inputs, additional_inputs=None):
    """carried = body_fn(*carried, *additional) while cond_fn(...) holds;
    returns the final carried values (a tuple)."""
    return _run(cond_fn, body_fn, carried_inputs, additional_inputs or ())


def fori_loop(lower, upper, body_fun, *input_value):
    """(remaining count, body_fun applied upper - lower times to
    input_value), as torch_xla returns it."""
    if upper < lower:
        print("ERROR: upper should be a larger number than lower")
    iteri = upper - lower

    def cond_fn(i, *vals):
        return i > 0

    def body_fn(i, *vals):
        return (i - 1,) + _as_tuple(body_fun(*vals))

    return _run(cond_fn, body_fn, (iteri,) + tuple(input_value))


@while_loop_op.py_impl(DispatchKey.XLA)
def _while_loop_xla(cond_fn, body_fn, carried_inputs, additional_inputs=None):
    return _run(cond_fn, body_fn, carried_inputs, additional_inputs or ())


# torch's while_loop called eagerly compiles itself first and its
# functionalization rule fake-traces the body, which a storage-less xla
# tensor cannot give: the eager loop runs above it (lazytpu.hop)
hop.register(DispatchKey.AutogradXLA)
