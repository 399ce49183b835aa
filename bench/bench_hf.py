"""Hugging Face on lazytpu against the same script on the CPU, in one run:
training steps/s of tests/python/scripts/hf_train.py (tiny random-weight
GPT-2 and BERT, Trainer and an Accelerate loop, batch 4 x 16 tokens), each
way in its own fresh process, CPU and lazytpu interleaved, ROUNDS rounds;
the median of each. lazytpu runs on the plain device
(ACCELERATE_TORCH_DEVICE=lazytpu). Time is the training loop only (first
steps' compiles included), not process start-up.

    .venv/bin/python bench/bench_hf.py [--steps 64] [--rounds 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.join(ROOT, "tests", "python", "scripts", "hf_train.py")


def one(model, way, device, steps, tmp):
    out = os.path.join(tmp, "%s-%s-%s.pt" % (model, way, device))
    env = dict(os.environ)
    env.pop("ACCELERATE_TORCH_DEVICE", None)
    if device == "lazytpu":
        env["ACCELERATE_TORCH_DEVICE"] = "lazytpu"
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, SCRIPT, "--model", model, "--way", way, "--steps",
                    str(steps), "--out", out], env=env, check=True, cwd=tmp,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = torch.load(out, weights_only=False)
    return steps / r["train_seconds"], r["losses"][-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print("| model | way | CPU steps/s | lazytpu steps/s | lazytpu / CPU | last loss CPU / lazytpu |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="lazytpu-bench-hf-") as tmp:
        for model, way in [("gpt2", "trainer"), ("bert", "trainer"), ("gpt2", "accelerate")]:
            rates = {"cpu": [], "lazytpu": []}
            loss = {}
            for _ in range(a.rounds):
                for dev in ("cpu", "lazytpu"):
                    r, loss[dev] = one(model, way, dev, a.steps, tmp)
                    rates[dev].append(r)
            c, l = statistics.median(rates["cpu"]), statistics.median(rates["lazytpu"])
            print("| %s | %s | %.1f | %.1f | %.2fx | %.4f / %.4f |"
                  % (model, way, c, l, l / c, loss["cpu"], loss["lazytpu"]), flush=True)


if __name__ == "__main__":
    main()
