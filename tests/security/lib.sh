# lib.sh - what the security tests share: they run as root, create an
# unprivileged user of their own (removed on exit), mount matfs as root
# with -o allow_other, and attack it as that user through the mount and
# through the specs that user may write (docs/security.md, "Trust model").
# Every daemon is unmounted and reaped, every stuck stage released and the
# user removed on exit, even when a test fails. Skips (77) only when the
# machine lacks something: root, /dev/fuse, fusermount3, useradd.
# Sourced by the test_security_*.sh scripts; not a test itself.
set -euo pipefail
src=${MF_SOURCE_ROOT:?} build=${MF_BUILD_ROOT:?}
matfs=$build/tools/matfs

skip() {
  echo "skip: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "not root"
[ -e /dev/fuse ] || skip "no /dev/fuse"
for cmd in fusermount3 useradd userdel runuser getfattr python3 timeout; do
  command -v "$cmd" >/dev/null || skip "no $cmd"
done

# reap PID: waits up to 5 s for it, then kills it hard.
reap() {
  local i
  for i in $(seq 1 100); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.05
  done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

is_mounted() { grep -q " $1 fuse" /proc/self/mounts; }
pid_gone() { ! kill -0 "$1" 2>/dev/null; }

tmp="" daemons=() mounts=() users=() releases=()
cleanup() {
  set +e
  local f m p u i
  # a stage a test left waiting on a file ends first, so that nothing
  # stays stuck reading from it
  for f in "${releases[@]}"; do touch "$f"; done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    m=${mounts[i]}
    is_mounted "$m" &&
      { fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; }
  done
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${daemons[@]}"; do reap "$p"; done
  # newest first: a user made with another's private group as its
  # primary one goes before that group's owner, so that userdel can
  # remove the group with its owner; a group left behind all the same
  # goes too, or a later useradd -U of the same name fails on it
  for ((i = ${#users[@]} - 1; i >= 0; i--)); do
    u=${users[i]}
    userdel -r "$u" 2>/dev/null || userdel -r -f "$u" 2>/dev/null
    getent group "$u" >/dev/null && groupdel "$u" 2>/dev/null
  done
  [ -z "$tmp" ] || rm -rf "$tmp"
}
trap cleanup EXIT

umask 022
# Readable by all: the user must reach its own folders and the mount.
tmp=$(mktemp -d /tmp/mf-sec.XXXXXX)
chmod 0755 "$tmp"
log=$tmp/matfs.log
install -m 0600 /dev/null "$log" # the daemon's, not the user's

# The user runs its own copy of matctl: the build folder may be out of
# its reach.
mkdir "$tmp/bin"
install -m 0755 "$build/tools/matctl" "$tmp/bin/matctl"
matctl=$tmp/bin/matctl

fail() {
  echo "FAIL: $*" >&2
  if [ -s "$log" ]; then
    echo "--- daemon log:" >&2
    tail -n 30 "$log" >&2
  fi
  exit 1
}
pass() { echo "ok - $*"; }

# wait_for SECONDS COMMAND...: polls every 50 ms until COMMAND succeeds.
wait_for() {
  local end=$(($(date +%s%N) + $1 * 1000000000))
  shift
  until "$@" 2>/dev/null; do
    [ "$(date +%s%N)" -lt "$end" ] || return 1
    sleep 0.05
  done
}

# add_user: creates an unprivileged user with a home and a private group;
# sets $user, $uid, $home. useradd is retried while another test holds
# the lock on /etc/passwd.
add_user() {
  local name=mfsec$$ i
  # a name free as a user and as a group: useradd -U makes both
  while getent passwd "$name" >/dev/null || getent group "$name" >/dev/null; do
    name=mfsec$$x$RANDOM
  done
  for i in $(seq 1 100); do
    useradd -m -U -s /bin/sh "$name" 2>"$tmp/useradd.err" && break
    [ "$i" -lt 100 ] || fail "useradd $name: $(cat "$tmp/useradd.err")"
    sleep 0.1
  done
  users+=("$name")
  user=$name
  uid=$(id -u "$name")
  home=$(getent passwd "$name" | cut -d: -f6)
}

# as_user COMMAND...: runs COMMAND as $user, with its uid, gid and groups.
as_user() { runuser -u "$user" -- "$@"; }

# mount_fs MOUNTPOINT STORE PIPELINES [ARGS...]: starts a daemon as root
# in the foreground (in the background of this shell) with -o allow_other
# and the environment assignments in $daemon_env, if any; sets $mpid.
daemon_env=()
mount_fs() {
  local mnt=$1 store=$2 pipes=$3
  shift 3
  mkdir -p "$mnt"
  env "${daemon_env[@]}" "$matfs" --store "$store" --pipelines "$pipes" \
    -f -o allow_other "$@" "$mnt" >>"$log" 2>&1 &
  mpid=$!
  daemons+=("$mpid")
  mounts+=("$mnt")
  wait_for 20 is_mounted "$mnt" || fail "matfs did not mount $mnt"
}

# umount_fs MOUNTPOINT PID: unmounts and checks the daemon exits 0 with
# no sanitizer report.
umount_fs() {
  fusermount3 -u "$1" || fail "fusermount3 -u $1"
  local i # whether it exits is the check, not how fast (see tests/mount/lib.sh)
  for i in $(seq 1 1200); do
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$2" 2>/dev/null && fail "matfs $2 still runs 60 s after unmount"
  wait "$2" || fail "matfs exited $? after unmount"
  ! grep -Eq 'runtime error|Sanitizer' "$log" || fail "a sanitizer reported"
}

# has_name MOUNT NAME: NAME is a registered pipeline (a symlink) there.
has_name() { [ -L "$1/$2" ]; }

# user_xattrs PATH: every user.matfs.* attribute of PATH as $user sees
# them (names and values), or nothing.
user_xattrs() { as_user getfattr --absolute-names -d -m '^user\.matfs\.' "$1" 2>/dev/null || true; }

# bomb_yaml: YAML text whose aliases expand to 10^9 nodes (9 levels of
# 10 aliases each) under keys the spec does not know.
bomb_yaml() {
  local i j line
  echo 'l0: &l0 ["xxxxxxxx"]'
  for i in $(seq 1 9); do
    line="l$i: &l$i ["
    for j in $(seq 1 10); do
      line+="*l$((i - 1))"
      [ "$j" -lt 10 ] && line+=", "
    done
    echo "$line]"
  done
}
