"""torch_xla.core.functions: differentiable collectives and the layers built
on them, over lazytpu's collectives.

The gradients follow torch_xla's conventions, which assume every replica
computes the same loss: all_reduce passes the output gradient through
(times scale; MUL/MIN/MAX route it to the inputs that made the result),
all_gather hands each replica its own slice of the output gradient, and
AllReduceSumLayer sums the gradient over the replicas.
"""
import torch

import torch_xla.core.xla_model as xm
from torch_xla import runtime as xr


class AllReduce(torch.autograd.Function):

    @staticmethod
    def forward(ctx, input, reduce_type, scale, groups):
        ctx.reduce_type, ctx.scale = reduce_type, scale
        output = xm.all_reduce(reduce_type, input, scale=scale, groups=groups)
        ctx.save_for_backward(input, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, output = ctx.saved_tensors
        grad = grad_output * ctx.scale if ctx.scale != 1.0 else grad_output
        kind = ctx.reduce_type
        if kind == xm.REDUCE_SUM:
            return grad, None, None, None
        if kind == xm.REDUCE_MUL:
            ratio = torch.where(input != 0, output / input, torch.zeros_like(input))
            return grad * ratio, None, None, None
        if kind in (xm.REDUCE_MIN, xm.REDUCE_MAX):
            return torch.where(input == output, grad, torch.zeros_like(grad)), None, None, None
        raise RuntimeError("Unsupported reduce type: {}".format(kind))


def all_reduce(reduce_type, value, scale=1.0, groups=None):
    """xm.all_reduce with autograd."""
    return AllReduce.apply(value, reduce_type, scale, groups)


class AllGather(torch.autograd.Function):

    @staticmethod
    def forward(ctx, input, dim):
        ctx.dim = dim
        ctx.ordinal = xr.global_ordinal()
        ctx.world_size = xr.world_size()
        return xm.all_gather(input, dim=dim)

    @staticmethod
    def backward(ctx, grad_output):
        size = grad_output.size(ctx.dim) // ctx.world_size
        return grad_output.narrow(ctx.dim, ctx.ordinal * size, size).clone(), None


def all_gather(value, dim=0):
    """xm.all_gather with autograd."""
    return AllGather.apply(value, dim)


def distributed_mm(w, x, split=1):
    """w @ x where each replica holds a shard w (N x Ko) of the weight and x
    is (Ko * world) x M: every replica gets its N x M block of the product
    over the gathered columns. split cuts M into that many pieces (the
    gathered x is world times bigger)."""
    ordinal, world = xr.global_ordinal(), xr.world_size()
    ko = w.size(1)
    assert x.size(0) // world == ko, "x rows %d != shard %d x world %d" % (x.size(0), ko,
                                                                          world)
    if split != 1:
        assert x.size(1) % split == 0
        pieces = torch.split(x, x.size(1) // split, dim=1)
    else:
        pieces = [x]
    out = []
    for xs in pieces:
        gathered = all_gather(xs, dim=1)                     # WG x (M * world)
        mine = gathered.narrow(0, ordinal * ko, ko)          # Ko x (M * world)
        summed = all_reduce(xm.REDUCE_SUM, w @ mine)         # N x (M * world)
        out.append(summed.narrow(1, ordinal * xs.size(1), xs.size(1)))
    return torch.cat(out, dim=1) if len(out) > 1 else out[0]


class AllReduceSumLayer(torch.autograd.Function):
    """Sum over the replicas, forward and backward."""

    @staticmethod
    def forward(ctx, x):
        return xm.all_reduce(xm.REDUCE_SUM, x)

    @staticmethod
    def backward(ctx, grad_output):
        return xm.all_reduce(xm.REDUCE_SUM, grad_output)


class SyncBatchNorm(torch.nn.Module):
    """Batch normalization whose batch statistics (mean and mean of squares
    over every dimension but 1) are averaged over the replicas."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = torch.nn.Parameter(torch.ones(num_features))
        self.bias = torch.nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, batch):
        assert 2 <= batch.ndim <= 5 and batch.shape[1] == self.num_features
        dims = [d for d in range(batch.ndim) if d != 1]
        if self.training:
            inv = 1.0 / xr.world_size()
            mean = AllReduceSumLayer.apply(batch.mean(dim=dims)) * inv
            sq_mean = AllReduceSumLayer.apply((batch * batch).mean(dim=dims)) * inv
            var = sq_mean - mean.pow(2)
            m = self.momentum
            self.running_mean = (1 - m) * self.running_mean + m * mean
            self.running_var = (1 - m) * self.running_var + m * var
        else:
            mean, var = self.running_mean, self.running_var
        shape = [1, -1] + [1] * (batch.ndim - 2)
        return ((batch - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
                * self.weight.view(shape) + self.bias.view(shape))

    def extra_repr(self):
        return "{}, eps={}".format(self.num_features, self.eps)
