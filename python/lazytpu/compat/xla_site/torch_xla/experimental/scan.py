"""torch_xla.experimental.scan on lazytpu: jax.lax.scan-style loops.

lazytpu has no loop construct in its IR: ``scan`` unrolls. The trip count
is static (the leading dimension of ``xs``), so the unrolled loop is exactly
the loop: ``fn`` is called once per step and traced like any code, autograd
differentiates the unrolled steps, and the step's graph grows with the
length (XLA's While-loop compile-time saving is not simulated).
``partition_fn`` and ``is_fn_pure`` are accepted (they tune XLA's traced
loop body, which lazytpu does not build).
"""
from weakref import WeakKeyDictionary

import torch
from torch.utils._pytree import tree_flatten, tree_iter, tree_map, tree_unflatten

try:
    from functorch.compile import default_partition
except ImportError:  # not in every torch build
    default_partition = None

# torch_xla's cache of traced loop bodies (fn -> {key: traced functions}).
# lazytpu builds no loop body (scan unrolls), so nothing is ever cached: the
# dict stays empty, and code that clears it (as pytorch/xla's tests do
# between tests) runs unchanged.
_SCAN_COMPUTATION_CACHE = WeakKeyDictionary()


def scan(fn, init, xs, partition_fn=default_partition, is_fn_pure=False):
    """(final carry, ys): carry, y = fn(carry, x) for each slice x of xs
    along dim 0 (every leaf of the xs PyTree), the y leaves stacked."""
    if not callable(fn):
        raise ValueError("`fn` {} must be callable.".format(fn))
    length = None
    for leaf in tree_iter(xs):
        n = len(leaf)
        if length is None:
            length = n
        elif n != length:
            raise ValueError("The leaves of the `xs` input PyTree must have the same "
                             "leading dimension size. Got {} and {}".format(length, n))
    if length is None:
        raise ValueError("`xs` {} is an empty PyTree.".format(xs))
    flat_xs, xs_spec = tree_flatten(xs)
    carry, ys = init, []
    for i in range(length):
        x = tree_unflatten([t[i] for t in flat_xs], xs_spec)
        carry, y = fn(carry, x)
        ys.append(y)
    flat0, y_spec = tree_flatten(ys[0])
    cols = [tree_flatten(y)[0] for y in ys]
    stacked = [None if flat0[k] is None else torch.stack([c[k] for c in cols], dim=0)
               for k in range(len(flat0))]
    return carry, tree_unflatten(stacked, y_spec)


def tree_flatten_none(pytree):
    """(leaves without the None ones, unflatten) where unflatten(leaves)
    puts the Nones back."""
    flat, spec = tree_flatten(pytree)
    mask = [v is None for v in flat]

    def unflatten(values):
        it = iter(values)
        return tree_unflatten([None if m else next(it) for m in mask], spec)

    return [v for v in flat if v is not None], unflatten


def value_and_grad_partitioned(fn, init, xs, partition_fn=default_partition,
                               is_fn_pure=False):
    """(forward, alias_input, backward) for one step of fn, split so the
    forward saves only its inputs and the backward recomputes the step:
    forward(carry, x) -> (new_carry, (y, carry)); alias_input(carry, x) ->
    the activations (carry, x); backward(grad_carry, (grad_y, (carry, x)))
    -> (grad wrt carry, grad wrt x)."""
    def forward(carry, x):
        with torch.no_grad():
            new_carry, y = fn(carry, x)
        return new_carry, (y, carry)

    def alias_input(partial_activations, x):
        return partial_activations, x

    def backward(grad_carry, grad_y_and_activations):
        grad_y, (carry, x) = grad_y_and_activations
        dup = lambda v: v.detach().requires_grad_(True) if isinstance(v, torch.Tensor) \
            and v.is_floating_point() else v  # noqa: E731
        carry_, x_ = tree_map(dup, carry), tree_map(dup, x)
        with torch.enable_grad():
            new_carry, y = fn(carry_, x_)
        outs, grads = [], []
        for o, g in zip(tree_flatten((new_carry, y))[0],
                        tree_flatten((grad_carry, grad_y))[0]):
            if isinstance(o, torch.Tensor) and o.requires_grad and g is not None:
                outs.append(o)
                grads.append(g)
        flat_in, in_spec = tree_flatten((carry_, x_))
        wanted = [t for t in flat_in if isinstance(t, torch.Tensor) and t.requires_grad]
        got = torch.autograd.grad(outs, wanted, grads, allow_unused=True) if outs else \
            [None] * len(wanted)
        by_id = {id(t): g for t, g in zip(wanted, got)}
        res = [by_id.get(id(t)) if isinstance(t, torch.Tensor) else None for t in flat_in]
        res = [torch.zeros_like(t) if r is None and isinstance(t, torch.Tensor) else r
               for r, t in zip(res, flat_in)]
        return tree_unflatten(res, in_spec)

    return forward, alias_input, backward
