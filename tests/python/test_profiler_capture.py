"""lazytpu.profiler (torch_xla.debug.profiler's capture API): start_trace /
stop_trace and start_server + trace write the events of the window, and only
those, as <logdir>/plugins/profile/<run>/<host>.xplane.pb (read back here
with a small protobuf reader) and <host>.trace.json.gz; misuse raises what
torch_xla 2.9 raises."""
import glob
import gzip
import json
import os
import socket
import subprocess
import sys
import threading

import pytest
import torch

import lazytpu
from lazytpu import profiler
from lazytpu.debug import Trace


# ------------------------------------------------------ reading the files

def _fields(buf):
    """(field, wire type, value) of one protobuf message (varint and
    length-delimited fields only, which is all XSpace uses)."""
    i, out = 0, []

    def varint():
        nonlocal i
        v = s = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7f) << s
            s += 7
            if not b & 0x80:
                return v
    while i < len(buf):
        key = varint()
        f, wt = key >> 3, key & 7
        if wt == 0:
            out.append((f, 0, varint()))
        elif wt == 2:
            n = varint()
            out.append((f, 2, bytes(buf[i:i + n])))
            i += n
        else:
            raise AssertionError("unexpected wire type %d" % wt)
    return out


def _get(msg, f, default=0):
    for k, _, v in msg:
        if k == f:
            return v
    return default


def _xspace(path):
    """{"planes": [{"name", "lines": [{"name", "ts", "events": [(name, offset_ps,
    dur_ps, cat)]}]}], "hostnames": [...]} of an .xplane.pb file."""
    space = _fields(open(path, "rb").read())
    planes = []
    for f, _, pv in space:
        if f != 1:
            continue
        plane = _fields(pv)
        names = {}
        for k, _, ent in plane:
            if k == 4:
                e = _fields(ent)
                md = _fields(_get(e, 2, b""))
                names[_get(e, 1)] = _get(md, 2, b"").decode()
        lines = []
        for k, _, lv in plane:
            if k != 3:
                continue
            line = _fields(lv)
            evs = []
            for k2, _, ev in line:
                if k2 == 4:
                    e = _fields(ev)
                    stat = _fields(_get(e, 4, b""))
                    evs.append((names[_get(e, 1)], _get(e, 2), _get(e, 3),
                                _get(stat, 5, b"").decode()))
            lines.append({"name": _get(line, 2, b"").decode(), "ts": _get(line, 3),
                          "events": evs})
        planes.append({"name": _get(plane, 2, b"").decode(), "lines": lines})
    return {"planes": planes, "hostnames": [v.decode() for f, _, v in space if f == 4]}


def _run_files(logdir):
    pbs = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    jss = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.trace.json.gz"))
    assert len(pbs) == 1 and len(jss) == 1, (pbs, jss)
    assert os.path.dirname(pbs[0]) == os.path.dirname(jss[0])
    with gzip.open(jss[0], "rt") as f:
        js = json.load(f)
    return _xspace(pbs[0]), js


def _json_events(js):
    return [e for e in js["traceEvents"] if e["ph"] == "X"]


def _step(dev, n=8):
    x = torch.randn(n, n)
    y = (x.to(dev) @ x.to(dev)).relu().sum()
    return y.cpu(), (x @ x).relu().sum()


# ------------------------------------------------------------------ tests

def test_start_stop_writes_window_events_only(tmp_path):
    dev = lazytpu.device()
    with Trace("before_window"):
        _step(dev)
    profiler.start_trace(tmp_path)
    with Trace("inside_window"):
        got, want = _step(dev, 12)
    run = profiler.stop_trace()
    with Trace("after_window"):
        _step(dev)
    torch.testing.assert_close(got, want)

    xs, js = _run_files(str(tmp_path))
    assert run == os.path.dirname(glob.glob(str(tmp_path / "plugins/profile/*/*.xplane.pb"))[0])
    assert xs["hostnames"] == [socket.gethostname()]
    assert [p["name"] for p in xs["planes"]] == ["/host:CPU"]
    lines = {ln["name"]: ln["events"] for ln in xs["planes"][0]["lines"]}
    host = [e[0] for e in lines["host"]]
    assert "inside_window" in host and "transfer_from_device" in host, host
    assert any(e[0] == "execute" and e[3] == "execute" for e in lines["core 0"]), lines
    names = {e[0] for evs in lines.values() for e in evs}
    assert not names & {"before_window", "after_window"}, names

    # the JSON holds the same events, with the same durations (us vs ps)
    jev = _json_events(js)
    assert sorted(e["name"] for e in jev) == sorted(e[0] for evs in lines.values() for e in evs)
    span = [e for e in jev if e["name"] == "inside_window"][0]
    pspan = [e for e in lines["host"] if e[0] == "inside_window"][0]
    assert abs(span["dur"] * 1e6 - pspan[2]) < 1e3
    ex = [e for e in jev if e["name"] == "execute"]
    assert all(span["ts"] <= e["ts"] <= span["ts"] + span["dur"] for e in ex), (span, ex)
    tnames = {e["args"]["name"] for e in js["traceEvents"] if e["name"] == "thread_name"}
    assert {"host", "core 0"} <= tnames, tnames


