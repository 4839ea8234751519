#!/usr/bin/env bash
# test_fault.sh - what a store failure during materialization leaves behind:
# write, fsync, rename and open of a shard fail (EIO, ENOSPC, EMFILE, a
# write that returns 0, a real short write, a full tmpfs), once and then
# persistently. Each time matctl exits 1 naming the store failure, the shard
# is failed (never materialized), no .mfs was committed, no .tmp survives
# gc, fsck is clean after gc, a failed fsync was not retried on the same
# file, and a rerun without the fault serves exactly the stage's bytes.
#
# How the faults are injected, and why this way:
# - strace --inject (exit 77 without an strace that has it), WITHOUT -f, on
#   `matctl cat`: cat computes the shard in matctl's main thread, so only
#   that thread is traced and the stage processes it forks (which also
#   write, open and close) never see a fault. `warm` computes on worker
#   threads, which strace without -f does not follow; with -f the stages
#   would be hit too, so warm is exercised on the full tmpfs instead.
# - The spec uses `compression: none`: the writer then writes chunks from
#   the calling thread (zstd and snappy hand them to a pool of threads).
# - strace -P cannot name the shard file (its run folder is random), so
#   each case first runs the same command on a copy of the same store under
#   `strace -y` (fds shown as paths) and takes the ordinal of the syscall
#   on shard-00000.tmp (or on its run folder); `when=K` then fails exactly
#   that call, `when=K+` that call and every later one of that syscall.
#   The count is deterministic: SQLite writes with pwrite64 and syncs with
#   fdatasync, so write and fsync are the store's own.
# - A real short write: RLIMIT_FSIZE (`ulimit -f`, SIGXFSZ ignored) lets a
#   write past the limit write part of its buffer, then fails with EFBIG.
# - A full disk: a 2 MiB tmpfs holding the store and a filler file; after
#   the filler is removed the next run succeeds (needs root and mount).
#
# Reproduce one case by hand (K from the dry run, as below):
#   strace -qq -e trace=fsync -e inject=fsync:error=EIO:when=K \
#     matctl --store S cat SPEC 0
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
command -v strace >/dev/null || { echo "skip: no strace"; exit 77; }
strace -qq -e trace=getpid -e inject=getpid:error=EIO:when=1 -o /dev/null \
  true 2>/dev/null || { echo "skip: strace without --inject"; exit 77; }

tmp=$(mktemp -d /tmp/mf-fault.XXXXXX)
mnt=$tmp/small
cleanup() {
  grep -q " $mnt tmpfs" /proc/self/mounts && umount "$mnt"
  rm -rf "$tmp"
}
trap cleanup EXIT
# LeakSanitizer cannot run under ptrace; the runs without strace keep it.
st() { ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 strace "$@"; }
fail() {
  echo "FAIL: $*" >&2
  [ -s "$tmp/matfs.log" ] && tail -n 30 "$tmp/matfs.log" >&2
  exit 1
}
pass() { echo "ok - $*"; }

