#!/usr/bin/env python3
"""Module import cycles in Rust crates: a stand-in for
`cargo modules dependencies --acyclic` (which builds rust-analyzer) that
reads the sources only. Python 3.11+, standard library only.

    scripts/module-cycles.py SRC_DIR...   e.g. server/src idemkey/src
    scripts/module-cycles.py --cfg-test SRC_DIR...   test code included
    scripts/module-cycles.py --self-test

Exit 0 when no crate has a cycle (one summary line per crate: "N modules,
M edges, no cycle"), 1 when one has (each cycle printed with the uses that
make it, file:line), 2 on a usage error.

Crates. Each SRC_DIR is a package's src/: src/lib.rs, src/main.rs,
src/bin/NAME.rs and src/bin/NAME/main.rs are each a crate of their own.
Modules are found by following `mod x;` declarations from the crate root
(x.rs or x/mod.rs beside a root or mod.rs file, foo/x.rs under foo.rs;
`#[path = "..."]` relative to the declaring file's directory), so main.rs
has only the modules it declares, and `crate::` in them means the binary.
A path to another crate (main.rs naming the library by its crate name) is
no edge: crates cannot form a cycle among themselves.

Edges. Comments (doc comments included: an intra-doc link is no
dependency) and string and char literals are blanked first, and test-only
code is left out (an item under #[cfg(test)] or #[cfg(all(test, ..))],
`mod tests { .. }` and `mod tests;` alike, a file under #![cfg(test)]), as
cargo-modules leaves it out unless given --cfg-test: tests may use any
module. Then every path
that starts with `crate::`, `super::`, `self::` or the name of a module the
file declares (`routes::router()` in lib.rs), in `use` declarations (nested
`{...}` groups, `self`, `as`, globs) and inline in code, makes an edge from
the file's module to the module the path names: the longest prefix of the
path that is a known module (`crate::db::postgres::PgDb` -> db::postgres if
that module exists, else db), then, if the next segment is a name that
module does not define but imports (`use`, any visibility, globs included),
followed to where it comes from. So `crate::Db` with `pub use db::Db;` in
lib.rs is an edge to db, while `crate::AppState` with `pub struct AppState`
in lib.rs is an edge to the crate root (`crate::m!` of a #[macro_export]
macro: to the module defining it). `super::` inside an inline module
(`mod tests { use super::*; }`) names the file's own module. Declarations
make no edges: `mod x;` never, and a `pub use` (any `pub(...)`) is a
re-export, an edge only when the file also uses the re-exported name
elsewhere in its code. A private `use` always is one. Edges from a module to
itself are dropped.

The rule (one, no flag relaxes it). For every module P with child modules,
starting with the crate root, the modules under P are collapsed onto P's
children (P's own file stays a node of its own) and the edges between two
of those nodes must form no cycle:
  - at the root: the top-level modules (`crate::a::b::...` -> a) and the
    root file itself: lib.rs is a node when it defines items others use
    (crate::AppState) and uses modules in its own code (app() calling
    routes::router), not for its `mod` and re-export lines;
  - one level down in each folder module: its children, and its mod.rs as
    the node that stands for the folder's own file (siblings through
    `super::sibling` or `crate::top::sibling`, the children's uses of what
    mod.rs defines, mod.rs's own uses of its children);
  - and so on down every folder.
A use between a parent and a child is an edge like any other (as
cargo-modules counts it), so a mod.rs that calls into its child while the
child uses an item mod.rs defines is a cycle. Every file-level cycle shows
at the level of its members' deepest common ancestor; a level can also fail
without a file-level cycle (a/x -> b -> a/y): top-level modules must layer.
The file-level strongly connected components are printed as well, for
detail.

Not handled: macros that generate `mod` or `use` items, `#[path]` inside
inline modules, `mod x;` inside inline modules (warned), names imported by
a glob from outside the crate.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict, deque

# ---- lexing ----------------------------------------------------------------

IDENT_START = re.compile(r"[A-Za-z_]")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RAW_STRING = re.compile(r'(b?r)(#*)"')


def blank(text):
    """Spaces for every character but newlines (line numbers stay)."""
    return "".join("\n" if c == "\n" else " " for c in text)


def strip_source(src):
    """The source with comments and string/char literals blanked."""
    out = []
    i = 0
    n = len(src)
    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(src[i:j]))
            i = j
        elif c == "/" and nxt == "*":
            depth = 1
            j = i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth += 1
                    j += 2
                elif src.startswith("*/", j):
                    depth -= 1
                    j += 2
                else:
                    j += 1
            out.append(blank(src[i:j]))
            i = j
        elif c in "rb" and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            # Raw strings r"..", r#".."#, br".."; byte strings b"..", b'.'.
            m = RAW_STRING.match(src, i)
            if m:
                end = src.find('"' + m.group(2), m.end())
                end = n if end < 0 else end + 1 + len(m.group(2))
                out.append(blank(src[i:end]))
                i = end
            elif c == "b" and nxt in "\"'":
                out.append(" ")
                i += 1
            else:
                m = IDENT.match(src, i)
                out.append(m.group(0))
                i = m.end()
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(blank(src[i : j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}', '\'') or a lifetime ('a).
            if nxt == "\\":
                j = i + 3
                while j < n and src[j] != "'":
                    j += 1
                out.append(blank(src[i : j + 1]))
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                out.append("   ")
                i += 3
            else:
                # A lifetime or label, blanked whole: `&'static T` defines no `T`.
                m = IDENT.match(src, i + 1)
                j = m.end() if m else i + 1
                out.append(" " * (j - i))
                i = j
        elif IDENT_START.match(c):
            m = IDENT.match(src, i)
            out.append(m.group(0))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


TOKEN = re.compile(r"r#([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_]*)|(::)|(\S)")


def tokenize(code):
    """(text, line, is_ident) for each token of stripped code."""
    tokens = []
    line = 1
    pos = 0
    for m in TOKEN.finditer(code):
        line += code.count("\n", pos, m.start())
        pos = m.start()
        if m.group(1):
            tokens.append((m.group(1), line, True))
        elif m.group(2):
            tokens.append((m.group(2), line, True))
        else:
            tokens.append((m.group(0), line, False))
    return tokens


ITEM_KEYWORDS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}
PATH_ATTR = re.compile(
    r'#\s*\[\s*path\s*=\s*"([^"]+)"\s*\]\s*(?:#\s*\[[^\]]*\]\s*)*'
    r"(?:pub\s*(?:\([^)]*\))?\s*)?mod\s+(?:r#)?([A-Za-z_][A-Za-z0-9_]*)\s*;"
)

# ---- one file --------------------------------------------------------------


class Use:
    """One leaf of a `use` tree."""

    def __init__(self, segs, alias, glob, line, is_pub, inline_depth, item_level):
        self.segs = segs
        self.alias = alias
        self.glob = glob
        self.line = line
        self.is_pub = is_pub
        self.inline_depth = inline_depth
        # At the file's own module level (not in a fn, impl or inline mod):
        # then it names something as `this_module::alias`.
        self.item_level = item_level


class Module:
    def __init__(self, path, file, mod_rs):
        self.path = path  # tuple of segments; () is the crate root
        self.file = file
        self.mod_rs = mod_rs  # children live in the file's own directory
        self.children = {}  # name -> child path
        self.defined = set()
        self.macro_exports = set()
        self.uses = []
        self.mentions = []  # (segs, line, inline_depth)
        self.code_idents = set()  # identifiers outside use declarations
        self.decls = []  # (name, line, path attribute or None)

    def imports(self):
        return {u.alias: u for u in self.uses if u.item_level and not u.glob and u.alias not in (None, "_")}

    def globs(self):
        return [u for u in self.uses if u.item_level and u.glob]


def parse_use_tree(tokens, i, prefix):
    """Leaves of the use tree at tokens[i]: ([(segs, alias, glob, line)], next index)."""
    leaves = []
    segs = list(prefix)
    if i < len(tokens) and tokens[i][0] == "::":
        i += 1
    while i < len(tokens):
        text, line, ident = tokens[i]
        if text == "{":
            i += 1
            while i < len(tokens) and tokens[i][0] != "}":
                sub, i = parse_use_tree(tokens, i, segs)
                leaves.extend(sub)
                if i < len(tokens) and tokens[i][0] == ",":
                    i += 1
            return leaves, i + 1
        if text == "*":
            leaves.append((segs, None, True, line))
            return leaves, i + 1
        if ident:
            segs.append(text)
            i += 1
            if i < len(tokens) and tokens[i][0] == "::":
                i += 1
                continue
            if segs[-1] == "self" and len(segs) > 1:
                segs.pop()
            alias = segs[-1]
            if i + 1 < len(tokens) and tokens[i][0] == "as":
                alias = tokens[i + 1][0]
                i += 2
            leaves.append((segs, alias, False, line))
            return leaves, i
        return leaves, i  # unexpected: stop at it
    return leaves, i


def is_pub_before(tokens, i):
    """Whether the item starting at tokens[i] has `pub` or `pub(...)` before it."""
    j = i - 1
    if j >= 0 and tokens[j][0] == ")":
        while j >= 0 and tokens[j][0] != "(":
            j -= 1
        j -= 1
    return j >= 0 and tokens[j][0] == "pub"


def matching(tokens, i, open_, close):
    """Index just past the bracket closing the one at tokens[i]."""
    depth = 0
    for k in range(i, len(tokens)):
        if tokens[k][0] == open_:
            depth += 1
        elif tokens[k][0] == close:
            depth -= 1
            if depth == 0:
                return k + 1
    return len(tokens)


def is_cfg_test(attr):
    """Whether an attribute's tokens (inside #[...]) are cfg(test) or cfg(all(.., test, ..))."""
    texts = [t[0] for t in attr]
    if texts == ["cfg", "(", "test", ")"]:
        return True
    if texts[:4] == ["cfg", "(", "all", "("] and texts[-2:] == [")", ")"]:
        depth = 0
        for k, t in enumerate(texts[4:-2]):
            depth += {"(": 1, ")": -1}.get(t, 0)
            if depth == 0 and t == "test" and (texts[3 + k] in ("(", ",")) and texts[5 + k] in (",", ")"):
                return True
    return False


