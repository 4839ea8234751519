#!/usr/bin/env bash
# test_security_fingerprint.sh - a fingerprint is one owner's computation
# (docs/security.md, "What a spec author can do"). The victim's pipeline
# is registered, not read. The attacker copies its stages and makes, in a
# folder of hers, an input of the same relative path, size and time with
# other bytes: her spec yields the victim's fingerprint. It is refused,
# with a log line naming both files, and matctl refuses it too; the
# victim's shard, read after, is the victim's bytes, and her name stays
# hers. A spec of the attacker's over the very same input files (through
# a symlink she could re-point later, stat or content identity) is
# refused too; a second spec of the victim's own takes the fingerprint.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user
victim=$user
add_user
attacker=$user

p=$tmp/p
install -d -m 0755 "$p"
# write_spec USER DIR NAME: a pipeline upper-casing its inputs
write_spec() {
  runuser -u "$1" -- sh -c 'cat >"$1/$2.yaml.new" && mv "$1/$2.yaml.new" "$1/$2.yaml"' sh "$2" "$3" <<YAML
name: $3
inputs: in/*.txt
stages:
  - exec: [tr, a-z, A-Z]
YAML
}
install -d -o "$victim" -g "$victim" -m 0755 "$tmp/v" "$tmp/v/in"
runuser -u "$victim" -- sh -c 'printf "victim data\n" >"$1/in/a.txt"' sh "$tmp/v"
write_spec "$victim" "$tmp/v" tokens
ln -s "$tmp/v/tokens.yaml" "$p/zz-victim.yaml"

mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 has_name "$mnt" tokens || fail "tokens is not registered"
fp=$(readlink "$mnt/tokens")

# the attacker's input: the victim's relative path, size and time
size=$(stat -c %s "$tmp/v/in/a.txt")
mtime=$(stat -c %.9Y "$tmp/v/in/a.txt")
install -d -o "$attacker" -g "$attacker" -m 0755 "$tmp/a" "$tmp/a/in"
runuser -u "$attacker" -- sh -c \
  'head -c "$2" /dev/zero | tr "\0" q >"$1/in/a.txt" && touch -d "@$3" "$1/in/a.txt"' \
  sh "$tmp/a" "$size" "$mtime"
write_spec "$attacker" "$tmp/a" mine
[ "$("$matctl" --store "$tmp/store" fingerprint "$tmp/a/mine.yaml")" = "$fp" ] ||
  fail "the attacker's spec does not yield the victim's fingerprint: the test proves nothing"
ln -s "$tmp/a/mine.yaml" "$p/aa-attacker.yaml"
wait_for 20 grep -q "fingerprint ${fp:0:12} belongs to spec '$p/zz-victim.yaml' of another owner" "$log" ||
  fail "the collision is not refused and logged naming the holder"
grep "fingerprint ${fp:0:12} belongs to" "$log" | grep -q "spec '$p/aa-attacker.yaml'" ||
  fail "the refusal does not name the refused file"
! has_name "$mnt" mine || fail "the attacker's name is on the mount"
if out=$("$matctl" --store "$tmp/store" cat "$tmp/a/mine.yaml" 0 2>&1); then
  fail "matctl cat of the attacker's spec: '$out'"
fi
grep -q "of another owner" <<<"$out" || fail "matctl's refusal: '$out'"
[ "$(cat "$mnt/tokens/shard-00000")" = "VICTIM DATA" ] ||
  fail "the victim's shard serves '$(cat "$mnt/tokens/shard-00000")'"
[ "$(cat "$mnt/$fp/shard-00000")" = "VICTIM DATA" ] || fail "the pinned read"
pass "another owner's spec of the same relative paths, sizes and times is refused"

"$matctl" --store "$tmp/store" ls | grep -q "^tokens " || fail "the catalog's name of the victim's snapshot: $("$matctl" --store "$tmp/store" ls)"

# the victim's own second spec takes the fingerprint
write_spec "$victim" "$tmp/v" tokens2
ln -s "$tmp/v/tokens2.yaml" "$p/zz-victim2.yaml"
wait_for 20 has_name "$mnt" tokens2 || fail "the victim's second spec is refused"
[ "$(readlink "$mnt/tokens2")" = "$fp" ] || fail "tokens2 has another fingerprint"
pass "the same owner's specs share the fingerprint"

# the attacker's spec over the very same files: refused as well, with
# stat and with content identity (her folder's symlink could be re-pointed
# at other files after, her HOME and programs are hers)
install -d -o "$attacker" -g "$attacker" -m 0755 "$tmp/s"
ln -s "$tmp/v/in" "$tmp/s/in"
write_spec "$attacker" "$tmp/s" same
[ "$("$matctl" --store "$tmp/store" fingerprint "$tmp/s/same.yaml")" = "$fp" ] ||
  fail "a spec over the same files yields another fingerprint"
ln -s "$tmp/s/same.yaml" "$p/mm-same.yaml"
wait_for 20 grep -q "spec '$p/mm-same.yaml': fingerprint ${fp:0:12} belongs to" "$log" ||
  fail "another owner's spec over the same files is not refused"
! has_name "$mnt" same || fail "the attacker's spec over the same files is on the mount"
# the victim first: whoever records a fingerprint first holds it
runuser -u "$victim" -- sh -c 'printf "input_identity: content\n" >>"$1/tokens.yaml"' sh "$tmp/v"
fc=$("$matctl" --store "$tmp/store" fingerprint "$tmp/v/tokens.yaml")
[ "$fc" != "$fp" ] || fail "content identity kept the fingerprint"
wait_for 20 sh -c "[ \"\$(readlink '$mnt/tokens')\" = $fc ]" || fail "tokens did not move to $fc"
runuser -u "$attacker" -- sh -c 'printf "input_identity: content\n" >>"$1/same.yaml"' sh "$tmp/s"
[ "$(cat "$mnt/tokens/shard-00000")" = "VICTIM DATA" ] || fail "tokens with content identity"
wait_for 20 grep -q "spec '$p/mm-same.yaml': fingerprint ${fc:0:12} belongs to" "$log" ||
  fail "another owner's content spec over the same files is not refused"
! has_name "$mnt" same || fail "the attacker's content spec is on the mount"
pass "another owner's spec over the very same files is refused, stat or content"

# a catalog rebuilt from the store (matctl fsck --rebuild) keeps the
# owner: the row's is its spec file's, and the attacker stays refused
runuser -u "$attacker" -- sh -c 'sed -i "/input_identity/d" "$1/same.yaml"' sh "$tmp/s"
runuser -u "$victim" -- sh -c 'sed -i "/input_identity/d" "$1/tokens.yaml"' sh "$tmp/v"
wait_for 20 sh -c "[ \"\$(readlink '$mnt/tokens')\" = $fp ]" || fail "tokens did not move back to $fp"
owner_of() { /usr/bin/python3 -c 'import sqlite3, sys
print(sqlite3.connect(sys.argv[1]).execute("select owner from snapshots where fp = ?", (sys.argv[2],)).fetchone()[0])' "$tmp/store/catalog.db" "$1"; }
umount_fs "$mnt" "$mpid"
rm "$p/mm-same.yaml" "$p/aa-attacker.yaml"
"$matctl" --store "$tmp/store" fsck --rebuild >/dev/null || fail "fsck --rebuild"
[ "$(owner_of "$fp")" = "$(id -u "$victim")" ] || fail "the rebuilt row's owner is $(owner_of "$fp")"
ln -s "$tmp/a/mine.yaml" "$p/aa-attacker.yaml"
n=$(grep -c "fingerprint ${fp:0:12} belongs to" "$log")
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 sh -c "[ \$(grep -c 'fingerprint ${fp:0:12} belongs to' '$log') -gt $n ]" ||
  fail "after a rebuild, the attacker's spec is not refused"
[ "$(cat "$mnt/$fp/shard-00000")" = "VICTIM DATA" ] || fail "after a rebuild: $(cat "$mnt/$fp/shard-00000")"
pass "a rebuilt catalog keeps the fingerprint's owner"

# rebuilt again with the recorded spec paths gone and the attacker's spec
# linked at them: the owner comes from snapshot.metadata, never from the
# file now at the recorded path
umount_fs "$mnt" "$mpid"
grep -qx "owner $(id -u "$victim")" "$tmp/store/snapshots/$fp/snapshot.metadata" ||
  fail "snapshot.metadata does not record the owner"
rm "$p/zz-victim.yaml" "$p/zz-victim2.yaml" "$p/aa-attacker.yaml"
ln -s "$tmp/a/mine.yaml" "$p/zz-victim.yaml"
ln -s "$tmp/a/mine.yaml" "$p/zz-victim2.yaml"
"$matctl" --store "$tmp/store" fsck --rebuild >/dev/null || fail "fsck --rebuild, paths planted"
[ "$(owner_of "$fp")" = "$(id -u "$victim")" ] || fail "the planted path gave the row to $(owner_of "$fp")"
n=$(grep -c "fingerprint ${fp:0:12} belongs to" "$log")
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 sh -c "[ \$(grep -c 'fingerprint ${fp:0:12} belongs to' '$log') -gt $n ]" ||
  fail "the attacker's spec at the recorded path is not refused"
[ "$(cat "$mnt/$fp/shard-00000")" = "VICTIM DATA" ] || fail "planted paths: $(cat "$mnt/$fp/shard-00000")"
pass "a rebuild takes the owner from the store, not from the file at the recorded path"

# a row without an owner (as from an older schema), its spec file gone
# and its shard materialized: nobody takes it over
umount_fs "$mnt" "$mpid"
rm "$p/zz-victim.yaml" "$p/zz-victim2.yaml"
ln -s "$tmp/a/mine.yaml" "$p/aa-attacker.yaml"
/usr/bin/python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); db.execute("update snapshots set owner = -1"); db.commit()' "$tmp/store/catalog.db"
n=$(grep -c "fingerprint ${fp:0:12} belongs to" "$log")
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 sh -c "[ \$(grep -c 'fingerprint ${fp:0:12} belongs to' '$log') -gt $n ]" ||
  fail "an unowned row with data is taken by another owner's spec"
[ "$(cat "$mnt/$fp/shard-00000")" = "VICTIM DATA" ] || fail "an unowned row: $(cat "$mnt/$fp/shard-00000")"
pass "a row without an owner, its data stored, is not taken over"

# an input whose file name holds line breaks ("...\nowner VICTIM\nname
# tokens..."), which snapshot.metadata would read as its own lines, is a
# spec error; a spec link whose name holds one is not read at all
install -d -o "$attacker" -g "$attacker" -m 0755 "$tmp/n" "$tmp/n/in"
runuser -u "$attacker" -- sh -c 'printf "evil\n" >"$1/in/x
owner $2
name tokens
.txt"' sh "$tmp/n" "$(id -u "$victim")"
write_spec "$attacker" "$tmp/n" nl
ln -s "$tmp/n/nl.yaml" "$p/nl.yaml"
wait_for 20 grep -q "nl.yaml:2:9: 'inputs': the name of a matched file holds a newline" "$log" ||
  fail "an input name with line breaks is not refused"
! has_name "$mnt" nl || fail "the spec over a file name with line breaks is registered"
runuser -u "$attacker" -- mv "$tmp/n/in/x"* "$tmp/n/in/x.txt"
ln -s "$tmp/n/nl.yaml" "$p/aa
owner $(id -u "$victim")
spec:
.yaml"
touch "$tmp/n/nl.yaml"
wait_for 20 has_name "$mnt" nl || fail "nl is not registered once its input is renamed"
! grep -q "^owner $(id -u "$victim")\$" "$tmp/store/snapshots/$(readlink "$mnt/nl")/snapshot.metadata" ||
  fail "a spec link's name forged an owner line"
! grep -q "p/aa$\|writing metadata" "$log" || fail "a spec link whose name holds a line break was read"
pass "file names with line breaks forge no line of snapshot.metadata"

# the catalog restored from a backup without the victim's row: the store's
# snapshot.metadata still names the owner, and the attacker is refused
umount_fs "$mnt" "$mpid"
rm -f "$p"/*
ln -s "$tmp/a/mine.yaml" "$p/aa-attacker.yaml"
/usr/bin/python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for t in ("holds", "shards", "runs", "snapshots"):
    db.execute("delete from %s where fp = ?" % t, (sys.argv[2],))
db.commit()' "$tmp/store/catalog.db" "$fp"
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 grep -q "aa-attacker.yaml': fingerprint ${fp:0:12} belongs to spec .* (the store's snapshot.metadata)" "$log" ||
  fail "a fingerprint only the store knows is taken by another owner's spec"
! has_name "$mnt" mine || fail "the attacker's spec is on the mount"
pass "a fingerprint the catalog lost stays its owner's by the store's metadata"
