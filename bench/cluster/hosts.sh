#!/usr/bin/env bash
# bench/cluster/hosts.sh - the cluster figures across three hosts: three
# network namespaces with their own PID and UTS namespaces (the harness of
# tests/cluster/lib.sh), one PostgreSQL 15 on a veth address, one store
# folder, a matfs on each host. Prints:
#
#   ratio stage_runs_per_shard_3_hosts R
#       ROUNDS rounds of a new fingerprint of 8 shards, each read at once by
#       8 readers on each host (every reader every shard, in an order of
#       its own); the stages log their runs: R is runs / shards (goal 1.00);
#       every reader's bytes are checked against the stages by hand
#   time round S
#       the median wall time of one such round (192 reads)
#   wake p50 MS, wake p90 MS, wake max MS
#       WAKES times: a stage on host 1 ends (it writes the time as its last
#       act) while readers of that shard wait on hosts 2 and 3; the time
#       from its end to each waiter's open and read returning (so it holds
#       the commit on host 1: fsync, rename and the catalog row, then the
#       NOTIFY and the waiters' claim)
#
# usage: [MF_BUILD_ROOT=build/bench] bench/cluster/hosts.sh  (env: ROUNDS
#        (3), WAKES (8)). Root; skips (77) without namespaces, FUSE or
#        PostgreSQL 15, as the tests of tests/cluster do.
here=$(cd "$(dirname "$0")" && pwd)
export MF_SOURCE_ROOT=${MF_SOURCE_ROOT:-$(cd "$here/../.." && pwd)}
if [ -z "${MF_BUILD_ROOT:-}" ]; then
  "$MF_SOURCE_ROOT/bench/build.sh" tools/matfs tools/matctl || exit 1
  export MF_BUILD_ROOT=$MF_SOURCE_ROOT/build/bench
fi
MF_BUILD_ROOT=$(cd "$MF_BUILD_ROOT" && pwd)
export MF_BUILD_ROOT
export ROUNDS=${ROUNDS:-3} WAKES=${WAKES:-8}
. "$MF_SOURCE_ROOT/tests/cluster/lib.sh"

inputs
for n in 1 2 3; do host_up "$n"; done
for n in 1 2 3; do host_mount "$n"; done

fp_now() { "$matctl" fingerprint "$pipes/cl.yaml"; }
links_to() { # links_to FP: every host's name cl points at FP
  local n
  for n in 1 2 3; do [ "$(hx "$n" readlink "$tmp/mnt$n/cl")" = "$1" ] || return 1; done
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# --- stage runs per shard ---
export -f readers shard_path
export tmp
mkdir -p "$tmp/out"
runs=0 times=()
for r in $(seq 1 "$ROUNDS"); do
  spec "echo \"\$(hostname) \$MATFS_SHARD\" >>calls-$r.log; sleep 0.2; tr a-z A-Z"
  fp=$(fp_now) || fail "fingerprint of round $r"
  wait_for 20 links_to "$fp" || fail "round $r: not every host names $fp"
  t0=$(now_ms)
  jobs=()
  for n in 1 2 3; do hx "$n" bash -c "readers $n r$r-" & jobs+=($!); done
  wait "${jobs[@]}"
  times+=("$(( $(now_ms) - t0 ))")
  [ -s "$tmp/errors" ] && fail "$(cat "$tmp/errors")"
  for f in "$tmp/out/r$r-"*; do
    cmp -s "$f" "$tmp/want${f##*-}" || fail "$(basename "$f"): bytes differ from the stages by hand"
  done
  [ "$(awk '{ print $2 }' "$pipes/calls-$r.log" | sort -u | wc -l)" -eq 8 ] ||
    fail "round $r: not every shard ran"
  runs=$(( runs + $(wc -l <"$pipes/calls-$r.log") ))
done
echo "count stage_runs $runs (of $((8 * ROUNDS)) shards, $((192 * ROUNDS)) reads on 3 hosts)"
awk -v a="$runs" -v b="$((8 * ROUNDS))" 'BEGIN { printf "ratio stage_runs_per_shard_3_hosts %.2f\n", a / b }'
printf '%s\n' "${times[@]}" | median | awk '{ printf "time round %.2f\n", $1 / 1000 }'

# --- wake-up across hosts ---
# shard k's stage on host 1 waits for go-k, then writes its end time
# shellcheck disable=SC2016 # expanded by the stage's shell
spec 'while [ ! -e "go-$MATFS_SHARD" ]; do sleep 0.01; done; tr a-z A-Z; date +%s%N >"end-$MATFS_SHARD"'
fp=$(fp_now) || fail "fingerprint of the wake spec"
wait_for 20 links_to "$fp" || fail "not every host names the wake spec's $fp"
lat=()
for w in $(seq 0 $((WAKES - 1))); do
  k=$(( w % 8 ))
  if [ "$w" -ge 8 ]; then # a new fingerprint for the next 8
    spec "while [ ! -e go-\$MATFS_SHARD ]; do sleep 0.01; done; tr a-z A-Z; date +%s%N >end-\$MATFS_SHARD # $((w / 8))"
    fp=$(fp_now) || fail "fingerprint of wake spec $((w / 8))"
    wait_for 20 links_to "$fp" || fail "wake spec $((w / 8)) not named on every host"
  fi
  rm -f "$pipes/go-$k" "$pipes/end-$k" "$tmp/woke-"*
  hx 1 cat "$(shard_path 1 "$k")" >/dev/null &
  first=$!
  sleep 0.3 # host 1 claims and runs the stage first
  waiters=()
  for n in 2 3; do
    # shellcheck disable=SC2016 # expanded by the host's shell
    hx "$n" bash -c 'cat "$1" >/dev/null && date +%s%N >"$2"' _ \
      "$(shard_path "$n" "$k")" "$tmp/woke-$n" &
    waiters+=($!)
  done
  sleep 0.5 # the waiters are in their open
  : >"$pipes/go-$k"
  wait "$first" || fail "host 1's read of shard $k"
  wait_for 30 test -e "$tmp/woke-2" -a -e "$tmp/woke-3" || fail "a waiter of shard $k never returned"
  wait "${waiters[@]}"
  end=$(cat "$pipes/end-$k")
  for n in 2 3; do
    lat+=("$(( ($(cat "$tmp/woke-$n") - end) / 1000 ))")
  done
done
printf '%s\n' "${lat[@]}" | sort -g | awk '
  { v[NR] = $1 / 1000 }
  END { printf "wake p50 %.1f\nwake p90 %.1f\nwake max %.1f\n", v[int((NR + 1) / 2)], v[int(NR * 0.9 + 0.5)], v[NR] }'
echo "count wakes $((2 * WAKES)) (host 1 computes, hosts 2 and 3 wait)"
echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in 1 2 3; do host_umount "$n"; done
