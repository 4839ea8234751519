#!/usr/bin/env bash
# test_cluster_shared.sh - shards shared between snapshots across hosts:
# a corpus of 8 shards is read on 3 hosts, then an input is appended (it
# lands in shard 0: 16 mod 8) and 3 hosts x 8 readers read every shard of
# the new snapshot at once. Shard 0 is computed exactly once more
# cluster-wide, the 7 others are stored from the first snapshot's data by
# whichever host claims them (no stage runs), and every reader gets the
# stages-by-hand bytes.
. "$MF_SOURCE_ROOT/tests/cluster/lib.sh"

inputs
spec 'echo "$(hostname) $MATFS_SHARD" >>calls.log; sleep 0.3; tr a-z A-Z'
for n in 1 2 3; do host_up "$n"; done
for n in 1 2 3; do host_mount "$n"; done
for n in 1 2 3; do wait_for 20 registered "$n" || fail "cl not registered on host $n"; done
mkdir -p "$tmp/out"
export -f readers shard_path
export tmp
hx 1 bash -c "readers 1 first"
[ -s "$tmp/errors" ] && fail "$(cat "$tmp/errors")"
for k in $(seq 0 7); do [ "$(calls_of "$k")" -eq 1 ] || fail "first: shard $k ran $(calls_of "$k") times"; done
pass "the first snapshot computed once"

old=$(hx 1 readlink "$tmp/mnt1/cl")
printf 'line 16 of input 16\n' >"$pipes/in/16.txt"
cat "$pipes/in/00.txt" "$pipes/in/08.txt" "$pipes/in/16.txt" | tr a-z A-Z >"$tmp/want0"
for n in 1 2 3; do
  wait_for 30 hx "$n" sh -c "[ \"\$(readlink '$tmp/mnt$n/cl')\" != '$old' ]" ||
    fail "host $n does not see the grown snapshot"
done
rm -rf "$tmp/out" && mkdir -p "$tmp/out"
jobs=()
for n in 1 2 3; do
  hx "$n" bash -c "readers $n grown" &
  jobs+=($!)
done
wait "${jobs[@]}"
[ -s "$tmp/errors" ] && fail "$(cat "$tmp/errors")"
[ "$(ls "$tmp/out" | wc -l)" -eq 192 ] || fail "the readers wrote $(ls "$tmp/out" | wc -l) files of 192"
for f in "$tmp"/out/*; do
  k=${f##*-}
  cmp -s "$f" "$tmp/want$k" || fail "$(basename "$f"): bytes differ from the stages by hand"
done
[ "$(calls_of 0)" -eq 2 ] || fail "shard 0 ran $(calls_of 0) times in all, not 2: $(cat "$pipes/calls.log")"
for k in $(seq 1 7); do
  [ "$(calls_of "$k")" -eq 1 ] || fail "shard $k ran again: $(cat "$pipes/calls.log")"
done
pass "grown: shard 0 computed once cluster-wide, 7 shards reused, 192 reads the bytes by hand"

for n in 1 2 3; do host_umount "$n"; done
pass "unmounted"
