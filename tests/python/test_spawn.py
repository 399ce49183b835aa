"""lazytpu.spawn: workers through lazytpu-run, collectives, failures.

Worker functions are module-level (spawn pickles them by reference). Each
spawn starts Python + torch per worker, so the tests use few processes.
"""
import os
import signal
import time

import pytest
import torch

import lazytpu
import lazytpu.spawn as lsp


# ------------------------------------------------------------ workers ----

def _host_collectives(index, n):
    assert lazytpu.get_ordinal() == index and lazytpu.world_size() == n
    assert lsp.rendezvous("hello", b"p%d" % index) == [b"p%d" % k for k in range(n)]
    assert lsp.mesh_reduce("sum", index + 1, sum) == n * (n + 1) // 2
    assert lsp.mesh_reduce("tensors", torch.full((2,), float(index)),
                           lambda xs: torch.stack(xs).sum(0)).tolist() == [n * (n - 1) / 2] * 2

    x = torch.arange(5, dtype=torch.float32) + index
    want = torch.arange(5, dtype=torch.float32) * n + n * (n - 1) / 2
    assert torch.allclose(lsp.all_reduce("sum", x, scale=0.5), want * 0.5)
    assert lsp.all_reduce("max", torch.tensor([index, -index])).tolist() == [n - 1, 0]
    a, b = torch.ones(3) * index, torch.ones(2, 2, dtype=torch.float32)
    lsp.all_reduce(lsp.REDUCE_SUM, [a, b], scale=1.0 / n)      # in place
    assert torch.allclose(a, torch.full((3,), (n - 1) / 2)) and torch.allclose(b, torch.ones(2, 2))

    g = lsp.all_gather(torch.tensor([[index, 10 * index]]), dim=1)
    assert g.tolist() == [[v for k in range(n) for v in (k, 10 * k)]]
    rs = lsp.reduce_scatter("sum", torch.arange(2 * n, dtype=torch.float64), 1.0, 0, n)
    assert rs.tolist() == [2.0 * index * n, (2.0 * index + 1) * n]
    assert lsp.broadcast(torch.tensor([index, 7]), root=n - 1).tolist() == [n - 1, 7]


def _device_collectives(index, n):
    dev = lazytpu.device()
    x = (torch.arange(6, dtype=torch.float32).reshape(2, 3) + index).to(dev)
    y = lsp.all_reduce("sum", x, scale=1.0 / n)
    assert y.device.type == dev.type
    want = torch.arange(6, dtype=torch.float32).reshape(2, 3) + (n - 1) / 2
    assert torch.allclose(y.cpu(), want)
    g = lsp.all_gather(torch.tensor([index]).to(dev))
    assert g.cpu().tolist() == list(range(n))
    p = torch.nn.Parameter((torch.ones(3) * index).to(dev))
    m = torch.nn.Module()
    m.p = p
    lsp.broadcast_master_param(m)
    assert m.p.cpu().tolist() == [0.0, 0.0, 0.0]


def _raise_on_1(index):
    if index == 1:
        time.sleep(0.2)
        raise ValueError("boom from ordinal 1")
    time.sleep(60)


def _sigkill_on_2(index):
    if index == 2:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def _dies_before_rendezvous(index):
    if index == 1:
        os._exit(3)
    lsp.rendezvous("never-complete")   # must not hang
    time.sleep(60)


def _record(index, path):
    with open(path, "a") as f:
        f.write("%d\n" % index)


# -------------------------------------------------------------- tests ----

def test_host_collectives_four_workers():
    lsp.spawn(_host_collectives, args=(4,), nprocs=4)


def test_device_collectives_two_workers():
    lsp.spawn(_device_collectives, args=(2,), nprocs=2)


def test_exception_names_ordinal_and_cause():
    t0 = time.time()
    with pytest.raises(lsp.WorkerError) as e:
        lsp.spawn(_raise_on_1, nprocs=3)
    assert e.value.ordinal == 1
    assert e.value.exit_code == 1
    assert "worker 1 exited with code 1: ValueError: boom from ordinal 1" in str(e.value)
    assert time.time() - t0 < 50       # the sleeping peers were stopped


def test_killed_worker_names_signal():
    with pytest.raises(lsp.WorkerError) as e:
        lsp.spawn(_sigkill_on_2, nprocs=3)
    assert e.value.ordinal == 2
    assert "worker 2 died: killed by signal 9 (SIGKILL)" in str(e.value)


def test_dead_peer_does_not_hang_the_others():
    t0 = time.time()
    with pytest.raises(lsp.WorkerError) as e:
        lsp.spawn(_dies_before_rendezvous, nprocs=2)
    assert e.value.ordinal == 1 and e.value.exit_code == 3
    assert time.time() - t0 < 50


def test_nprocs_1_runs_in_process(tmp_path):
    path = str(tmp_path / "ran")
    lsp.spawn(_record, args=(path,), nprocs=1)
    assert open(path).read() == "0\n"


def test_join_false_returns_context(tmp_path):
    path = str(tmp_path / "ran")
    ctx = lsp.spawn(_record, args=(path,), nprocs=2, join=False)
    assert ctx.join() is True
    assert sorted(open(path).read().split()) == ["0", "1"]


def test_world_of_one_collectives_outside_spawn():
    x = torch.tensor([1.0, 2.0])
    assert lsp.all_reduce("sum", x, scale=3.0).tolist() == [3.0, 6.0]
    assert lsp.rendezvous("solo", b"x") == [b"x"]
    assert lsp.mesh_reduce("solo", 5, sum) == 5
    with pytest.raises(ValueError):
        lsp.all_reduce("avg", x)
