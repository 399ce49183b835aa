"""Lightning on lazytpu: a CNN on Fashion-MNIST with Trainer(accelerator="lazytpu").

    .venv/bin/python examples/lightning_fashion_mnist.py                 # 8 cores
    .venv/bin/python examples/lightning_fashion_mnist.py --devices 1
    .venv/bin/python examples/lightning_fashion_mnist.py --accelerator cpu --devices 1

The only lazytpu line is `import lazytpu.lightning` (it registers the
accelerator and strategies); the rest is plain Lightning. With --devices 8
the Trainer runs one worker process per simulated core (lazytpu-run), each on
1/8 of every global batch, gradients averaged inside the step's graph.
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

import lazytpu.lightning  # noqa: E402,F401  (accelerator="lazytpu")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import DATA_DIR, load_split  # noqa: E402


class FashionCNN(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 7 * 7, 10)
        self.lr = lr

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))

    def training_step(self, batch, i):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        # epoch-level value: accumulated on the device, no host read per step
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def test_step(self, batch, i):
        x, y = batch
        acc = (self(x).argmax(1) == y).float().mean()
        self.log("test_acc", acc, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


class StepRate(L.Callback):
    """Training steps per second after the first `skip` steps (compiles)."""

    def __init__(self, skip=5):
        self.skip = skip
        self.t0 = None
        self.steps = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, i):
        self.steps += 1
        if self.steps == self.skip:
            self.t0 = time.perf_counter()

    def on_train_end(self, trainer, module):
        if self.t0 is not None and trainer.is_global_zero:
            import lazytpu
            lazytpu.wait_device_ops()
            n = self.steps - self.skip
            rate = n / (time.perf_counter() - self.t0)
            print("steps/s: %.1f (%d timed steps on each of %d device(s))"
                  % (rate, n, trainer.world_size))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--accelerator", default="lazytpu")
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--precision", default="32-true")
    p.add_argument("--batch", type=int, default=256, help="global batch size")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=60, help="train batches per epoch (0: all)")
    p.add_argument("--data", default=DATA_DIR)
    args = p.parse_args()

    L.seed_everything(0)
    xtr, ytr = load_split(args.data, "train")
    xte, yte = load_split(args.data, "test")
    per_device = args.batch // args.devices
    train = DataLoader(TensorDataset(xtr, ytr), batch_size=per_device, shuffle=True,
                       drop_last=True)
    test = DataLoader(TensorDataset(xte, yte), batch_size=500)
    trainer = L.Trainer(accelerator=args.accelerator, devices=args.devices,
                        precision=args.precision, max_epochs=args.epochs,
                        limit_train_batches=args.max_steps or 1.0, logger=False,
                        enable_checkpointing=False, enable_model_summary=False,
                        enable_progress_bar=False, callbacks=[StepRate()])
    model = FashionCNN()
    t0 = time.time()
    trainer.fit(model, train)
    print("fit: %.1fs (%s, %d device(s), global batch %d, %s)"
          % (time.time() - t0, args.accelerator, args.devices, args.batch, args.precision))
    res = trainer.test(model, test, verbose=False)
    print("test accuracy: %.2f%%" % (100 * res[0]["test_acc"]))
    if args.accelerator == "lazytpu" and args.devices == 1:
        import lazytpu.metrics as met
        print(met.short_metrics_report())


if __name__ == "__main__":
    main()