def skip_item(tokens, i):
    """Index just past the item (or statement) starting at tokens[i]."""
    n = len(tokens)
    while i < n and tokens[i][0] == "#":  # further attributes
        i = matching(tokens, i + 1, "[", "]") if i + 1 < n and tokens[i + 1][0] == "[" else i + 1
    k = i
    if k < n and tokens[k][0] == "pub":
        k += 1
        if k < n and tokens[k][0] == "(":
            k = matching(tokens, k, "(", ")")
    if k < n and tokens[k][0] == "use":
        while k < n and tokens[k][0] != ";":
            k += 1
        return k + 1
    while k < n:
        if tokens[k][0] == ";":
            return k + 1
        if tokens[k][0] == "{":
            return matching(tokens, k, "{", "}")
        if tokens[k][0] in ("}", ")", "]"):
            return k  # the end of the enclosing block or list: no item after all
        if tokens[k][0] in ("(", "["):
            k = matching(tokens, k, tokens[k][0], {"(": ")", "[": "]"}[tokens[k][0]])
            continue
        k += 1
    return n


def parse_file(module, warn, cfg_test=False):
    with open(module.file, encoding="utf-8", errors="replace") as f:
        src = f.read()
    path_attrs = {m.group(2): m.group(1) for m in PATH_ATTR.finditer(src)}
    tokens = tokenize(strip_source(src))
    stack = []  # one entry per open brace: True when it opened an inline mod
    used_idents = set()
    i = 0
    n = len(tokens)
    while i < n:
        text, line, ident = tokens[i]
        inline_depth = sum(stack)
        item_level = all(stack)
        prev = tokens[i - 1][0] if i > 0 else ""
        if text == "#" and not cfg_test:
            # Test-only code is left out: #[cfg(test)] on an item, or
            # #![cfg(test)] on the whole file.
            inner = i + 1 < n and tokens[i + 1][0] == "!"
            at = i + 2 if inner else i + 1
            if at < n and tokens[at][0] == "[":
                end = matching(tokens, at, "[", "]")
                if is_cfg_test(tokens[at + 1 : end - 1]):
                    if inner and not stack:
                        break
                    if not inner:
                        i = skip_item(tokens, end)
                        continue
            i += 1
            continue
        if text == "{":
            stack.append(i >= 2 and tokens[i - 2][0] == "mod" and tokens[i - 1][2])
            i += 1
            continue
        if text == "}":
            if stack:
                stack.pop()
            i += 1
            continue
        if not ident:
            i += 1
            continue
        if text == "mod" and i + 2 < n and tokens[i + 1][2] and tokens[i + 2][0] == ";":
            name = tokens[i + 1][0]
            if inline_depth == 0 and item_level:
                module.decls.append((name, line, path_attrs.get(name)))
                module.defined.add(name)
            else:
                warn(f"{module.file}:{line}: `mod {name};` inside an inline module or block is not followed")
            i += 3
            continue
        if text == "use" and prev not in ("::", "."):
            is_pub = is_pub_before(tokens, i)
            leaves, j = parse_use_tree(tokens, i + 1, [])
            for segs, alias, glob, leaf_line in leaves:
                if segs:
                    module.uses.append(Use(segs, alias, glob, leaf_line, is_pub, inline_depth, item_level and inline_depth == 0))
            while j < n and tokens[j][0] != ";":
                j += 1
            i = j + 1
            continue
        if item_level and inline_depth == 0:
            if text in ITEM_KEYWORDS and i + 1 < n and tokens[i + 1][2] and prev != "impl":
                module.defined.add(tokens[i + 1][0])
            if text == "macro_rules" and i + 2 < n and tokens[i + 1][0] == "!":
                name = tokens[i + 2][0]
                module.defined.add(name)
                # The attributes before it: #[macro_export] makes crate::name.
                k = i - 1
                while k >= 0 and tokens[k][0] == "]":
                    depth = 0
                    while k >= 0:
                        depth += {"]": 1, "[": -1}.get(tokens[k][0], 0)
                        if depth == 0:
                            break
                        k -= 1
                    if k + 1 < n and tokens[k + 1][0] == "macro_export":
                        module.macro_exports.add(name)
                    k -= 2  # over '[' and '#'
        used_idents.add(text)
        # A path: ident (:: ident)*, not itself the tail of a longer path.
        if prev != "::" and i + 2 < n and tokens[i + 1][0] == "::" and tokens[i + 2][2]:
            segs = [text]
            j = i + 1
            while j + 1 < n and tokens[j][0] == "::" and tokens[j + 1][2]:
                segs.append(tokens[j + 1][0])
                used_idents.add(tokens[j + 1][0])
                j += 2
            # `pub(in crate::a)` restricts visibility; it uses nothing.
            if not (prev == "in" and i >= 2 and tokens[i - 2][0] == "("):
                module.mentions.append((segs, line, inline_depth))
            i = j
            continue
        i += 1
    module.code_idents = used_idents


