#!/usr/bin/env bash
# test_mount_full.sh - a store whose disk fills up (a 12 MiB tmpfs, the
# catalog on it too) loses nothing it stored: the materialized shard is
# still served exactly; a spec edited while it is full is not registered,
# the log says why, and it registers on its own once there is room, with
# no further edit; then the cold shard computes exactly.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "skip: not root (tmpfs)"; exit 77; }
st=$tmp/st p=$tmp/p mnt=$tmp/mnt
mkdir -p "$st" "$p/in"
mount -t tmpfs -o size=12m tmpfs "$st" || { echo "skip: no tmpfs"; exit 77; }
trap 'cleanup_full' EXIT
cleanup_full() {
  local m
  for m in "${mounts[@]}"; do
    grep -q " $m fuse" /proc/self/mounts &&
      { fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; }
  done
  umount -l "$st" 2>/dev/null
  cleanup
}
echo "small shard" >"$p/in/0.txt"
head -c 6000000 /dev/urandom >"$p/in/1.bin"
spec() {
  printf 'name: full\ninputs: [in/0.txt, in/1.bin]\nshards: 2\n%sstages:\n  - exec: [cat]\n' \
    "$1" >"$p/full.yaml.new"
  mv "$p/full.yaml.new" "$p/full.yaml"
}
spec ""
mount_fs "$mnt" "$st/store" "$p"
wait_for 20 test -L "$mnt/full" || fail "full is not registered"
[ "$(cat "$mnt/full/shard-00000")" = "small shard" ] || fail "shard 0"
fp0=$(readlink "$mnt/full")
committed() { [ "$(xattr "$mnt/$fp0/shard-00000" state)" = materialized ]; }
wait_for 10 committed || fail "shard 0 is not recorded"
dd if=/dev/zero of="$st/filler" bs=64k status=none 2>/dev/null
sync

[ "$(cat "$mnt/$fp0/shard-00000")" = "small shard" ] ||
  fail "a full disk: the materialized shard 0 is not served"
spec $'env: {X: "1"}\n'
gone() { [ ! -e "$mnt/full" ]; }
wait_for 20 gone || fail "the spec edited on a full disk is still shown as before"
grep -q "No space left on device (spec not registered; tried again until the catalog records it)" "$log" ||
  fail "the log does not say why the edited spec is not registered"
pass "a full disk: stored shards served, an edited spec not registered and the log says why"

rm -f "$st/filler"
wait_for 30 test -L "$mnt/full" || fail "the edited spec did not register once there was room"
[ "$(readlink "$mnt/full")" != "$fp0" ] || fail "the name still follows the old fingerprint"
cmp "$mnt/full/shard-00001" "$p/in/1.bin" || fail "shard 1 after the disk had room again"
[ "$(cat "$mnt/$fp0/shard-00000")" = "small shard" ] || fail "the first fingerprint's shard 0 was lost"
"$matctl" --store "$st/store" fsck >"$tmp/fsck" 2>&1 || fail "fsck: $(cat "$tmp/fsck")"
pass "room again: the edited spec registers on its own, its shards compute exactly, nothing lost"
umount_fs "$mnt" "$mpid"
