#!/usr/bin/env bash
# test_lost_catalog.sh - a lost or replaced catalog never costs a committed
# shard. Through a real mount: (1) catalog.db (with -wal and -shm) deleted
# between two mounts, and (2) replaced by an empty file: the second mount
# serves every shard as materialized (xattr, size, exact bytes) without
# running the stage again, and the start-up reclaim leaves the store's
# shard files in place; (3) catalog.db deleted while mounted, then matctl
# ls and stat make a new one: every shard still reads its exact bytes
# through the mount (never 0 bytes), with its state and size right, and
# what matctl then does in the new catalog (rm, warm) is what the mount
# serves; with the store's files gone too, every shard is computed again;
# (4) a new catalog made by matctl gc while mounted: the daemon holds its
# registered snapshot there as soon as it uses it, so matctl expire keeps
# the row and matctl still resolves the name.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1 2; do printf 'input %d\n' $k >"$pipes/in/$k.txt"; done
cat >"$pipes/lc.yaml" <<'YAML'
name: lc
inputs: in/*.txt
chunk_size: 16KiB
suffix: .bin
stages:
  - exec: [/bin/sh, -c, 'echo "$MATFS_SHARD" >> calls; cat; seq 1 50000']
YAML
for k in 0 1 2; do
  ( cd "$pipes" && sh -c 'cat; seq 1 50000' <"in/$k.txt" ) >"$tmp/want$k"
done
m() { "$matctl" --store "$store" "$@"; }
ncalls() { calls "$pipes/calls"; }
store_files() { find "$store/snapshots" -name 'shard-*.mfs' | sort; }
reclaims() { grep -c 'start-up reclaim' "$log"; }
reclaimed() { [ "$(reclaims)" -gt "$1" ]; }

# every shard materialized, with its exact size and bytes, and no stage run
all_served() {
  local d=$mnt/lc k f n; n=$(ncalls)
  for k in 0 1 2; do
    f=$d/shard-0000$k.bin
    [ "$(xattr "$f" state)" = materialized ] ||
      fail "$1: shard $k is '$(xattr "$f" state)', not materialized"
    [ "$(stat -c %s "$f")" -eq "$(stat -c %s "$tmp/want$k")" ] ||
      fail "$1: shard $k has size $(stat -c %s "$f")"
    cmp "$f" "$tmp/want$k" || fail "$1: shard $k reads other bytes"
  done
  [ "$(ncalls)" -eq "$n" ] || fail "$1: $(( $(ncalls) - n )) stage runs"
}

all_committed() {
  local k
  for k in 0 1 2; do
    [ "$(xattr "$mnt/lc/shard-0000$k.bin" state)" = materialized ] || return 1
  done
}

mount_fs "$mnt" "$store" "$pipes"
for k in 0 1 2; do cmp "$mnt/lc/shard-0000$k.bin" "$tmp/want$k" || fail "first read $k"; done
[ "$(ncalls)" -eq 3 ] || fail "first reads ran $(ncalls) stages"
umount_fs "$mnt" "$mpid"
files=$(store_files)
[ "$(echo "$files" | wc -l)" -eq 3 ] || fail "store files: $files"
cp -a "$store" "$tmp/good"

# --- (1) and (2): a lost or emptied catalog between two mounts ---
for how in deleted emptied; do
  rm -rf "$store" && cp -a "$tmp/good" "$store"
  rm -f "$store"/catalog.db*
  [ $how = emptied ] && : >"$store/catalog.db"
  before=$(reclaims)
  mount_fs "$mnt" "$store" "$pipes"
  wait_for 20 reclaimed "$before" || fail "$how: the start-up reclaim did not run"
  [ "$(store_files)" = "$files" ] || fail "$how: store files after the reclaim:
$(store_files)"
  all_served "$how catalog"
  umount_fs "$mnt" "$mpid"
  [ "$(store_files)" = "$files" ] || fail "$how: store files after unmount"
  pass "catalog $how: the next mount serves every shard, nothing recomputed or removed"
done

# --- (3): the catalog deleted while mounted, then matctl makes a new one ---
rm -rf "$store" && cp -a "$tmp/good" "$store"
mount_fs "$mnt" "$store" "$pipes"
all_served "before the loss"
rm -f "$store"/catalog.db*
m ls >/dev/null || fail "matctl ls on a lost catalog"
m stat lc >"$tmp/stat.out" || fail "matctl stat lc: $(cat "$tmp/stat.out")"
all_served "deleted while mounted"
m stat lc --json | "$py" -c '
import json, sys
v = json.load(sys.stdin)
assert [s["state"] for s in v["shards"]] == ["materialized"] * 3, v
' || fail "matctl stat after the loss: $(m stat lc)"
[ "$(store_files)" = "$files" ] || fail "store files after the loss"
pass "a catalog deleted while mounted: matctl and the mount agree, exact bytes"

# the daemon follows the new catalog: what matctl does there is what the
# mount serves (rm, then warm: new files under a new run)
m rm lc >/dev/null || fail "matctl rm lc"
m warm "$pipes/lc.yaml" >"$tmp/warm.out" 2>&1 || fail "matctl warm lc: $(cat "$tmp/warm.out")"
[ "$(ncalls)" -eq 6 ] || fail "warm ran $(( $(ncalls) - 3 )) stages, want 3"
[ "$(store_files)" != "$files" ] || fail "warm left the same files"
all_served "rm and warm by matctl on the new catalog"
pass "the daemon serves what the new catalog holds"

# the same, and then the store's files go too: recomputed, never 0 bytes
rm -f "$store"/catalog.db*
rm -rf "$store/snapshots"/*/*/
m ls >/dev/null || fail "matctl ls on a lost catalog and store"
n=$(ncalls)
for k in 0 1 2; do cmp "$mnt/lc/shard-0000$k.bin" "$tmp/want$k" || fail "read $k after the files went"; done
[ "$(ncalls)" -eq $((n + 3)) ] || fail "expected 3 recomputations, got $(( $(ncalls) - n ))"
# the reads can end before the commits of what they read (served sealed)
wait_for 20 all_committed || fail "after recomputing: not all committed"
all_served "after recomputing"
pass "shards whose files went with the catalog are computed again, never served empty"