# ---- one crate -------------------------------------------------------------


class Crate:
    def __init__(self, label, root_file, warn, cfg_test=False):
        self.label = label
        self.warn = warn
        self.cfg_test = cfg_test
        self.modules = {}
        self.macro_exports = {}
        self.files = set()
        self._load((), root_file, True)

    def _load(self, path, file, mod_rs):
        module = Module(path, file, mod_rs)
        self.modules[path] = module
        self.files.add(os.path.realpath(file))
        parse_file(module, self.warn, self.cfg_test)
        for name in module.macro_exports:
            self.macro_exports.setdefault(name, path)
        directory = os.path.dirname(file)
        for name, line, attr in module.decls:
            if attr is not None:
                candidates = [(os.path.normpath(os.path.join(directory, attr)), True)]
            else:
                base = directory if mod_rs else os.path.join(directory, os.path.splitext(os.path.basename(file))[0])
                candidates = [(os.path.join(base, name + ".rs"), False), (os.path.join(base, name, "mod.rs"), True)]
            found = [(c, m) for c, m in candidates if os.path.isfile(c)]
            if not found:
                self.warn(f"{file}:{line}: no file for `mod {name};` (tried {', '.join(c for c, _ in candidates)})")
                continue
            child_file, child_mod_rs = found[0]
            if os.path.realpath(child_file) in self.files:
                self.warn(f"{file}:{line}: `mod {name};` is {child_file}, already a module of this crate: not followed")
                continue
            child = path + (name,)
            module.children[name] = child
            self._load(child, child_file, child_mod_rs)

    # -- resolution

    def resolve(self, from_path, inline_depth, segs, aliases=False):
        """(module path, rest of segs) a path names, or None (another crate)."""
        if not segs:
            return None
        module = self.modules[from_path]
        first = segs[0]
        i = 0
        if first == "crate":
            base, i = (), 1
        elif first in ("self", "super"):
            base, depth = from_path, inline_depth
            if first == "self":
                i = 1
            while i < len(segs) and segs[i] == "super":
                if depth > 0:
                    depth -= 1
                elif base:
                    base = base[:-1]
                else:
                    return None
                i += 1
        elif first in module.children:
            base = from_path
        elif aliases and first in module.imports():
            use = module.imports()[first]
            if use.segs[0] == first:  # `use foo;` of an extern crate
                return None
            target = self.resolve(from_path, 0, use.segs, aliases=False)
            if target is None:
                return None
            base, rest = target
            return self.resolve_from(base, list(rest) + list(segs[1:]))
        else:
            return None
        return self.resolve_from(base, segs[i:])

    def resolve_from(self, base, rest):
        cur = base
        rest = list(rest)
        while rest and cur + (rest[0],) in self.modules and rest[0] in self.modules[cur].children:
            cur = cur + (rest.pop(0),)
        return cur, rest

    def target(self, from_path, inline_depth, segs):
        """(module, note) a path depends on, re-exports followed; None when outside the crate."""
        resolved = self.resolve(from_path, inline_depth, segs)
        if resolved is None:
            return None
        cur, rest = resolved
        seen = set()  # imports followed: one that leads back to itself (a crate
        # that does not compile, `use crate::x::x;` without a module x) ends the walk
        while rest:
            key = (cur, rest[0])
            if key in seen:
                return cur, f"`{rest[0]}` imported in a loop in {display(cur)}"
            seen.add(key)
            module = self.modules[cur]
            name = rest[0]
            if name in module.defined:
                return cur, None
            if cur == () and name in self.macro_exports:
                return self.macro_exports[name], None
            imports = module.imports()
            if name in imports:
                use = imports[name]
                if use.glob:
                    break
                nxt = self.resolve(cur, 0, use.segs, aliases=True)
                if nxt is None:
                    return None  # re-exported from another crate
                cur, more = nxt
                rest = list(more) + rest[1:]
                cur, rest = self.resolve_from(cur, rest)
                continue
            moved = False
            for use in module.globs():
                g = self.resolve(cur, 0, use.segs, aliases=True)
                if g is None or g[1]:
                    continue
                gm = self.modules[g[0]]
                if name in gm.defined or name in gm.imports() or name in gm.children:
                    cur = g[0]
                    cur, rest = self.resolve_from(cur, rest)
                    moved = True
                    break
            if not moved:
                return cur, f"`{name}` not found in {display(cur)}"
        return cur, None

    # -- edges

    def edges(self):
        """{(src, dst): [(file, line, text, note)]} between distinct modules."""
        edges = defaultdict(list)
        for path, module in self.modules.items():
            for use in module.uses:
                if use.is_pub and (use.glob or use.alias not in module.code_idents):
                    continue  # a re-export that the file does not use itself
                segs = use.segs
                got = self.target(path, use.inline_depth, segs)
                if got is None:
                    continue
                text = ("pub use " if use.is_pub else "use ") + "::".join(segs) + ("::*" if use.glob else "")
                self._add(edges, path, got, module.file, use.line, text)
            for segs, line, inline_depth in module.mentions:
                if not (segs[0] in ("crate", "self", "super") or segs[0] in module.children):
                    continue
                got = self.target(path, inline_depth, segs)
                if got is None:
                    continue
                self._add(edges, path, got, module.file, line, "::".join(segs))
        return edges

    @staticmethod
    def _add(edges, src, got, file, line, text):
        dst, note = got
        if dst != src and (file, line, text, note) not in edges[(src, dst)]:
            edges[(src, dst)].append((file, line, text, note))


