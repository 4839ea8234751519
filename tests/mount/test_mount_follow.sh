#!/usr/bin/env bash
# test_mount_follow.sh - a name follows its spec's deps and inputs: after a
# deps file is edited in place or replaced by rename (also a dep in another
# folder and one reached through a symlink), an input file is added,
# removed or changed, or a folder a wildcard folder part matches appears,
# the name moves to the fingerprint of the spec as it is now, a read through
# it gives the bytes of the stages run by hand on the new inputs, and the
# old fingerprint directory still serves the old bytes. Then the same
# without inotify (-o spec_poll): a resolved name is checked when its spec
# was last checked over a second ago, and a periodic pass moves names that
# nobody resolves. Last, inputs on a FUSE filesystem (another matfs mount),
# whose changes inotify may not see, are found by stat without the option.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
export LC_ALL=C

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in" "$pipes/deep/x" "$tmp/shared" "$tmp/other"
script() { # script VERSION: the stage's program, a deps file
  cat <<EOF
tr a-z A-Z
echo "version $1"
echo "vocab \$(cat ../shared/vocab.txt)"
echo "alias \$(cat alias.txt)"
EOF
}
script 1 >"$pipes/tok.sh"
echo words >"$tmp/shared/vocab.txt"
echo real >"$tmp/other/real.txt"
ln -s ../other/real.txt "$pipes/alias.txt"
printf 'alpha\n' >"$pipes/in/a.txt"
printf 'beta\n' >"$pipes/in/b.txt"
printf 'deep x\n' >"$pipes/deep/x/a.txt"
cat >"$pipes/tok.yaml" <<'YAML'
name: tok
inputs: in/*.txt
shards: 1
stages:
  - exec: [/bin/sh, tok.sh]
    deps: [tok.sh, ../shared/vocab.txt, alias.txt]
YAML
cat >"$pipes/deep.yaml" <<'YAML'
name: deep
inputs: deep/*/*.txt
shards: 1
stages:
  - exec: [/bin/sh, -c, 'cat; echo end']
YAML

# expected NAME: the shard's bytes, the stages run by hand on what is there
expected() {
  case $1 in
    tok) cat "$pipes"/in/*.txt | (cd "$pipes" && /bin/sh tok.sh) ;;
    deep) cat "$pipes"/deep/*/*.txt | (cd "$pipes" && /bin/sh -c 'cat; echo end') ;;
  esac
}
link_is() { [ "$(readlink "$mnt/$1")" = "$2" ]; }

# step NAME DESC COMMAND...: reads shard 0 through the name, runs COMMAND,
# waits for the name to move to the spec's fingerprint as it is now, then
# checks the bytes through the name and through the old fingerprint.
step() {
  local name=$1 desc=$2 old want; shift 2
  old=$(readlink "$mnt/$name") || fail "$desc: no name '$name'"
  cat "$mnt/$name/shard-00000" >"$tmp/before" || fail "$desc: cat before"
  expected "$name" >"$tmp/want"
  cmp -s "$tmp/before" "$tmp/want" || fail "$desc: bytes before the change"
  "$@" || fail "$desc: the change itself failed"
  want=$("$matctl" fingerprint "$pipes/$name.yaml") || fail "$desc: matctl fingerprint"
  [ "$want" != "$old" ] || fail "$desc: the change kept the fingerprint"
  wait_for 10 link_is "$name" "$want" ||
    fail "$desc: $name -> $(readlink "$mnt/$name"), not $want (was $old)"
  expected "$name" >"$tmp/want"
  cat "$mnt/$name/shard-00000" >"$tmp/got" || fail "$desc: cat through the name"
  cmp -s "$tmp/got" "$tmp/want" || fail "$desc: bytes through the name: $(cat "$tmp/got")"
  cat "$mnt/$old/shard-00000" >"$tmp/got" || fail "$desc: cat of the old fingerprint"
  cmp -s "$tmp/got" "$tmp/before" || fail "$desc: the old fingerprint's bytes changed"
  pass "$desc"
}

