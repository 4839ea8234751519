#!/usr/bin/env bash
# test_security_symlink.sh - attack (a) of docs/security.md's trust model:
# a user links a root-owned spec (the bundled example, copied to a folder
# of root's) into the pipelines folder they own, and puts a program of
# their own, named as the spec's stage program, beside the link. The
# stage must never run that program as root: the spec is refused (its
# name is absent or its shards fail), or it runs in the target's real
# folder; reading a shard never yields the user's "uid=0".
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

# root's copy of the example, as an administrator would install it
rootdir=$tmp/root
install -d -m 0755 "$rootdir/pipelines" "$rootdir/data"
install -m 0644 "$src/examples/pipelines/tokens.yaml" \
  "$src/examples/pipelines/tokenize.py" "$rootdir/pipelines/"
install -m 0644 "$src"/examples/data/*.txt "$rootdir/data/"

# the user's folder: the daemon's pipelines folder, the link, a program
# named like the example's and inputs where the example looks for them
u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/data"
as_user sh -c 'echo "one two" >"$1/a.txt"; echo "three" >"$1/b.txt"' sh "$u/data"
as_user ln -s "$rootdir/pipelines/tokens.yaml" "$u/pipelines/tokens.yaml"
as_user tee "$u/pipelines/tokenize.py" >/dev/null <<'PY'
import os, sys
sys.stdin.buffer.read()
print("uid=%d" % os.getuid())
PY
as_user tee "$u/pipelines/ctl.yaml" >/dev/null <<'YAML'
name: ctl
inputs: ../data/*.txt
shards: 1
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; echo "uid=$(id -u)"']
YAML

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$u/pipelines"

# the user's own spec is served and runs as the user
wait_for 20 has_name "$mnt" ctl || fail "ctl is not registered"
out=$(as_user cat "$mnt/ctl/shard-00000") || fail "ctl: read failed"
[ "$out" = "uid=$uid" ] || fail "ctl ran as '$out', want uid=$uid"
pass "the user's own spec runs as the user"

# the linked root spec never runs the user's program as root
if has_name "$mnt" tokens; then
  for k in 0 1; do
    f=$mnt/tokens/shard-0000$k.u32
    if as_user cat "$f" >"$tmp/out" 2>/dev/null; then
      ! grep -aq 'uid=0' "$tmp/out" || fail "$f: the user's program ran as root"
    fi
  done
  pass "a linked root spec is registered, but never runs the user's program as root"
else
  pass "a link owned by the user to a root spec is refused"
fi
umount_fs "$mnt" "$mpid"
