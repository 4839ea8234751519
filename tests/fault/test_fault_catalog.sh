#!/usr/bin/env bash
# test_fault_catalog.sh - a catalog the disk fails under says so: an
# open(2) of catalog.db that fails with EIO (a store filesystem shut down
# under the daemon) is "Input/output error", not "Permission denied"; a
# read that fails is EIO too, never "Bad message"; a store path past
# SQLite's 511 bytes is "File name too long", not "Permission denied".
# Faults come from strace --inject on matctl (skips without it).
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
command -v strace >/dev/null || { echo "skip: no strace"; exit 77; }
strace -qq -e trace=getpid -e inject=getpid:error=EIO:when=1 -o /dev/null \
  true 2>/dev/null || { echo "skip: strace without --inject"; exit 77; }
tmp=$(mktemp -d /tmp/mf-faultcat.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }

mkdir -p "$tmp/p/in"
echo a >"$tmp/p/in/a.txt"
printf 'name: f\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$tmp/p/f.yaml"
store=$tmp/store
"$matctl" --store "$store" warm "$tmp/p/f.yaml" >/dev/null 2>&1 || fail "warm"

# with_fault SYSCALL: matctl ls with every SYSCALL on catalog.db failing EIO
with_fault() {
  strace -f -qq -o /dev/null -P "$store/catalog.db" \
    -e inject="$1":error=EIO "$matctl" --store "$store" ls 2>&1
}
for call in openat pread64; do
  out=$(with_fault "$call") && fail "$call EIO: matctl ls succeeded"
  grep -q "Input/output error" <<<"$out" ||
    fail "$call EIO: matctl ls says: $out"
done
pass "a catalog whose opens or reads fail with EIO says Input/output error"

long=$tmp/$(printf 'd%.0s' $(seq 1 250))/$(printf 'e%.0s' $(seq 1 250))
mkdir -p "$long"
out=$("$matctl" --store "$long" ls 2>&1) && fail "a 530-byte catalog path opened"
grep -q "File name too long" <<<"$out" || fail "a long store path says: $out"
pass "a store path past SQLite's limit says File name too long"
