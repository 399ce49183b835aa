"""Train-step time: lazytpu vs eager CPU vs torch.compile (inductor, CPU), in
one run, printed as ratios.

    .venv/bin/python bench/train_step.py [--steps 50] [--only mlp|cnn]

MLP: 784-256-10, batch 64, SGD. CNN: 2 conv + batchnorm + maxpool + linear on
[32, 1, 28, 28], SGD with momentum. Each backend runs warm-up steps first
(compiles), then the timed steps; a step ends with the backend's step
boundary (lazytpu.mark_step) and the timing waits for the device
(wait_device_ops). "inductor" is what a CPU user would pick instead:
torch.compile(model) (default backend), optimizer step eager.
"lazytpu-sync" waits for every step's result (mark_step + wait_device_ops
per step), the way eager and inductor run. Every backend runs at its own
defaults (no OpenMP variable is set here).
Targets (DESIGN.md): lazytpu MLP <= 0.85x eager, CNN <= 0.9x eager.
"""
import argparse
import os
import sys
import time

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lazytpu  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import CNN, mlp  # noqa: E402  (the same models as make bench)


MODELS = {
    "mlp": (mlp, lambda: torch.randn(64, 784), 64,
            lambda p: torch.optim.SGD(p, lr=0.01)),
    "cnn": (CNN, lambda: torch.randn(32, 1, 28, 28), 32,
            lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
}


def bench(name, backend, steps, warmup):
    make, make_x, batch, make_opt = MODELS[name]
    torch.manual_seed(0)
    model = make()
    x_cpu, y_cpu = make_x(), torch.randint(0, 10, (batch,))
    if backend == "eager":
        dev, sync, wait = torch.device("cpu"), (lambda: None), (lambda: None)
    elif backend == "lazytpu":
        dev, sync, wait = lazytpu.device(), lazytpu.mark_step, lazytpu.wait_device_ops
    elif backend == "lazytpu-sync":
        dev, wait = lazytpu.device(), lazytpu.wait_device_ops

        def sync():
            lazytpu.mark_step()
            lazytpu.wait_device_ops()
    else:  # inductor
        dev, sync, wait = torch.device("cpu"), (lambda: None), (lambda: None)
    model = model.to(dev)
    opt = make_opt(model.parameters())
    if backend == "inductor":
        torch._dynamo.reset()
        model = torch.compile(model)
    x, y = x_cpu.to(dev), y_cpu.to(dev)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if backend.startswith("lazytpu"):
            lazytpu.optimizer_step(opt)
        else:
            opt.step()
        sync()
        return loss

    for _ in range(warmup + (3 if backend == "inductor" else 0)):
        step()
    wait()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    wait()
    dt = (time.perf_counter() - t0) / steps
    float(loss.item())  # the run really happened
    return dt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--only", choices=list(MODELS))
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile")
    args = p.parse_args()

    backends = ["eager", "lazytpu", "lazytpu-sync"] + ([] if args.no_inductor else ["inductor"])

    torch.set_num_threads(torch.get_num_threads())
    print("%-5s %-11s %12s %10s" % ("model", "backend", "step time", "vs eager"))
    for name in ([args.only] if args.only else list(MODELS)):
        times = {}
        for b in backends:
            times[b] = bench(name, b, args.steps, args.warmup)
            print("%-5s %-11s %9.3f ms %9.2fx" % (name, b, times[b] * 1e3,
                                                  times[b] / times["eager"]))
        if "inductor" in times:
            print("%-5s lazytpu / inductor = %.2fx" % (name, times["lazytpu"] / times["inductor"]))
        target = 0.85 if name == "mlp" else 0.9
        print("%-5s lazytpu / eager = %.2fx (target <= %.2fx)"
              % (name, times["lazytpu"] / times["eager"], target))


if __name__ == "__main__":
    main()