edit_in_place() { script "$1" >"$pipes/tok.sh"; }
edit_by_rename() { script "$1" >"$pipes/.tok.sh.swp" && mv "$pipes/.tok.sh.swp" "$pipes/tok.sh"; }
other_folder() { echo "$1" >"$tmp/shared/vocab.txt"; }
symlink_target() { echo "$1" >"$tmp/other/.real.new" && mv "$tmp/other/.real.new" "$tmp/other/real.txt"; }
add_input() { printf '%s\n' "$1" >"$pipes/in/$1.txt"; }
remove_input() { rm "$pipes/in/$1.txt"; }
change_input() { printf '%s\n' "$2" >>"$pipes/$1"; }

mount_fs "$mnt" "$store" "$pipes"
step tok "a deps file edited in place moves the name" edit_in_place 2
step tok "a deps file replaced by rename moves the name" edit_by_rename 3
step tok "a dep in another folder moves the name" other_folder words2
step tok "a dep reached through a symlink moves the name" symlink_target real2
step tok "an added input file moves the name" add_input c
step tok "a removed input file moves the name" remove_input b
step tok "a changed input file moves the name" change_input in/a.txt more
deep_folder() { mkdir "$pipes/deep/y" && printf 'deep y\n' >"$pipes/deep/y/b.txt"; }
step deep "a folder matched by a wildcard folder part moves the name" deep_folder
step deep "a file in that new folder changed moves the name" change_input deep/y/b.txt again
umount_fs "$mnt" "$mpid"

# --- without inotify: a resolved name is checked, by stat ---
mount_fs "$mnt" "$store" "$pipes" -o spec_poll=3600
step tok "spec_poll: a deps file edited in place, seen on resolve" edit_in_place 4
step tok "spec_poll: an added input file, seen on resolve" add_input d
step tok "spec_poll: a removed input file, seen on resolve" remove_input c
umount_fs "$mnt" "$mpid"

# --- without inotify: the periodic pass moves a name nobody resolves ---
mount_fs "$mnt" "$store" "$pipes" -o spec_poll=1
old=$(readlink "$mnt/tok")
cat "$mnt/tok/shard-00000" >/dev/null || fail "cat before the periodic pass"
other_folder words3
want=$("$matctl" fingerprint "$pipes/tok.yaml")
[ "$want" != "$old" ] || fail "the change kept the fingerprint"
logged() { grep -q "tok.yaml': fingerprint $want" "$log"; }
wait_for 10 logged || fail "spec_poll=1: the periodic pass did not re-register"
link_is tok "$want" || fail "spec_poll=1: tok -> $(readlink "$mnt/tok"), not $want"
expected tok >"$tmp/want"
cmp -s <(cat "$mnt/tok/shard-00000") "$tmp/want" || fail "spec_poll=1: bytes"
pass "spec_poll=1: the periodic pass moves a name nobody resolves"
umount_fs "$mnt" "$mpid"

# --- inputs on a FUSE filesystem: polled without being asked ---
pa=$tmp/pa ma=$tmp/ma
mkdir -p "$pa/in"
printf 'one\n' >"$pa/in/a.txt"
printf 'two\n' >"$pa/in/b.txt"
printf 'name: src\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$pa/src.yaml"
mount_fs "$ma" "$tmp/store-a" "$pa"
apid=$mpid
cat "$ma/src/shard-00000" "$ma/src/shard-00001" >/dev/null || fail "src shards"
printf 'name: chain\ninputs: ../ma/src/shard-*\nshards: 1\nstages:\n  - exec: [cat]\n' \
  >"$pipes/chain.yaml"
mount_fs "$mnt" "$store" "$pipes"
grep -q "chain.yaml': '.*/ma' is on a network or FUSE filesystem" "$log" ||
  fail "no warning for inputs on a FUSE filesystem"
old=$(readlink "$mnt/chain")
[ "$(cat "$mnt/chain/shard-00000")" = "$(printf 'one\ntwo')" ] || fail "chain bytes"
rm "$ma/src/shard-00001" || fail "rm of an input of chain" # size 4 -> 0
want=$("$matctl" fingerprint "$pipes/chain.yaml")
[ "$want" != "$old" ] || fail "the rm kept chain's fingerprint"
wait_for 10 link_is chain "$want" ||
  fail "inputs on FUSE: chain -> $(readlink "$mnt/chain"), not $want"
[ "$(cat "$mnt/$old/shard-00000")" = "$(printf 'one\ntwo')" ] || fail "chain's old bytes"
pass "inputs on a FUSE filesystem are checked by stat: the name follows"
umount_fs "$mnt" "$mpid"
umount_fs "$ma" "$apid"
