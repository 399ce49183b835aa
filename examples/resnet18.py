"""torchvision's ResNet-18 for a few training steps on random data with lazytpu.

    PYTHONPATH=python python3 examples/resnet18.py [--steps 5] [--batch 8] [--size 64]

Shows a realistic convolutional network (conv, batchnorm with running stats,
residual adds, max/adaptive-avg pooling) running natively on the device: the
report at the end should show one UncachedCompile for the first step, cache
hits afterwards, and no aten:: fallback counters.
"""
import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep

import torch  # noqa: E402
import torch.nn.functional as F
import torchvision

import lazytpu
import lazytpu.metrics as met


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=64, help="image height/width")
    p.add_argument("--classes", type=int, default=10)
    args = p.parse_args()

    torch.manual_seed(0)
    dev = lazytpu.device()
    model = torchvision.models.resnet18(num_classes=args.classes).to(dev)
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
