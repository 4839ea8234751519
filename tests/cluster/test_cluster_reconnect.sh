#!/usr/bin/env bash
# test_cluster_reconnect.sh - liveness after the server comes back, three
# ways: a restart, a stop of 30 s, and SIGKILL to the postmaster (crash
# recovery). Each time host 1 computes shard A through the outage; right
# after the server is back it opens shard B of the same fingerprint (a
# new claim of the same run, which refreshes the run's heartbeat), and
# host 2 then opens A. Host 2 must find host 1's run alive and wait for
# it, not judge it dead from a free advisory lock its liveness session
# has not taken back yet: each shard's stage runs once cluster-wide, and
# every reader gets the bytes of the stages by hand.
. "$MF_SOURCE_ROOT/tests/cluster/lib.sh"

inputs
# a shard with a flag file slow-K waits until the test removes it
spec 'echo "$(hostname) $MATFS_SHARD" >>calls.log; while [ -e slow-$MATFS_SHARD ]; do sleep 0.1; done; tr a-z A-Z'
for n in 1 2 3; do host_up "$n"; done
for n in 1 2 3; do host_mount "$n"; done
for n in 1 2 3; do wait_for 20 registered "$n" || fail "cl not registered on host $n"; done
mkdir -p "$tmp/out"

# outage WAY: the server goes away one way and comes back
outage() {
  case $1 in
    restart) "$MF_PG_SERVER" restart || fail "restarting PostgreSQL" ;;
    stop30)
      "$MF_PG_SERVER" stop || fail "stopping PostgreSQL"
      sleep 30
      "$MF_PG_SERVER" start || fail "starting PostgreSQL again"
      ;;
    kill9)
      "$MF_PG_SERVER" kill9 || fail "killing the postmaster"
      "$MF_PG_SERVER" start || fail "starting PostgreSQL after the kill"
      ;;
  esac
}

cycle=0
for way in restart stop30 kill9; do
  a=$((2 * cycle)) b=$((2 * cycle + 1))
  cycle=$((cycle + 1))
  : >"$pipes/slow-$a"
  : >"$pipes/slow-$b"
  readers=()
  read_bg 1 "$a" "$tmp/out/$way-h1-$a"
  wait_for 20 grep -qx "mfh1 $a" "$pipes/calls.log" ||
    fail "$way: host 1 did not start shard $a: $(cat "$pipes/calls.log")"
  outage "$way"
  read_bg 1 "$b" "$tmp/out/$way-h1-$b"
  wait_for 40 grep -qx "mfh1 $b" "$pipes/calls.log" ||
    fail "$way: host 1 did not start shard $b: $(cat "$pipes/calls.log")"
  read_bg 2 "$a" "$tmp/out/$way-h2-$a"
  read_bg 3 "$b" "$tmp/out/$way-h3-$b"
  sleep 3 # time for hosts 2 and 3 to claim and judge
  [ "$(calls_of "$a")" -eq 1 ] && [ "$(calls_of "$b")" -eq 1 ] ||
    fail "$way: host 1's run judged dead after the server came back: $(cat "$pipes/calls.log")"
  rm "$pipes/slow-$a" "$pipes/slow-$b"
  for p in "${readers[@]}"; do wait "$p"; done
  for f in "$way-h1-$a" "$way-h1-$b" "$way-h2-$a" "$way-h3-$b"; do
    k=${f##*-}
    [ -e "$tmp/out/$f.failed" ] && fail "$f: the read failed"
    cmp -s "$tmp/out/$f" "$tmp/want$k" || fail "$f: bytes differ from the stages by hand"
  done
  for k in "$a" "$b"; do
    [ "$(calls_of "$k")" -eq 1 ] ||
      fail "$way: shard $k computed $(calls_of "$k") times: $(cat "$pipes/calls.log")"
  done
  pass "$way: shards $a and $b computed once, across it, by host 1; every reader the bytes by hand"
done

for n in 1 2 3; do
  for k in 0 1 2 3 4 5; do
    hx "$n" cat "$(shard_path "$n" "$k")" | cmp -s - "$tmp/want$k" ||
      fail "host $n shard $k: bytes differ at the end"
  done
done
[ "$(wc -l <"$pipes/calls.log")" -eq 6 ] || fail "a shard computed again: $(cat "$pipes/calls.log")"
pass "every host reads the six shards, each computed once"

for n in 1 2 3; do host_umount "$n"; done
pass "unmounted"
