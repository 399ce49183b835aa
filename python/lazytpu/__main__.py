"""python -m lazytpu script.py [args]: runs a torch_xla script on lazytpu
(see _lazytpu_cli.run_python)."""
import sys

from _lazytpu_cli import run_python

run_python(sys.argv[1:])
