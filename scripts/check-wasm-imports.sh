#!/usr/bin/env bash
# Usage: scripts/check-wasm-imports.sh FILE.wasm
# Lists the import section of a WebAssembly module (no wabt needed) and
# fails if the module imports anything: the idemkey core must run on any
# host without glue.
set -euo pipefail

if [[ $# -ne 1 || ! -f $1 ]]; then
    echo "usage: $0 FILE.wasm" >&2
    exit 2
fi

exec python3 - "$1" <<'PY'
import sys

path = sys.argv[1]
data = open(path, "rb").read()
pos = 0


def fail(msg):
    print(f"check-wasm-imports: {path}: {msg}", file=sys.stderr)
    sys.exit(2)


def byte():
    global pos
    if pos >= len(data):
        fail("truncated module")
    b = data[pos]
    pos += 1
    return b


def leb():
    result = shift = 0
    while True:
        b = byte()
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result


def name():
    global pos
    n = leb()
    s = data[pos:pos + n]
    if len(s) != n:
        fail("truncated name")
    pos += n
    return s.decode("utf-8", "replace")


def limits():
    flags = byte()
    lo = leb()
    hi = leb() if flags & 1 else None
    return f"{lo}..{'' if hi is None else hi}"


if data[:4] != b"\0asm":
    fail("not a WebAssembly module (bad magic)")
if data[4:8] != b"\x01\0\0\0":
    fail("unsupported WebAssembly version")
pos = 8
VALTYPES = {0x7F: "i32", 0x7E: "i64", 0x7D: "f32", 0x7C: "f64", 0x7B: "v128",
            0x70: "funcref", 0x6F: "externref"}
imports = []
exports = []
while pos < len(data):
    section = byte()
    size = leb()
    end = pos + size
    if section == 2:  # import section
        for _ in range(leb()):
            module, field = name(), name()
            kind = byte()
            if kind == 0:
                desc = f"func (type {leb()})"
            elif kind == 1:
                ref = byte()
                desc = f"table {VALTYPES.get(ref, hex(ref))} {limits()}"
            elif kind == 2:
                desc = f"memory {limits()}"
            elif kind == 3:
                vt, mut = byte(), byte()
                desc = f"global {'mut ' if mut else ''}{VALTYPES.get(vt, hex(vt))}"
            elif kind == 4:
                byte()
                desc = f"tag (type {leb()})"
            else:
                fail(f"unknown import kind {kind:#x}")
            imports.append(f"{module}.{field}: {desc}")
    elif section == 7:  # export section
        for _ in range(leb()):
            field = name()
            byte()
            leb()
            exports.append(field)
    pos = end
if pos != len(data):
    fail("section runs past the end of the module")

print(f"{path}: {len(data)} bytes, {len(exports)} exports ({', '.join(exports)})")
if imports:
    print(f"FAIL: {len(imports)} import(s); the module needs these from its host:")
    for line in imports:
        print(f"  {line}")
    sys.exit(1)
print("OK: no imports")
PY
