#!/usr/bin/env python3
"""Every script, test, hook and manifest names paths inside the repository.

The README's two commands must pass on a clone with nothing beside it: a
script that reads ../shared/..., an absolute path of one machine (/work/...)
or a relative path that climbs out of the repository works where it was
written and fails for everyone else. This reads the repository's code (not
its prose: docs record where past runs were made) and fails on:

  - absolute paths into one machine's trees: /work/, /home/, /Users/, /root/;
  - `../shared`, `shared/peers` and `..//`;
  - `$ROOT/..` and `$IDEMKEY_ROOT/..` (also `${ROOT}`): the folder that
    holds the repository;
  - a relative path (`../..`, also after `$(dirname ...)/`) that leaves the
    repository when resolved from the file's own folder (include_str!,
    imports, `new URL(.., import.meta.url)`, Cargo path dependencies, the
    hooks' `cd "$(dirname "${BASH_SOURCE[0]}")/../.."`).

A line saying `outside-ok: REASON` is allowed and listed: an optional
neighbour that the script skips, saying so, when it is absent (bench/run.sh's
Node lab).

usage: scripts/paths-inside.py [ROOT]   (default: the repository of this file)
"""

import os
import re
import subprocess
import sys
from pathlib import Path

CODE_SUFFIXES = {
    ".sh", ".bash", ".py", ".mjs", ".cjs", ".js", ".ts", ".rs", ".toml",
    ".lua", ".yml", ".yaml", ".json", ".sql", ".html",
}
# Records of past runs (commands as they were typed on the machine that ran them), and this file,
# which names what it looks for.
SKIP_DIRS = ("docs/performance-data/", "scripts/paths-inside.py")
MARKER = "outside-ok:"

FORBIDDEN = [
    (re.compile(r"(?<![\w.:/])/(?:work|home|Users|root)/"), "an absolute path of one machine"),
    (re.compile(r"\.\./shared\b|\bshared/peers\b"), "a folder beside the repository (../shared)"),
    (re.compile(r"\.\.//"), "a path climbing out through `..//`"),
    (re.compile(r"\$\{?(?:IDEMKEY_)?ROOT\}?/\.\.(?![\w.])"), "the folder holding the repository ($ROOT/..)"),
]
# A relative path starting with `..` (at a token's start), or after `$(dirname ...)/`.
RELATIVE = re.compile(r"""(?:(?<=["'`(\s=,])|^)((?:\.\./)*\.\.(?=[/"'`)\s;,]|$)(?:/[\w.@+-]+)*)""")
DIRNAME = re.compile(r"""\$\(\s*dirname\s+[^)]*\)\s*/((?:\.\./)*\.\.(?:/[\w.@+-]+)*)""")


def files(root: Path):
    """The repository's files: git's list when it is a checkout, else a walk."""
    if (root / ".git").exists():
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True,
        ).stdout.decode()
        names = [n for n in out.split("\0") if n]
    else:
        names = []
        for folder, dirs, found in os.walk(root):
            dirs[:] = [d for d in dirs if d not in (".git", "target", "node_modules")]
            names += [os.path.relpath(os.path.join(folder, f), root) for f in found]
    for name in sorted(names):
        path = root / name
        if name.startswith(SKIP_DIRS) or not path.is_file():
            continue
        if path.suffix in CODE_SUFFIXES or name.startswith((".ci/", ".config/")) or is_script(path):
            yield name, path


def is_script(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def leaves(root: Path, name: str, relative: str) -> bool:
    """Whether `relative`, resolved from `name`'s folder, is outside `root`."""
    target = os.path.normpath(os.path.join(os.path.dirname(name), relative))
    return target == ".." or target.startswith("../")


def check(root: Path):
    problems, allowed = [], []
    for name, path in files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{name}:{number}: {line.strip()}"
            found = [why for pattern, why in FORBIDDEN if pattern.search(line)]
            for pattern in (DIRNAME, RELATIVE):
                for match in pattern.finditer(line):
                    if leaves(root, name, match.group(1)):
                        found.append(f"`{match.group(1)}` resolves outside the repository from {os.path.dirname(name) or '.'}/")
            if not found:
                continue
            if MARKER in line:
                allowed.append(where)
            else:
                problems.append(f"{where}\n    {'; '.join(dict.fromkeys(found))}")
    return problems, allowed


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    problems, allowed = check(root)
    for line in allowed:
        print(f"allowed ({MARKER}): {line}")
    if problems:
        print(f"paths-inside: {len(problems)} path(s) leave the repository:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print("paths-inside: every script, test, hook and manifest stays inside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
