"""A script that parses sys.argv at module level (argparse with a required
positional and a required option, before anything else), as many training
scripts do, then runs `work` on 2 workers through lazytpu.spawn. `work` is
defined here, so every worker loads this script again (as __mp_main__) and
must see the same sys.argv, sys.path and working directory as the parent.

    spawn_argv.py OUT --tag TAG [--nprocs N]

Every worker appends "ordinal<TAB>repr((sys.argv, cwd, tag, sys.path[0]))"
to OUT; the parent prints "OK".
"""
import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--tag", required=True)
parser.add_argument("--nprocs", type=int, default=2)
ARGS = parser.parse_args()          # at import: the workers run this too

import lazytpu  # noqa: E402


def work(index):
    with open(ARGS.out, "a") as f:
        f.write("%d\t%r\n" % (index, (sys.argv, os.getcwd(), ARGS.tag, sys.path[0])))


if __name__ == "__main__":
    lazytpu.spawn(work, nprocs=ARGS.nprocs)
    print("OK", repr((sys.argv, os.getcwd(), ARGS.tag, sys.path[0])))
