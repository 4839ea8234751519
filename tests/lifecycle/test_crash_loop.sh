#!/usr/bin/env bash
# test_crash_loop.sh - crash safety of the daemon: kill -9 at a random point
# while several shards materialize, MF_CRASH_LOOPS times (default 20; set
# MF_CRASH_LOOPS=200 for a longer run). What readers got before the kill
# is a prefix of the exact bytes. After each restart: every shard
# reads the exact bytes of the stage run by hand, the catalog passes
# PRAGMA integrity_check, `matctl fsck` finds no catalog entry whose file is
# missing, short or corrupt, the start-up reclaim leaves no *.tmp in the
# store, and the restart recomputes only the shards that were not committed
# when the daemon died. At the end, reading everything again makes no call.
# One round in five (with strace) kills in the window between serving and
# committing: shard 0 is read first, then every fsync of the daemon is held
# back while shards 1-3 are read, which must get their exact bytes before
# any of them is durable; the kill then leaves them uncommitted, and the
# restart computes them again.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

command -v sqlite3 >/dev/null || { echo "skip: no sqlite3"; exit 77; }
loops=${MF_CRASH_LOOPS:-20}
shards=4
store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in" "$mnt"
for k in $(seq 0 $((shards - 1))); do printf 'input %d\n' "$k" >"$pipes/in/$k.txt"; done
# Deterministic, seeded by the shard, slow enough (1, 4, 7, 10 blocks, a
# pause after each) that kills land before, between and after commits;
# appends a line per call.
stage='echo "$MATFS_SHARD" >>calls; cat; i=0; while [ $i -lt $((1 + 3 * MATFS_SHARD)) ]; do'
stage+=' b=$((MATFS_SHARD * 100000 + i * 1000)); seq $b $((b + 4000));'
stage+=' i=$((i + 1)); sleep 0.04; done'
cat >"$pipes/crash.yaml" <<YAML
name: crash
inputs: in/*.txt
chunk_size: 16KiB
stages:
  - exec: [/bin/sh, -c, '$stage']
YAML
for k in $(seq 0 $((shards - 1))); do
  (cd "$pipes" && MATFS_SHARD=$k sh -c "${stage/>>calls/>>/dev/null}" <"in/$k.txt") \
    >"$tmp/want-$k" || fail "the stage by hand, shard $k"
done
[ "$(stat -c %s "$tmp/want-3")" -gt 200000 ] || fail "the stage output is too small"

shard_path() { printf '%s/crash/shard-%05d' "$mnt" "$1"; }
committed() {
  sqlite3 "$store/catalog.db" \
    "SELECT count(*) FROM shards WHERE state = 'materialized'" 2>/dev/null
}
no_tmp() { [ -z "$(find "$store" -name '*.tmp' 2>/dev/null)" ]; }

# wait_gone SECONDS PID...: waits for the readers to end (a dead mount
# fails their reads), then kills what is left.
wait_gone() {
  local s=$1 p; shift
  for p in "$@"; do wait_for "$s" eval "! kill -0 $p" || kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null; done
}

# kill_daemon PID: kill -9, reap (a zombie would still look alive), and
# remove the dead mount.
kill_daemon() {
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
  wait_for 5 eval "! is_mounted $mnt" || fail "the dead mount stays"
  daemons=()
}

# check_round ROUND: restarts after a kill and checks everything; leaves
# the daemon running ($mpid).
check_round() {
  local r=$1 before_calls before_done k fsck_out
  before_calls=$(calls "$pipes/calls")
  before_done=$(committed)
  [ -n "$before_done" ] || fail "round $r: catalog unreadable after kill -9"
  mount_fs "$mnt" "$store" "$pipes" -o workers=$shards
  local pids=()
  for k in $(seq 0 $((shards - 1))); do
    cat "$(shard_path "$k")" >"$tmp/got-$k" 2>>"$log" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail "round $r: a reader failed after restart"; done
  for k in $(seq 0 $((shards - 1))); do
    cmp -s "$tmp/got-$k" "$tmp/want-$k" || fail "round $r: shard $k: wrong bytes"
  done
  local extra=$(( $(calls "$pipes/calls") - before_calls ))
  [ "$extra" -le $((shards - before_done)) ] ||
    fail "round $r: $extra stage calls with $before_done of $shards committed"
  recomputed=$((recomputed + extra))
  [ "$(sqlite3 "$store/catalog.db" 'PRAGMA integrity_check')" = ok ] ||
    fail "round $r: integrity_check: $(sqlite3 "$store/catalog.db" 'PRAGMA integrity_check')"
  fsck_out=$("$matctl" --store "$store" fsck 2>&1)
  ! grep -Eq '^(missing|size|corrupt|catalog):' <<<"$fsck_out" ||
    fail "round $r: fsck: $fsck_out"
  wait_for 10 no_tmp || fail "round $r: temp files left: $(find "$store" -name '*.tmp')"
}

# window_round ROUND: reads shard 0 (the run folder is made, with its
# fsync), then holds every fsync of the daemon ($pid) back while the other
# shards are read: they must be served, exact, though none is durable.
# Leaves the tracer in $tracer for the kill.
tracer=
window_round() {
  local r=$1 k t
  cat "$(shard_path 0)" >"$tmp/pre-0" || fail "round $r: read of shard 0"
  strace -qq -f -p "$pid" -o /dev/null -e trace=fsync \
    -e inject=fsync:delay_enter=600s 2>/dev/null & tracer=$!
  wait_for 10 traced_all "$pid" || fail "round $r: strace did not attach"
  rpids=()
  for k in $(seq 1 $((shards - 1))); do
    cat "$(shard_path "$k")" >"$tmp/pre-$k" & rpids+=($!)
  done
  for t in "${rpids[@]}"; do
    wait_for 60 pid_gone "$t" || fail "round $r: a read waited for its commit"
    wait "$t" || fail "round $r: a read in the commit window failed"
  done
  for k in $(seq 1 $((shards - 1))); do
    cmp -s "$tmp/pre-$k" "$tmp/want-$k" || fail "round $r: shard $k: served wrong bytes"
  done
  [ "$(committed)" -le 1 ] || fail "round $r: $(committed) shards committed with fsync held"
}
traced_all() {
  local f
  for f in /proc/"$1"/task/*/status; do
    grep -q '^TracerPid:[[:space:]]*0$' "$f" && return 1
  done
  return 0
}
# a traced process killed ends once its tracer lets go: the tracer is
# killed too, not detached, so that no held fsync goes on
kill_tracer() {
  [ -n "$tracer" ] && { kill -9 "$tracer" 2>/dev/null; wait "$tracer" 2>/dev/null; }
  tracer=
}
trap 'kill_tracer; cleanup' EXIT
has_strace=false
command -v strace >/dev/null && has_strace=true

