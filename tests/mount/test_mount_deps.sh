#!/usr/bin/env bash
# test_mount_deps.sh - deps folders and globs on a real mount: a file
# edited deep inside a deps folder, a file added to a subfolder of it, a
# file removed from it and a file a deps glob starts to match each move
# the name to the fingerprint of the spec as it is now, whose bytes are
# the stages run by hand on the new files, while the old fingerprint
# keeps its bytes; what a folder dep leaves out (a hidden file, a
# __pycache__ a Python import writes) keeps the fingerprint. Then the same
# without inotify (-o spec_poll): a file edited inside the folder is seen
# when the name is resolved.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
export LC_ALL=C

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in" "$pipes/lib/sub/deep" "$pipes/conf"
printf 'alpha\n' >"$pipes/in/a.txt"
printf 'lib one\n' >"$pipes/lib/one.txt"
printf 'deep two\n' >"$pipes/lib/sub/deep/two.txt"
printf '{"x": 1}\n' >"$pipes/conf/x.json"
printf 'not matched\n' >"$pipes/conf/notes.txt"
cat >"$pipes/tok.yaml" <<'YAML'
name: tok
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat; find lib -type f ! -path "*/.*" ! -path "*/__pycache__/*" | sort | xargs cat; cat conf/*.json']
    deps: [lib, 'conf/*.json']
YAML

# the shard's bytes, the stage run by hand on what is there
expected() {
  cat "$pipes"/in/*.txt | (cd "$pipes" &&
    /bin/sh -c 'cat; find lib -type f ! -path "*/.*" ! -path "*/__pycache__/*" | sort | xargs cat; cat conf/*.json')
}
link_is() { [ "$(readlink "$mnt/tok")" = "$1" ]; }

# step DESC COMMAND...: reads shard 0 through the name, runs COMMAND,
# waits for the name to move to the spec's fingerprint as it is now, then
# checks the bytes through the name and through the old fingerprint.
step() {
  local desc=$1 old want; shift
  old=$(readlink "$mnt/tok") || fail "$desc: no name 'tok'"
  cat "$mnt/tok/shard-00000" >"$tmp/before" || fail "$desc: cat before"
  expected >"$tmp/want"
  cmp -s "$tmp/before" "$tmp/want" || fail "$desc: bytes before the change"
  "$@" || fail "$desc: the change itself failed"
  want=$("$matctl" fingerprint "$pipes/tok.yaml") || fail "$desc: matctl fingerprint"
  [ "$want" != "$old" ] || fail "$desc: the change kept the fingerprint"
  wait_for 10 link_is "$want" ||
    fail "$desc: tok -> $(readlink "$mnt/tok"), not $want (was $old)"
  expected >"$tmp/want"
  cat "$mnt/tok/shard-00000" >"$tmp/got" || fail "$desc: cat through the name"
  cmp -s "$tmp/got" "$tmp/want" || fail "$desc: bytes through the name: $(cat "$tmp/got")"
  cat "$mnt/$old/shard-00000" >"$tmp/got" || fail "$desc: cat of the old fingerprint"
  cmp -s "$tmp/got" "$tmp/before" || fail "$desc: the old fingerprint's bytes changed"
  pass "$desc"
}

edit_deep() { printf 'deep %s\n' "$1" >"$pipes/lib/sub/deep/two.txt"; }
add_file() { printf 'new %s\n' "$1" >"$pipes/lib/sub/$1.txt"; }
remove_file() { rm "$pipes/lib/sub/$1.txt"; }
glob_match() { printf '{"%s": 2}\n' "$1" >"$pipes/conf/$1.json"; }
rename_into() { printf 'renamed\n' >"$tmp/r.txt" && mv "$tmp/r.txt" "$pipes/lib/r.txt"; }

mount_fs "$mnt" "$store" "$pipes"
step "a file edited deep in a deps folder moves the name" edit_deep two2
step "a file added to a deps folder's subfolder moves the name" add_file n1
step "a file removed from a deps folder moves the name" remove_file n1
step "a file renamed into a deps folder moves the name" rename_into
step "a file a deps glob starts to match moves the name" glob_match y

# what a folder dep leaves out keeps the fingerprint and the bytes
old=$(readlink "$mnt/tok")
mkdir -p "$pipes/lib/__pycache__" "$pipes/lib/sub/.cache"
printf 'bytecode\n' >"$pipes/lib/__pycache__/one.cpython-311.pyc"
printf 'hidden\n' >"$pipes/lib/.one.txt.swp"
printf 'hidden\n' >"$pipes/lib/sub/.cache/x"
printf 'text\n' >"$pipes/conf/more.txt"
want=$("$matctl" fingerprint "$pipes/tok.yaml") || fail "matctl fingerprint"
[ "$want" = "$old" ] || fail "a hidden file or __pycache__ changed the fingerprint"
# a change the watcher must see comes after them: the name moves to it
step "after files a folder dep leaves out, an edit still moves the name" edit_deep two3
umount_fs "$mnt" "$mpid"

# --- without inotify: a resolved name is checked, by stat ---
mount_fs "$mnt" "$store" "$pipes" -o spec_poll=3600
step "spec_poll: a file edited in a deps folder, seen on resolve" edit_deep two4
step "spec_poll: a file added to a deps folder, seen on resolve" add_file n2
umount_fs "$mnt" "$mpid"
