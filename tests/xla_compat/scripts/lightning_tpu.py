"""A plain Lightning script for TPUs: Trainer(accelerator="tpu", devices=...).
It imports nothing of lazytpu; the tests run it unchanged in lazytpu's
torch_xla compatibility mode (`lazytpu-run python lightning_tpu.py ...` or
`python -m lazytpu lightning_tpu.py ...`), where Lightning picks its own
XLAAccelerator, XLAStrategy / SingleDeviceXLAStrategy and XLAPrecision.

    lightning_tpu.py --devices 8|1|[3] [--precision bf16-true] [--ckpt-dir D] OUT

writes OUT (torch.save, CPU tensors only): the trained weights, the
callback metrics, the classes Lightning chose, and, per ordinal, the device
type the batches arrived on and the ops that ran on torch_xla's CPU fallback
(met.executed_fallback_ops()).

tests/python/test_lightning_tpu.py imports Net and dataset() from here for
its CPU reference run.
"""
import argparse
import ast
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

N = 256            # samples: 8 global batches of 32 per epoch
GLOBAL_BATCH = 32


class Net(L.LightningModule):
    """A small MLP classifier. In training every ordinal records the device
    type of its batches and, at the end, torch_xla's executed fallback ops
    in report_dir (one file per ordinal)."""

    def __init__(self, lr=0.1, report_dir=None):
        super().__init__()
        torch.manual_seed(0)
        self.l1 = nn.Linear(20, 32)
        self.l2 = nn.Linear(32, 4)
        self.lr = lr
        self.report_dir = report_dir
        self.batch_device = None

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))

    def training_step(self, batch, i):
        x, y = batch
        self.batch_device = x.device.type
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y), sync_dist=True)

    def on_train_end(self):
        if self.report_dir and self.device.type == "xla":
            import torch_xla.debug.metrics as met
            torch.save({"fallback_ops": list(met.executed_fallback_ops()),
                        "batch_device": self.batch_device,
                        "param_dtype": str(next(self.parameters()).dtype)},
                       os.path.join(self.report_dir, "rank%d.pt" % self.global_rank))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def dataset():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, 20, generator=g)
    y = torch.randint(0, 4, (N,), generator=g)
    return TensorDataset(x, y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--devices", default="8")
    p.add_argument("--precision", default="32-true")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("out")
    a = p.parse_args()
    devices = ast.literal_eval(a.devices)
    n = devices if isinstance(devices, int) else 1
    report_dir = os.path.dirname(os.path.abspath(a.out))
    model = Net(report_dir=report_dir)
    callbacks = []
    if a.ckpt_dir:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(
            dirpath=a.ckpt_dir, monitor="val_loss", save_last=True))
    trainer = L.Trainer(accelerator="tpu", devices=devices, precision=a.precision,
                        max_epochs=a.epochs, logger=False,
                        enable_checkpointing=bool(a.ckpt_dir), callbacks=callbacks,
                        enable_progress_bar=False, enable_model_summary=False)
    # per-core batches: Lightning shards the loader over the cores
    t0 = time.time()
    trainer.fit(model, DataLoader(dataset(), batch_size=GLOBAL_BATCH // n),
                DataLoader(dataset(), batch_size=GLOBAL_BATCH // n))
    seconds = time.time() - t0

    def qualname(o):
        return type(o).__module__ + "." + type(o).__name__

    torch.save({
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "accelerator": qualname(trainer.accelerator),
        "strategy": qualname(trainer.strategy),
        "precision": qualname(trainer.precision_plugin),
        "num_devices": trainer.num_devices,
        "root_device": str(trainer.strategy.root_device) if n == 1 else None,
        "best_model_path": callbacks[0].best_model_path if callbacks else None,
        "last_model_path": callbacks[0].last_model_path if callbacks else None,
        "fit_seconds": seconds,
    }, a.out)
    print("DONE", qualname(trainer.strategy), "%.1fs" % seconds)


if __name__ == "__main__":
    main()
