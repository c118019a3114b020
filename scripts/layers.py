#!/usr/bin/env python3
"""The server's module layering, checked:  scripts/layers.py [server/src]

Reads every `crate::`, `super::` and `self::` path in server/src (in `use` trees
and inline in code; comments and strings are skipped), resolves each to the file
that defines the item it names (following `pub use` re-exports, so a facade
mod.rs that re-exports its rooms is not a dependency of its own), and builds the
file-level dependency graph. It fails on:

- any cycle between files (two or more files that reach each other; a file's
  use of its own ancestor module, e.g. a room's `super::Broker`, is how a module
  and its rooms are one unit and does not count), and
- any arrow up the layer order, lowest first:
      domain, telemetry         (pure types and rules; log/trace setup)
      store, dispatch, metrics  (the Store trait, its implementations, wake-ups,
                                 the counters the service and api record into)
      service, maintenance, depth  (semantics; background jobs over the service)
      api, console, http        (the gRPC, console and HTTP surfaces, side by side)
      app, config, main, lib, smoke   (wiring on top)
  A file may use files of its own layer or below, never above, and may not
  reach a lower item through a higher module's re-export either (the path as
  written counts as well as the file that defines the item).

Prints one line, e.g. "layers: 180 files, 0 cycles, 0 arrows up", after the
offending edges (file -> file, with the path that made it) when there are any.
Python 3 standard library only.
"""

import os
import re
import sys
from collections import defaultdict

LAYERS = {
    "domain": 0,
    "telemetry": 0,
    "store": 1,
    "dispatch": 1,
    "metrics": 1,
    "service": 2,
    "maintenance": 2,
    "depth": 2,
    "api": 3,
    "console": 3,
    "http": 3,
    "app": 4,
    "config": 4,
    "main": 4,
    "lib": 4,
    "smoke": 4,
}


def strip_comments_and_strings(src):
    """The source with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r(#*)"', src[i:i + 258]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 12]):
            m = re.match(r"'(\\[^']*|[^\\'])'", src[i:i + 12])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_top(s):
    """Split a use-tree list on top-level commas."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


class Module:
    def __init__(self, path, file):
        self.path = path  # ["store", "sqlite", "ops"]
        self.file = file
        self.items = set()
        self.reexports = {}  # name -> absolute module path + [item]
        self.globs = []  # absolute paths re-exported with *
        self.uses = {}  # local name -> absolute path (private use)
        self.children = set()


def module_files(src_root):
    mods = {}
    for dirpath, _, files in os.walk(src_root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src_root)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                path = tuple(rel) if rel == ["main"] else ()
            else:
                path = tuple(rel)
            mods[path] = Module(list(path), full)
    return mods


ITEM_RE = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+|unsafe\s+)*"
    r"(struct|enum|trait|fn|const|static|type|mod|union|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
