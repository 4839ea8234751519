#!/usr/bin/env bash
# test_mount_served.sh - a snapshot a daemon serves keeps its catalog row
# when another process expires it (matctl rm, matctl expire): its data
# goes, but matctl can still name, list and compute it, as the mount can.
# Once no live daemon serves it (unmounted, or killed), an expiry removes
# it from the catalog as before.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1; do printf 'line %d\n' $k >"$pipes/in/$k.txt"; done
cat >"$pipes/up.yaml" <<'YAML'
name: up
inputs: in/*.txt
stages:
  - exec: [tr, a-z, A-Z]
YAML
want() { printf 'LINE %d\n' "$1"; }
# cat_is FP K: matctl cat FP K prints shard K's bytes
cat_is() {
  "$matctl" --store "$store" cat "$1" "$2" >"$tmp/got" 2>"$tmp/err" ||
    fail "matctl cat $1 $2: $(cat "$tmp/err")"
  cmp -s "$tmp/got" <(want "$2") || fail "matctl cat $1 $2: wrong bytes"
}
listed() { local out; out=$("$matctl" --store "$store" ls) && grep -q "${1:0:12}" <<<"$out"; }

mount_fs "$mnt" "$store" "$pipes"
fp=$(readlink "$mnt/up") || fail "no up link"
cmp -s "$mnt/up/shard-00000" <(want 0) || fail "first read"
# committed: the mount answers a read before its commit lands, and rm
# refuses (EBUSY) while a shard is still being computed
committed() {
  shard=$1
  # shellcheck disable=SC2016 # expanded by eval, in each try
  wait_for 30 eval '[ "$(xattr "$shard" state)" = materialized ]' ||
    fail "$shard was not committed: $(xattr "$shard" state)"
}
committed "$mnt/up/shard-00000"

for round in 1 2 3; do
  "$matctl" --store "$store" rm "$fp" >/dev/null 2>"$tmp/err" ||
    fail "matctl rm $fp (round $round): $(cat "$tmp/err")"
  listed "$fp" || fail "matctl rm of a served fingerprint dropped it from ls"
  cat_is "$fp" 1
  "$matctl" --store "$store" expire --older-than 0s >/dev/null ||
    fail "matctl expire"
  listed "$fp" || fail "matctl expire dropped a served fingerprint from ls"
  cat_is "$fp" 0
  cmp -s "$mnt/$fp/shard-00001" <(want 1) || fail "read through the mount"
  committed "$mnt/$fp/shard-00001"
done
pass "matctl rm and expire of a served fingerprint keep it known"

# unmounted: nobody serves it, rm removes it
umount_fs "$mnt" "$mpid"
"$matctl" --store "$store" rm "$fp" >/dev/null || fail "matctl rm after unmount"
! listed "$fp" || fail "matctl rm after unmount left $fp listed"
"$matctl" --store "$store" cat "$fp" 0 >/dev/null 2>"$tmp/err" &&
  fail "matctl cat of a removed snapshot succeeded"
grep -q "no snapshot" "$tmp/err" || fail "unexpected error: $(cat "$tmp/err")"
pass "after unmount, matctl rm removes it from the catalog"

# a killed daemon's hold counts for nothing
mount_fs "$mnt" "$store" "$pipes"
cmp -s "$mnt/up/shard-00000" <(want 0) || fail "read after remount"
# served before it is durable: the kill comes after the commit (a kill
# before it leaves a dead run's claim, which the crash tests cover)
committed "$mnt/up/shard-00000"
kill -9 "$mpid"
wait "$mpid" 2>/dev/null
fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
"$matctl" --store "$store" rm "$fp" >/dev/null || fail "matctl rm after kill"
! listed "$fp" || fail "a killed daemon's hold kept $fp listed"
"$matctl" --store "$store" gc >/dev/null || fail "matctl gc"
pass "a killed daemon's hold is ignored"
