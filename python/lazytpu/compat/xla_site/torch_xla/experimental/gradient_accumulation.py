"""torch_xla.experimental.gradient_accumulation on lazytpu.

torch_xla runs the accumulation steps as one XLA While loop; lazytpu has no
loop in its IR and unrolls them (the step count, the leading dimension of
the iterable tensors, is static): each step's loss is divided by the step
count and back-propagated, so the parameters' gradients accumulate (added
to any gradient they had) and the returned loss is the mean."""
import torch


def gradient_accumulation(train_step, iterable_tensors, model, *carried_tensors):
    """train_step(*slices, *carried) per slice along dim 0 of
    iterable_tensors, returning a loss or (loss, *carried); returns the
    accumulated loss (and the final carried tensors when given)."""
    if not iterable_tensors:
        raise ValueError("iterable_tensors cannot be empty")
    steps = iterable_tensors[0].size(0)
    for i, t in enumerate(iterable_tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError("Element %d of iterable_tensors is not a tensor" % i)
        if t.numel() == 0:
            raise ValueError("Element %d of iterable_tensors is empty" % i)
        if t.size(0) != steps:
            raise ValueError("Element %d of iterable_tensors has inconsistent first "
                             "dimension" % i)
    carried = tuple(carried_tensors)
    total = None
    for s in range(steps):
        out = train_step(*[t[s] for t in iterable_tensors], *carried)
        if carried:
            loss, carried = out[0], tuple(out[1:])
        else:
            loss = out
        loss = loss / steps
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return (total,) + carried if carried else total
