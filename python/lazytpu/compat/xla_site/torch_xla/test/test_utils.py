"""torch_xla.test.test_utils on lazytpu: the helpers pytorch/xla's training
scripts call, and mp_test (a test method run in a child process)."""
import functools
import multiprocessing
import unittest

from lazytpu.utils import (close_summary_writer, get_summary_writer, now,  # noqa: F401
                           print_test_update, print_training_update, write_to_summary)


def mp_test(func):
    """Decorates a unittest.TestCase method to run in a child process
    (multiprocessing's default start method): the test fails unless the
    child exits 0; the wrapper returns the child's exit code."""
    @functools.wraps(func)
    def run_in_child(*args, **kwargs):
        child = multiprocessing.Process(target=func, args=args, kwargs=kwargs)
        child.start()
        child.join()
        if args and isinstance(args[0], unittest.TestCase):
            args[0].assertEqual(child.exitcode, 0)
        return child.exitcode
    return run_in_child
