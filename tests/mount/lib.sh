# lib.sh - what the mount tests share: skipping without FUSE, a temporary
# folder, daemons run with -f in the background and always unmounted and
# reaped on exit (even when a test fails), and polling with timeouts.
# Sourced by the test_mount_*.sh scripts; not a test itself.
set -uo pipefail
src=${MF_SOURCE_ROOT:?} build=${MF_BUILD_ROOT:?}
matfs=$build/tools/matfs
matctl=$build/tools/matctl
py=/usr/bin/python3
[ -e /dev/fuse ] || { echo "skip: no /dev/fuse"; exit 77; }
command -v fusermount3 >/dev/null || { echo "skip: no fusermount3"; exit 77; }
[ -x "$py" ] || py=$(command -v python3)

tmp=$(mktemp -d /tmp/mf-mount.XXXXXX)
log=$tmp/matfs.log
daemons=() mounts=()
# what mount_fs starts the daemon through (a test sets it: env ...)
launch=()

# reap PID: waits up to 5 s for it, then kills it hard.
reap() {
  local i
  for i in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

cleanup() {
  local m p
  for m in "${mounts[@]}"; do
    grep -q " $m fuse" /proc/self/mounts &&
      { fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; }
  done
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${daemons[@]}"; do reap "$p"; done
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  [ -s "$log" ] && { echo "--- daemon log:" >&2; tail -n 30 "$log" >&2; }
  exit 1
}
pass() { echo "ok - $*"; }

# wait_for SECONDS COMMAND...: polls every 50 ms until COMMAND succeeds.
wait_for() {
  local end=$(( $(date +%s%N) + $1 * 1000000000 )); shift
  until "$@" 2>/dev/null; do
    [ "$(date +%s%N)" -lt "$end" ] || return 1
    sleep 0.05
  done
}

is_mounted() { grep -q " $1 fuse" /proc/self/mounts; }
pid_gone() { ! kill -0 "$1" 2>/dev/null; }

# mount_fs MOUNTPOINT STORE PIPELINES [ARGS...]: starts a daemon in the
# foreground (in the background of this shell); sets $mpid.
mount_fs() {
  local mnt=$1 store=$2 pipes=$3; shift 3
  mkdir -p "$mnt"
  "${launch[@]}" "$matfs" --store "$store" --pipelines "$pipes" -f "$@" "$mnt" >>"$log" 2>&1 &
  mpid=$!
  daemons+=("$mpid")
  mounts+=("$mnt")
  wait_for 10 is_mounted "$mnt" || fail "matfs did not mount $mnt"
}

# umount_fs MOUNTPOINT PID: unmounts and checks the daemon exits 0.
umount_fs() {
  fusermount3 -u "$1" || fail "fusermount3 -u $1"
  # whether it exits is the check, not how fast: a sanitizer build on a
  # loaded machine takes seconds to join its threads and check for leaks
  wait_for 60 pid_gone "$2" || fail "matfs $2 still runs 60 s after unmount"
  wait "$2" || fail "matfs exited $? after unmount"
  ! grep -Eq 'runtime error|Sanitizer' "$log" || fail "a sanitizer reported"
}

# calls FILE: how many times a stage appended to FILE.
calls() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# xattr PATH NAME: the value of user.matfs.NAME, or nothing.
xattr() {
  "$py" -c 'import os, sys
try:
    print(os.getxattr(sys.argv[1], "user.matfs." + sys.argv[2]).decode())
except OSError:
    pass' "$1" "$2"
}

# now_ms: a monotonic-enough clock for timings.
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
