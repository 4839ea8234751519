#!/usr/bin/env bash
# test_mount_daemon.sh - the daemon as users start it: in the background
# (the shell gets its status only once the mount is there), through
# mount.fuse3 as /etc/fstab does (store and pipelines as -o options), with
# its errors and exit codes.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in" "$mnt"
printf 'payload\n' >"$pipes/in/a.txt"
printf 'name: plain\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$pipes/plain.yaml"

# --- background: returns once mounted; unmount ends it ---
mounts+=("$mnt")
"$matfs" --store "$store" --pipelines "$pipes" -o workers=2,cache=64MiB "$mnt" 2>>"$log" ||
  fail "matfs in the background exited $?"
is_mounted "$mnt" || fail "not mounted when matfs returned"
[ "$(cat "$mnt/plain/shard-00000")" = payload ] || fail "background daemon: read"
mline=$(grep " $mnt " /proc/self/mounts)
grep -q 'fuse.matfs' <<<"$mline" || fail "mount type: $mline"
fusermount3 -u "$mnt" || fail "fusermount3 -u"
pass "in the background: matfs returns once mounted; fusermount3 -u unmounts"

# --- matctl stats asks only the mounts of its store: a stopped daemon of
# another store does not block it ---
store2=$tmp/store2 mnt2=$tmp/mnt2
mkdir -p "$mnt2"
mounts+=("$mnt" "$mnt2")
"$matfs" --store "$store" --pipelines "$pipes" "$mnt" 2>>"$log" || fail "matfs exited $?"
"$matfs" --store "$store2" --pipelines "$pipes" "$mnt2" 2>>"$log" || fail "matfs 2 exited $?"
pid2=$(pgrep -f -- "--store $store2 " | head -n 1)
[ -n "$pid2" ] || fail "no daemon for $store2"
kill -STOP "$pid2"
rc=0; out=$(timeout 20 "$matctl" --store "$store" stats 2>&1) || rc=$?
kill -CONT "$pid2"
[ $rc -eq 0 ] || fail "matctl stats with another store's daemon stopped: exit $rc: $out"
[[ $out == *"daemons mounted on this store: 1"* ]] || fail "matctl stats: $out"
fusermount3 -u "$mnt2" || fail "fusermount3 -u $mnt2"
fusermount3 -u "$mnt" || fail "fusermount3 -u $mnt"
pass "matctl stats asks only its store's mounts: another store's stopped daemon does not block it"

# --- errors: exit status 1 or 2 with a message, nothing mounted ---
"$matfs" --store "$store" --pipelines "$pipes" "$tmp/nowhere" 2>"$tmp/err" && fail "a missing mountpoint"
grep -q "mountpoint '.*nowhere'" "$tmp/err" || fail "message: $(cat "$tmp/err")"
"$matfs" --store "$store" -o workers=0 "$mnt" 2>"$tmp/err"; [ $? -eq 2 ] || fail "workers=0 accepted"
grep -q "bad workers '0'" "$tmp/err" || fail "message: $(cat "$tmp/err")"
"$matfs" --store "$store" -o max_size=lots "$mnt" 2>"$tmp/err"; [ $? -eq 2 ] || fail "max_size=lots accepted"
"$matfs" --store "$store" -o no_such_option "$mnt" 2>"$tmp/err" && fail "an unknown -o option"
touch "$tmp/file"
"$matfs" --store "$tmp/file/store" --pipelines "$pipes" "$mnt" 2>"$tmp/err" && fail "a store under a file"
grep -q "store '.*file/store'" "$tmp/err" || fail "message: $(cat "$tmp/err")"
is_mounted "$mnt" && fail "a failed start left a mount"
pass "bad mountpoint, options or store: an error and a non-zero status"

# --- /etc/fstab: mount.fuse3 runs 'matfs SOURCE MOUNTPOINT -o OPTIONS' ---
if command -v mount.fuse3 >/dev/null && [ "$(id -u)" -eq 0 ]; then
  PATH=$build/tools:$PATH mount.fuse3 matfs "$mnt" -t fuse.matfs \
    -o "store=$store,pipelines=$pipes,allow_other,workers=2,nofail" 2>>"$log" || fail "mount.fuse3 exited $?"
  is_mounted "$mnt" || fail "mount.fuse3 did not mount"
  [ "$(cat "$mnt/plain/shard-00000")" = payload ] || fail "fstab mount: read"
  mline=$(grep " $mnt " /proc/self/mounts)
  grep -q 'allow_other' <<<"$mline" || fail "allow_other missing"
  grep -q 'default_permissions' <<<"$mline" || fail "default_permissions missing"
  [ "$(stat -c %A "$mnt/plain/")" = drwxr-xr-x ] || fail "allow_other dir mode $(stat -c %A "$mnt/plain/")"
  rm "$mnt/plain/shard-00000" || fail "rm as the owner under default_permissions"
  src=$(awk -v m="$mnt" '$5 == m { for (i = 7; $i != "-"; i++); print $(i + 2) }' /proc/self/mountinfo)
  [ "$src" = "$(realpath "$store")" ] || fail "fstab mount's source '$src', not the store"
  out=$("$matctl" --store "$store" stats) ||
    fail "matctl stats does not find the fstab mount: $("$matctl" --store "$store" stats 2>&1 | head -n 3)"
  grep -q '^daemons mounted on this store: 1$' <<<"$out" ||
    fail "matctl stats does not find the fstab mount: $("$matctl" --store "$store" stats 2>&1 | head -n 3)"
  fusermount3 -u "$mnt" || fail "fusermount3 -u"
  pass "mount.fuse3 with -o store=,pipelines=,allow_other (adds default_permissions); its source is the store"
else
  echo "ok - mount.fuse3 part skipped (no mount.fuse3 or not root)"
fi
