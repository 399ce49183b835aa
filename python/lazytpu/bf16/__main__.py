"""python -m lazytpu.bf16: the bf16 lab's command line (see __init__)."""
import argparse
import sys

from .lab import MODES, run


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m lazytpu.bf16",
        description="Run a training script once per bf16 mode and compare with f32.")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per run (20)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated, from %s (f32 always runs)" % ", ".join(MODES))
    p.add_argument("--out", default="bf16_lab", help="output directory (./bf16_lab)")
    p.add_argument("--step", type=int, default=1,
                   help="the step of the per-module precision table (1: the same weights in "
                        "every mode)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-gap", type=float, default=None,
                   help="exit 1 if a mode's final loss is further than PCT%% from f32's")
    p.add_argument("--keep-f32", default="",
                   help="comma-separated names for lazytpu.amp.keep_f32 in every run "
                        "(to try the suggested list)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.steps < 1:
        p.error("--steps must be >= 1")
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    try:
        text, worst = run(a.script, a.args, modes=modes, steps=a.steps, k=a.step,
                          out_dir=a.out, seed=a.seed, max_gap=a.max_gap,
                          keep=[n for n in a.keep_f32.split(",") if n])
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(e, file=sys.stderr)
        return 2
    print(text, end="")
    if a.max_gap is not None and not (worst <= a.max_gap):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