# --- a one-shard spec whose stage output is known byte for byte ---
p=$tmp/p
mkdir -p "$p/in"
seq 1 40000 >"$p/in/a.txt"
cat >"$p/s.yaml" <<'YAML'
name: fault
inputs: in/*.txt
shards: 1
stages:
  - exec: [/bin/sh, -c, 'tr 0-9 a-j; echo "end $MATFS_SHARD"']
compression: none
chunk_size: 16KiB
YAML
{ tr 0-9 a-j <"$p/in/a.txt"; echo "end 0"; } >"$tmp/want"
base=$tmp/base S=$tmp/S
"$matctl" --store "$base" stat "$p/s.yaml" >/dev/null || fail "register"

fresh() { rm -rf "$S" && cp -a "$base" "$S"; }
m() { "$matctl" --store "$S" "$@"; }

# ordinal SYSCALL PATTERN WHICH: the 1-based ordinal, among the main
# thread's SYSCALL calls in a clean `cat`, of the first or last (WHICH) one
# whose line matches PATTERN (an extended regex).
ordinal() {
  fresh
  st -qq -y -e signal=none -e trace="$1" -o "$tmp/dry" "$matctl" --store "$S" \
    cat "$p/s.yaml" 0 >/dev/null || fail "dry run of $1"
  local n
  n=$(grep -En "$2" "$tmp/dry" | cut -d: -f1)
  [ -n "$n" ] || fail "no $1 matching '$2' in the dry run"
  if [ "$3" = first ]; then head -1 <<<"$n"; else tail -1 <<<"$n"; fi
}

# shard_error: the shard's state and error, as "STATE|ERROR".
shard_error() {
  m stat "$p/s.yaml" --json | "$py" -c '
import json, sys
s = json.load(sys.stdin)["shards"][0]
print("%s|%s" % (s["state"], s["error"] or ""))'
}

# after_fault NAME MSG: the checks every fault shares (see the header).
after_fault() {
  local name=$1 msg=$2 st
  st=$(shard_error)
  [[ $st == "failed|store: "*"$msg"* ]] || fail "$name: shard is '$st'"
  last_error=${st#failed|}
  [ -z "$(find "$S/snapshots" -name '*.mfs')" ] || fail "$name: .mfs committed"
  m gc >/dev/null || fail "$name: gc"
  [ -z "$(find "$S/snapshots" -name '*.tmp')" ] || fail "$name: .tmp after gc"
  local out
  out=$(m fsck) || fail "$name: fsck after gc: $out"
  m cat "$p/s.yaml" 0 >"$tmp/got" || fail "$name: rerun"
  cmp -s "$tmp/got" "$tmp/want" || fail "$name: rerun served wrong bytes"
  [[ $(shard_error) == "materialized|" ]] || fail "$name: not materialized"
  m fsck >/dev/null || fail "$name: fsck after rerun"
}

# inject NAME SYSCALL FAULT PATTERN WHICH ONCE|PERSISTENT MSG
# FAULT is strace's error=ERRNO or retval=N; MSG the strerror the shard's
# error must name.
inject() {
  local name=$1 sc=$2 fault=$3 pat=$4 which=$5 mode=$6 msg=$7 k rc
  k=$(ordinal "$sc" "$pat" "$which") || exit 1
  [ "$mode" = persistent ] && k=$k+
  fresh
  st -qq -y -e trace="$sc" -e inject="$sc:$fault:when=$k" \
    -o "$tmp/log" "$matctl" --store "$S" cat "$p/s.yaml" 0 \
    >"$tmp/got" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 1 ] || fail "$name: exit $rc"
  [ -s "$tmp/got" ] && fail "$name: bytes served despite the fault"
  # a persistent write fault also eats matctl's own message on stderr
  if ! [[ $sc == write && $mode == persistent ]]; then
    grep -q "store: .*$msg" "$tmp/err" || fail "$name: stderr '$(cat "$tmp/err")'"
  fi
  if [ "$sc" = fsync ]; then
    local syncs
    syncs=$(grep -c 'fsync(.*shard-00000\.tmp>)' "$tmp/log")
    [ "$syncs" -le 1 ] || fail "$name: fsync of the shard tried $syncs times"
  fi
  after_fault "$name" "$msg"
  pass "$name ($sc $fault when=$k): $last_error"
}

EIO='Input/output error' NOSPC='No space left on device'
tmpf='shard-00000\.tmp>'
run='/[0-9a-f]{32}>\)'
inject "write header EIO once" write error=EIO "$tmpf" first once "$EIO"
inject "write last ENOSPC once" write error=ENOSPC "$tmpf" last once "$NOSPC"
inject "write header ENOSPC persistent" write error=ENOSPC "$tmpf" first \
  persistent "$NOSPC"
inject "write trailer EIO persistent" write error=EIO "$tmpf" last \
  persistent "$EIO"
inject "write returns 0" write retval=0 "$tmpf" last once "$EIO"
inject "fsync shard EIO once" fsync error=EIO "$tmpf" first once "$EIO"
inject "fsync shard ENOSPC once" fsync error=ENOSPC "$tmpf" first once "$NOSPC"
inject "fsync shard EIO persistent" fsync error=EIO "$tmpf" first \
  persistent "$EIO"
inject "fsync run folder EIO once" fsync error=EIO "$run" last once "$EIO"
inject "rename EIO once" renameat error=EIO "shard-00000\.tmp" first once "$EIO"
inject "rename ENOSPC persistent" renameat error=ENOSPC "shard-00000\.tmp" \
  first persistent "$NOSPC"
inject "open EIO once" openat error=EIO '"shard-00000\.tmp"' first once "$EIO"
inject "open EMFILE once" openat error=EMFILE '"shard-00000\.tmp"' first \
  once 'Too many open files'
inject "open ENOSPC persistent" openat error=ENOSPC '"shard-00000\.tmp"' \
  first persistent "$NOSPC"

# --- a real short write: the file size limit cuts a write, then EFBIG ---
fresh
(
  trap '' XFSZ
  ulimit -f 128 # KiB: catalog and metadata fit, the ~225 KiB shard not
  "$matctl" --store "$S" cat "$p/s.yaml" 0 >"$tmp/got" 2>"$tmp/err"
)
rc=$?
[ $rc -eq 1 ] || fail "short write: exit $rc"
[ -s "$tmp/got" ] && fail "short write: bytes served"
grep -q "store: .*File too large" "$tmp/err" || fail "short write: '$(cat "$tmp/err")'"
after_fault "short write" "File too large"
pass "short write, then EFBIG (ulimit -f)"

# --- a full tmpfs: ENOSPC mid-shard, then space freed, then success ---
if [ "$(id -u)" -ne 0 ]; then
  echo "tmpfs part skipped: not root"
  exit 0
fi
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=2m tmpfs "$mnt" 2>/dev/null; then
  echo "tmpfs part skipped: mount not permitted"
  exit 0
fi
seq 1 160000 >"$p/in/a.txt" # ~1.1 MB of output: fits 2 MiB, not with filler
{ tr 0-9 a-j <"$p/in/a.txt"; echo "end 0"; } >"$tmp/want"
S=$mnt/store
head -c 1200000 /dev/zero >"$mnt/filler"
m warm "$p/s.yaml" >"$tmp/got" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "full tmpfs: warm exit $rc"
grep -q "store: .*$NOSPC" "$tmp/err" || fail "full tmpfs: '$(cat "$tmp/err")'"
[[ $(shard_error) == "failed|store: "*"$NOSPC"* ]] || fail "full tmpfs: $(shard_error)"
[ -z "$(find "$S/snapshots" -name '*.mfs' -o -name '*.tmp')" ] ||
  fail "full tmpfs: shard file left"
rm "$mnt/filler"
m warm "$p/s.yaml" >/dev/null || fail "freed tmpfs: warm"
m cat "$p/s.yaml" 0 >"$tmp/got" || fail "freed tmpfs: cat"
cmp -s "$tmp/got" "$tmp/want" || fail "freed tmpfs: wrong bytes"
{ m gc && m fsck; } >/dev/null || fail "freed tmpfs: gc, fsck"
pass "full tmpfs: ENOSPC, nothing partial; after freeing space, exact bytes"

# --- the same through one running daemon: EIO to the reader while the
# disk is full, the right bytes once it is freed, no restart between ---
matfs=$build/tools/matfs
if ! [ -x "$matfs" ] || ! [ -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
  echo "daemon part skipped: no matfs or FUSE"
  exit 0
fi
rm -rf "$S"
S=$mnt/store2 fuse=$tmp/fuse
mkdir -p "$fuse"
head -c 1200000 /dev/zero >"$mnt/filler"
"$matfs" --store "$S" --pipelines "$p" -f "$fuse" >"$tmp/matfs.log" 2>&1 &
mpid=$!
# umount_fuse: unmounts, gives the daemon 10 s to exit, returns its status.
umount_fuse() {
  grep -q " $fuse fuse" /proc/self/mounts && fusermount3 -u "$fuse"
  for _ in $(seq 1 200); do
    kill -0 "$mpid" 2>/dev/null || break
    sleep 0.05
  done
  kill -9 "$mpid" 2>/dev/null
  wait "$mpid"
}
cleanup() {
  umount_fuse 2>/dev/null
  grep -q " $mnt tmpfs" /proc/self/mounts && umount "$mnt"
  rm -rf "$tmp"
}
for _ in $(seq 1 200); do
  grep -q " $fuse fuse" /proc/self/mounts && break
  sleep 0.05
done
grep -q " $fuse fuse" /proc/self/mounts || fail "matfs did not mount"
if cat "$fuse/fault/shard-00000" >"$tmp/got" 2>"$tmp/err"; then
  fail "daemon: a read on a full disk succeeded"
fi
grep -q "$EIO" "$tmp/err" || fail "daemon: reader got '$(cat "$tmp/err")', not EIO"
[[ $(shard_error) == "failed|store: "*"$NOSPC"* ]] || fail "daemon: $(shard_error)"
[ -z "$(find "$S/snapshots" -name '*.mfs' -o -name '*.tmp')" ] ||
  fail "daemon: shard file left on a full disk"
rm "$mnt/filler"
cat "$fuse/fault/shard-00000" >"$tmp/got" || fail "daemon: read after freeing"
cmp -s "$tmp/got" "$tmp/want" || fail "daemon: wrong bytes after freeing"
kill -0 "$mpid" || fail "daemon: not the same process"
umount_fuse || fail "daemon exited $? after unmount"
! grep -Eq 'runtime error|Sanitizer' "$tmp/matfs.log" || fail "a sanitizer reported"
pass "daemon: EIO to the reader on a full disk, exact bytes once freed, no restart"
