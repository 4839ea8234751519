#!/usr/bin/env bash
# test_lost_catalog.sh - a lost or replaced catalog never costs a committed
# shard, through matctl alone: after catalog.db is deleted, or replaced by
# an empty file, `matctl stat SPEC` then `matctl gc` keep every shard file
# and serve every shard as materialized with its exact bytes and no stage
# run; a catalog that lost its runs and shard states (as a replaced one
# whose snapshots were registered again) and one that lost a snapshot row
# get them back from gc instead of losing the files; several matctl
# started at once on a lost catalog index it once.
# Skips (77) only without the sqlite3 shell.
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
command -v sqlite3 >/dev/null || { echo "skip: no sqlite3 shell"; exit 77; }
tmp=$(mktemp -d /tmp/mf-lost.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
store=$tmp/store
m() { "$matctl" --store "$store" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
calls() { wc -l <"$tmp/p/calls"; }
store_files() { find "$store/snapshots" -name 'shard-*.mfs' | sort; }
sql() { sqlite3 -cmd 'PRAGMA foreign_keys = ON' "$store/catalog.db" "$@"; }

mkdir -p "$tmp/p/in"
for f in a b c; do seq 1 2000 | sed "s/^/$f /" >"$tmp/p/in/$f.txt"; done
cat >"$tmp/p/lost.yaml" <<'YAML'
name: lost
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo x >> calls; cat; echo "shard $MATFS_SHARD"']
chunk_size: 4KiB
YAML
spec=$tmp/p/lost.yaml
m warm "$spec" >/dev/null || fail "warm"
[ "$(calls)" -eq 3 ] || fail "warm ran $(calls) stages"
for k in 0 1 2; do m cat lost $k >"$tmp/want$k" || fail "cat $k"; done
files=$(store_files)
[ "$(echo "$files" | wc -l)" -eq 3 ] || fail "store files: $files"
cp -a "$store" "$tmp/good"
restore() { rm -rf "$store" && cp -a "$tmp/good" "$store"; }

# intact CONTEXT: the store's files are those warm wrote, every shard is
# materialized and reads its exact bytes, no stage ran, fsck is clean
intact() {
  [ "$(store_files)" = "$files" ] || fail "$1: store files now:
$(store_files)"
  m stat lost --json | "$py" -c '
import json, sys
v = json.load(sys.stdin)
assert [s["state"] for s in v["shards"]] == ["materialized"] * 3, v
' || fail "$1: $(m stat lost)"
  for k in 0 1 2; do
    m cat lost $k | cmp -s - "$tmp/want$k" || fail "$1: shard $k differs"
  done
  [ "$(calls)" -eq 3 ] || fail "$1: $(( $(calls) - 3 )) stage runs"
  m fsck >/dev/null || fail "$1: fsck: $(m fsck)"
}

# --- (2) and (3): stat SPEC, then gc, on a deleted or 0-byte catalog ---
for how in deleted emptied; do
  restore
  rm -f "$store"/catalog.db*
  [ $how = emptied ] && : >"$store/catalog.db"
  m stat "$spec" >/dev/null || fail "$how: stat SPEC"
  m gc >"$tmp/gc.out" || fail "$how: gc"
  [ "$(head -n 1 "$tmp/gc.out")" = "removed 0 snapshot folders, 0 run folders, 0 shard files, 0 stale reuse hints" ] ||
    fail "$how: gc said: $(cat "$tmp/gc.out")"
  intact "catalog $how"
  pass "catalog $how, then stat SPEC and gc: nothing removed or recomputed"
done

# --- a catalog that knows the snapshot but not its runs: gc adopts ---
# (as one that was replaced while the snapshot was registered again)
restore
sql "DELETE FROM runs; UPDATE shards SET state = 'absent', run_id = NULL,
     raw_bytes = 0, stored_bytes = 0, chunks = 0" || fail "sqlite3"
out=$(m stat lost --json) || fail "rows not absent"
grep -q '"materialized":0' <<<"$out" || fail "rows not absent"
m gc >"$tmp/gc.out" || fail "gc"
grep -q "^recorded 3 shard files and 0 snapshot folders the catalog did not know" "$tmp/gc.out" ||
  fail "gc said: $(cat "$tmp/gc.out")"
intact "runs the catalog never knew"
pass "gc records the shard files of runs the catalog never knew"

# --- a catalog that lost a snapshot row: fsck says so, gc adopts ---
restore
sql "DELETE FROM snapshots" || fail "sqlite3"
m fsck >"$tmp/fsck.out" && fail "fsck found nothing"
grep -q "orphan-snapshot: .*: fingerprint folder unknown to the catalog, with a snapshot.metadata: 'matctl gc' records its shard files" "$tmp/fsck.out" ||
  fail "fsck said: $(cat "$tmp/fsck.out")"
m gc >"$tmp/gc.out" || fail "gc"
grep -q "^recorded 3 shard files and 1 snapshot folders" "$tmp/gc.out" ||
  fail "gc said: $(cat "$tmp/gc.out")"
intact "a lost snapshot row"
pass "gc records a fingerprint folder the catalog lost, with its shards"

# --- several matctl at once on a lost catalog ---
restore
rm -f "$store"/catalog.db*
pids=()
for c in "ls" "gc" "stat $spec" "gc" "ls" "stat lost"; do
  m $c >"$tmp/out.${#pids[@]}" 2>&1 & pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || fail "concurrent command $i: $(cat "$tmp/out.$i")"
done
[ "$(sql 'SELECT COUNT(*) FROM runs')" = 1 ] || fail "runs: $(sql 'SELECT * FROM runs')"
[ "$(sql 'SELECT COUNT(*) FROM snapshots')" = 1 ] || fail "snapshots"
intact "concurrent commands"
pass "six matctl started at once on a lost catalog index it once"
echo "all lost-catalog tests passed"
