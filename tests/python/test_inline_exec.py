"""Inline execution (LAZYTPU_INLINE_EXEC, lazy/device.c): a caller waiting
for a program its core has not started runs it on its own thread (counter
InlineExecute). Values, errors and their reporting must be those of the
core's worker running it; programs with collectives stay on the worker.
"""
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazytpu
import lazytpu.collectives as lcc
import lazytpu.metrics as met


def _inline():
    return met.counter_value("InlineExecute") or 0


def _drain():
    for _ in range(4 * lazytpu.device_count()):
        try:
            lazytpu.mark_step(wait=True)
            lazytpu.wait_device_ops()
            return
        except (IndexError, RuntimeError):
            pass
    raise AssertionError("errors keep coming")


@pytest.fixture(autouse=True)
def clean_errors():
    _drain()
    yield
    _drain()


def _train(dev, steps, end):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 4)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(8, 20).to(dev)
    y = torch.randint(0, 4, (8,)).to(dev)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        if dev.type == "cpu":
            opt.step()
            losses.append(loss.item())
            continue
        lazytpu.optimizer_step(opt)
        end(loss, losses)
    return losses, [p.detach().cpu() for p in m.parameters()]


@pytest.mark.parametrize("end", ["wait_device_ops", "mark_step_wait", "item"])
def test_synchronous_steps_run_inline_and_match_eager(dev, end):
    def finish(loss, losses):
        if end == "wait_device_ops":
            lazytpu.mark_step()
            lazytpu.wait_device_ops()
            losses.append(loss.item())
        elif end == "mark_step_wait":
            lazytpu.mark_step(wait=True)
            losses.append(loss.item())
        else:   # a value read syncs and waits
            losses.append(loss.item())
            lazytpu.mark_step()

    ref_losses, ref_params = _train(torch.device("cpu"), 6, None)
    losses, params = _train(dev, 6, finish)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses),
                               rtol=1e-5, atol=1e-5)
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-5)
    # (how many ran inline depends on the cores this process used before:
    # with several in use only a worker that has not started a job leaves
    # it to the waiter; test_switch counts them in a fresh process)


def test_compiled_model_with_waits_matches_eager(dev):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 3))
    m = nn.Sequential(nn.Linear(12, 8), nn.Tanh(), nn.Linear(8, 3)).to(dev)
    m.load_state_dict(ref.state_dict())
    cm = torch.compile(m, backend="lazytpu")
    x = torch.randn(5, 12)
    xd = x.to(dev)
    for _ in range(4):
        out = cm(xd)
        lazytpu.wait_device_ops()
        torch.testing.assert_close(out.cpu(), ref(x), rtol=1e-5, atol=1e-5)
        lazytpu.mark_step(wait=True)


def test_error_of_an_inline_program_is_reported_once_and_poisons(dev):
    x = torch.arange(12.0).reshape(4, 3).to(dev)
    y = torch.index_select(x, 0, torch.tensor([1, 7]).to(dev))
    # (whether it ran inline depends on how many cores this process has
    # used: test_switch checks that in a fresh one-core process)
    with pytest.raises(IndexError) as ei:
        lazytpu.mark_step(wait=True)
    msg = str(ei.value)
    assert msg.startswith("index_select: index 7 is out of range for dimension 0 of size 4"), msg
    assert "core 0" in msg, msg
    # the values it was to write are poisoned: every read raises the same
    for _ in range(2):
        with pytest.raises(IndexError) as e2:
            y.cpu()
        assert str(e2.value).startswith("index_select: index 7 is out of range"), str(e2.value)
    # reported once: the next step boundary and wait are clean, the core works
    lazytpu.mark_step(wait=True)
    lazytpu.wait_device_ops()
    assert ((x * 2).sum()).item() == 132.0


def test_error_read_before_the_step_is_not_reported_again(dev):
    x = torch.arange(6.0).to(dev)
    y = torch.index_select(x, 0, torch.tensor([9]).to(dev))
    with pytest.raises(IndexError):
        y.item()          # a value read: the read's sync runs and waits inline
    lazytpu.mark_step()
    lazytpu.wait_device_ops()   # claimed by the read: nothing


@pytest.mark.parametrize("on", ["1", "0"])
def test_switch(tmp_path, on):
    """A fresh process on one core: with LAZYTPU_INLINE_EXEC=1 every
    waiting step's program runs inline (the worker is never woken for it);
    with 0 (read at init) none does; values the same."""
    import subprocess
    import sys
    code = (
        "import torch, lazytpu, lazytpu.metrics as met\n"
        "d = lazytpu.device()\n"
        "x = torch.arange(6.0).to(d)\n"
        "for i in range(5):\n"
        "    x = x * 2 + 1\n"
        "    lazytpu.mark_step(wait=True)\n"
        "n = met.counter_value('InlineExecute') or 0\n"
        "y = torch.index_select(x, 0, torch.tensor([9]).to(d))\n"
        "try:\n"
        "    lazytpu.mark_step(wait=True)\n"
        "except IndexError as e:\n"
        "    assert str(e).startswith('index_select: index 9 is out of range'), str(e)\n"
        "else:\n"
        "    raise SystemExit('no IndexError')\n"
        "n_err = (met.counter_value('InlineExecute') or 0) - n\n"
        "print(x.cpu().tolist(), n_err, n)\n")
    env = dict(os.environ, LAZYTPU_INLINE_EXEC=on)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)   # a loaded machine: import torch alone can take a minute
    assert p.returncode == 0, p.stderr
    ref = torch.arange(6.0)
    for _ in range(5):
        ref = ref * 2 + 1
    assert p.stdout.split("]")[0] + "]" == str(ref.tolist())
    n_err, n = int(p.stdout.split()[-2]), int(p.stdout.split()[-1])
    assert n == (5 if on == "1" else 0), p.stdout
    # the failing program ran inline too (on) and its error reached the step
    assert n_err == (1 if on == "1" else 0), p.stdout


def _spawned(index, out_dir):
    dev = lazytpu.device()
    n = lazytpu.world_size()
    # collectives stay on the worker: a rank waiting for its all_reduce
    # does not run it inline (its peers' programs may not have started)
    for k in range(3):
        z = lcc.all_reduce("sum", torch.ones(4).to(dev) * (index + 1 + k))
        lazytpu.mark_step(wait=True)
        assert z.cpu().tolist() == [n * (n + 1) / 2 + n * k] * 4
    # plain programs of a rank run inline as in one process
    x = torch.arange(6.0).to(dev) * (index + 1)
    lazytpu.mark_step(wait=True)
    assert x.cpu().tolist() == [float(v * (index + 1)) for v in range(6)]
    y = torch.index_select(x, 0, torch.tensor([9 if index == 1 else 0]).to(dev))
    if index == 1:
        with pytest.raises(IndexError) as ei:
            y.cpu()
        assert "rank 1 of %d" % n in str(ei.value), str(ei.value)
    else:
        assert y.cpu().tolist() == [0.0]
    lazytpu.wait_device_ops()
    with open(os.path.join(out_dir, "ok.%d" % index), "w") as f:
        f.write("%d" % (met.counter_value("InlineExecute") or 0))


def test_spawn_world_collectives_and_errors(tmp_path):
    lazytpu.spawn(_spawned, args=(str(tmp_path),), nprocs=2, timeout=240)
    done = sorted(os.listdir(tmp_path))
    assert done == ["ok.0", "ok.1"], done
