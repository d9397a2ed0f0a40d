#!/usr/bin/env python3
"""Finds module circles inside Rust crates: exits 1 naming each, 0 when there are none.

    scripts/module-cycles.py CRATE_SRC_DIR...      e.g. crates/server/src crates/router/src

The rule, per crate (its src/ directory):

- A node is a top-level module: a file `x.rs` or a directory `x/` under src/ (lib.rs and
  main.rs are the crate root, no node). Everything under `exec/` is module `exec`.
- Module A depends on module B when code in A names a path that starts in B: `use crate::B…`,
  `crate::B::…` anywhere in code, `super::B…` resolved from where it stands (a file's own
  module path, plus the inline `mod x { … }` blocks around it), and grouped forms such as
  `use crate::{B, C::D}`. Comments (doc links too), strings and `$crate` in macros are ignored;
  a path back into A itself is no edge.
- Then the same, one level down, among the children of each directory module: `exec/text.rs`
  and `exec/lease.rs` are siblings, and a circle between them counts too. The directory's own
  `mod.rs` is left out of that graph: it declares its children and they use its items, which is
  how a Rust module is built, not a circle.

A circle is a strongly connected component of more than one node; each is printed with one
path through it (A -> B -> ... -> A) and the lines that make each step.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH_START = re.compile(r"(?<![\w$])(crate|super)\b")


def strip_code(text):
    """The text with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{..}'), not a lifetime ('a without a closing quote).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def inline_modules(code):
    """For each `mod x {` block: (start, end, name), by brace matching."""
    blocks = []
    for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", code):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        blocks.append((m.end(), j, m.group(1)))
    return blocks


def group_heads(code, start):
    """The first segment of each item of the `{…}` group opening at `start`, and its end."""
    depth, j, items, item = 0, start, [], ""
    while j < len(code):
        c = code[j]
        if c == "{":
            depth += 1
            if depth > 1:
                item += c
        elif c == "}":
            depth -= 1
            if depth == 0:
                items.append(item)
                break
            item += c
        elif c == "," and depth == 1:
            items.append(item)
            item = ""
        else:
            item += c
        j += 1
    heads = []
    for it in items:
        m = re.match(r"\s*(" + IDENT + r")", it)
        if m and m.group(1) not in ("self",):
            heads.append(m.group(1))
    return heads


def referenced(code, module_path):
    """(top-level module named, line) for every crate-relative path in `code`, a file whose
    own module path (from the crate root) is `module_path`."""
    blocks = inline_modules(code)
    found = []
    for m in PATH_START.finditer(code):
        pos = m.start()
        here = list(module_path) + [name for (s, e, name) in blocks if s <= pos < e]
        segments = [] if m.group(1) == "crate" else here[:-1]
        j = m.end()
        # Further `::super` steps.
        while True:
            s = re.match(r"\s*::\s*super\b", code[j:])
            if not s:
                break
            segments = segments[:-1]
            j += s.end()
        line = code.count("\n", 0, pos) + 1
        rest = re.match(r"\s*::\s*", code[j:])
        if not rest:
            continue  # `crate` alone, `pub(crate)`, `pub(super)`
        j += rest.end()
        if code.startswith("{", j):
            heads = group_heads(code, j)
        else:
            h = re.match(IDENT, code[j:])
            heads = [h.group(0)] if h else []
        for head in heads:
            full = segments + [head]
            found.append((full, line))
    return found


def crate_modules(src):
    """Every .rs file under `src` with its module path, e.g. ('exec', 'meta')."""
    files = []
    for root, _dirs, names in os.walk(src):
        for name in sorted(names):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            parts = os.path.relpath(path, src)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            files.append((path, tuple(parts)))
    return files


def strongly_connected(nodes, edges):
    """Tarjan's algorithm: the components, each a list of nodes."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def a_circle(component, edges):
    """One closed path through a component, starting at its first node."""
    start = component[0]
    members = set(component)
    # Breadth-first from start back to start inside the component.
    paths = {w: [start, w] for w in sorted(edges.get(start, ())) if w in members}
    queue = list(paths)
    while queue:
        v = queue.pop(0)
        if v == start:
            return paths[v]
        for w in sorted(edges.get(v, ())):
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return [start, start]


def circles(graph_name, nodes, edges, where):
    found = []
    for comp in strongly_connected(nodes, edges):
        if len(comp) < 2:
            continue
        path = a_circle(comp, edges)
        lines = [f"{graph_name}: circle of {len(comp)} modules: {' -> '.join(path)}"]
        lines.append(f"  all of them: {', '.join(comp)}")
        for a, b in zip(path, path[1:]):
            lines.append(f"  {a} -> {b}: {', '.join(sorted(where[(a, b)])[:3])}")
        found.append("\n".join(lines))
    return found


def check(src):
    files = crate_modules(src)
    top = {p[0] for _, p in files if p}
    children = {}  # directory module -> its child modules
    for _, p in files:
        if len(p) >= 2:
            children.setdefault(p[0], set()).add(p[1])
    edges, where = {}, {}
    sub_edges = {d: {} for d in children}
    sub_where = {d: {} for d in children}
    for path, mpath in files:
        with open(path, encoding="utf-8") as f:
            code = strip_code(f.read())
        rel = os.path.relpath(path)
        for full, line in referenced(code, mpath):
            if not full or not mpath:
                continue
            a, b = mpath[0], full[0]
            if b in top and a != b:
                edges.setdefault(a, set()).add(b)
                where.setdefault((a, b), set()).add(f"{rel}:{line}")
            # Siblings inside a directory module (its mod.rs left out).
            if a == b and a in children and len(mpath) >= 2 and len(full) >= 2:
                x, y = mpath[1], full[1]
                if y in children[a] and x != y:
                    sub_edges[a].setdefault(x, set()).add(y)
                    sub_where[a].setdefault((x, y), set()).add(f"{rel}:{line}")
    name = os.path.relpath(src)
    found = circles(name, top, edges, where)
    for d in sorted(children):
        found += circles(f"{name}/{d}", children[d], sub_edges[d], sub_where[d])
    return found


def main(argv):
    if len(argv) < 2 or any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    found = []
    for src in argv[1:]:
        if not os.path.isdir(src):
            print(f"{src}: not a directory", file=sys.stderr)
            return 2
        found += check(src)
    for circle in found:
        print(circle)
    if found:
        print(f"{len(found)} module circle(s)")
        return 1
    print(f"no module circles in {', '.join(argv[1:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
