#!/usr/bin/env bash
# test_mount_register.sh - registration no spec can block: a spec whose
# deps file hangs when read (a shard of a second mount whose stage sleeps)
# delays no other spec's registration, fails at -o spec_timeout, and is
# registered again once the read returns; a spec whose deps or inputs are
# files of the mount itself is refused with a message naming the path, and
# the daemon keeps serving.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

# --- a second mount whose only shard takes ten minutes: reading it hangs ---
store2=$tmp/store2 pipes2=$tmp/p2 mnt2=$tmp/mnt2
mkdir -p "$pipes2/in"
echo slow >"$pipes2/in/a.txt"
printf 'name: slow\ninputs: in/*.txt\nstages:\n  - exec: [sleep, "600"]\n' \
  >"$pipes2/slow.yaml"
mount_fs "$mnt2" "$store2" "$pipes2"
pid2=$mpid
hang=$mnt2/slow/shard-00000

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
echo payload >"$pipes/in/a.txt"
spec() { # spec NAME [DEP]: a one-stage spec on in/*.txt
  printf 'name: %s\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' "$1"
  [ -z "${2:-}" ] || printf '    deps: [%s]\n' "$2"
}
spec first >"$pipes/first.yaml"
mount_fs "$mnt" "$store" "$pipes" -o spec_timeout=20

has_link() { [ -L "$mnt/$1" ]; }
no_link() { ! [ -e "$mnt/$1" ] && ! [ -L "$mnt/$1" ]; }
running() { [ "$(xattr "$hang" state)" = running ]; }
logged() { grep -Eq "$1" "$log"; }
has_link first || fail "first spec not registered at mount"

# --- a spec whose dep hangs delays no other ---
ln -s "$hang" "$pipes/hang.bin"
spec hang hang.bin >"$pipes/hang.yaml"
wait_for 10 running || fail "the hanging dep was never read"
spec second >"$pipes/second.yaml"
wait_for 10 has_link second || fail "a spec waited for another's hanging dep"
running || fail "the dep's read returned: the test proves nothing"
logged "hang\.yaml': fingerprint|hang\.yaml.*spec skipped" &&
  fail "hang.yaml done already: $(grep hang.yaml "$log")"
no_link hang || fail "a hanging spec got a name"
[ "$(cat "$mnt/second/shard-00000")" = payload ] || fail "second's bytes"
pass "a spec registers while another's deps hang"

# --- past the limit the hanging spec fails; the others are served ---
wait_for 60 logged "hang\.yaml: reading its deps and inputs took longer than 20 s \(spec skipped\)" ||
  fail "no time limit message for hang.yaml"
running || fail "the dep's read returned before the limit"
no_link hang || fail "a timed-out spec got a name"
spec third >"$pipes/third.yaml"
wait_for 10 has_link third || fail "a spec added after a time-out did not appear"
[ "$(cat "$mnt/first/shard-00000")" = payload ] || fail "first's bytes"
pass "a spec past its time limit is failed and logged; the others are served"

# --- a spec whose deps or inputs are files of the mount itself is refused ---
ln -s "$mnt/second/shard-00000" "$pipes/own.bin"
spec own own.bin >"$pipes/own.yaml"
ln -s "$mnt/first" "$pipes/ownin"
printf 'name: ownin\ninputs: ownin/shard-*\nstages:\n  - exec: [cat]\n' \
  >"$pipes/ownin.yaml"
wait_for 10 logged "own\.yaml: deps 'own\.bin': $mnt/[0-9a-f]{64}/shard-00000: on this matfs mount itself: refused \(spec skipped\)" ||
  fail "no refusal of a dep on the mount itself"
wait_for 10 logged "ownin\.yaml: inputs 'ownin/shard-00000': $mnt/[0-9a-f]{64}/shard-00000: on this matfs mount itself: refused" ||
  fail "no refusal of an input on the mount itself"
no_link own || fail "a spec with a dep on the mount got a name"
no_link ownin || fail "a spec with inputs on the mount got a name"
[ "$(cat "$mnt/second/shard-00000")" = payload ] || fail "second's bytes after"
[ "$(ls "$mnt" | grep -c -x -e first -e second -e third)" -eq 3 ] ||
  fail "root: $(ls "$mnt")"
pass "deps and inputs on the mount itself are refused, naming the path; serving goes on"

# --- the stuck read returns: discarded, and the spec is registered again ---
kill "$pid2" # its waiting opens fail: the read returns
wait_for 20 logged "hang\.yaml:.*'deps': no such file 'hang\.bin' \(spec skipped\)" ||
  fail "hang.yaml was not registered again once its read returned"
no_link hang || fail "a discarded registration gave hang.yaml a name"
rm "$pipes/hang.bin"
spec hang >"$pipes/hang.yaml"
wait_for 10 has_link hang || fail "hang.yaml, fixed, did not appear"
pass "a registration past its limit is discarded when it returns, and the spec registered again"

umount_fs "$mnt" "$mpid"
