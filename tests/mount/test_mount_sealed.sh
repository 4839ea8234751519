#!/usr/bin/env bash
# test_mount_sealed.sh - an open returns once the output is complete, not
# once it is durable. With every fsync of the daemon held back (strace
# --inject delay), a cold read still gets the exact bytes, while the shard
# stays `running` and no committed file exists; fstat, stat and a second
# open in that window see the same bytes and size, and no stage runs again.
# A kill -9 in that window leaves the claim of a dead run: the next daemon
# computes the shard again, and gc and fsck leave a clean store. A commit
# that fails (fsync EIO) leaves the readers their exact bytes, records the
# failure, logs it, and the next open computes the shard again. A shard
# larger than the chunk cache is served from the file being written.
. "${MF_SOURCE_ROOT:?}/tests/mount/lib.sh" || exit 1
command -v strace >/dev/null || { echo "skip: no strace"; exit 77; }
command -v sqlite3 >/dev/null || { echo "skip: no sqlite3"; exit 77; }

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1 2 3; do printf 'input %d\n' $k >"$pipes/in/$k.txt"; done
cat >"$pipes/sealed.yaml" <<'YAML'
name: sealed
inputs: in/*.txt
chunk_size: 16KiB
compression: zstd:1
stages:
  - exec: [/bin/sh, -c, 'echo "$MATFS_SHARD" >>calls; cat; seq 1 100000']
YAML
for k in 0 1 2 3; do
  (cd "$pipes" && sh -c 'cat; seq 1 100000' <"in/$k.txt") >"$tmp/want$k"
done
size0=$(stat -c %s "$tmp/want0")
s=$mnt/sealed
state() { xattr "$s/shard-0000$1" state; }
row() {
  sqlite3 "$store/catalog.db" "SELECT state FROM shards WHERE idx = $1" 2>/dev/null
}
committed_files() { find "$store" -name "shard-0000$1.mfs" | wc -l; }
tracer=

# hold_fsync INJECTION: strace on every thread of the daemon, injecting
# into each fsync (the shard file's and its folder's; SQLite calls
# fdatasync; the run folder is made, with an fsync, by the daemon's first
# computation of the snapshot, so one shard is read before). Returns once
# every thread is traced.
hold_fsync() {
  strace -qq -f -p "$mpid" -o /dev/null -e trace=fsync -e "inject=fsync:$1" 2>/dev/null &
  tracer=$!
  wait_for 10 traced || fail "strace did not attach to $mpid"
}
traced() {
  local f
  for f in /proc/"$mpid"/task/*/status; do
    grep -q '^TracerPid:[[:space:]]*0$' "$f" && return 1
  done
  return 0
}
release_fsync() {
  [ -n "$tracer" ] && { kill "$tracer" 2>/dev/null; wait "$tracer" 2>/dev/null; }
  tracer=
}
# on a failure: the daemon may be stopped in a held fsync; the tracer is
# killed first so that it can end
kill_tracer() {
  [ -n "$tracer" ] && { kill -9 "$tracer" 2>/dev/null; wait "$tracer" 2>/dev/null; }
  tracer=
}
trap 'kill_tracer; cleanup' EXIT

# read_in_time K OUT: cat of shard K into OUT, given 60 s to end.
read_in_time() {
  cat "$s/shard-0000$1" >"$2" 2>>"$log" &
  local p=$!
  wait_for 60 pid_gone "$p" || { kill "$p" 2>/dev/null; return 1; }
  wait "$p"
}
mount_fs "$mnt" "$store" "$pipes"
cmp "$s/shard-00002" "$tmp/want2" || fail "shard 2: bytes differ"
wait_for 30 eval '[ "$(row 2)" = materialized ]' || fail "the catalog's row of shard 2: $(row 2)"

# --- served before durable: every fsync held for 10 minutes ---
hold_fsync delay_enter=600s
read_in_time 0 "$tmp/got0" ||
  fail "the cold read waited for the commit (fsync held back)"