def display(path):
    return "::".join(path) if path else "crate"


# ---- cycles ----------------------------------------------------------------


def tarjan(nodes, succ):
    """Strongly connected components, each a list of nodes."""
    index = {}
    low = {}
    on_stack = set()
    stack = []
    sccs = []
    counter = [0]

    for start in nodes:
        if start in index:
            continue
        # Iterative Tarjan: (node, iterator over successors).
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    scc.append(w)
                    if w == node:
                        break
                sccs.append(sorted(scc))
    return sccs


def shortest_cycle(members, succ):
    """One shortest cycle through the first member, within the SCC."""
    inside = set(members)
    start = members[0]
    parent = {}
    queue = deque([start])
    seen = {start}
    while queue:
        node = queue.popleft()
        for w in sorted(succ.get(node, ())):
            if w not in inside:
                continue
            if w == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return list(reversed(path)) + [start]
            if w not in seen:
                seen.add(w)
                parent[w] = node
                queue.append(w)
    return [start]


def level_graphs(crate, edges):
    """(level module, {(node, node): examples}) for each module with children."""
    for level, module in sorted(crate.modules.items()):
        if not module.children:
            continue
        n = len(level)
        graph = defaultdict(list)
        for (src, dst), examples in edges.items():
            if src[:n] != level or dst[:n] != level:
                continue
            a = src[: n + 1]
            b = dst[: n + 1]
            if a != b:
                graph[(a, b)].extend(examples)
        yield level, graph


