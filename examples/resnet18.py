"""ResNet-18 for a few training steps on random data with lazytpu.

    .venv/bin/python examples/resnet18.py [--steps 5] [--batch 8] [--size 64]

The network is written here (torchvision cannot be installed beside torch
2.13): the standard ResNet-18 of He et al., BasicBlocks [2, 2, 2, 2], the
same layers and initialisation as torchvision's resnet18.

Shows a realistic convolutional network (conv, batchnorm with running stats,
residual adds, max/adaptive-avg pooling) running natively on the device: the
report at the end should show one UncachedCompile for the first step, cache
hits afterwards, and no aten:: fallback counters.
"""
import argparse
import os
import time

if __name__ == "__main__":
    # idle OpenMP threads sleep; only when run as a script: bench/models.py
    # imports this module and its peers must run at their own defaults
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lazytpu
import lazytpu.metrics as met


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + idt)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000, in_channels=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes=1000):
    return ResNet18(num_classes)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=64, help="image height/width")
    p.add_argument("--classes", type=int, default=10)
    args = p.parse_args()

    torch.manual_seed(0)
    dev = lazytpu.device()
    model = resnet18(num_classes=args.classes).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, args.classes, (args.batch,))
    for step in range(1, args.steps + 1):
        t0 = time.time()
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
        loss.backward()
        lazytpu.optimizer_step(opt)
        lazytpu.mark_step()
        print("step %d  loss %.4f  %.2fs" % (step, loss.item(), time.time() - t0), flush=True)
    print(met.short_metrics_report())
    fallbacks = met.executed_fallback_ops()
    print("CPU fallbacks: %s" % (", ".join(fallbacks) if fallbacks else "none"))


if __name__ == "__main__":
    main()
