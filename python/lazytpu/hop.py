"""torch's control-flow higher-order ops called outside torch.compile on
device tensors: while_loop, cond, scan, map, associative_scan.

Called eagerly, such an op compiles itself with dynamo's eager backend
(lazytpu lets that one compile, see _patches._in_hop_compile) and the graph
runs the op on the real inputs. The op's functionalization rule then traces
its branches or body over fake copies of the inputs to check for aliasing,
which a storage-less device tensor cannot give. lazytpu has no loop or
branch in its IR: on device tensors the op runs its eager implementation
instead (the CompositeExplicitAutograd kernel PyTorch runs for CPU tensors),
registered for the device's autograd key, so it runs before
functionalization. A while_loop reads cond_fn's result on the host each
iteration (a value read: the pending graph runs) and traces body_fn once
more; cond reads its predicate. Autograd records every op of every
iteration, as for the same loop written in Python. torch_xla lowers
while_loop to one XLA While instead; the values are the same.
"""
import torch
from torch._C import DispatchKey
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _get_current_dispatch_mode


def _ops():
    """The higher-order ops with an eager kernel (those torch defines)."""
    found = []
    for mod, name in (("while_loop", "while_loop_op"), ("cond", "cond_op"),
                      ("scan", "scan_op"), ("map", "map_impl"),
                      ("associative_scan", "associative_scan_op")):
        try:
            m = __import__("torch._higher_order_ops." + mod, fromlist=[name])
        except ImportError:
            continue
        op = getattr(m, name, None)
        if op is not None and DispatchKey.CompositeExplicitAutograd in op.py_kernels:
            found.append(op)
    return found


def _traced(args, kwargs):
    """True while dynamo, AOTAutograd or make_fx traces the op (a fake,
    functional or proxy mode, or tensor subclasses with the Python key):
    PyTorch's own rules handle that. Other modes (AOTAutograd's runtime
    observer of custom ops) run over real tensors."""
    mode = _get_current_dispatch_mode()
    if mode is not None and isinstance(mode, _tracing_modes()):
        return True
    for t in pytree.tree_leaves((args, kwargs)):
        if isinstance(t, torch.Tensor) and torch._C._dispatch_keys(t).has(DispatchKey.Python):
            return True
    return False


def _tracing_modes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch._subclasses.functional_tensor import FunctionalTensorMode
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode
    return (FakeTensorMode, FunctionalTensorMode, ProxyTorchDispatchMode)


def register(key):
    """Runs each op's eager implementation on real tensors of the device
    whose autograd dispatch key is `key` (lazytpu's: AutogradPrivateUse1;
    compatibility mode's xla tensors: AutogradXLA)."""
    for op in _ops():
        if key in op.py_kernels:
            continue            # registered already
        dense = op.py_kernels[DispatchKey.CompositeExplicitAutograd]
        autograd = op.py_kernels.get(DispatchKey.Autograd)

        def on_device(*args, _dense=dense, _autograd=autograd, **kwargs):
            if _autograd is not None and _traced(args, kwargs):
                return _autograd(*args, **kwargs)
            return _dense(*args, **kwargs)

        op.py_impl(key)(on_device)


register(DispatchKey.AutogradPrivateUse1)
