# Sourced by hooks: a copy of the repository outside its usual place, with
# nothing beside it.
#
# alone_copy: prints the path of a fresh copy of this checkout's files (the
# tracked ones and the untracked ones git does not ignore, as the working
# tree has them, so uncommitted edits are tested too; no .git) in a new
# temporary folder that holds nothing else. A script run from there that
# reads a path outside the repository (a folder beside it) finds nothing,
# as on a user's fresh clone, and fails in the test command rather than for
# the user. Remove it with alone_remove COPY. Takes well under a
# second (a few MB of sources; no build: give the scripts the binaries the
# checkout built, which come from the same sources).
alone_copy() {
    local root here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    root=$(mktemp -d /tmp/idemkey-alone.XXXXXX)
    # The postgres OS user must reach a cluster that a bench script makes
    # under the copy (the tests run as root).
    chmod 755 "$root"
    mkdir "$root/idemkey"
    git -C "$here" ls-files -z --cached --others --exclude-standard |
        tar -C "$here" --null --ignore-failed-read -T - -cf - 2>/dev/null |
        tar -C "$root/idemkey" -xf -
    [[ -x $root/idemkey/scripts/test.sh ]] || {
        echo "alone_copy: copying $here to $root/idemkey failed" >&2
        return 1
    }
    printf '%s\n' "$root/idemkey"
}

# alone_remove COPY: removes a copy made by alone_copy and its folder.
alone_remove() {
    case $1 in
    /tmp/idemkey-alone.*/idemkey) rm -rf -- "$(dirname "$1")" ;;
    *) echo "alone_remove: not a copy of alone_copy: $1" >&2 ;;
    esac
}