# --- the loop: kill -9 at a random point of a materialization ---
recomputed=0 kills_mid=0 partial=0 windows=0
for r in $(seq 1 "$loops"); do
  # start from nothing committed in three rounds of four, so kills land
  # mid-materialization; the fourth starts from what the last one left
  if [ $((r % 4)) -ne 0 ] && [ "$r" -gt 1 ]; then
    "$matctl" --store "$store" rm crash >>"$log" 2>&1 || fail "matctl rm crash"
  fi
  mount_fs "$mnt" "$store" "$pipes" -o workers=$shards
  pid=$mpid rpids=()
  if $has_strace && [ $((r % 5)) -eq 3 ] && [ "$(committed)" = 0 ]; then
    window_round "$r"
    windows=$((windows + 1))
    kill -9 "$pid"
    kill_tracer
  else
    for k in $(seq 0 $((shards - 1))); do
      cat "$(shard_path "$k")" >"$tmp/pre-$k" 2>/dev/null & rpids+=($!)
    done
    sleep "0.$(printf '%03d' $((RANDOM % 300)))"
  fi
  kill_daemon "$pid"
  done_now=$(committed)
  [ "$done_now" -lt "$shards" ] 2>/dev/null && kills_mid=$((kills_mid + 1))
  [ "$done_now" -gt 0 ] && [ "$done_now" -lt "$shards" ] && partial=$((partial + 1))
  wait_gone 10 "${rpids[@]}"
  # what a reader got before the kill is a prefix of the exact bytes
  for k in $(seq 0 $((shards - 1))); do
    cmp -s -n "$(stat -c %s "$tmp/pre-$k")" "$tmp/pre-$k" "$tmp/want-$k" ||
      fail "round $r: shard $k: wrong bytes served before the kill"
  done
  check_round "$r"
  umount_fs "$mnt" "$mpid"
  daemons=()
done
pass "$loops kill -9 rounds ($kills_mid mid-materialization, $partial with some shards committed, $windows between serving and committing): exact bytes, catalog ok, no temp file left"
! $has_strace || [ "$loops" -lt 3 ] || [ "$windows" -gt 0 ] ||
  fail "no kill landed between serving and committing"

# --- committed shards are never recomputed ---
mount_fs "$mnt" "$store" "$pipes" -o workers=$shards
n=$(calls "$pipes/calls")
for k in $(seq 0 $((shards - 1))); do
  cmp -s "$(shard_path "$k")" "$tmp/want-$k" || fail "final read: shard $k: wrong bytes"
done
[ "$(calls "$pipes/calls")" -eq "$n" ] || fail "a final read of committed shards called the stage"
umount_fs "$mnt" "$mpid"
[ "$kills_mid" -gt 0 ] || fail "no kill landed mid-materialization"
pass "reading everything again makes no stage call ($n calls in all, $recomputed after restarts)"
reclaims=$(grep -c 'start-up reclaim removed' "$log")
[ "$reclaims" -gt 0 ] || fail "no start-up reclaim removed anything"
pass "$reclaims start-ups reclaimed what a killed daemon left"
