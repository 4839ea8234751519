#!/usr/bin/env bash
# test_mount_deps.sh - deps folders and globs on a real mount: a file
# edited deep inside a deps folder, a file added to a subfolder of it, a
# file removed from it and a file a deps glob starts to match each move
# the name to the fingerprint of the spec as it is now, whose bytes are
# the stages run by hand on the new files, while the old fingerprint
# keeps its bytes; what a folder dep leaves out (a hidden file, a
# __pycache__ a Python import writes) keeps the fingerprint. Then the same
# without inotify (-o spec_poll): a file edited inside the folder is seen
# when the name is resolved. Also `identity`: a new output moves the name
# at the next registration, and a command that never ends or floods fails
# its own spec, with the spec file and the command in the log.
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

# identity: its output is part of the fingerprint; a hostile one (never
# ends, floods) fails its own spec only, with the spec and command named
printf '1.0\n' >"$tmp/ver.txt"
cat >"$pipes/ver.yaml" <<YAML
name: ver
inputs: in/*.txt
identity: [cat, $tmp/ver.txt]
stages:
  - exec: [cat]
YAML

mount_fs "$mnt" "$store" "$pipes"
# added once mounted: the mount waits for its first registrations (at
# most 10 s), and a command that never ends takes its whole bound
printf 'name: hang\ninputs: in/*.txt\nidentity: [sleep, "1000"]\nstages: [{exec: [cat]}]\n' \
  >"$pipes/hang.yaml"
printf 'name: flood\ninputs: in/*.txt\nidentity: ["yes"]\nstages: [{exec: [cat]}]\n' \
  >"$pipes/flood.yaml"
[ -L "$mnt/ver" ] && [ "$(cat "$mnt/ver/shard-00000")" = alpha ] || fail "identity: ver not served"
old=$(readlink "$mnt/ver")
[ "$old" = "$("$matctl" fingerprint "$pipes/ver.yaml")" ] || fail "identity: matctl differs"
printf '1.1\n' >"$tmp/ver.txt"
new=$("$matctl" fingerprint "$pipes/ver.yaml")
[ "$new" != "$old" ] || fail "identity: a new output kept the fingerprint"
touch "$pipes/ver.yaml" # an identity is run again at registration
wait_for 10 eval '[ "$(readlink "$mnt/ver")" = "$new" ]' || fail "identity: ver did not move"
pass "identity: a new output of the command moves the name on registration"
logged() { grep -q "$1" "$log"; }
wait_for 20 logged "hang.yaml: identity (sleep 1000): did not end within 10 s" ||
  fail "identity: no error for a command that never ends"
wait_for 10 logged "flood.yaml: identity (yes): wrote more than 65536 bytes" ||
  fail "identity: no error for a command that floods"
[ ! -e "$mnt/hang" ] && [ ! -e "$mnt/flood" ] || fail "identity: a failing spec has a name"
pass "identity: a command that never ends or floods fails its own spec only"
rm "$pipes/hang.yaml" "$pipes/flood.yaml" "$pipes/ver.yaml"
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