# (4) a new catalog that matctl indexed (gc), not the daemon: the daemon
# holds its registered snapshot there too once it uses it, so an expiry
# by matctl keeps the row and its name (before, the hold came back only
# at the next 60 s refresh, and the name was gone meanwhile)
rm -f "$store"/catalog.db*
m gc >/dev/null || fail "matctl gc on a lost catalog"
cat "$mnt/lc/shard-00000.bin" >/dev/null || fail "read after gc"
held() {
  "$py" -c 'import sqlite3, sys
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
sys.exit(0 if c.execute("SELECT COUNT(*) FROM holds").fetchone()[0] else 1)' "$store/catalog.db" 2>/dev/null
}
# at once: the daemon's first use of the new catalog puts its holds
# back (before, they came back only later, after 3 s in every run, and an
# expiry meanwhile took the row and the name)
wait_for 3 held || fail "the daemon does not hold lc in the catalog matctl made"
m expire --older-than 0s >"$tmp/expire.out" 2>&1 || fail "matctl expire: $(cat "$tmp/expire.out")"
m stat lc >"$tmp/stat4.out" 2>&1 || fail "matctl stat lc after the expiry: $(cat "$tmp/stat4.out")"
m rm lc >"$tmp/rm4.out" 2>&1 || fail "matctl rm lc after the expiry: $(cat "$tmp/rm4.out")"
[ -L "$mnt/lc" ] || fail "the mount lost lc"
pass "a catalog matctl made while mounted: the daemon holds its snapshot there, an expiry keeps its name"
umount_fs "$mnt" "$mpid"
echo "all lost-catalog tests passed"
