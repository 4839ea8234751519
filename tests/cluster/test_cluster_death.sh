#!/usr/bin/env bash
# test_cluster_death.sh - a host dies while it computes shards that the
# other hosts wait for: SIGKILL to its PID 1 kills every process of the
# host (its daemon, its stages, its readers) mid-computation. The waiters
# on the two other hosts take over within the documented bound, one
# computation per shard among them; their bytes are the stages by hand;
# the dead host's partial files are never served and `matctl gc` reclaims
# them (its run folder goes).
. "$MF_SOURCE_ROOT/tests/cluster/lib.sh"

inputs
# host 1 writes part of its output, then hangs until it is killed
spec 'echo "$(hostname) $MATFS_SHARD" >>calls.log; if [ "$(hostname)" = mfh1 ]; then head -c 7; sleep 600; fi; tr a-z A-Z'
for n in 1 2 3; do host_up "$n"; done
for n in 1 2 3; do host_mount "$n"; done
for n in 1 2 3; do wait_for 20 registered "$n" || fail "cl not registered on host $n"; done

mkdir -p "$tmp/out"
for k in 0 1 2 3; do read_bg 1 "$k" "$tmp/out/h1-$k"; done
for k in 0 1 2 3; do
  wait_for 20 grep -qx "mfh1 $k" "$pipes/calls.log" ||
    fail "host 1 did not start shard $k: $(cat "$pipes/calls.log")"
done
wait_for 10 sh -c "[ \$(find '$store/snapshots' -name 'shard-*.tmp' | wc -l) -eq 4 ]" ||
  fail "host 1 has no partial files"
dead_run=$(run_dirs_with 'shard-*.tmp')
[ "$(echo "$dead_run" | wc -l)" -eq 1 ] || fail "partial files in several runs: $dead_run"
for n in 2 3; do
  for k in 0 1 2 3; do read_bg "$n" "$k" "$tmp/out/h$n-$k"; done
done
sleep 1
[ "$(xattr 2 0 state)" = running ] || fail "shard 0 is $(xattr 2 0 state), not running"
grep -qv '^mfh1 ' "$pipes/calls.log" && fail "another host computed while host 1 lived: $(cat "$pipes/calls.log")"
pass "host 1 computes shards 0-3, hosts 2 and 3 wait for them"

t0=$(now_ms)
host_kill 1
for p in "${readers[@]:4}"; do wait "$p"; done
took=$(($(now_ms) - t0))
# a dead host's connections end at once (its kernel closes them) or, if
# it vanished from the network, within the keepalive bound (15 s);
# generous slack for a loaded machine
[ "$took" -lt 45000 ] || fail "the takeover took $took ms"
for n in 2 3; do
  for k in 0 1 2 3; do
    [ -e "$tmp/out/h$n-$k.failed" ] && fail "host $n: reading shard $k failed"
    cmp -s "$tmp/out/h$n-$k" "$tmp/want$k" ||
      fail "host $n shard $k: bytes differ from the stages by hand"
  done
done
for k in 0 1 2 3; do
  others=$(grep -c "^mfh[23] $k\$" "$pipes/calls.log")
  [ "$others" -eq 1 ] || fail "shard $k computed $others times after the death: $(cat "$pipes/calls.log")"
done
pass "hosts 2 and 3 took over in $took ms, once per shard, the bytes by hand"

[ -d "$dead_run" ] || fail "the dead run's folder is already gone"
ctl_host=2 ctl gc >"$tmp/gc" 2>&1 || fail "matctl gc: $(cat "$tmp/gc")"
[ -d "$dead_run" ] && fail "matctl gc left the dead run's folder: $(ls "$dead_run")"
[ -z "$(find "$store/snapshots" -name 'shard-*.tmp')" ] ||
  fail "partial files left: $(find "$store/snapshots" -name 'shard-*.tmp')"
for k in 0 1 2 3; do
  hx 3 cat "$(shard_path 3 "$k")" | cmp -s - "$tmp/want$k" ||
    fail "shard $k after gc: bytes differ"
done
pass "matctl gc reclaimed the dead host's partial files; the shards still read"

for n in 2 3; do host_umount "$n"; done
pass "unmounted"
