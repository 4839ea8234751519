#!/usr/bin/env bash
# test_mount_others.sh - what a failure shows to other users of an
# allow_other mount: a reader who is not root, the daemon's user or the
# spec's owner gets a user.matfs.error that names no path (only the spec
# file's name) and no user.matfs.stderr; root and the spec's owner get the
# full texts. Runs as root: two users are made for it and removed after.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root to add users"; exit 77; }
command -v useradd >/dev/null || { echo "skip: no useradd"; exit 77; }

# names free as users and as groups: --user-group makes both
free_name() {
  local n=$1$$
  while getent passwd "$n" >/dev/null || getent group "$n" >/dev/null; do
    n=$1$$x$RANDOM
  done
  echo "$n"
}
owner=$(free_name mfo) reader=$(free_name mfr)
users=()
drop_users() {
  local u
  for u in "${users[@]}"; do
    userdel "$u" 2>/dev/null
    getent group "$u" >/dev/null && groupdel "$u" 2>/dev/null
  done
}
trap 'cleanup; drop_users' EXIT
for u in "$owner" "$reader"; do
  useradd --no-create-home --shell /usr/sbin/nologin --user-group "$u" ||
    fail "useradd $u"
  users+=("$u")
done
as() { # as USER COMMAND...: runs COMMAND as USER, no other group
  local u=$1; shift
  setpriv --reuid="$u" --regid="$u" --clear-groups "$@"
}

chmod 711 "$tmp" # others reach the mount, not the rest
store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt secret=$tmp/secret-place
mkdir -p "$pipes/in" "$secret"
chmod 700 "$secret"
echo payload >"$pipes/in/a.txt"
chmod 755 "$pipes" "$pipes/in"
# a stage that fails naming files in a folder only root can read
tool=$secret/tool.sh
printf '#!/bin/sh\necho "cannot open %s.data" >&2\nexit 3\n' "$tool" >"$tool"
chmod 755 "$tool"
printf 'name: rootfail\ninputs: in/*.txt\nstages:\n  - exec: [%s]\n' \
  "$tool" >"$pipes/rootfail.yaml"
# the same failure in a spec the owner user owns (its stage runs as them)
otool=$tmp/otool.sh
printf '#!/bin/sh\necho "cannot open %s.data" >&2\nexit 3\n' "$otool" >"$otool"
chmod 755 "$otool"
printf 'name: ownfail\ninputs: in/*.txt\nstages:\n  - exec: [%s]\n' \
  "$otool" >"$pipes/ownfail.yaml"
chown "$owner:$owner" "$pipes/ownfail.yaml"

mount_fs "$mnt" "$store" "$pipes" -o allow_other
getx() { # getx USER PATH NAME: user.matfs.NAME as USER sees it
  as "$1" getfattr --only-values -n "user.matfs.$3" "$2" 2>/dev/null
}
for n in rootfail ownfail; do
  cat "$mnt/$n/shard-00000" 2>/dev/null && fail "$n: a failing shard read"
  [ "$(xattr "$mnt/$n/shard-00000" state)" = failed ] || fail "$n not failed"
done

# --- root sees everything ---
f=$mnt/rootfail/shard-00000
val=$(getx root "$f" error) || fail "root's error: $(getx root "$f" error)"
grep -qF "$tool" <<<"$val" || fail "root's error: $val"
val=$(getx root "$f" stderr) || fail "root's stderr: $(getx root "$f" stderr)"
grep -qF "$tool.data" <<<"$val" || fail "root's stderr: $val"
pass "root sees the full error and stderr"

# --- another user sees no path ---
e=$(getx "$reader" "$f" error) || fail "the reader cannot read user.matfs.error"
[ -n "$e" ] || fail "the reader got an empty error"
case $e in */*) fail "the reader's error names a path: $e" ;; esac
grep -qF "rootfail.yaml" <<<"$e" || fail "the reader's error does not name the spec: $e"
getx "$reader" "$f" stderr && fail "the reader sees user.matfs.stderr"
attrs=$(as "$reader" getfattr -d "$f" 2>/dev/null) && grep -q secret-place <<<"$attrs" &&
  fail "getfattr -d shows the reader a path"
[ "$(getx "$reader" "$f" state)" = failed ] || fail "the reader's state"
[ "$(getx "$reader" "$f" exit_status)" = "$(getx root "$f" exit_status)" ] ||
  fail "the reader's exit status"
pass "another user's error names only the spec file; no stderr"

# --- the spec's owner sees their own failure in full, not root's ---
g=$mnt/ownfail/shard-00000
val=$(getx "$owner" "$g" error) || fail "owner's error: $(getx "$owner" "$g" error)"
grep -qF "$otool" <<<"$val" || fail "owner's error: $val"
val=$(getx "$owner" "$g" stderr) || fail "owner's stderr"
grep -qF "$otool.data" <<<"$val" || fail "owner's stderr"
case $(getx "$owner" "$f" error) in */*) fail "the owner sees root's paths" ;; esac
case $(getx "$reader" "$g" error) in */*) fail "the reader sees the owner's paths" ;; esac
pass "a spec's owner sees its failures in full, and only its own"

umount_fs "$mnt" "$mpid"
