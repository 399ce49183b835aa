"""lazytpu.loader: prefetching device loaders, and data-parallel training
through spawn + MpDeviceLoader + DistributedSampler matching one big batch.
"""
import time

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import lazytpu
import lazytpu as lsp
from lazytpu import loader as ll
from lazytpu import metrics


def _samples(name):
    d = metrics.metric_data(name)
    return d[0] if d else 0


# ------------------------------------------------------ single process ----

def test_mp_device_loader_moves_batches_and_counts_waits():
    dev = lazytpu.device()
    batches = [(torch.full((2, 3), float(i)), torch.tensor([i, i])) for i in range(5)]
    before = _samples("LoaderWaitTime")
    seen = []
    for x, y in ll.MpDeviceLoader(batches, dev):
        assert x.device == dev and y.device == dev
        seen.append((x.cpu(), y.cpu()))
    assert len(seen) == 5
    for i, (x, y) in enumerate(seen):
        assert torch.equal(x, batches[i][0]) and torch.equal(y, batches[i][1])
    assert _samples("LoaderWaitTime") - before == 6    # 5 batches + the end


def _slow_source(n, delay):
    for i in range(n):
        time.sleep(delay)
        yield torch.ones(2) * i


def test_slow_input_pipeline_is_visible():
    dev = lazytpu.device()
    before = metrics.counter_value("LoaderWaits") or 0
    out = [x.cpu().tolist() for x in ll.MpDeviceLoader(_slow_source(3, 0.05), dev)]
    assert out == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert (metrics.counter_value("LoaderWaits") or 0) - before >= 3


def _failing_source():
    yield torch.zeros(1)
    raise KeyError("bad sample 17")


def test_loader_error_reaches_the_training_loop():
    it = iter(ll.MpDeviceLoader(_failing_source(), lazytpu.device()))
    next(it)
    with pytest.raises(KeyError, match="bad sample 17"):
        next(it)


def test_parallel_loader_rejects_unknown_device():
    pl = ll.ParallelLoader([torch.zeros(1)], [lazytpu.device(0)])
    with pytest.raises(ValueError):
        pl.per_device_loader(torch.device("cpu"))
    pl.close()


# ------------------------------------------------------ data parallel ----

B, K, FEAT = 4, 3, 6


def _dataset(n_cores):
    g = torch.Generator().manual_seed(1234)
    n = n_cores * B * K
    x = torch.randn(n, FEAT, generator=g)
    y = torch.randn(n, 2, generator=g)
    return TensorDataset(x, y)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEAT, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 2))


def _ddp_worker(index, n, out_path):
    dev = lazytpu.device()
    ds = _dataset(n)
    sampler = DistributedSampler(ds, num_replicas=lazytpu.world_size(),
                                 rank=lazytpu.get_ordinal(), shuffle=False)
    data = DataLoader(ds, batch_size=B, sampler=sampler)
    model = _model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for x, y in ll.MpDeviceLoader(data, dev):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        lazytpu.optimizer_step(opt)
        steps += 1
    assert steps == K
    # the gradient all-reduce was traced into each step's graph (one
    # collective for all gradients), not run on host copies
    assert lazytpu._C.counter_value("lazytpu::all_reduce") == K
    lazytpu.mark_step()
    if index == 0:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, out_path)


def test_eight_cores_match_one_big_batch(tmp_path):
    n = 8
    out = str(tmp_path / "params.pt")
    lsp.spawn(_ddp_worker, args=(n, out), nprocs=n)
    got = torch.load(out)

    # reference: one process, eager CPU, batch n*B
    ds = _dataset(n)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(ds, batch_size=n * B, shuffle=False):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    for k, v in model.state_dict().items():
        assert torch.allclose(got[k], v, atol=1e-5, rtol=1e-4), (k, got[k], v)


# ------------------------------------------------------- back-pressure ----

def test_loader_bounds_queued_steps():
    """A host that traces faster than its core runs must not queue steps
    without limit (each queued program holds its outputs): with the loader
    ending the steps, device memory in use stays flat."""
    dev = lazytpu.device()

    def in_use():
        return lazytpu._C.memory_info(dev.index or 0)[0]
    w = torch.randn(512, 512).to(dev)
    batches = [torch.randn(256, 512) for _ in range(4)] * 15

    def run(n):
        it = iter(ll.MpDeviceLoader(batches[:n], dev))
        for x in it:
            for _ in range(8):           # enough device work per step
                x = torch.tanh(x @ w)
        lazytpu.wait_device_ops()

    run(4)
    base = in_use()
    peak = [0]
    it = iter(ll.MpDeviceLoader(batches, dev))
    for x in it:
        for _ in range(8):
            x = torch.tanh(x @ w)
        peak[0] = max(peak[0], in_use())
    lazytpu.wait_device_ops()
    step_bytes = 8 * 256 * 512 * 4
    # at most a few steps' outputs in flight (60 without back-pressure)
    assert peak[0] - base < 6 * step_bytes, (peak[0] - base) / step_bytes