USE_RE = re.compile(r"(?:^|[;{}\s])(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
INLINE_RE = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


INLINE_MOD_RE = re.compile(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")


def inline_mods(text):
    """[(start, end, name)] of the inline `mod name { ... }` blocks of a file."""
    out = []
    for m in INLINE_MOD_RE.finditer(text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        out.append((m.start(), j, m.group(1)))
    return out


def inner_path(mod, blocks, pos):
    """The module path at `pos` of the file: the file's, plus inline modules around it."""
    return list(mod.path) + [name for start, end, name in blocks if start <= pos < end]


def absolutize(mod, path, here=None):
    """A path as written in `mod` (at module path `here`) -> absolute module path
    list, or None if external."""
    if not path:
        return None
    here = list(mod.path) if here is None else here
    head = path[0]
    if head == "crate":
        return path[1:]
    if head == "self":
        return here + path[1:]
    if head == "super":
        base = list(here)
        rest = list(path)
        while rest and rest[0] == "super":
            base = base[:-1]
            rest = rest[1:]
        return base + rest
    return None


def parse(mods):
    texts = {}
    for key, mod in mods.items():
        with open(mod.file, encoding="utf-8") as fh:
            text = strip_comments_and_strings(fh.read())
        texts[key] = text
        for m in ITEM_RE.finditer(text):
            mod.items.add(m.group(2))
        for m in USE_RE.finditer(text):
            public = bool(m.group(1))
            for path, alias in parse_use(m.group(2)):
                ab = absolutize(mod, path)
                if ab is None:
                    # a use of a child module or item by relative path (`use ops::X`)
                    if path and tuple(mod.path + [path[0]]) in mods:
                        ab = mod.path + path
                    else:
                        continue
                if alias == "*":
                    if public:
                        mod.globs.append(ab)
                    continue
                if public:
                    mod.reexports[alias] = ab
                else:
                    mod.uses[alias] = ab
    for key in mods:
        if key:
            parent = mods.get(key[:-1])
            if parent:
                parent.children.add(key[-1])
    return texts


def parse_use(tree):
    tree = tree.strip()
    out = []
    if "{" in tree:
        i = tree.index("{")
        prefix = [p.strip() for p in tree[:i].split("::") if p.strip()]
        inner = tree[i + 1:tree.rindex("}")]
        for part in split_top(inner):
            for path, alias in parse_use(part):
                out.append((prefix + path, alias))
        return out
    m = re.match(r"(.*?)\s+as\s+([A-Za-z_][A-Za-z0-9_]*)$", tree, re.S)
    alias = None
    if m:
        tree, alias = m.group(1), m.group(2)
    path = [p.strip() for p in tree.split("::") if p.strip()]
    if path and path[-1] == "self":
        path = path[:-1]
    if not path:
        return []
    return [(path, alias or path[-1])]


def resolve(mods, path, seen=None):
    """Absolute path -> the key of the module (file) that defines what it names."""
    seen = seen or set()
    key = ()
    i = 0
    while i < len(path) and tuple(list(key) + [path[i]]) in mods:
        key = tuple(list(key) + [path[i]])
        i += 1
    if i >= len(path):
        return key
    name = path[i]
    mod = mods[key]
    if name in mod.items:
        return key
    marker = (key, name)
    if marker in seen:
        return key
    seen.add(marker)
    if name in mod.reexports:
        return resolve(mods, mod.reexports[name] + path[i + 1:], seen)
    for g in mod.globs:
        target = resolve(mods, g + [name], seen)
        if target != tuple(g) or name in mods.get(tuple(g), Module([], "")).items:
            return target
    if name in mod.uses:
        return resolve(mods, mod.uses[name] + path[i + 1:], seen)
    return key


def top(key):
    return key[0] if key else "lib"


def main():
    src_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "server", "src")
    mods = module_files(src_root)
    texts = parse(mods)
    edges = defaultdict(dict)  # from -> to -> example path
    vias = []  # (file, higher module the path goes through, path)
    for key, mod in mods.items():
        paths = []
        blocks = inline_mods(texts[key])
        for m in USE_RE.finditer(texts[key]):
            if m.group(1):
                continue  # re-exports are followed through, not edges of their own
            here = inner_path(mod, blocks, m.start())
            for path, _ in parse_use(m.group(2)):
                ab = absolutize(mod, path, here)
                if ab is None and path and tuple(mod.path + [path[0]]) in mods:
                    ab = mod.path + path
                if ab is not None:
                    paths.append((ab, "::".join(path)))
        for m in INLINE_RE.finditer(texts[key]):
            path = m.group(1).split("::")
            ab = absolutize(mod, path, inner_path(mod, blocks, m.start()))
            if ab is not None:
                paths.append((ab, m.group(1)))
        for ab, written in paths:
            via = ab[0] if ab else None
            if via in LAYERS and key and LAYERS[via] > LAYERS.get(top(key), 99):
                vias.append((key, via, written))
            target = resolve(mods, ab)
            if target == key or target == ():
                continue
            # a module's own ancestors (a `super::Item` up to mod.rs) count like any file
            edges[key].setdefault(target, written)

    rel = lambda k: os.path.relpath(mods[k].file, src_root)  # noqa: E731
    up = []
    for a, targets in edges.items():
        for b, written in targets.items():
            ta, tb = top(a), top(b)
            la, lb = LAYERS.get(ta), LAYERS.get(tb)
            if la is None or lb is None:
                up.append((a, b, written, f"{ta if la is None else tb} has no layer"))
            elif lb > la:
                up.append((a, b, written, f"{ta} ({la}) -> {tb} ({lb})"))

    # cycles: strongly connected components of more than one file (Tarjan). A
    # file's use of its own ancestor module (a room's `super::Broker`, the type
    # its mod.rs defines and it implements) is how a module and its rooms are one
    # unit, so it is not an edge here; the ancestor's use of a room is.
    cyc = {
        a: {b: w for b, w in targets.items() if a[: len(b)] != b}
        for a, targets in edges.items()
    }
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        work = [(v, iter(sorted(cyc.get(v, {}))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(cyc.get(w, {})))))
                    advanced = True
                    break
                elif w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    sccs.append(comp)

    for v in sorted(mods):
        if v not in index:
            strong(v)

    for comp in sccs:
        names = sorted(rel(k) for k in comp)
        print("cycle: " + " <-> ".join(names))
        members = set(comp)
        for a in sorted(comp):
            for b, written in sorted(cyc.get(a, {}).items()):
                if b in members:
                    print(f"    {rel(a)} -> {rel(b)}  ({written})")
    for a, via, written in sorted(set(vias)):
        if not any(x == a and top(y) == via for x, y, _, _ in up):
            up.append((a, (via,), written, f"through {via}"))
    for a, b, written, why in sorted(up, key=lambda e: (e[0], e[2])):
        target = rel(b) if b in mods else b[0]
        print(f"arrow up: {rel(a)} -> {target}  ({written}; {why})")
    print(f"layers: {len(mods)} files, {len(sccs)} cycles, {len(up)} arrows up")
    return 1 if sccs or up else 0


if __name__ == "__main__":
    sys.exit(main())
