#!/usr/bin/env bash
# test_security_logfile.sh - the daemon's log against another user who can
# write the folder it is in (docs/security.md, "The store"): root mounts
# with -o log=FILE in a sticky world-writable folder (as /tmp) and, in a
# second part, in a folder the user may write. The user cannot make the
# log grow past log_size by blocking its rotation, cannot make root's
# `matctl log` or `matctl log -f` print a file of theirs or a file they
# link to, and a stage's stderr reaches the log without control
# characters (terminal escapes, C1 controls, invalid UTF-8).
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

secret=$tmp/shadow
install -m 0600 /dev/null "$secret"
echo "root-only-Kq7" >"$secret"
p=$tmp/p
install -d -m 0755 "$p" "$p/in"
echo input >"$p/in/a.txt"
# fails with terminal escapes, a C1 CSI (U+009B), a lone 0x9b byte and a
# carriage return in its last stderr line
cat >"$p/noisy.yaml" <<'YAML'
name: noisy
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; printf "x\033]0;pwned\007y\302\2332Jz\233w\rforged\n" >&2; exit 3']
YAML
store=$tmp/store
mnt=$tmp/mnt
pub=$tmp/pub
install -d -m 1777 "$pub"
flog=$pub/m.log

# --- a rotation the user blocks does not let the log grow without bound ---
# FILE.3 a non-empty folder and FILE.2 a file of the user's: FILE.2 cannot
# move to FILE.3
as_user mkdir "$flog.3"
as_user touch "$flog.3/x" "$flog.2"
mount_fs "$mnt" "$store" "$p" -o "log=$flog,log_size=2KiB"
wait_for 20 has_name "$mnt" noisy || fail "noisy not registered"
for i in $(seq 1 40); do cat "$mnt/noisy/shard-00000" 2>/dev/null || true; done
wait_for 5 test -e "$flog.1" || fail "not rotated: $(ls -l "$pub")"
size=$(stat -c %s "$flog")
[ "$size" -lt $((2048 + 2200)) ] || fail "the log grew to $size bytes past log_size 2KiB"
[ -d "$flog.3" ] && [ -e "$flog.3/x" ] || fail "the user's folder was touched"
pass "a rotation blocked by the user's files keeps the log under log_size"

# --- a stage's stderr reaches the log without control characters ---
grep -q 'forged' "$flog" || fail "no failure line in the log: $(tail -n 3 "$flog")"
! LC_ALL=C grep -q $'\033\|\007\|\r' "$flog" || fail "a C0 control in the log"
! LC_ALL=C grep -q $'\302\233\|\233' "$flog" || fail "a C1 control in the log"
iconv -f UTF-8 -t UTF-8 "$flog" >/dev/null || fail "invalid UTF-8 in the log"
pass "control characters, C1 controls and invalid UTF-8 are written as '?'"

umount_fs "$mnt" "$mpid"

# --- a log the user moves away: root's matctl log never reads what the
# user puts at its path, and the file the daemon holds stays bounded ---
upub=$tmp/upub
install -d -m 0755 -o "$user" "$upub"
ulog=$upub/m.log
mount_fs "$mnt" "$store" "$p" -o "log=$ulog,log_size=2KiB"
wait_for 20 has_name "$mnt" noisy || fail "noisy not registered"
"$build/tools/matctl" --store "$store" log -f >"$tmp/followed" 2>"$tmp/ferr" &
follower=$!
daemons+=("$follower")
wait_for 5 grep -q 'noisy' "$tmp/followed" || fail "matctl log -f shows nothing"
as_user mv "$ulog" "$upub/moved.log"
as_user ln -s "$secret" "$ulog"
cat "$mnt/noisy/shard-00000" 2>/dev/null || true
wait_for 5 grep -q "log '$ulog': a symlink" "$tmp/ferr" ||
  fail "matctl log -f said nothing of the symlink: $(cat "$tmp/ferr")"
rc=0; out=$("$build/tools/matctl" --store "$store" log 2>&1) || rc=$?
[ $rc -eq 1 ] && [[ $out == *"'$ulog': a symlink, not the daemon's log"* ]] ||
  fail "matctl log of a symlink: $out"
for i in $(seq 1 40); do cat "$mnt/noisy/shard-00000" 2>/dev/null || true; done
size=$(stat -c %s "$upub/moved.log")
[ "$size" -lt $((2048 + 2200)) ] ||
  fail "the log the daemon could not open again grew to $size bytes"
as_user rm "$ulog"
as_user sh -c "printf '\\033]0;pwned-Kq7\\007\\n' >'$ulog'"
wait_for 5 grep -q "log '$ulog': not a regular file with one link owned" "$tmp/ferr" ||
  fail "matctl log -f said nothing of the user's file: $(cat "$tmp/ferr")"
rc=0; out=$("$build/tools/matctl" --store "$store" log 2>&1) || rc=$?
[ $rc -eq 1 ] || fail "matctl log printed a file of the user's: $out"
kill "$follower"
wait "$follower" 2>/dev/null || true
grep -q 'Kq7' "$tmp/followed" && fail "matctl log -f printed what the user planted"
umount_fs "$mnt" "$mpid"
pass "a log moved away by the user: matctl log refuses what is put there, the daemon's file stays bounded"

ln -s "$secret" "$store/matfs.log"
rc=0; out=$("$build/tools/matctl" --store "$store" log 2>&1) || rc=$?
[ $rc -eq 1 ] && [[ $out == *"a symlink, not the daemon's log"* ]] && [[ $out != *Kq7* ]] ||
  fail "matctl log of a symlinked STORE/matfs.log: $out"
pass "matctl log refuses a symlinked STORE/matfs.log"
