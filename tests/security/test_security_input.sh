#!/usr/bin/env bash
# test_security_input.sh - a user's spec whose one input is a file of
# root's that the user may see but not read (attack "disclosure" of
# docs/security.md's trust model): the daemon, running as root, opens a
# shard's one input file itself and gives it to stage 0 as stdin (no
# feeder), so it must open it with the spec owner's rights. The shard
# fails with EIO naming the file and EACCES, and no byte of the file shows
# in the shard, its xattrs, the store or the log; the same spec over a
# file the user may read is served, its stdin the file itself. A write
# lease the owner holds on the input (never given back) does not hold the
# daemon's open: the job goes on without it, and the stage's timeout
# fails the shard in seconds, where the daemon's own open would wait for
# the kernel to break the lease (45 s by default).
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
  - exec: [/bin/sh, -c, 'if [ -f /dev/stdin ]; then echo file; else echo pipe; fi; cat']
YAML
done

mnt=$tmp/mnt store=$tmp/store
mount_fs "$mnt" "$store" "$u/pipelines"
wait_for 20 has_name "$mnt" peek || fail "peek is not registered: $(cat "$log")"
wait_for 20 has_name "$mnt" ok || fail "ok is not registered"

out=$(as_user cat "$mnt/ok/shard-00000") || fail "ok: the user cannot read it"
[ "$out" = "$(printf 'file\nthe-users-own')" ] || fail "ok: read '$out'"
pass "one readable input: served, stage 0 reading the file itself"

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
  pass "a lease held on the input: the stage times out, no open of the daemon waits for it"
else
  echo "skip: lease-break-time $break_s s is too short to tell"
fi
umount_fs "$mnt" "$mpid"
