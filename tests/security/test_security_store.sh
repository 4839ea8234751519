#!/usr/bin/env bash
# test_security_store.sh - the store is not the other users' to read
# (docs/security.md, "The store"). A user's 0600 spec puts a token in
# env:, its stage fails with a secret on stderr. Through the mount the
# user reads what the mount shows, but nothing in the store a root daemon
# made is open to other users: the store folder is 0700, no folder or file
# in it has a bit for others, snapshot.metadata (the spec's bytes) is
# 0600, and another user can neither list the store, read catalog.db nor
# get the secrets with matctl. A store an older version left 0755/0644
# loses the other users' bits at the next mount (its group's stay: a
# group that shares a store is the admin's choice). A store folder another
# user made (in a sticky /tmp), or one in a folder others may write, is
# refused: the daemon does not start and writes nothing there.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user
umask 022

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in"
as_user sh -c "echo x >'$u/pipelines/in/a.txt'"
as_user sh -c "umask 077; cat >'$u/pipelines/s.yaml'" <<'YAML'
name: s
inputs: in/*.txt
env:
  TOKEN: tok-SECRET-123
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; echo "stderr-SECRET-456" >&2; exit 3']
YAML
store=$tmp/store
mnt=$tmp/mnt
mount_fs "$mnt" "$store" "$u/pipelines"
wait_for 20 has_name "$mnt" s || fail "s is not registered"
as_user cat "$mnt/s/shard-00000" >/dev/null 2>&1 && fail "the failing stage's shard read"

# check_store WHAT: nothing in the store is open to other users
check_store() {
  [ "$(stat -c %a "$store")" = 700 ] || fail "$1: the store folder is $(stat -c %a "$store")"
  open=$(find "$store" -perm /o=rwx ! -type l ! -name matfs.log 2>/dev/null)
  [ -z "$open" ] || fail "$1: open to other users: $open"
  meta=$(find "$store" -name snapshot.metadata | head -1)
  [ -n "$meta" ] || fail "$1: no snapshot.metadata"
  [ "$(stat -c %a "$meta")" = 600 ] || fail "$1: snapshot.metadata is $(stat -c %a "$meta")"
  as_user ls "$store" >/dev/null 2>&1 && fail "$1: another user lists the store"
  as_user cat "$store/catalog.db" >/dev/null 2>&1 && fail "$1: another user reads catalog.db"
  out=$(as_user "$matctl" --store "$store" stat s 2>&1) &&
    fail "$1: another user's matctl stat worked: $out"
  ! grep -q SECRET <<<"$out" || fail "$1: matctl showed a secret: $out"
  [ -n "$out" ] || fail "$1: matctl failed without a word"
}
check_store "a new store"
pass "a new store is closed to other users; matctl as another user fails"
umount_fs "$mnt" "$mpid"

# as an older version left it
chmod 0755 "$store"
find "$store" -type d -exec chmod 0755 {} +
find "$store" -type f ! -name matfs.log -exec chmod 0644 {} +
mount_fs "$mnt" "$store" "$u/pipelines"
wait_for 20 has_name "$mnt" s || fail "s is not registered again"
as_user cat "$mnt/s/shard-00000" >/dev/null 2>&1 || true
# the group's bits are the admin's to choose; the others' go
for f in "$store" "$store/catalog.db"; do
  [ $((0$(stat -c %a "$f") & 7)) = 0 ] || fail "'$f' stays $(stat -c %a "$f")"
done
as_user cat "$store/catalog.db" >/dev/null 2>&1 && fail "another user reads an old store's catalog.db"
pass "a store an older version left open is narrowed at the next mount"
umount_fs "$mnt" "$mpid"

# a store another user made first (as in a world-writable /tmp): refused,
# and nothing of it is used
pub=$tmp/pub
install -d -m 1777 "$pub"
as_user sh -c "umask 0; mkdir -p '$pub/.cache/matfs/snapshots' && : >'$pub/.cache/matfs/catalog.db'"
mkdir -p "$tmp/mnt2"
if "$matfs" --store "$pub/.cache/matfs" --pipelines "$u/pipelines" -f \
  -o allow_other "$tmp/mnt2" >"$tmp/squat.out" 2>&1; then
  fusermount3 -u "$tmp/mnt2" 2>/dev/null
  fail "a daemon served a store another user made"
fi
grep -q "refused: it, or a folder above it, is another user's" "$tmp/squat.out" ||
  fail "the refusal does not say why: $(cat "$tmp/squat.out")"
[ ! -s "$pub/.cache/matfs/catalog.db" ] || fail "the daemon wrote to the user's catalog"
# a store in a folder others may write without the sticky bit: the same
install -d -m 0777 "$tmp/open"
out=$("$matctl" --store "$tmp/open/store" ls 2>&1) && fail "matctl used a store in an open folder"
grep -q "refused" <<<"$out" || fail "matctl in an open folder says: $out"
pass "a store another user made or could swap is refused, nothing written"
