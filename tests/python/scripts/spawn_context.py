"""lazytpu.spawn passes the parent's process context, as multiprocessing's
spawn does (Lightning's XLA launcher relies on both):

- fn is a library callable (here a functools.partial) whose arguments hold
  an object of a class defined in this script: every worker loads the script
  (as __mp_main__) before unpickling them;
- a multiprocessing.Manager().Queue() in the arguments: every worker gets the
  parent's authentication key, so the proxy connects back to the manager.

Prints "OK" and the values the workers put in the queue.
"""
import functools
import multiprocessing as mp

import lazytpu


class Box:
    def __init__(self, value):
        self.value = value


def work(box, index, queue):
    queue.put((index, box.value * 10 + index))


if __name__ == "__main__":
    q = mp.Manager().Queue()
    lazytpu.spawn(functools.partial(work, Box(4)), args=(q,), nprocs=2)
    got = sorted(q.get(timeout=30) for _ in range(2))
    assert got == [(0, 40), (1, 41)], got
    print("OK", got)
