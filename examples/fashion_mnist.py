"""Train an MLP and a small CNN on Fashion-MNIST with lazytpu.

    .venv/bin/python examples/fashion_mnist.py            # 8 cores, 1 epoch each
    .venv/bin/python examples/fashion_mnist.py --cores 1 --model cnn --epochs 3

Data: the IDX files of Debian's dataset-fashion-mnist package
(/usr/share/datasets/fashion-mnist/*.gz), parsed with gzip + numpy.

With --cores N > 1 the script runs data-parallel on N processes (one simulated
core each) through lazytpu.spawn: every process trains on its shard of each
batch, lazytpu.optimizer_step all-reduces the gradients, and the loader ends
each step. At the end the master prints test accuracy and the metrics report.
"""
import argparse
import gzip
import os
import struct
import sys
import tempfile
import time

# Idle OpenMP threads sleep instead of spinning: on a small machine spinning
# threads steal the CPU from the host thread that traces the next step.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.metrics as met

DATA_DIR = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
           "Sneaker", "Bag", "Boot"]


def read_idx(path):
    """An IDX file (gzip) as a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError("%s: not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    img = os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz")
    lab = os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz")
    if not (os.path.exists(img) and os.path.exists(lab)):
        sys.exit("fashion_mnist: %s not found. Install the Debian package "
                 "'dataset-fashion-mnist' (sudo apt-get install dataset-fashion-mnist) "
                 "or pass --data DIR." % img)
    x = torch.from_numpy(read_idx(img).astype(np.float32) / 255.0)
    x = (x - 0.2860) / 0.3530            # Fashion-MNIST mean/std
    y = torch.from_numpy(read_idx(lab).astype(np.int64))
    return x.unsqueeze(1), y             # [N, 1, 28, 28]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(x.flatten(1)))


def progress(prefix, i, n, loss, t0, width=30):
    done = int(width * i / max(n, 1))
    rate = i / max(time.time() - t0, 1e-9)
    sys.stdout.write("\r%s [%s%s] %4d/%d  loss %.4f  %.1f steps/s"
                     % (prefix, "#" * done, "." * (width - done), i, n, loss, rate))
    if i == n:
        sys.stdout.write("\n")
    sys.stdout.flush()


def batches(x, y, batch, shuffle, seed):
    """A list of (x, y) batches of this process's shard."""
    n = x.shape[0]
    idx = torch.randperm(n, generator=torch.Generator().manual_seed(seed)) if shuffle \
        else torch.arange(n)
    ws, rank = lazytpu.world_size(), lazytpu.get_ordinal()
    per = batch // ws
    out = []
    for s in range(0, n - batch + 1, batch):
        sel = idx[s + rank * per: s + (rank + 1) * per]
        out.append((x[sel], y[sel]))
    return out


def evaluate(model, x, y, dev, batch=500):
    model.eval()
    correct = 0
    with torch.no_grad():
        for s in range(0, x.shape[0], batch):
            logits = model(x[s:s + batch].to(dev))
            correct += (logits.argmax(1) == y[s:s + batch].to(dev)).sum()
    model.train()
    return correct.item() / x.shape[0]          # one value read at the end


def train_model(name, args, data, dev):
    xtr, ytr, xte, yte = data
    torch.manual_seed(0)
    model = (MLP() if name == "mlp" else CNN()).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    master = lazytpu.is_master_ordinal(local=False)
    loader_mod = getattr(lazytpu, "loader", None)
    for epoch in range(args.epochs):
        bs = batches(xtr, ytr, args.batch, True, epoch)
        if args.max_steps:
            bs = bs[:args.max_steps]
        it = loader_mod.MpDeviceLoader(bs, dev) if loader_mod else \
            ((x.to(dev), y.to(dev)) for x, y in bs)
        t0 = time.time()
        for i, (x, y) in enumerate(it, 1):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            lazytpu.optimizer_step(opt)
            if loader_mod is None:
                lazytpu.mark_step()
            if master and (i % 20 == 0 or i == len(bs)):
                # read the loss after the step has run: no extra sync/graph
                lazytpu.add_step_closure(
                    lambda l, i=i: progress("%s epoch %d" % (name, epoch + 1), i, len(bs),
                                            l.item(), t0), (loss,))
        if master:
            dt = time.time() - t0
            print("%s epoch %d: %.1fs, %.0f images/s (all cores)"
                  % (name, epoch + 1, dt, len(bs) * args.batch / dt))
    if master:
        acc = evaluate(model, xte, yte, dev)
        print("%s test accuracy: %.2f%%" % (name, 100 * acc))
    return model


def run(index, args):
    if args.bf16:
        os.environ.setdefault("LAZYTPU_USE_BF16", "1")
    dev = lazytpu.device()
    xtr, ytr = load_split(args.data, "train")
    xte, yte = load_split(args.data, "test")
    master = lazytpu.is_master_ordinal(local=False)
    if master:
        print("Fashion-MNIST: %d train / %d test images, %d core(s), global batch %d"
              % (xtr.shape[0], xte.shape[0], lazytpu.world_size(), args.batch))
    models = ["mlp", "cnn"] if args.model == "both" else [args.model]
    for name in models:
        train_model(name, args, (xtr, ytr, xte, yte), dev)
    lazytpu.wait_device_ops()
    if lazytpu.world_size() == 1:
        print(met.metrics_report())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--cores", type=int, default=8,
                   help="processes / simulated cores (data parallel; 8 = a TPU v3-8 layout)")
    p.add_argument("--batch", type=int, default=256, help="global batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-steps", type=int, default=0, help="limit steps per epoch")
    p.add_argument("--data", default=DATA_DIR)
    p.add_argument("--bf16", action="store_true", help="store f32 as bf16 on the device")
    args = p.parse_args()
    if args.batch % args.cores:
        p.error("--batch must be a multiple of --cores")
    if args.cores > 1:
        # every worker writes its report; the launcher merges them: totals,
        # then one row per core for what differs (compiles, fallbacks, waits)
        with tempfile.TemporaryDirectory() as tmp:
            merged = os.path.join(tmp, "metrics.txt")
            lazytpu.spawn(run, args=(args,), nprocs=args.cores, metrics_file=merged)
            with open(merged) as f:
                report = f.read()
        print("Merged metrics report of %d cores:" % args.cores)
        print(report.split("== ordinal 0 ==")[0].rstrip())
    else:
        run(0, args)


if __name__ == "__main__":
    main()
