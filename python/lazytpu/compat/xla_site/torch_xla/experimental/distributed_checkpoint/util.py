"""prime_optimizer: the optimizer's state made (one step with zero gradients)
so that a checkpoint can be loaded into it in place, as in torch_xla."""
import torch


def prime_optimizer(optimizer):
    """Runs optimizer.step() with a zero gradient for every parameter that
    requires one (keeping the parameter's sharding), ending the step before
    and after. It changes the parameters where the update of a zero gradient
    is not zero (weight decay): call it just before restoring a checkpoint.
    Returns the optimizer."""
    import lazytpu
    lazytpu.mark_step()
    lazytpu.wait_device_ops()
    for group in optimizer.param_groups:
        for p in group["params"]:
            if isinstance(p, torch.Tensor) and p.requires_grad:
                p.grad = torch.zeros_like(p, requires_grad=False)
                enc = list(torch.ops.lazytpu.spmd_get_sharding(p))
                if enc:      # the gradient sharded as its parameter
                    torch.ops.lazytpu.spmd_set_sharding(p.grad, enc, "")
    optimizer.step()
    lazytpu.mark_step()
    lazytpu.wait_device_ops()
    return optimizer
