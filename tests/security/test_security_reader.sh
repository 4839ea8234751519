#!/usr/bin/env bash
# test_security_reader.sh - what another user sees of an allow_other mount
# (docs/security.md, "Trust model"): root serves specs from its private
# folder; an unprivileged reader reads shards, but cannot expire them (rm,
# rmdir, rm -r fail with EACCES or EPERM) nor write, create, rename or set
# attributes; and the error texts of failed shards (user.matfs.error,
# user.matfs.stderr) never show that reader a path in root's folder, which
# root, who owns the specs, still sees in full.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

secret=$tmp/secret-Zp9
p=$secret/p
install -d -m 0700 "$secret"
install -d -m 0755 "$p" "$p/in"
echo input >"$p/in/a.txt"
echo v1 >"$p/dep.txt"
cat >"$p/ok.yaml" <<'YAML'
name: ok
inputs: in/*.txt
stages:
  - exec: [cat]
YAML
# cannot be computed: it changes its own dep (ESTALE; the claim is given
# back, nothing recorded)
cat >"$p/stale.yaml" <<'YAML'
name: stale
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat; echo more >>dep.txt']
    deps: [dep.txt]
YAML
# fails with a path of root's folder in its stderr
cat >"$p/crash.yaml" <<'YAML'
name: crash
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; echo "cannot open $PWD/detail.txt" >&2; exit 3']
YAML

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p"
for n in ok stale crash; do
  wait_for 20 has_name "$mnt" $n || fail "$n is not registered"
done

# reading
out=$(as_user cat "$mnt/ok/shard-00000") || fail "ok: the reader cannot read"
[ "$out" = input ] || fail "ok: got '$out'"
# committed after the read (served sealed): the attempts below must
# leave it materialized
ok_state() {
  getfattr --absolute-names --only-values -n user.matfs.state "$mnt/ok/shard-00000"
}
wait_for 20 eval '[ "$(ok_state)" = materialized ]' || fail "ok: $(ok_state) after its read"
pass "another user reads shards"

# expiring and writing
fp=$(readlink "$mnt/ok")
as_user python3 - "$mnt" "$fp" <<'PY' || fail "the reader changed the mount"
import errno, os, sys
mnt, fp = sys.argv[1:]
shard = os.path.join(mnt, fp, "shard-00000")
NOWRITE = {errno.EACCES, errno.EPERM, errno.EROFS}
def refused(what, f, allowed={errno.EACCES, errno.EPERM}):
    try:
        f()
    except OSError as e:
        assert e.errno in allowed, "%s: %s" % (what, e)
        return
    raise AssertionError(what + ": succeeded")
refused("rm of a shard", lambda: os.unlink(shard))
refused("rmdir of a snapshot", lambda: os.rmdir(os.path.join(mnt, fp)))
refused("rm of a name", lambda: os.unlink(os.path.join(mnt, "ok")))
refused("open for writing", lambda: open(shard, "r+b"), NOWRITE)
refused("create", lambda: open(os.path.join(mnt, fp, "new"), "wb"), NOWRITE)
refused("mkdir", lambda: os.mkdir(os.path.join(mnt, "new")), NOWRITE)
refused("rename", lambda: os.rename(shard, shard + ".x"), NOWRITE)
refused("setxattr", lambda: os.setxattr(shard, "user.matfs.state", b"absent"),
        NOWRITE | {errno.ENOTSUP})
PY
if as_user rm -rf "$mnt/$fp" 2>/dev/null; then fail "rm -r of a snapshot succeeded"; fi
state=$(getfattr --absolute-names --only-values -n user.matfs.state "$mnt/$fp/shard-00000")
[ "$state" = materialized ] || fail "ok's shard is $state after the reader's attempts"
pass "another user cannot expire, write, create, rename or set attributes"

# error texts: the reader sees no path of root's folder, root sees them
fp=$(readlink "$mnt/stale")
if as_user cat "$mnt/stale/shard-00000" >/dev/null 2>&1; then fail "stale: read succeeded"; fi
if as_user cat "$mnt/crash/shard-00000" >/dev/null 2>&1; then fail "crash: read succeeded"; fi
state=$(getfattr --absolute-names --only-values -n user.matfs.state "$mnt/$fp/shard-00000")
[ "$state" = absent ] || fail "stale: a fingerprint that cannot be computed left its shard $state"
for f in "$mnt/crash/shard-00000"; do
  getfattr --absolute-names -d -m '^user\.matfs\.' "$f" >"$tmp/root-view" 2>/dev/null
  grep -q 'state="failed"' "$tmp/root-view" || fail "$f: not failed: $(cat "$tmp/root-view")"
  grep -q "$secret" "$tmp/root-view" || fail "$f: root does not see the failure: $(cat "$tmp/root-view")"
  user_xattrs "$f" >"$tmp/user-view"
  grep -q 'state="failed"' "$tmp/user-view" || fail "$f: the reader sees no failure: $(cat "$tmp/user-view")"
  ! grep -q "$secret" "$tmp/user-view" ||
    fail "$f: the reader sees a path of root's folder: $(grep "$secret" "$tmp/user-view")"
done
pass "a failed shard's error texts show another user no path of root's folder"
umount_fs "$mnt" "$mpid"
