"""A minimal stand-in for torchvision (which cannot be installed beside torch
2.13), for running pytorch/xla's training scripts in their fake-data mode:
they import torchvision at the top but use it only for real data."""


class _Unavailable:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        raise RuntimeError("torchvision is not installed: %s.%s is unavailable "
                           "(run the script with --fake_data)" % (self._name, attr))


datasets = _Unavailable("torchvision.datasets")
transforms = _Unavailable("torchvision.transforms")
models = _Unavailable("torchvision.models")
