#!/usr/bin/env bash
# test_security_input.sh - a user's spec whose one input the user may see
# but not read (attack "disclosure" of docs/security.md's trust model):
# the input is read with the spec owner's rights, never the daemon's.
# A file of root's fails the shard with EIO naming the file and EACCES,
# and no byte of it shows in the shard, its xattrs, the store or the log;
# the same spec over a file the user may read is served. Nor do /proc's
# links reach the daemon's rights: an input that is the user's symlink to
# the daemon's /proc/PID/maps, or to a file under /proc/PID/cwd (the
# daemon's working folder, root's 0700), fails as the user's own read of
# it does, and serves nothing (an open in the daemon's thread under the
# owner's filesystem rights served both: docs/decisions.md). A write
# lease the owner holds on the input (never given back) holds no thread
# of the daemon's: the stage's timeout fails the shard in seconds.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in" "$u/pipelines/ok"
# root's file in the user's folder: its name and size are the user's to
# see (the fingerprint stats it), its bytes are not
echo "root-secret-Hv3" >"$u/pipelines/in/a.txt"
chmod 0600 "$u/pipelines/in/a.txt"
as_user sh -c 'echo "the-users-own" >"$1/ok/a.txt"' sh "$u/pipelines"
as_user mkdir "$u/pipelines/held"
as_user sh -c 'echo "leased" >"$1/held/a.txt"' sh "$u/pipelines"
as_user tee "$u/pipelines/held.yaml" >/dev/null <<'YAML'
name: held
inputs: held/*.txt
stages:
  - exec: [cat]
    timeout: 2s
YAML
for n in peek ok; do
  d=in
  [ $n = ok ] && d=ok
  as_user tee "$u/pipelines/$n.yaml" >/dev/null <<YAML
name: $n
inputs: $d/*.txt
stages:
  - exec: [cat]
YAML
done

mnt=$tmp/mnt store=$tmp/store
# the daemon works in root's 0700 folder, a readable file in it
cwd=$tmp/rootcwd
install -d -m 0700 "$cwd"
echo "root-cwd-Wq8" >"$cwd/note.txt"
chmod 0644 "$cwd/note.txt"
cd "$cwd" || fail "cd $cwd"
mount_fs "$mnt" "$store" "$u/pipelines"
cd / || fail "cd /"
wait_for 20 has_name "$mnt" peek || fail "peek is not registered: $(cat "$log")"
wait_for 20 has_name "$mnt" ok || fail "ok is not registered"

out=$(as_user cat "$mnt/ok/shard-00000") || fail "ok: the user cannot read it"
[ "$out" = the-users-own ] || fail "ok: read '$out'"
pass "one readable input: served"

rc=0
as_user cat "$mnt/peek/shard-00000" >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" -ne 0 ] || fail "peek: served $(cat "$tmp/out")"
grep -q 'Input/output error' "$tmp/err" || fail "peek: not EIO: $(cat "$tmp/err")"
! grep -q root-secret "$tmp/out" || fail "peek: root's bytes read"
err=$(as_user getfattr --only-values -n user.matfs.error "$mnt/peek/shard-00000" 2>/dev/null || true)
case "$err" in
*"Permission denied"*) ;;
*) fail "peek: error '$err', want Permission denied" ;;
esac
pass "an input the owner may not read: EIO, the error says Permission denied"

! grep -rqa root-secret "$store" || fail "the store holds root's bytes"
! grep -qa root-secret "$log" || fail "the log shows root's bytes"
! user_xattrs "$mnt/peek/shard-00000" | grep -q root-secret ||
  fail "the xattrs show root's bytes"
pass "no byte of root's file in the shard, the store, the log or the xattrs"

# --- the daemon's /proc: its maps, and a file under its cwd ---
for n in maps cwd; do
  as_user mkdir "$u/pipelines/$n"
  target=/proc/$mpid/maps
  [ $n = cwd ] && target=/proc/$mpid/cwd/note.txt
  as_user ln -s "$target" "$u/pipelines/$n/x"
  as_user cat "$target" >/dev/null 2>&1 && fail "$n: the user reads $target itself"
  as_user tee "$u/pipelines/$n.yaml" >/dev/null <<YAML
name: $n
inputs: $n/*
stages:
  - exec: [cat]
YAML
done
for n in maps cwd; do
  settled() { has_name "$mnt" $n || grep -q "$n.yaml.*no file matches" "$log"; }
  wait_for 20 settled || fail "$n: neither registered nor refused"
  if ! has_name "$mnt" $n; then
    # refused at load (its glob, with the user's rights, matches
    # nothing there): safe; maps must get as far as the open
    [ $n = cwd ] && grep -q "cwd.yaml.*no file matches" "$log" && continue
    fail "$n is not registered: $(grep "$n" "$log" | tail -2)"
  fi
  rc=0
  as_user cat "$mnt/$n/shard-00000" >"$tmp/out" 2>/dev/null || rc=$?
  [ "$rc" -ne 0 ] || fail "$n: served $(head -c 200 "$tmp/out")"
  ! grep -qa 'root-cwd-Wq8\|libc' "$tmp/out" || fail "$n: the daemon's bytes read"
done
pass "symlinks to the daemon's /proc/PID/maps and /proc/PID/cwd serve nothing"

# --- a write lease on the one input ---
break_s=$(cat /proc/sys/fs/lease-break-time 2>/dev/null || echo 0)
if [ "$break_s" -ge 20 ]; then
  wait_for 20 has_name "$mnt" held || fail "held is not registered"
  as_user python3 -c '
import fcntl, os, signal, sys, time
signal.signal(signal.SIGIO, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.fcntl(fd, 1024, fcntl.F_WRLCK)  # F_SETLEASE
print("held", flush=True)
time.sleep(30)' "$u/pipelines/held/a.txt" >"$tmp/lease" &
  leaser=$!
  daemons+=("$leaser")
  wait_for 10 grep -q held "$tmp/lease" || fail "no lease taken"
  rc=0
  timeout 20 cat "$mnt/held/shard-00000" >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" -ne 124 ] || fail "held: the open waited for the lease"
  [ "$rc" -ne 0 ] || fail "held: served while the lease was held"
  err=$(getfattr --only-values -n user.matfs.error "$mnt/held/shard-00000" 2>/dev/null || true)
  case "$err" in
  *"timed out"*) ;;
  *) fail "held: error '$err', want the stage's timeout" ;;
  esac
  pkill -KILL -u "$user" python3
  wait "$leaser" 2>/dev/null || true
  pass "a lease held on the input: the stage times out, no thread of the daemon waits for it"
else
  echo "skip: lease-break-time $break_s s is too short to tell"
fi
umount_fs "$mnt" "$mpid"
