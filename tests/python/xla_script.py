"""Run a torch_xla script in a fresh process under ``python -m lazytpu``, as a
user would, with the caller's torch_xla / PJRT / lazytpu variables removed
(LAZYTPU_BIN_DIR kept) so the run sees only what the test sets."""
import os
import subprocess
import sys
import textwrap


def run_xla_script(tmp_path, code, name="prog.py", args=(), pjrt="CPU", timeout=900,
                   **env_extra):
    """Writes `code` (dedented) to tmp_path/name, runs it with `args`, asserts exit 0
    and returns its stdout. PJRT_DEVICE is `pjrt` (None: unset); env_extra is added."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("XLA_", "PT_XLA", "PJRT_", "CPU_NUM")) or (
                k.startswith("LAZYTPU_") and k != "LAZYTPU_BIN_DIR"):
            env.pop(k)
    if pjrt is not None:
        env["PJRT_DEVICE"] = pjrt
    env.update(env_extra)
    script = tmp_path / name
    script.write_text(textwrap.dedent(code))
    p = subprocess.run([sys.executable, "-m", "lazytpu", str(script), *args], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=str(tmp_path))
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, p.stdout[-4000:],
                                                  p.stderr[-4000:])
    return p.stdout
