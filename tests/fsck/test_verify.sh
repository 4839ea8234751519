#!/usr/bin/env bash
# test_verify.sh - a shard file in the wrong place is never served: shard
# 0's file copied over shard 1's (same sizes, the catalog kept) is refused
# on read, which recomputes shard 1's true bytes, and reported by `matctl
# verify`; an older computation's file restored over the current one (a
# valid file of the right shard, other sizes) is reported by verify as
# fsck reports it. verify expires what it reports, so fsck is clean after
# it (and gc of the runs left empty).
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
tmp=$(mktemp -d /tmp/mf-verify.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
store=$tmp/store
m() { "$matctl" --store "$store" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
calls() { wc -l <"$tmp/p/$1.calls"; }
# file NAME SHARD: the path of a materialized shard's file in the store
file() {
  local fp run
  fp=$(m fingerprint "$tmp/p/$1.yaml") || fail "fingerprint $1"
  run=$(m stat "$1" --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["shards"][int(sys.argv[1])]["run_id"])' "$2") ||
    fail "stat $1"
  echo "$store/snapshots/$fp/$run/shard-$(printf %05d "$2").mfs"
}

# --- twins: two shards of the same size, stored uncompressed ---
mkdir -p "$tmp/p/in"
seq 1 3000 | sed 's/^/a line /' >"$tmp/p/in/a.txt"
seq 1 3000 | sed 's/^/b line /' >"$tmp/p/in/b.txt"
cat >"$tmp/p/twins.yaml" <<'YAML'
name: twins
inputs: in/*.txt
shards: 2
stages:
  - exec: [/bin/sh, -c, 'echo call >> twins.calls; cat; echo "shard $MATFS_SHARD"']
compression: none
chunk_size: 4KiB
YAML
m warm "$tmp/p/twins.yaml" >/dev/null || fail "warm twins"
for k in 0 1; do m cat twins $k >"$tmp/want.$k" || fail "cat twins $k"; done
cmp -s "$tmp/want.0" "$tmp/want.1" && fail "the twins are identical"
[ "$(stat -c %s "$tmp/want.0")" -eq "$(stat -c %s "$tmp/want.1")" ] ||
  fail "the twins differ in size"
f0=$(file twins 0) f1=$(file twins 1)
[ "$(stat -c %s "$f0")" -eq "$(stat -c %s "$f1")" ] || fail "the twins' files differ in size"
[ "$(calls twins)" -eq 2 ] || fail "warm ran $(calls twins) stages"

# a read of shard 1 never gets shard 0's bytes: it recomputes shard 1
cp "$f0" "$f1"
m cat twins 1 >"$tmp/got.1" || fail "cat twins 1 over shard 0's file"
cmp -s "$tmp/got.1" "$tmp/want.0" && fail "shard 0's bytes served as shard 1"
cmp -s "$tmp/got.1" "$tmp/want.1" || fail "cat twins 1 gave other bytes"
[ "$(calls twins)" -eq 3 ] || fail "expected one recomputation, got $(($(calls twins) - 2))"
m cat twins 0 | cmp -s - "$tmp/want.0" || fail "shard 0 changed"
pass "shard 0's file under shard 1's name is refused on read; shard 1 is recomputed"

# verify reports it (and expires it); the next read recomputes
f1=$(file twins 1)
cp "$f0" "$f1"
m verify twins >"$tmp/verify.out"; rc=$?
[ $rc -eq 1 ] || fail "verify exited $rc over a copied shard: $(cat "$tmp/verify.out")"
grep -q '^shard 0: ok$' "$tmp/verify.out" &&
  grep -q '^shard 1: corrupt' "$tmp/verify.out" || fail "verify said: $(cat "$tmp/verify.out")"
m gc >/dev/null && m fsck >/dev/null || fail "fsck after verify and gc: $(m fsck)"
m stat twins --json | "$py" -c '
import json, sys
v = json.load(sys.stdin)
assert [s["state"] for s in v["shards"]] == ["materialized", "absent"], v
' || fail "verify did not expire shard 1"
n=$(calls twins)
m cat twins 1 | cmp -s - "$tmp/want.1" || fail "cat twins 1 after verify"
[ "$(calls twins)" -eq $((n + 1)) ] || fail "expected one recomputation after verify"
m verify twins >"$tmp/verify.out" || fail "verify after healing: $(cat "$tmp/verify.out")"
pass "verify reports shard 0's file under shard 1's name"

# --- grows: every computation is 1000 bytes longer than the last ---
cat >"$tmp/p/grows.yaml" <<'YAML'
name: grows
inputs: in/a.txt
stages:
  - exec: [/bin/sh, -c, 'echo call >> grows.calls; head -c $(($(wc -l <grows.calls) * 1000)) /dev/zero']
YAML
m warm "$tmp/p/grows.yaml" >/dev/null || fail "warm grows"
cp "$(file grows 0)" "$tmp/old.mfs"
m rm grows >/dev/null || fail "rm grows"
m warm "$tmp/p/grows.yaml" >/dev/null || fail "warm grows again"
[ "$(m cat grows 0 | wc -c)" -eq 2000 ] || fail "grows did not grow"
# a valid file of the same shard, restored from an older computation
cp "$tmp/old.mfs" "$(file grows 0)"
m fsck --json >"$tmp/fsck.json"; rc=$?
[ $rc -eq 1 ] && grep -q '"kind":"size"' "$tmp/fsck.json" ||
  fail "fsck does not see the size mismatch: rc=$rc $(cat "$tmp/fsck.json")"
m verify grows >"$tmp/verify.out"; rc=$?
[ $rc -eq 1 ] || fail "verify exited $rc over a file of other sizes: $(cat "$tmp/verify.out")"
grep -q '^shard 0: corrupt' "$tmp/verify.out" || fail "verify said: $(cat "$tmp/verify.out")"
m gc >/dev/null && m fsck >/dev/null || fail "fsck after verify and gc: $(m fsck)"
[ "$(m cat grows 0 | wc -c)" -eq 3000 ] || fail "grows was not recomputed"
pass "verify reports a file whose sizes disagree with the catalog, as fsck does"
echo "all verify tests passed"
