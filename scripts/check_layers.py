#!/usr/bin/env python3
"""scripts/check_layers.py — checks that the C core's parts depend on each
other one way only:

    base  <-  metrics  <-  spawn  <-  lazy        (include/ is the public API)

A part may include headers of, and call functions defined in, the parts to
its left only; base/ depends on nothing. lazy/ reaches spawn/ only through
the collective kernels (lazy/kernels/collective.c). include/ (the public
headers) includes no header of base/, lazy/, spawn/ or metrics/.

Two kinds of edges are checked:
  includes  every `#include "..."` of a .c/.h file of a part, resolved like
            the build does (the file's directory, then include/, the
            generated <build>/include, base, lazy, lazy/kernels, metrics,
            spawn);
  calls     with --build: `nm` of the object files the build made for the
            core (CMakeFiles/lazytpu_core.dir) and for lazytpu-run: a symbol
            undefined in an object of one part and defined in an object of
            another is a call (or data reference) between them.

Prints every edge that breaks the order (file and line, or object and
symbol) and every cycle between parts; exits 1 if there is one, 0 otherwise.

usage: scripts/check_layers.py [--root DIR] [--build DIR | --objects DIR]
       [--no-calls]
Run as the ctest `layers` after a build; tests/python/test_layers.py checks
that it catches an include cycle and a call cycle.
"""
import argparse
import os
import re
import subprocess
import sys

# The parts, lowest first: each may depend on the ones before it only.
ORDER = ["base", "metrics", "spawn", "lazy"]
RANK = {p: i for i, p in enumerate(ORDER)}
# lazy -> spawn is allowed from these files only (by path from the root).
LAZY_TO_SPAWN = {"lazy/kernels/collective.c"}
# Search path after the including file's own directory (CMakeLists.txt's
# lazytpu_core include directories, in order).
SEARCH = ["include", "<gen>", "base", "lazy", "lazy/kernels", "metrics", "spawn"]
GENERATED = {"lazytpu_ops.h"}      # made by the build into <build>/include
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def part_of(rel):
    """The part of a path relative to the root ('lazy/kernels/x.c' -> 'lazy'),
    'include' for the public headers, None outside the core."""
    top = rel.split("/", 1)[0]
    if top in RANK or top == "include":
        return top
    return None


def source_files(root):
    for top in ORDER + ["include"]:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".def")):
                    yield os.path.relpath(os.path.join(d, f), root)


def resolve(root, rel, name):
    """Path (relative to root) that `#include "name"` in file rel reaches;
    'include/<name>' for a generated public header; None if not found."""
    cand = os.path.normpath(os.path.join(os.path.dirname(rel), name))
    if os.path.isfile(os.path.join(root, cand)):
        return cand
    for d in SEARCH:
        if d == "<gen>":
            if name in GENERATED:
                return "include/" + name
            continue
        cand = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def include_edges(root):
    """[(from_part, to_part, where, what)] for includes between parts."""
    edges = []
    for rel in source_files(root):
        src = part_of(rel)
        with open(os.path.join(root, rel), errors="replace") as f:
            for ln, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                tgt = resolve(root, rel, m.group(1))
                if tgt is None:
                    continue            # a system or third-party header
                dst = part_of(tgt)
                if dst is not None and dst != src:
                    edges.append((src, dst, f"{rel}:{ln}", f'#include "{m.group(1)}" -> {tgt}'))
    return edges


def object_files(objdir):
    """{object path: source path relative to the root} under a CMake build
    directory's core targets, or every .o under a plain directory (whose
    layout mirrors the source tree)."""
    out = {}
    cm = os.path.join(objdir, "CMakeFiles")
    dirs = ([os.path.join(cm, t) for t in ("lazytpu_core.dir", "lazytpu-run.dir")]
            if os.path.isdir(cm) else [objdir])
    for base in dirs:
        for d, _, files in os.walk(base):
            for f in files:
                if f.endswith(".o"):
                    p = os.path.join(d, f)
                    rel = os.path.relpath(p, base)
                    out[p] = rel[:-2] if rel.endswith(".c.o") else rel[:-2] + ".c"
    return out


def nm_symbols(obj):
    defined, undefined = set(), set()
    res = subprocess.run(["nm", obj], capture_output=True, text=True, check=True)
    for line in res.stdout.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "U":
            undefined.add(f[1])
        elif len(f) == 3 and f[1] in "TDBRCGSVW":
            defined.add(f[2])
    return defined, undefined


def call_edges(objdir):
    """[(from_part, to_part, where, what)] for symbol references between
    parts; raises SystemExit when there are no core objects."""
    objs = object_files(objdir)
    objs = {o: s for o, s in objs.items() if part_of(s) in RANK}
    if not objs:
        sys.exit(f"check_layers: no object files of the core under {objdir} (build first)")
    defs, uses = {}, {}
    for o, src in objs.items():
        d, u = nm_symbols(o)
        for s in d:
            defs.setdefault(s, src)
        uses[src] = u
    edges = []
    for src, us in sorted(uses.items()):
        for s in sorted(us):
            if s in defs and part_of(defs[s]) != part_of(src):
                edges.append((part_of(src), part_of(defs[s]), src, f"calls {s} ({defs[s]})"))
    return edges


def allowed(src, dst, where):
    if src == "include":
        return False                # the public headers include no internals
    if dst == "include":
        return True
    if RANK[dst] >= RANK[src]:
        return False
    if src == "lazy" and dst == "spawn":
        return where.split(":")[0] in LAZY_TO_SPAWN
    return True


def cycles(edges):
    """Cycles of the part graph (each as a list of parts), by DFS."""
    graph = {}
    for s, d, _, _ in edges:
        graph.setdefault(s, set()).add(d)
    found, seen = [], set()

    def dfs(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cyc = path[path.index(nxt):] + [nxt]
                key = frozenset(cyc)
                if key not in seen:
                    seen.add(key)
                    found.append(cyc)
            else:
                dfs(nxt, path + [nxt])

    for start in sorted(graph):
        dfs(start, [start])
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--build", help="CMake build directory (its core object files)")
    ap.add_argument("--objects", help="directory of object files laid out like the sources")
    ap.add_argument("--no-calls", action="store_true", help="check includes only")
    a = ap.parse_args(argv)
    edges = include_edges(a.root)
    n_inc = len(edges)
    if not a.no_calls:
        objdir = a.objects or a.build or os.path.join(a.root, "build")
        edges += call_edges(objdir)
    bad = [e for e in edges if not allowed(*e[:3])]
    for src, dst, where, what in bad:
        print(f"layer violation {src} -> {dst}: {where}: {what}")
    cyc = cycles(edges)
    for c in cyc:
        print("cycle: " + " -> ".join(c))
    if bad or cyc:
        print(f"check_layers: FAILED ({len(bad)} edges against base <- metrics <- spawn <- lazy, "
              f"{len(cyc)} cycles)")
        return 1
    print(f"check_layers: ok ({n_inc} include and {len(edges) - n_inc} call edges between parts, "
          "all one way: base <- metrics <- spawn <- lazy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