def relpath(file):
    rel = os.path.relpath(file)
    return file if rel.startswith("..") else rel


def report_scc(members, graph, out, indent="  "):
    succ = defaultdict(set)
    for a, b in graph:
        succ[a].add(b)
    cycle = shortest_cycle(members, succ)
    out(f"{indent}members ({len(members)}): {', '.join(display(m) for m in members)}")
    out(f"{indent}a shortest cycle: {' -> '.join(display(m) for m in cycle)}")
    inside = set(members)
    for (a, b), examples in sorted(graph.items()):
        if a in inside and b in inside:
            out(f"{indent}{display(a)} -> {display(b)}: {len(examples)} use(s)")
            for file, line, text, note in examples[:3]:
                extra = f"  ({note})" if note else ""
                out(f"{indent}    {relpath(file)}:{line}: {text}{extra}")
            if len(examples) > 3:
                out(f"{indent}    ... and {len(examples) - 3} more")


def check_crate(crate, out):
    """Prints the crate's verdict; returns its cycles, [(level, [member, ...])]."""
    edges = crate.edges()
    cycles = []
    for level, graph in level_graphs(crate, edges):
        nodes = sorted({level} | {level + (c,) for c in crate.modules[level].children})
        succ = defaultdict(set)
        for a, b in graph:
            succ[a].add(b)
        for scc in tarjan(nodes, succ):
            if len(scc) < 2:
                continue
            cycles.append((level, scc))
            where = "the crate root" if not level else f"module {display(level)}"
            out(f"{crate.label}: cycle among the children of {where} ({relpath(crate.modules[level].file)}):")
            report_scc(scc, graph, out)
    if cycles:
        file_succ = defaultdict(set)
        for a, b in edges:
            file_succ[a].add(b)
        file_sccs = [s for s in tarjan(sorted(crate.modules), file_succ) if len(s) > 1]
        for scc in file_sccs:
            out(f"{crate.label}: detail, a file-level import cycle of {len(scc)} files:")
            for m in scc:
                out(f"    {display(m)} ({relpath(crate.modules[m].file)})")
            out(f"  a shortest cycle: {' -> '.join(display(m) for m in shortest_cycle(scc, file_succ))}")
        out(f"{crate.label}: {len(crate.modules)} modules, {len(edges)} edges, {len(cycles)} cycle(s)")
    else:
        out(f"{crate.label}: {len(crate.modules)} modules, {len(edges)} edges, no cycle")
    return cycles


