#!/usr/bin/env bash
# test_fsck.sh - matctl fsck, fsck --rebuild and expire end to end, on a
# store built with matctl warm from small /bin/sh stages that count their
# calls: each kind of damage is reported (and fsck changes nothing), gc and
# verify repair what they should, the catalog is rebuilt after being
# deleted, emptied or overwritten and then lists, states and serves the
# same bytes as before without running a stage, the newer of two copies of
# a shard wins, and expire goes by age.
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
tmp=$(mktemp -d /tmp/mf-fsck.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
store=$tmp/store
m() { "$matctl" --store "$store" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
calls() { wc -l <"$tmp/p/calls"; }

# --- a store with two snapshots: alpha (2 shards, zstd) and beta (snappy) ---
mkdir -p "$tmp/p/in"
for f in a b c; do seq 1 3000 | sed "s/^/$f line /" >"$tmp/p/in/$f.txt"; done
cat >"$tmp/p/alpha.yaml" <<'YAML'
name: alpha
inputs: in/*.txt
shards: 2
stages:
  - exec: [/bin/sh, -c, 'echo alpha >> calls; cat; echo "shard $MATFS_SHARD"']
chunk_size: 4KiB
YAML
cat >"$tmp/p/beta.yaml" <<'YAML'
name: beta
inputs: in/*.txt
shards: 1
stages:
  - exec: [/bin/sh, -c, 'echo beta >> calls; tr a-z A-Z']
compression: snappy
chunk_size: 8KiB
suffix: .txt
YAML
m warm "$tmp/p/alpha.yaml" >/dev/null || fail "warm alpha"
m warm "$tmp/p/beta.yaml" >/dev/null || fail "warm beta"
[ "$(calls)" -eq 3 ] || fail "warm ran $(calls) stages"
A=$(m fingerprint "$tmp/p/alpha.yaml") && B=$(m fingerprint "$tmp/p/beta.yaml") ||
  fail "fingerprint"
for s in "alpha 0" "alpha 1" "beta 0"; do
  m cat $s >"$tmp/want.${s/ /.}" || fail "cat $s"
done
m ls --json >"$tmp/ls.before" || fail "ls --json"
m stat alpha --json >"$tmp/alpha.before" && m stat beta --json >"$tmp/beta.before" ||
  fail "stat --json"
runid() { "$py" -c 'import json,sys; print(json.load(sys.stdin)["shards"][int(sys.argv[1])]["run_id"])' "$2" <"$tmp/$1.before"; }
RA=$(runid alpha 0) RB=$(runid beta 0)
[[ $RA =~ ^[0-9a-f]{32}$ && $RB =~ ^[0-9a-f]{32}$ ]] || fail "run ids '$RA' '$RB'"
fa=$store/snapshots/$A/$RA fb=$store/snapshots/$B/$RB
cp -a "$store" "$tmp/good"
restore() { rm -rf "$store" && cp -a "$tmp/good" "$store"; }

# --- a clean store ---
out=$(m fsck); rc=$?
[ $rc -eq 0 ] && [[ $out == "no problems found in store '$store'" ]] || fail "clean: rc=$rc '$out'"
out=$(m fsck --json); rc=$?
[ $rc -eq 0 ] && [ "$out" = "[]" ] || fail "clean --json: rc=$rc '$out'"
pass "a clean store: exit 0, no problems"

# kinds FILE: the problems of a fsck --json output as "kind fp shard run path"
# lines, sorted, with the fingerprints and run ids of this test named.
kinds() {
  "$py" - "$1" "$A" "$B" "$RA" "$RB" "$store" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
names = dict(zip(sys.argv[2:6], ["A", "B", "RA", "RB"]))
for p in v:
    assert set(p) == {"kind", "fingerprint", "shard", "run", "path", "detail"}, p
    assert p["detail"], p
    assert p["path"] is None or p["path"].startswith(sys.argv[6] + "/"), p
    f = lambda x: names.get(x, x) if x is not None else "-"
    print(p["kind"], f(p["fingerprint"]), f(p["shard"]), f(p["run"]),
          (p["path"] or "-").replace(sys.argv[6], "S").split("/")[-1])
PY
}
# expect "LINES": fsck --json gives exactly these problems and exit 1; the
# text output has one line per problem and says that it changed nothing.
expect() {
  m fsck --json >"$tmp/fsck.json"; local rc=$?
  local got; got=$(kinds "$tmp/fsck.json" | sort) || fail "fsck --json output"
  [ $rc -eq 1 ] || fail "fsck --json exited $rc with: $got"
  [ "$got" = "$(printf '%s\n' "$@" | sort)" ] || fail "fsck found:
$got
expected:
$(printf '%s\n' "$@" | sort)"
  m fsck >"$tmp/fsck.txt"; rc=$?
  [ $rc -eq 1 ] || fail "fsck exited $rc"
  grep -q "^$# problems\? found; fsck changed nothing" "$tmp/fsck.txt" ||
    fail "fsck text: $(cat "$tmp/fsck.txt")"
  grep -q "'matctl gc' removes orphans" "$tmp/fsck.txt" || fail "no repair hint"
}
# tree: every path, type, size and mtime under the store, for "changes
# nothing" (SQLite's -wal and -shm files come and go with a connection)
tree() { (cd "$store" && find . -mindepth 1 -printf '%p %y %s %T@\n' | grep -v 'catalog.db-' | sort; md5sum catalog.db 2>/dev/null); }

# --- damage, one kind at a time ---
rm "$fa/shard-00001.mfs"
expect "missing A 1 RA shard-00001.mfs"
grep -q "^missing: $fa/shard-00001.mfs: shard 1 of 'alpha'" "$tmp/fsck.txt" ||
  fail "missing, text: $(cat "$tmp/fsck.txt")"
m verify alpha >/dev/null
m fsck >/dev/null || fail "verify did not repair a missing shard"
pass "a deleted shard file is reported; verify repairs it"

restore
cp "$fb/shard-00000.mfs" "$fa/shard-00005.mfs"
: >"$fa/shard-00001.tmp"
zero=$(printf '%032d' 5) seven=$(printf '7%.0s' $(seq 64))
mkdir -p "$store/snapshots/$A/$zero" "$store/snapshots/$seven/$zero"
cp "$fb/shard-00000.mfs" "$store/snapshots/$seven/$zero/shard-00000.mfs"
before=$(tree)
expect "orphan-file A 5 RA shard-00005.mfs" "orphan-tmp A 1 RA shard-00001.tmp" \
  "orphan-run A - $zero $zero" "orphan-snapshot $seven - - $seven"
[ "$before" = "$(tree)" ] || fail "fsck changed the store"
m gc >"$tmp/gc.out" || fail "gc"
[ -e "$fa/shard-00005.mfs" ] || [ -e "$store/snapshots/$A/$zero" ] &&
  fail "gc left orphans fsck reported"
# an unknown folder's shard file is data, metadata or not: kept for rm
[ -f "$store/snapshots/$seven/$zero/shard-00000.mfs" ] ||
  fail "gc removed a shard file of an unknown fingerprint folder"
grep -q "kept 1 snapshot folders the catalog does not know" "$tmp/gc.out" ||
  fail "gc: $(cat "$tmp/gc.out")"
m rm "$seven" >/dev/null && [ ! -e "$store/snapshots/$seven" ] || fail "rm $seven"
kinds <(m fsck --json) | grep -v '^orphan-tmp ' && fail "gc left problems"
pass "orphan file, tmp, run and fingerprint folders reported, nothing changed; gc removes them, rm an unknown folder"

restore
truncate -s 1000 "$fb/shard-00000.mfs"
expect "size B 0 RB shard-00000.mfs"
restore
size=$(stat -c %s "$fa/shard-00000.mfs")
printf '\x55' | dd of="$fa/shard-00000.mfs" bs=1 seek=$((size - 20)) conv=notrunc status=none
expect "corrupt A 0 RA shard-00000.mfs"
m verify alpha >/dev/null
m fsck >/dev/null || fail "verify did not repair a corrupt shard"
pass "a truncated and a corrupt shard file are reported"

restore
rm "$store/snapshots/$B/snapshot.metadata"
mv "$store/snapshots/$A" "$tmp/moved"
expect "no-metadata B - - snapshot.metadata" "no-folder A - - $A" \
  "missing A 0 RA shard-00000.mfs" "missing A 1 RA shard-00001.mfs"
restore
echo junk >"$store/snapshots/README"
expect "stray - - - README"
pass "snapshots without folder or metadata, and stray names, are reported"

for how in missing empty garbage; do
  restore
  case $how in
    missing) rm "$store/catalog.db" ;;
    empty) : >"$store/catalog.db" ;;
    garbage) head -c 9000 /dev/urandom >"$store/catalog.db"
             cp "$store/catalog.db" "$tmp/garbage" ;;
  esac
  before=$(tree)
  expect "catalog - - - catalog.db"
  [ "$before" = "$(tree)" ] || fail "fsck changed the store with a $how catalog"
done
[ -e "$store/catalog.db" ] || fail "garbage catalog gone"
out=$("$matctl" --store "$tmp/nostore" fsck 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == "matctl: store '$tmp/nostore': No such file or directory" ]] ||
  fail "no store: rc=$rc '$out'"
[ -e "$tmp/nostore" ] && fail "fsck created a store"
pass "a missing, empty or garbage catalog is one problem; fsck creates nothing"

# --- rebuild ---
# same BEFORE AFTER: ls, or stat, --json outputs agree on what the store holds
same() {
  "$py" - "$1" "$2" <<'PY' || fail "rebuilt catalog differs: $1 $2"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
snap = ["name", "fingerprint", "shards", "materialized", "raw_bytes",
        "stored_bytes", "spec", "compression", "chunk_size", "expire_after",
        "keep"]
shard = ["index", "state", "run_id", "raw_bytes", "stored_bytes", "chunks"]
pick = lambda d, ks: {k: d[k] for k in ks}
if isinstance(a, list):
    assert [pick(s, snap) for s in a] == [pick(s, snap) for s in b], (a, b)
else:
    assert pick(a["snapshot"], snap) == pick(b["snapshot"], snap), (a, b)
    assert [pick(s, shard) for s in a["shards"]] == \
        [pick(s, shard) for s in b["shards"]], (a, b)
PY
}
# rebuilt: the catalog lists, states and serves as before, no stage runs
rebuilt() {
  local n; n=$(calls)
  m ls --json >"$tmp/ls.after" || fail "$1: ls --json"
  same "$tmp/ls.before" "$tmp/ls.after"
  for s in alpha beta; do
    m stat $s --json >"$tmp/$s.after" || fail "$1: stat $s --json"
    same "$tmp/$s.before" "$tmp/$s.after"
  done
  for s in "alpha 0" "alpha 1" "beta 0"; do
    m cat $s | cmp -s - "$tmp/want.${s/ /.}" || fail "$1: cat $s differs"
  done
  [ "$(calls)" -eq "$n" ] || fail "$1: a stage ran after the rebuild"
  m fsck >/dev/null || fail "$1: fsck after the rebuild: $(m fsck)"
}
for how in missing empty garbage fresh; do
  restore
  case $how in
    missing) rm "$store/catalog.db" ;;
    empty) : >"$store/catalog.db" ;;
    garbage) cp "$tmp/garbage" "$store/catalog.db"
             echo "not a wal" >"$store/catalog.db-wal" ;;
    fresh) # any command makes a new catalog where one is missing, and
           # gives it what the store holds before anything else
           rm "$store/catalog.db" && m ls >/dev/null || fail "ls"
           rebuilt "a new catalog indexed on open" ;;
  esac
  m fsck --rebuild >"$tmp/rebuild.out" || fail "$how: rebuild exited $?"
  grep -q "^recovered snapshot alpha $A: 2/2 shards materialized, from 1 run$" "$tmp/rebuild.out" &&
    grep -q "^recovered snapshot beta $B: 1/1 shards materialized" "$tmp/rebuild.out" &&
    grep -q "2 snapshots, 3 shards from 2 runs; 0 items skipped" "$tmp/rebuild.out" ||
    fail "$how: rebuild said: $(cat "$tmp/rebuild.out")"
  aside=$(ls "$store" | grep '^catalog\.db\.corrupt-[0-9]*$')
  case $how in
    missing) [ -z "$aside" ] && grep -q "no old catalog" "$tmp/rebuild.out" ||
               fail "missing: '$aside'" ;;
    empty) [ -f "$store/$aside" ] && [ ! -s "$store/$aside" ] || fail "empty: '$aside'" ;;
    fresh) [ -s "$store/$aside" ] || fail "fresh: '$aside'" ;;
    garbage) cmp -s "$store/$aside" "$tmp/garbage" || fail "garbage not kept aside"
             grep -q "not a wal" "$store/$aside-wal" || fail "wal not kept aside"
             grep -q "moved the old catalog aside to $store/$aside" "$tmp/rebuild.out" ||
               fail "rebuild did not say where the old catalog went" ;;
  esac
  rebuilt "$how"
done
pass "rebuild after a missing, empty, garbage or new empty catalog: same snapshots, states, sizes, run ids and bytes, no stage run"

# two runs hold shard 0 of beta: the newer file wins, the older is an orphan
restore
R2=ffffffffffffffffffffffffffffffff
cp -a "$fb" "$store/snapshots/$B/$R2"
touch -d '1 hour ago' "$fb/shard-00000.mfs"
rm "$store/catalog.db"
m fsck --rebuild >"$tmp/rebuild.out" || fail "rebuild with two copies"
grep -q "^skipped $fb/shard-00000.mfs: an older copy: run $R2" "$tmp/rebuild.out" ||
  fail "older copy not reported: $(cat "$tmp/rebuild.out")"
[ "$(m stat beta --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["shards"][0]["run_id"])')" = $R2 ] ||
  fail "the older copy won"
expect "orphan-run B - RB $RB"
m gc >/dev/null && m fsck >/dev/null || fail "gc after rebuild"
m cat beta 0 | cmp -s - "$tmp/want.beta.0" || fail "newer copy bytes"
pass "the newer of two copies wins; the older is left for gc"

# what cannot be recovered is skipped with its reason
restore
printf 'matfs-snapshot 1\nfingerprint %s\nname beta\n' "$B" >"$store/snapshots/$B/snapshot.metadata"
truncate -s 500 "$fa/shard-00001.mfs"
rm "$store/catalog.db"
m fsck --rebuild >"$tmp/rebuild.out" || fail "rebuild with damage"
grep -q "^skipped $store/snapshots/$B/snapshot.metadata: snapshot.metadata: no 'spec_path' line" "$tmp/rebuild.out" &&
  grep -q "^skipped $fa/shard-00001.mfs: does not open: Bad message" "$tmp/rebuild.out" &&
  grep -q "^recovered snapshot alpha $A: 1/2 shards" "$tmp/rebuild.out" ||
  fail "skips: $(cat "$tmp/rebuild.out")"
m ls --json | "$py" -c 'import json,sys; v=json.load(sys.stdin); assert [s["name"] for s in v]==["alpha"], v' ||
  fail "ls after a partial rebuild"
n=$(calls)
m cat alpha 1 | cmp -s - "$tmp/want.alpha.1" || fail "recomputed shard differs"
m cat alpha 0 | cmp -s - "$tmp/want.alpha.0" || fail "recovered shard differs"
[ "$(calls)" -eq $((n + 1)) ] || fail "expected one recomputation"
pass "bad metadata and an unreadable shard are skipped with the reason; the shard is recomputed"

# --- expire ---
store=$tmp/store3
cat >"$tmp/p/gamma.yaml" <<'YAML'
name: gamma
inputs: in/a.txt
stages:
  - exec: [cat]
expire_after: 3s
YAML
for s in alpha beta gamma; do m warm "$tmp/p/$s.yaml" >/dev/null || fail "warm $s"; done
out=$(m expire) && [ "$out" = "nothing to expire" ] || fail "expire at once: '$out'"
sleep 3.2
m cat alpha 1 >/dev/null || fail "cat alpha"
out=$(m expire) || fail "expire"
[[ $out == "expired gamma "*" (last read "*" ago)" ]] && [ "$(echo "$out" | wc -l)" -eq 1 ] ||
  fail "expire by expire_after: '$out'"
m expire --older-than 3s --json >"$tmp/expire.json" || fail "expire --older-than"
"$py" -c 'import json,sys; v=json.load(open(sys.argv[1])); assert [s["name"] for s in v]==["beta"], v' \
  "$tmp/expire.json" || fail "expire --older-than: $(cat "$tmp/expire.json")"
m ls --json | "$py" -c 'import json,sys; v=json.load(sys.stdin); assert [s["name"] for s in v]==["alpha"], v' ||
  fail "ls after expire"
out=$(ls "$store/snapshots") && grep -q "$B" <<<"$out" && fail "beta's folder is still there"
out=$(m expire --older-than soon 2>&1); rc=$?
[ $rc -eq 2 ] && [[ $out == "matctl: bad --older-than 'soon'"* ]] || fail "bad duration: rc=$rc '$out'"
m fsck >/dev/null || fail "fsck after expire: $(m fsck)"
pass "expire: by expire_after, and --older-than keeps the recently read"
echo "all fsck tests passed"