def test_capture_without_lazytpu_trace_keeps_file_sink_off(tmp_path):
    assert profiler.start_trace(tmp_path) is None
    assert lazytpu._C.capture_active() and lazytpu._C.trace_enabled()
    profiler.stop_trace()
    assert not lazytpu._C.capture_active()
    assert bool(lazytpu._C.trace_enabled()) == bool(lazytpu.debug.trace_path())
    xs, js = _run_files(str(tmp_path))          # an empty window still writes a run
    assert _json_events(js) == [] and xs["planes"][0]["lines"] == []


def test_stop_without_start_raises():
    with pytest.raises(RuntimeError, match="No profile started"):
        profiler.stop_trace()


def test_start_twice_raises_and_first_session_still_stops(tmp_path):
    profiler.start_trace(tmp_path / "a")
    try:
        with pytest.raises(RuntimeError, match="Only one profile may be run at a time."):
            profiler.start_trace(tmp_path / "b")
    finally:
        profiler.stop_trace()
    assert os.path.isdir(tmp_path / "a" / "plugins" / "profile")
    assert not os.path.exists(tmp_path / "b")
    with pytest.raises(RuntimeError, match="No profile started"):
        profiler.stop_trace()


def test_unwritable_logdir_raises_and_ends_session(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    profiler.start_trace(blocker / "sub")
    with pytest.raises(RuntimeError, match="cannot create directory"):
        profiler.stop_trace()
    assert not lazytpu._C.capture_active()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_trace_through_server_in_process(tmp_path):
    dev = lazytpu.device()
    server = profiler.start_server(_free_port())
    runs = []
    t = threading.Thread(target=lambda: runs.extend(profiler.trace(
        "localhost:%d" % server.port, str(tmp_path), duration_ms=300)))
    t.start()
    while t.is_alive():           # work until the capture has ended
        with Trace("loop_step"):
            _step(dev)
    t.join()
    del server
    xs, js = _run_files(str(tmp_path))
    assert runs == [os.path.dirname(glob.glob(str(tmp_path / "plugins/profile/*/*.xplane.pb"))[0])]
    names = {e["name"] for e in _json_events(js)}
    assert {"loop_step", "execute", "transfer_to_device"} <= names, names


def test_start_trace_refused_while_server_captures(tmp_path):
    server = profiler.start_server(_free_port())
    t = profiler.trace_detached("localhost:%d" % server.port, str(tmp_path / "srv"),
                                duration_ms=2000)
    while not lazytpu._C.capture_active() and t.is_alive():
        t.join(0.01)
    with pytest.raises(RuntimeError, match="Only one profile may be run at a time."):
        profiler.start_trace(tmp_path / "mine")
    t.join()
    server.stop()
    _run_files(str(tmp_path / "srv"))


def test_trace_unreachable_server_raises(tmp_path):
    port = _free_port()
    with pytest.raises(RuntimeError, match="trace of localhost:%d failed" % port):
        profiler.trace("localhost:%d" % port, str(tmp_path), num_tracing_attempts=2,
                       timeout_s=0, interval_s=1)
    assert not os.path.exists(tmp_path / "plugins")


TRAINER = r'''
import sys, torch, lazytpu
from lazytpu import profiler
from lazytpu.debug import Trace
server = profiler.start_server(int(sys.argv[1]))
dev = lazytpu.device()
w = torch.randn(16, 16, device=dev)
print("ready", flush=True)
while True:
    with Trace("train_step_in_child"):
        w = (w @ w).tanh()
        w.sum().item()
'''


def test_trace_another_process(tmp_path):
    port = _free_port()
    env = dict(os.environ, LAZYTPU_NUM_CORES="1")
    env.pop("LAZYTPU_TRACE", None)
    p = subprocess.Popen([sys.executable, "-c", TRAINER, str(port)], env=env,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        runs = profiler.trace("localhost:%d" % port, str(tmp_path), duration_ms=500,
                              num_tracing_attempts=3, timeout_s=10, interval_s=1)
    finally:
        p.kill()
        p.wait()
    xs, js = _run_files(str(tmp_path))
    assert len(runs) == 1
    names = {e["name"] for e in _json_events(js)}
    assert {"train_step_in_child", "execute", "transfer_from_device"} <= names, names
    assert not any(e["name"] == "train_step_in_child" for e in _json_events(js)
                   if e["ts"] < 0), "an event from before the window"