def crate_roots(src_dir):
    roots = []
    for name in ("lib.rs", "main.rs"):
        f = os.path.join(src_dir, name)
        if os.path.isfile(f):
            roots.append(f)
    bin_dir = os.path.join(src_dir, "bin")
    if os.path.isdir(bin_dir):
        for entry in sorted(os.listdir(bin_dir)):
            f = os.path.join(bin_dir, entry)
            if entry.endswith(".rs") and os.path.isfile(f):
                roots.append(f)
            elif os.path.isfile(os.path.join(f, "main.rs")):
                roots.append(os.path.join(f, "main.rs"))
    return roots


def check_dirs(dirs, out, err, cfg_test=False):
    """Checks every crate of every src dir; returns the number of cycles (None: usage error)."""
    total = 0
    for d in dirs:
        if not os.path.isdir(d):
            err(f"module-cycles: {d}: not a directory")
            return None
        roots = crate_roots(d)
        if not roots:
            err(f"module-cycles: {d}: no lib.rs, main.rs or bin/*.rs")
            return None
        for root in roots:
            crate = Crate(relpath(root), root, lambda msg: err(f"module-cycles: warning: {msg}"), cfg_test)
            total += len(check_crate(crate, out))
    return total


# ---- self-test -------------------------------------------------------------

