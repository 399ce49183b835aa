"""Builds lazytpu's C core and PyTorch shim with CMake before packaging.

Everything else is declared in pyproject.toml. The build uses the torch of
the interpreter running this file (sys.executable), which is why pip must be
called with --no-build-isolation. CMake writes the extension
(python/lazytpu/_C.so) and copies liblazytpu.so and the lazytpu-run launcher
into python/lazytpu/_lib/, so the same tree serves an editable install.
Environment: LAZYTPU_BUILD_DIR (default: build), LAZYTPU_BUILD_TYPE
(default: RelWithDebInfo), LAZYTPU_JOBS (default: 2).
"""
import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def cmake_build():
    build = os.path.join(HERE, os.environ.get("LAZYTPU_BUILD_DIR", "build"))
    cfg = ["cmake", "-S", HERE, "-B", build,
           "-DCMAKE_BUILD_TYPE=" + os.environ.get("LAZYTPU_BUILD_TYPE", "RelWithDebInfo"),
           "-DLT_PYTHON=" + sys.executable]
    subprocess.check_call(cfg, stdout=subprocess.DEVNULL)
    subprocess.check_call(["cmake", "--build", build, "--target", "lazytpu_C",
                           "-j", os.environ.get("LAZYTPU_JOBS", "2")])


class BuildWithCMake(build_py):
    def run(self):
        cmake_build()
        super().run()


class BinaryDistribution(Distribution):
    """The wheel carries compiled code: make it platform specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution)
