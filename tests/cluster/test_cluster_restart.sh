#!/usr/bin/env bash
# test_cluster_restart.sh - PostgreSQL stops and starts again mid-run.
# While it is down, every host still serves the shards it knows
# materialized (open and read), a computation already running finishes
# its stage and waits to record it (its readers get its bytes only once
# they are recorded: the claim cannot be confirmed meanwhile), and a
# new computation waits. Once the
# server is back, the daemons connect again: the recorded and waiting
# computations complete, the shards computing through the restart are not
# taken over by another host (each stage runs once), and the bytes are
# the stages by hand.
. "$MF_SOURCE_ROOT/tests/cluster/lib.sh"

inputs
# a shard with a flag file slow-K waits until the test removes it
spec 'echo "$(hostname) $MATFS_SHARD" >>calls.log; while [ -e slow-$MATFS_SHARD ]; do sleep 0.1; done; tr a-z A-Z; echo "$(hostname) $MATFS_SHARD end" >>calls.log'
for n in 1 2 3; do host_up "$n"; done
for n in 1 2 3; do host_mount "$n"; done
for n in 1 2 3; do wait_for 20 registered "$n" || fail "cl not registered on host $n"; done

for n in 1 2 3; do
  for k in 0 1 2 3; do
    hx "$n" cat "$(shard_path "$n" "$k")" | cmp -s - "$tmp/want$k" ||
      fail "host $n shard $k: bytes differ"
  done
done
pass "shards 0-3 materialized and read on every host"

mkdir -p "$tmp/out"
: >"$pipes/slow-4"
: >"$pipes/slow-5"
read_bg 2 4 "$tmp/out/h2-4"
read_bg 2 5 "$tmp/out/h2-5"
for k in 4 5; do
  wait_for 20 grep -qx "mfh2 $k" "$pipes/calls.log" ||
    fail "host 2 did not start shard $k: $(cat "$pipes/calls.log")"
done

"$MF_PG_SERVER" stop || fail "stopping PostgreSQL"
down=$(now_ms)
for n in 1 2 3; do
  for k in 0 1 2 3; do
    hx "$n" cat "$(shard_path "$n" "$k")" >"$tmp/down-$n-$k" ||
      fail "host $n: reading materialized shard $k while the server is down"
    cmp -s "$tmp/down-$n-$k" "$tmp/want$k" || fail "host $n shard $k: bytes differ while down"
  done
done
pass "the server down: every host reads the shards it knows materialized"

# shard 4's stage ends while the server is down: its bytes are complete,
# but another host may have taken its claim over meanwhile, so host 2
# serves them only once the catalog recorded them
rm "$pipes/slow-4"
read_bg 3 6 "$tmp/out/h3-6" # a new computation waits
wait_for 20 grep -qx "mfh2 4 end" "$pipes/calls.log" || fail "shard 4's stage did not end"
sleep 2
for p in "${readers[@]}"; do
  kill -0 "$p" 2>/dev/null || fail "a reader of a shard not recorded ended while the server was down"
done
"$MF_PG_SERVER" start || fail "starting PostgreSQL again"
pass "down $(($(now_ms) - down)) ms: shard 4 (its stage done) waits to be recorded; 5 (computing) and 6 (new) wait"

# shard 5 still computes on host 2: another host must wait for it, not
# take it over, while host 2 connects again
read_bg 1 5 "$tmp/out/h1-5"
sleep 2
rm "$pipes/slow-5"
for p in "${readers[@]}"; do wait "$p"; done
for f in h2-4 h2-5 h3-6 h1-5; do
  k=${f##*-}
  [ -e "$tmp/out/$f.failed" ] && fail "$f: the read failed"
  cmp -s "$tmp/out/$f" "$tmp/want$k" || fail "$f: bytes differ from the stages by hand"
done
for k in 0 1 2 3 4 5 6; do
  [ "$(calls_of "$k")" -eq 1 ] ||
    fail "shard $k computed $(calls_of "$k") times: $(cat "$pipes/calls.log")"
done
pass "after the restart: shards 4, 5 and 6 complete, each computed once"

# an outage longer than the bound (30 s): a new computation fails with
# EIO and a log line that names the catalog; known shards still read
"$MF_PG_SERVER" stop || fail "stopping PostgreSQL"
t0=$(now_ms)
hx 1 cat "$(shard_path 1 7)" >/dev/null 2>"$tmp/eio" &&
  fail "shard 7 opened with the server down"
took=$(($(now_ms) - t0))
grep -q 'Input/output error' "$tmp/eio" || fail "not EIO: $(cat "$tmp/eio")"
[ "$took" -ge 29000 ] || fail "the open gave up after $took ms, before the bound"
grep -q "shard 7 of cl .*catalog '.*' unreachable for 30 s" "$tmp/h1.log" ||
  fail "no log line says the catalog is unreachable"
hx 1 cat "$(shard_path 1 0)" | cmp -s - "$tmp/want0" || fail "shard 0 while down again"
"$MF_PG_SERVER" start || fail "starting PostgreSQL again"
hx 1 cat "$(shard_path 1 7)" | cmp -s - "$tmp/want7" || fail "shard 7 after the outage"
[ "$(calls_of 7)" -eq 1 ] || fail "shard 7 computed $(calls_of 7) times"
pass "an outage past the bound: EIO after $took ms, logged; after it, shard 7 computes"

for n in 1 2 3; do host_umount "$n"; done
pass "unmounted"