# name: (files under src/, {crate root: (modules, cycles)} by default, the
# same with --cfg-test).
SELF_TEST = {
    # No cycle. lib.rs declares and re-exports (a child's use of a lib.rs
    # re-export goes to its origin); b uses a function lib.rs defines, which
    # lib.rs's own code does not pair with a use of b; crate:: in comments,
    # doc links, strings, raw strings and after char literals and lifetimes
    # counts for nothing; `super::` in an inline module is the file itself
    # and `super::super::` the file's parent; #[cfg(test)] code (which would close a cycle) is
    # left out; main.rs is a crate of its own whose crate:: names its own
    # modules, and its use of the library by name is no edge.
    "acyclic": (
        {
            "lib.rs": "//! See [`crate::b::Thing`].\npub mod a;\npub mod b;\npub use b::Thing;\n"
            "pub fn root_helper() -> u8 { 1 }\n",
            "a/mod.rs": "mod x;\nmod y;\npub use x::X;\n/// [`crate::a::x::X`]\npub fn f() { let _ = y::Y; }\n",
            "a/x.rs": "use super::y::Y;\nuse crate::{b::{self, Thing}, Thing as T2};\n"
            "pub struct X(pub Y);\nfn g() { let _ = \"crate::a::y::Y super::y\"; b::h(); }\n"
            "mod inner {\n    use super::*;\n    fn k() { super::super::f() }\n}\n",
            "a/y.rs": "pub struct Y;\n/* crate::a::x::X /* nested */ crate::a::x::X */\n"
            "mod inner {\n    fn k() -> super::Y { super::Y }\n}\n"
            "fn q() -> char { '\\'' }\nfn s<'a>(_: &'a str) -> &'static str { \"crate::a::x::X \\\" crate::a::x::X\" }\n"
            "fn t() -> u8 { b'\"' }\n"
            "#[cfg(test)]\nmod tests {\n    use crate::a::x::X;\n}\n"
            "#[cfg(test)]\n#[allow(dead_code)]\nfn helper() -> crate::a::x::X { crate::a::x::X(Y) }\n"
            "#[cfg(all(test, unix))]\nuse crate::a::x::{X as X2};\n"
            "#[cfg(test)]\nmod more_tests;\n",
            "a/y/more_tests.rs": "use crate::a::x::X;\n",
            "b.rs": "pub struct Thing<'a>(&'a str);\npub fn h() -> u8 { let _ = r#\"crate::a::X\"#; crate::root_helper() }\n"
            "// crate::a::X\n",
            "main.rs": "mod cli;\nmod run;\nfn main() { cli::start(); }\n",
            "cli.rs": "pub fn start() { crate::run::go(); }\n",
            "run.rs": "pub fn go() { let _ = acyclic::a::f; }\n",
        },
        {"lib.rs": (5, []), "main.rs": (3, [])},
        {"lib.rs": (6, [["a", "a::x", "a::y"]]), "main.rs": (3, [])},
    ),
    # A cycle through super:: between two siblings in folder a.
    "super_cycle": (
        {
            "lib.rs": "pub mod a;\n",
            "a/mod.rs": "mod x;\nmod y;\n",
            "a/x.rs": "pub struct X;\npub fn fx() -> super::y::Y { super::y::Y }\n",
            "a/y.rs": "use super::x::X;\npub struct Y;\npub fn fy() -> X { X }\n",
        },
        {"lib.rs": (4, [["a::x", "a::y"]])},
        None,
    ),
    # A cycle through crate:: between two top-level modules, one side
    # through lib.rs's and b/mod.rs's re-exports.
    "crate_cycle": (
        {
            "lib.rs": "pub mod a;\npub mod b;\npub use b::B;\n",
            "a.rs": "pub struct A;\npub fn fa() -> crate::B { crate::B }\n",
            "b/mod.rs": "mod inner;\npub use inner::B;\n",
            "b/inner.rs": "use crate::a::{A};\npub struct B;\npub fn fb() -> A { A }\n",
        },
        {"lib.rs": (4, [["a", "b"]])},
        None,
    ),
    # lib.rs defines the state a module uses while lib.rs's own code calls
    # into that module: a cycle through the crate root.
    "root_cycle": (
        {
            "lib.rs": "pub mod routes;\npub struct AppState;\npub fn app(s: AppState) { routes::router(s) }\n",
            "routes.rs": "use crate::AppState;\npub fn router(_: AppState) {}\n",
        },
        {"lib.rs": (2, [["crate", "routes"]])},
        None,
    ),
}


