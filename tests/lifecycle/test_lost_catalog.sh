#!/usr/bin/env bash
# test_lost_catalog.sh - a lost or replaced catalog never costs a committed
# shard. Through a real mount: (1) catalog.db (with -wal and -shm) deleted
# between two mounts, and (2) replaced by an empty file: the second mount
# serves every shard as materialized (xattr, size, exact bytes) without
# running the stage again, and the start-up reclaim leaves the store's
# shard files in place.
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
  pass "a $how catalog: the next mount serves every shard, nothing recomputed or removed"
done

echo "all lost-catalog tests passed"
