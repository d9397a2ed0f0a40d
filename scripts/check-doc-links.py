#!/usr/bin/env python3
"""Checks every relative markdown link in README.md and docs/: the file exists, and an anchor
names a heading of it (GitHub's slugs)."""
import pathlib, re, sys
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
files = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
def slug(h):
    h = h.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)   # GitHub keeps letters, digits, _, -, spaces
    return h.replace(" ", "-")
def anchors(path):
    out, seen = set(), {}
    in_code = False
    for line in path.read_text().split("\n"):
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0); seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out
bad = 0; count = 0
for f in files:
    text = f.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        count += 1
        path, _, anchor = target.partition("#")
        dest = (f.parent / path).resolve() if path else f
        if not dest.exists():
            print(f"{f}: missing {target}"); bad += 1; continue
        if anchor:
            if dest.is_dir() or anchor not in anchors(dest):
                print(f"{f}: no anchor {target}"); bad += 1
print(f"{count} links checked, {bad} broken")
sys.exit(1 if bad else 0)
