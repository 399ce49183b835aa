"""torch_xla.experimental.deprecation: old names that forward to new
functions, with one logged warning (``logging.warning``) on first use."""
import functools
import importlib
import logging


def deprecated(module, new, old_name=None, extra_msg=None):
    """A function named ``module.<old_name>`` that warns once, then calls
    ``new``."""
    warned = []
    old_name = old_name or new.__name__

    @functools.wraps(new)
    def wrapped(*args, **kwargs):
        if not warned:
            msg = "%s.%s is deprecated. Use %s.%s instead." % (
                module.__name__, old_name, new.__module__, new.__name__)
            if extra_msg:
                msg += " " + extra_msg
            logging.warning(msg)
            warned.append(True)
        return new(*args, **kwargs)

    return wrapped


def mark_deprecated(new, extra_msg=None):
    """Decorator: the decorated function becomes a deprecated alias of
    ``new`` (its body is not run)."""
    def decorator(func):
        return deprecated(importlib.import_module(func.__module__), new,
                          old_name=func.__name__, extra_msg=extra_msg)
    return decorator


def register_deprecated(module, new, extra_msg=None):
    """Sets ``module.<new.__name__>`` to a deprecated alias of ``new``."""
    setattr(module, new.__name__, deprecated(module, new, extra_msg=extra_msg))