def self_test():
    failures = []
    scratch = tempfile.mkdtemp(prefix="module-cycles-")
    try:
        for name, (files, expected, expected_cfg_test) in SELF_TEST.items():
            src = os.path.join(scratch, name, "src")
            for rel, text in files.items():
                path = os.path.join(src, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            for cfg_test, want in ((False, expected), (True, expected_cfg_test)):
                if want is None:
                    continue
                warnings = []
                lines = []
                found = {}
                for root in crate_roots(src):
                    crate = Crate(os.path.relpath(root, src), root, warnings.append, cfg_test)
                    cycles = check_crate(crate, lines.append)
                    found[crate.label] = (len(crate.modules), sorted([display(m) for m in scc] for _, scc in cycles))
                ok = found == want and not warnings
                verdict = "a cycle" if any(c for _, c in found.values()) else "no cycle"
                label = name + (" --cfg-test" if cfg_test else "")
                print(f"self-test {label}: {verdict}{'' if ok else '  <-- MISMATCH'}")
                if not ok:
                    print(f"  expected (modules, cycles) per crate: {want}")
                    print(f"  found: {found}")
                    for line in lines + [f"warning: {w}" for w in warnings]:
                        print(f"  | {line}")
                    failures.append(label)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failures:
        print(f"self-test: FAILED: {', '.join(failures)}")
        return 1
    print(f"self-test: ok ({len(SELF_TEST)} scratch crates)")
    return 0


def main(argv):
    parser = argparse.ArgumentParser(
        description="Fails (exit 1) when a Rust crate's modules import each other in a cycle; see the header.")
    parser.add_argument("src_dirs", nargs="*", metavar="SRC_DIR", help="a package's src/ directory")
    parser.add_argument("--self-test", action="store_true", help="check the checker on scratch crates")
    parser.add_argument("--cfg-test", action="store_true",
                        help="include #[cfg(test)] code (left out by default, as cargo-modules does)")
    args = parser.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.src_dirs:
        parser.print_usage(sys.stderr)
        return 2
    cycles = check_dirs(args.src_dirs, print, lambda m: print(m, file=sys.stderr), args.cfg_test)
    if cycles is None:
        return 2
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
