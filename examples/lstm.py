"""An Embedding + LSTM sequence classifier on synthetic data with lazytpu.

    .venv/bin/python examples/lstm.py [--steps 100] [--seq 12]

Task: a sequence of tokens is labelled with the most frequent token class
(tokens are grouped into --classes classes), which an LSTM learns in a few
dozen steps. nn.LSTM decomposes into matmuls, sigmoid/tanh, split/stack and
select/slice ops, which all run natively (their backward too).
"""
import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep

import torch  # noqa: E402
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met


class Classifier(nn.Module):
    def __init__(self, vocab, emb, hidden, classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.lstm(self.emb(x))
        return self.fc(out[:, -1])


def batch(n, seq, vocab, classes, g):
    x = torch.randint(0, vocab, (n, seq), generator=g)
    y = torch.stack([torch.bincount(r % classes, minlength=classes).argmax() for r in x])
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=12)
    p.add_argument("--vocab", type=int, default=40)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    args = p.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    dev = lazytpu.device()
    model = Classifier(args.vocab, 32, args.hidden, args.classes).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    t0 = time.time()
    for step in range(1, args.steps + 1):
        x, y = batch(args.batch, args.seq, args.vocab, args.classes, g)
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        lazytpu.optimizer_step(opt)
        acc = (logits.argmax(1) == y).float().mean()
        lazytpu.mark_step()
        if step % 20 == 0 or step == args.steps:
            print("step %3d  loss %.4f  acc %.2f  (%.1f steps/s)"
                  % (step, loss.item(), acc.item(), step / (time.time() - t0)), flush=True)
    print(met.short_metrics_report())
    fallbacks = met.executed_fallback_ops()
    print("CPU fallbacks: %s" % (", ".join(fallbacks) if fallbacks else "none"))


if __name__ == "__main__":
    main()
