"""torch_xla.utils.utils on lazytpu."""
import os

from lazytpu.utils import SampleGenerator  # noqa: F401


def getenv_as(name, type, defval=None):
    """os.environ[name] converted with `type` (bools accept 1/true/yes)."""
    v = os.environ.get(name)
    if v is None:
        return defval
    return v.lower() in ("1", "true", "yes", "on") if type is bool else type(v)


def as_list(t):
    return t if isinstance(t, (list, tuple)) else [t]
