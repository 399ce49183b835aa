"""Lightning Fabric on lazytpu: a CNN on Fashion-MNIST with your own loop.

    .venv/bin/python examples/fabric_fashion_mnist.py                    # 8 cores
    .venv/bin/python examples/fabric_fashion_mnist.py --devices 1
    .venv/bin/python examples/fabric_fashion_mnist.py --accelerator cpu --devices 1
    .venv/bin/lazytpu-run python examples/fabric_fashion_mnist.py --accelerator tpu

With --accelerator lazytpu (the default) the one lazytpu line is
`import lazytpu.lightning` (Fabric's accelerator and strategies "lazytpu");
with --accelerator tpu the script is plain Fabric on Lightning's own XLA
accelerator, strategy and precision plugin, run in lazytpu's torch_xla
compatibility mode (lazytpu-run / python -m lazytpu). Prints the training
steps/s of ordinal 0 after `--skip` warm-up steps (compiles), i.e. without
the start-up of the worker processes.
Data: Debian's dataset-fashion-mnist (read as in examples/fashion_mnist.py).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import lightning as L  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import DATA_DIR, load_split  # noqa: E402


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def wait_device(accelerator):
    """Waits for the queued device programs (so a time covers their work)."""
    if accelerator == "lazytpu":
        import lazytpu
        lazytpu.wait_device_ops()
    elif accelerator == "tpu":
        import torch_xla.core.xla_model as xm
        xm.wait_device_ops()


def train(fabric, args):
    fabric.seed_everything(0)
    xtr, ytr = load_split(args.data, "train")
    per_device = args.batch // fabric.world_size
    loader = DataLoader(TensorDataset(xtr, ytr), batch_size=per_device, shuffle=True,
                        drop_last=True)
    # the module on the device before the optimizer is made: moving a module
    # to an XLA (or lazytpu) device makes new Parameter objects, and Fabric
    # re-points an optimizer made earlier only for its multi-device
    # XLAStrategy (with one TPU core it would step the CPU copies), while that
    # strategy needs the module and optimizer set up together
    model = make_model().to(fabric.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(loader)
    model.train()
    t0, timed = None, 0
    for i, (x, y) in enumerate(loader):
        if i == args.steps:
            break
        if i == args.skip:
            wait_device(args.accelerator)
            t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        fabric.backward(loss)
        optimizer.step()
        timed += i >= args.skip
    wait_device(args.accelerator)
    rate = timed / (time.perf_counter() - t0)
    fabric.print("steps/s: %.1f (%d timed steps on each of %d device(s)), last loss %.3f"
                 % (rate, timed, fabric.world_size, loss.item()))
    return rate


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--accelerator", default="lazytpu")
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--batch", type=int, default=256, help="global batch size")
    p.add_argument("--steps", type=int, default=60, help="training steps")
    p.add_argument("--skip", type=int, default=5, help="warm-up steps not timed")
    p.add_argument("--data", default=DATA_DIR)
    args = p.parse_args()
    if args.accelerator == "lazytpu":
        import lazytpu.lightning  # noqa: F401  (accelerator="lazytpu")
    fabric = L.Fabric(accelerator=args.accelerator, devices=args.devices)
    t0 = time.time()
    fabric.launch(train, args)
    print("launch + train: %.1fs (%s, %d device(s), global batch %d)"
          % (time.time() - t0, args.accelerator, args.devices, args.batch))


if __name__ == "__main__":
    main()