cmp "$tmp/got0" "$tmp/want0" || fail "cold read: bytes differ"
[ "$(state 0)" = running ] || fail "state while committing: $(state 0)"
[ "$(row 0)" = running ] || fail "catalog row while committing: $(row 0)"
[ "$(committed_files 0)" = 0 ] || fail "a committed file before its fsync"
exec 3<"$s/shard-00000"
fsize=$("$py" -c 'import os; print(os.fstat(3).st_size)')
[ "$fsize" = "$size0" ] || fail "fstat in the window: $fsize, want $size0"
[ "$(stat -c %s "$s/shard-00000")" = "$size0" ] ||
  fail "stat with a descriptor open: $(stat -c %s "$s/shard-00000")"
ls -l "$s" >/dev/null || fail "ls -l in the window"
read_in_time 0 "$tmp/again0" || fail "a second open in the window waited"
cmp "$tmp/again0" "$tmp/want0" || fail "second open in the window: bytes differ"
cmp <(cat <&3) "$tmp/want0" || fail "the held descriptor: bytes differ"
exec 3<&-
[ "$(stat -c %s "$s/shard-00000")" = "$size0" ] ||
  fail "stat with no descriptor open in the window: $(stat -c %s "$s/shard-00000"), want $size0"
[ "$(calls "$pipes/calls")" = 2 ] || fail "the stage ran $(calls "$pipes/calls") times"
pass "served in the commit window: exact bytes, fstat $fsize, state running, one computation"

# --- kill -9 in the window: the old state, computed again ---
# the tracer goes with it (killed, not detached, so that no held fsync
# goes on): a traced process killed ends only once its tracer lets go
kill -9 "$mpid"
kill -9 "$tracer"
wait "$tracer" 2>/dev/null
tracer=
wait "$mpid" 2>/dev/null
fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
wait_for 10 eval "! is_mounted $mnt" || fail "the dead mount stays"
[ "$(row 0)" = running ] || fail "after the kill: row $(row 0), want running"
[ "$(committed_files 0)" = 0 ] || fail "after the kill: a committed file"
mount_fs "$mnt" "$store" "$pipes"
cmp "$s/shard-00000" "$tmp/want0" || fail "after the restart: bytes differ"
[ "$(calls "$pipes/calls")" = 3 ] || fail "not computed again after the kill"
wait_for 30 eval '[ "$(row 0)" = materialized ]' || fail "after the restart: row $(row 0)"
"$matctl" --store "$store" gc >/dev/null 2>&1 || fail "matctl gc"
"$matctl" --store "$store" fsck >"$tmp/fsck" 2>&1 || fail "fsck: $(cat "$tmp/fsck")"
[ -z "$(find "$store" -name '*.tmp')" ] || fail "a temp file survives gc"
pass "kill -9 in the window: computed again, exact bytes, fsck clean"

# --- a failed commit: readers keep their bytes, the next open recomputes ---
hold_fsync error=EIO
read_in_time 1 "$tmp/got1" || fail "read with a failing commit"
cmp "$tmp/got1" "$tmp/want1" || fail "read with a failing commit: bytes differ"
wait_for 30 eval '[ "$(row 1)" = failed ]' || fail "failed commit: row $(row 1)"
release_fsync
grep -q "shard 1 of .*committing shard 1: Input/output error" "$log" ||
  fail "the failed commit is not logged"
[ "$(committed_files 1)" = 0 ] || fail "a committed file after a failed commit"
cmp "$s/shard-00001" "$tmp/want1" || fail "after the failed commit: bytes differ"
[ "$(calls "$pipes/calls")" = 5 ] || fail "not computed again after the failed commit"
wait_for 30 eval '[ "$(row 1)" = materialized ]' || fail "after recomputing: row $(row 1)"
pass "failed commit: exact bytes, logged, recorded failed, computed again"
umount_fs "$mnt" "$mpid"

# --- a shard larger than the cache: served from the file being written ---
mount_fs "$mnt" "$store" "$pipes" -o cache=64KiB
[ "$size0" -gt $((8 * 65536)) ] || fail "the shard is not larger than the cache"
read_in_time 3 "$tmp/got3" || fail "read of a shard larger than the cache"
cmp "$tmp/got3" "$tmp/want3" || fail "shard larger than the cache: bytes differ"
tapped=$(xattr "$mnt" chunks_tapped)
[ "$tapped" -le 4 ] || fail "tapped $tapped chunks of 16 KiB into a 64 KiB cache"
pass "a shard of $size0 bytes through a 64 KiB cache: exact bytes, $tapped chunks kept"
umount_fs "$mnt" "$mpid"
