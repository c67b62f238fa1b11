#!/usr/bin/env bash
# The two publishable crates, idemkey-core and idemkey, are ready for
# crates.io:
#   - `cargo package` makes both .crate files and verifies them: it unpacks
#     each and builds it from its packaged sources alone (a file missing
#     from the .crate, a path that leaves the crate, fails here). They are
#     packaged in one command: idemkey depends on idemkey-core, which is not
#     on the registry yet, and cargo (1.90 and later) builds it from the
#     other package being packaged, through a local registry overlay.
#     `--allow-dirty` because earlier steps of a test run may leave files in
#     the work tree (lock files copied, build outputs); the clone CI tests
#     is clean anyway, and the check is on what the .crate holds.
#   - each .crate holds its README.md, a Cargo.toml with description,
#     license, readme, (no placeholder repository), keywords, categories and docs.rs's
#     `all-features = true`, no path dependency, and no file outside the
#     crate (no `../core`);
#   - every file idemkey's and idemkey-core's sources pull in at compile
#     time (`include_str!`, `include_bytes!`, `#[path]`: the SQL statements,
#     the migrations, the Lua scripts) is inside the crate and in its
#     .crate, so the published crate builds from its own contents;
#   - rustdoc with every feature of idemkey and warnings denied (the
#     workspace's rustdoc step builds default features only, so the
#     feature-gated modules' links are checked here). Without `--cfg
#     docsrs`: that turns on a nightly-only attribute.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

command -v python3 >/dev/null || { echo "58-package.sh: python3 is required" >&2; exit 1; }

cargo package --allow-dirty -p idemkey-core -p idemkey

python3 - "$CARGO_TARGET_DIR/package" <<'EOF'
import pathlib, re, subprocess, sys, tarfile, tomllib

package_dir = pathlib.Path(sys.argv[1])
failures = []

def fail(message):
    failures.append(message)

INCLUDE = re.compile(r'(?:include_str|include_bytes)!\(\s*"([^"]+)"\s*\)|#\[path\s*=\s*"([^"]+)"\]')

def compile_time_files(crate_dir, src):
    """Paths, relative to the crate, that its sources include at compile time."""
    found = set()
    for rs in sorted(src.rglob("*.rs")):
        for m in INCLUDE.finditer(rs.read_text()):
            target = m.group(1) or m.group(2)
            # Both are relative to the including file's directory (a
            # #[path] in a non-mod.rs file is relative to a directory named
            # after it; none of those here).
            resolved = (rs.parent / target).resolve()
            try:
                found.add(str(resolved.relative_to(crate_dir.resolve())))
            except ValueError:
                fail(f"{rs}: includes {target}, outside {crate_dir}")
    return found

for name, crate_dir in [("idemkey-core", "core"), ("idemkey", "idemkey")]:
    crate_dir = pathlib.Path(crate_dir)
    version = tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"]
    path = package_dir / f"{name}-{version}.crate"
    if not path.exists():
        fail(f"{path} was not made")
        continue
    prefix = f"{name}-{version}/"
    with tarfile.open(path) as tar:
        members = tar.getnames()
        manifest = tomllib.loads(tar.extractfile(prefix + "Cargo.toml").read().decode())
    files = set()
    for member in members:
        if not member.startswith(prefix) or ".." in pathlib.PurePosixPath(member).parts:
            fail(f"{path.name}: {member} is outside the crate")
        else:
            files.add(member[len(prefix):])
    if "README.md" not in files:
        fail(f"{path.name}: no README.md")
    package = manifest.get("package", {})
    for field in ["description", "license", "readme", "keywords", "categories"]:
        if not package.get(field):
            fail(f"{path.name}: Cargo.toml has no {field}")
    # No repository until the project has a public home (see the workspace
    # Cargo.toml); never a placeholder that points nowhere.
    repository = package.get("repository", "")
    if re.search(r"\.(invalid|example|test)(/|$)|example\.(com|org|net)", repository):
        fail(f"{path.name}: repository {repository} is a placeholder")
    if package.get("readme") and package["readme"] not in files:
        fail(f"{path.name}: readme {package['readme']} is not in the crate")
    if len(package.get("keywords", [])) > 5:
        fail(f"{path.name}: more than 5 keywords")
    docs_rs = package.get("metadata", {}).get("docs", {}).get("rs", {})
    if docs_rs.get("all-features") is not True:
        fail(f"{path.name}: no [package.metadata.docs.rs] all-features = true")
    for table in ["dependencies", "build-dependencies"]:
        for dep, spec in manifest.get(table, {}).items():
            if isinstance(spec, dict) and "path" in spec:
                fail(f"{path.name}: {table}.{dep} is a path dependency")
    included = compile_time_files(crate_dir, crate_dir / "src")
    for file in sorted(included - files):
        fail(f"{path.name}: src includes {file}, which the .crate lacks")
    # Every committed file under src/ (the .sql and .lua files that macros
    # include too, whose names the pattern above cannot see).
    tracked = subprocess.run(["git", "ls-files", "--", "src"], cwd=crate_dir,
                             check=True, capture_output=True, text=True).stdout.split()
    if not tracked:
        fail(f"git lists no file under {crate_dir}/src")
    for file in sorted(set(tracked) - files):
        fail(f"{path.name}: {crate_dir}/{file} is not in the .crate")
    print(f"{path.name}: {len(files)} files, README.md, metadata, all {len(tracked)} "
          f"files of src/ ({len(included)} included by literal path)")

if failures:
    for message in failures:
        print(f"58-package.sh: FAILED: {message}", file=sys.stderr)
    sys.exit(1)
EOF

RUSTDOCFLAGS="-D warnings" cargo doc -p idemkey --all-features --no-deps
# And with no feature at all: no link may lean on a feature-gated item.
RUSTDOCFLAGS="-D warnings" cargo doc -p idemkey --no-default-features --no-deps
echo "58-package: idemkey-core and idemkey package, and build from their packaged sources, with their READMEs and every included file;" \
    "rustdoc --all-features has no warnings"
