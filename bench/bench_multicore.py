"""Data-parallel training throughput: N simulated cores (N processes through
lazytpu.spawn) vs 1 core at the same global batch, as images/s and a ratio.

    .venv/bin/python bench/bench_multicore.py [--model mlp|cnn|both]
        [--cores 8] [--batch 256] [--steps 60] [--warmup 10]

Models: the MLP (784-256-10) and CNN of examples/fashion_mnist.py, SGD with
momentum, cross entropy, synthetic Fashion-MNIST-shaped data (28x28, 10
classes), fed through lazytpu.loader.MpDeviceLoader like the example. With
N cores each process trains on batch/N images per step and
lazytpu.optimizer_step all-reduces the gradients (mean) inside the step's
graph. The timed window starts after `warmup` steps (compiles) once every
core finished them, and ends when the last core finished `steps` more.
Process start-up and compiles are reported separately (startup = time from
spawn() to every core ready to train).

Target (issue "Eight simulated cores"): 8 cores >= 0.5x the images/s of 1
core at the same global batch on a 2-core machine (the total work is the
same; 8 processes share 2 physical cores).
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lazytpu  # noqa: E402
import lazytpu as lsp  # noqa: E402  (spawn, rendezvous, mesh_reduce)
from lazytpu.loader import MpDeviceLoader  # noqa: E402

# the models of the example, not a copy of them
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "examples"))
from fashion_mnist import CNN, MLP  # noqa: E402


def _batches(n_steps, per_core, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    out = []
    for _ in range(n_steps):
        out.append((torch.randn(per_core, 1, 28, 28, generator=g),
                    torch.randint(0, 10, (per_core,), generator=g)))
    return out


def _barrier(tag):
    if lazytpu.world_size() > 1:
        lsp.rendezvous(tag)


def worker(index, model_name, batch, steps, warmup, out_path, t_spawn):
    ws = lazytpu.world_size()
    dev = lazytpu.device()
    torch.manual_seed(0)
    model = (MLP() if model_name == "mlp" else CNN()).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = _batches(warmup + steps, batch // ws, index)
    it = iter(MpDeviceLoader(data, dev))
    _barrier("ready")
    t_ready = time.time()

    def step():
        x, y = next(it)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        lazytpu.optimizer_step(opt)

    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    lazytpu.mark_step()
    lazytpu.wait_device_ops()
    t_warm = time.perf_counter() - t0
    _barrier("warm")
    t0 = time.perf_counter()
    c0 = time.process_time()
    for _ in range(steps):
        step()
    lazytpu.mark_step()
    lazytpu.wait_device_ops()
    cpu = time.process_time() - c0      # all threads of this process
    _barrier("done")       # the window ends when the slowest core is done
    dt = time.perf_counter() - t0
    if ws > 1:
        cpu = lsp.mesh_reduce("cpu", cpu, sum)
    if index == 0:
        with open(out_path, "w") as f:
            json.dump({"seconds": dt, "cpu_s": cpu, "warmup_s": t_warm,
                       "startup_s": t_ready - t_spawn}, f)


def measure(model, cores, batch, steps, warmup):
    fd, path = tempfile.mkstemp(prefix="lazytpu-bench-", suffix=".json")
    os.close(fd)
    try:
        t = time.time()
        args = (model, batch, steps, warmup, path, t)
        if cores == 1:
            worker(0, *args)
        else:
            lsp.spawn(worker, args=args, nprocs=cores, timeout=600)
        total = time.time() - t
        with open(path) as f:
            r = json.load(f)
    finally:
        os.unlink(path)
    r["images_per_s"] = steps * batch / r["seconds"]
    r["total_s"] = total
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
    p.add_argument("--cores", type=int, default=8)
    p.add_argument("--batch", type=int, default=256, help="global batch")
    p.add_argument("--steps", type=int, default=60, help="timed steps")
    p.add_argument("--warmup", type=int, default=10)
    args = p.parse_args()
    if args.batch % args.cores:
        p.error("--batch must be a multiple of --cores")
    models = ["mlp", "cnn"] if args.model == "both" else [args.model]
    for m in models:
        one = measure(m, 1, args.batch, args.steps, args.warmup)
        many = measure(m, args.cores, args.batch, args.steps, args.warmup)
        print("%s global batch %d, %d steps: 1 core %.0f images/s | %d cores "
              "%.0f images/s (start-up %.1fs, warm-up %.1fs) | ratio %.2fx"
              % (m, args.batch, args.steps, one["images_per_s"], args.cores,
                 many["images_per_s"], many["startup_s"], many["warmup_s"],
                 many["images_per_s"] / one["images_per_s"]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
