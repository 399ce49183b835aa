"""Lightning on 8 cores from a script that parses sys.argv at module level
(argparse with a required positional and a required option): every worker
re-executes this module with the parent's arguments.

    lightning_argv.py {lazytpu|tpu} OUT --steps N

accelerator "lazytpu" (lazytpu.lightning's strategy, `python script.py`) or
"tpu" (Lightning's own XLAStrategy; run it under `python -m lazytpu`). Every
ordinal writes OUT.rank<k> (torch.save: its sys.argv, working directory and
the device type its batches arrived on); the parent writes OUT with the
trained weights and prints "DONE".
"""
import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("accelerator", choices=["lazytpu", "tpu"])
parser.add_argument("out")
parser.add_argument("--steps", type=int, required=True)
ARGS = parser.parse_args()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import lightning as L  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

if ARGS.accelerator == "lazytpu":
    import lazytpu.lightning  # noqa: E402,F401  (registers the accelerator)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1 = nn.Linear(8, 4)
        self.seen = None

    def training_step(self, batch, i):
        x, y = batch
        self.seen = x.device.type
        return F.cross_entropy(self.l1(x), y)

    def on_train_end(self):
        torch.save({"argv": list(sys.argv), "cwd": os.getcwd(), "device": self.seen,
                    "args": vars(ARGS)}, "%s.rank%d" % (ARGS.out, self.global_rank))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    g = torch.Generator().manual_seed(1)
    ds = TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 4, (64,), generator=g))
    model = Net()
    trainer = L.Trainer(accelerator=ARGS.accelerator, devices=8, max_steps=ARGS.steps,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, DataLoader(ds, batch_size=2))
    torch.save({"state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "strategy": type(trainer.strategy).__name__}, ARGS.out)
    print("DONE", type(trainer.strategy).__name__)


if __name__ == "__main__":
    main()
