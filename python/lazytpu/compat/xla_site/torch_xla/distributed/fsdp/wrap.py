"""torch_xla.distributed.fsdp.wrap: auto-wrap policies and recursive_wrap.

A policy is called as policy(module=, recurse=, unwrapped_params=):
recurse=True asks whether to descend into the module's children,
recurse=False whether to wrap the module itself (with what is left of its
parameters after its children were wrapped)."""
import torch.nn as nn


def always_wrap_policy(*args, **kwargs):
    """Wraps every submodule."""
    return True


def lambda_auto_wrap_policy(module, recurse, unwrapped_params, lambda_fn):
    """Wraps the modules for which lambda_fn(module) is true."""
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module, recurse, unwrapped_params, transformer_layer_cls):
    """Wraps every instance of one of transformer_layer_cls."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module, recurse, unwrapped_params, min_num_params=int(1e8),
                                force_leaf_modules=None, exclude_wrap_modules=None):
    """Wraps modules with at least min_num_params parameters not yet wrapped;
    never descends into force_leaf_modules, never wraps exclude_wrap_modules."""
    leaves = (size_based_auto_wrap_policy.FORCE_LEAF_MODULES
              if force_leaf_modules is None else force_leaf_modules)
    excluded = (size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES
                if exclude_wrap_modules is None else exclude_wrap_modules)
    large = unwrapped_params >= min_num_params
    if recurse:
        return large and not isinstance(module, tuple(leaves))
    return large and not isinstance(module, tuple(excluded))


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}


def _wrap(module, wrapper_cls, **kwargs):
    overrides = getattr(module, "_wrap_overrides", None)
    return wrapper_cls(module, **({**kwargs, **overrides} if overrides else kwargs))


def recursive_wrap(module, auto_wrap_policy, wrapper_cls, ignored_modules=(),
                   ignored_params=(), only_wrap_children=False, **kwargs):
    """(module with its children wrapped by policy, parameters wrapped)."""
    assert auto_wrap_policy is not None, "Must specify auto_wrap_policy."
    assert wrapper_cls is not None, "Must specify wrapper_cls"
    ignored_modules, ignored_params = set(ignored_modules), set(ignored_params)
    if isinstance(wrapper_cls, type):
        for child in module.modules():
            if child not in ignored_modules:
                assert not isinstance(child, wrapper_cls), "module is already wrapped"
    n = sum(p.numel() for p in module.parameters() if p not in ignored_params)
    if not auto_wrap_policy(module=module, recurse=True, unwrapped_params=n):
        return module, 0
    wrapped = 0
    for name, child in list(module.named_children()):
        if child in ignored_modules:
            continue
        new_child, k = recursive_wrap(child, auto_wrap_policy, wrapper_cls, ignored_modules,
                                      ignored_params, **kwargs)
        setattr(module, name, new_child)
        wrapped += k
    if not only_wrap_children and auto_wrap_policy(module=module, recurse=False,
                                                   unwrapped_params=n - wrapped):
        return _wrap(module, wrapper_cls, **kwargs), n
    return module, wrapped
