"""torch_xla.experimental.eager: every operation on xla tensors runs at once
(lazytpu.compat.eager); torch_xla.compile'd functions still trace as one
graph."""
import contextlib

from lazytpu.compat import eager as _eager


def eager_mode(enable):
    """Turns eager execution on or off (process-wide)."""
    _eager.set_enabled(enable)


def is_eager_mode():
    return _eager.is_enabled()


@contextlib.contextmanager
def eager_mode_context(enable):
    """Eager execution on or off inside the block; yields the previous
    setting."""
    saved = is_eager_mode()
    eager_mode(enable)
    try:
        yield saved
    finally:
        eager_mode(saved)
