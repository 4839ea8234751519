#!/usr/bin/env bash
# test_mount_corrupt.sh - the corruption sweep through a real mount: each
# stored chunk of a small snapshot in turn is flipped, zeroed or cut off
# (truncation), and the shard read again through a fresh mount. A reader
# never gets wrong bytes: a read either fails with EIO or returns the exact
# bytes (a shard whose damage is found at open is computed again), and at
# the latest the next open heals it.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
printf 'x\n' >"$pipes/in/a.txt"
cat >"$pipes/c.yaml" <<'YAML'
name: c
inputs: in/*.txt
compression: none
chunk_size: 4KiB
stages:
  - exec: [/bin/sh, -c, 'echo x >> calls; cat >/dev/null; seq 1 3000']
YAML
seq 1 3000 >"$tmp/want"
size=$(stat -c %s "$tmp/want")
chunks=$(( (size + 4095) / 4096 ))
matctl=$MF_BUILD_ROOT/tools/matctl
shard_file() {
  local run
  run=$("$matctl" --store "$store" stat c --json | "$py" -c \
    'import json,sys; print(json.load(sys.stdin)["shards"][0]["run_id"])')
  echo "$store/snapshots/$fp/$run/shard-00000.mfs"
}
materialized() { [ "$(xattr "$mnt/c/shard-00000" state)" = materialized ]; }
remount() {
  if is_mounted "$mnt"; then fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"; fi
  [ -n "${mpid:-}" ] && reap "$mpid"
  mount_fs "$mnt" "$store" "$pipes"
}
remount
fp=$(readlink "$mnt/c")
cmp "$mnt/c/shard-00000" "$tmp/want" || fail "first read"

cases=0 eio=0
for i in $(seq 0 $((chunks - 1))); do
  for how in flip zero cut; do
    # a read can end before the commit of what it read (it is served
    # sealed): the store file is there once the shard is materialized
    wait_for 20 materialized || fail "not materialized for case $how $i"
    f=$(shard_file)
    [ -f "$f" ] || fail "no store file for case $how $i"
    at=$((16 + i * 4096))   # the chunks of codec none follow a 16-byte header
    case $how in
      flip) printf '\x5a' | dd of="$f" bs=1 seek=$((at + 7)) conv=notrunc status=none ;;
      zero) dd if=/dev/zero of="$f" bs=1 seek="$at" count=64 conv=notrunc status=none ;;
      cut) truncate -s $((at + 10)) "$f" ;;
    esac
    remount
    if cat "$mnt/c/shard-00000" >"$tmp/got" 2>"$tmp/err"; then
      cmp -s "$tmp/got" "$tmp/want" || fail "$how chunk $i: wrong bytes served"
    else
      grep -q 'Input/output error' "$tmp/err" || fail "$how chunk $i: $(cat "$tmp/err")"
      cmp -s "$tmp/got" <(head -c "$(stat -c %s "$tmp/got")" "$tmp/want") \
        || fail "$how chunk $i: wrong bytes before the error"
      eio=$((eio + 1))
      cmp "$mnt/c/shard-00000" "$tmp/want" || fail "$how chunk $i: not healed on the next open"
    fi
    cases=$((cases + 1))
  done
done
[ "$eio" -gt 0 ] || fail "no case reached a reader's checksum check"
pass "$cases corruptions of $chunks chunks: never wrong bytes ($eio read errors, all healed)"
