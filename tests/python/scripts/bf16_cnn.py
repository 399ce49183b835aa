"""A small CNN + MLP head trained on synthetic data: plain PyTorch on the
lazytpu device (the bf16 lab runs it unchanged).

    python tests/python/scripts/bf16_cnn.py [--steps N] [--fragile]

--fragile adds a module that subtracts the mean of large-offset activations
(x + 300 - mean(x + 300)): exact in f32, it loses most of its bits in bf16."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu


class Centered(nn.Module):
    """x + c - mean(x + c) over the features: cancels catastrophically when
    x + c is rounded to bf16 (c = 300: a bf16 step of 2 there)."""

    def forward(self, x):
        y = x + 300.0
        return y - y.mean(dim=1, keepdim=True)


class Net(nn.Module):
    def __init__(self, fragile):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, stride=2)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.center = Centered() if fragile else nn.Identity()
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.fc1(x.flatten(1))
        return self.fc2(F.relu(self.center(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--fragile", action="store_true")
    a = p.parse_args()
    dev = lazytpu.device()
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(a.steps, 32, 1, 8, 8, generator=g)
    ys = torch.randint(0, 10, (a.steps, 32), generator=g)
    model = Net(a.fragile).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for i in range(a.steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(xs[i].to(dev)), ys[i].to(dev))
        loss.backward()
        opt.step()
        lazytpu.mark_step()
    print("final loss %.4f" % loss.item())


if __name__ == "__main__":
    main()
