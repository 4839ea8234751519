#!/usr/bin/env bash
# test_cluster_once.sh - exactly once across hosts: 3 hosts x 8 readers x
# 8 shards, every reader reading every shard in its own order at once;
# each shard's stage runs exactly once cluster-wide (the stage appends
# "HOST SHARD" to a log in the shared pipelines folder) and every reader
# gets the stages-by-hand bytes. Then the runs, idle, end: their rows
# say done and their advisory locks go, so a daemon's locks on the
# server do not grow with every fingerprint it ever computed.
. "$MF_SOURCE_ROOT/tests/cluster/lib.sh"

inputs
spec 'echo "$(hostname) $MATFS_SHARD" >>calls.log; sleep 0.3; tr a-z A-Z'
for n in 1 2 3; do host_up "$n"; done
for n in 1 2 3; do host_mount "$n"; done
for n in 1 2 3; do wait_for 20 registered "$n" || fail "cl not registered on host $n"; done
pass "three hosts mounted on one PostgreSQL catalog and one store"

mkdir -p "$tmp/out"
export -f readers shard_path
export tmp
jobs=()
for n in 1 2 3; do
  hx "$n" bash -c "readers $n" &
  jobs+=($!)
done
wait "${jobs[@]}"
[ "$(ls "$tmp/out" | wc -l)" -eq 192 ] ||
  fail "the readers wrote $(ls "$tmp/out" | wc -l) files of 192"
[ -s "$tmp/errors" ] && fail "$(cat "$tmp/errors")"
for f in "$tmp"/out/*; do
  k=${f##*-}
  cmp -s "$f" "$tmp/want$k" || fail "$(basename "$f"): bytes differ from the stages by hand"
done
pass "192 reads (3 hosts x 8 readers x 8 shards), every one the bytes by hand"

for k in $(seq 0 7); do
  [ "$(calls_of "$k")" -eq 1 ] ||
    fail "shard $k computed $(calls_of "$k") times: $(cat "$pipes/calls.log")"
done
awk '$1 !~ /^mfh[123]$/ { bad = 1 } END { exit bad }' "$pipes/calls.log" ||
  fail "a stage ran outside the hosts: $(cat "$pipes/calls.log")"
pass "every shard computed exactly once cluster-wide ($(awk '{print $1}' "$pipes/calls.log" | sort | uniq -c | tr -s ' \n' ' '))"

# a run that is over gives its advisory lock back: once idle for six
# heartbeats (30 s) its row says done, and only the daemons' holds (one
# lock each) stay locked
advisory() {
  psql -X -Atq "$MF_PG_ADMIN" -c \
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
}
runs_active() {
  psql -X -Atq "$MF_PG_ADMIN" -c \
    "SELECT count(*) FROM matfs.runs WHERE state = 'active'"
}
before=$(advisory)
[ "$before" -gt 3 ] || fail "only $before advisory locks while the runs live"
wait_for 90 sh -c "[ \"\$(psql -X -Atq '$MF_PG_ADMIN' -c \"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted\")\" -eq 3 ]" ||
  fail "advisory locks still held after the runs went idle: $(advisory) (was $before)"
[ "$(runs_active)" -eq 0 ] || fail "$(runs_active) runs still active"
for k in 0 5; do
  hx 2 cat "$(shard_path 2 "$k")" | cmp -s - "$tmp/want$k" || fail "shard $k after its run ended"
done
[ "$(wc -l <"$pipes/calls.log")" -eq 8 ] || fail "a shard computed again after its run ended"
pass "idle runs end: their advisory locks go ($before locks, then 3: the holds)"

for n in 1 2 3; do host_umount "$n"; done
pass "unmounted"
