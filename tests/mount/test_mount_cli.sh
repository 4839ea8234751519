#!/usr/bin/env bash
# test_mount_cli.sh - what a user meets at the command line around a
# mount: matfs refuses a mountpoint that is not a folder or is already a
# matfs mount, naming it; its --help names the spec files it reads; rm of
# a shard while it is computed is refused with EBUSY and leaves the
# computation to land; so are rmdir of its snapshot and matctl rm, which
# expire the other shards.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in" "$mnt"
printf 'payload\n' >"$pipes/in/a.txt"
printf 'other\n' >"$pipes/in/b.txt"
cat >"$pipes/slow.yaml" <<'YAML'
name: slow
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo run >> calls; while [ -e hold ]; do sleep 0.05; done; cat']
YAML

# --- matfs --help names both spec suffixes ---
help=$("$matfs" --help) || fail "matfs --help: $("$matfs" --help | grep -i yaml)"
grep -q '\*\.yaml.*\*\.yml' <<<"$help" || fail "matfs --help: $(grep -i yaml <<<"$help")"
pass "matfs --help names *.yaml and *.yml"

# --- a mountpoint that is not a folder ---
touch "$tmp/file"
"$matfs" --store "$store" --pipelines "$pipes" -f "$tmp/file" 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] || fail "a file as mountpoint exited 0"
[ "$(cat "$tmp/err")" = "matfs: mountpoint '$tmp/file': not a directory" ] ||
  fail "file as mountpoint: $(cat "$tmp/err")"
is_mounted "$tmp/file" && fail "a file got mounted"
pass "a mountpoint that is not a folder is refused, by name"

# --- a mountpoint that is already a matfs mount ---
mount_fs "$mnt" "$store" "$pipes"
[ -L "$mnt/slow" ] || wait_for 10 test -L "$mnt/slow" || fail "no name 'slow'"
"$matfs" --store "$tmp/other" --pipelines "$pipes" -f "$mnt" 2>"$tmp/err"; rc=$?
[ $rc -ne 0 ] || fail "a second matfs on the same mountpoint exited 0"
[ "$(cat "$tmp/err")" = "matfs: mountpoint '$mnt' is already a matfs mount; unmount it first (fusermount3 -u $mnt)" ] ||
  fail "mounted twice: $(cat "$tmp/err")"
[ "$(grep -c " $mnt fuse" /proc/self/mounts)" -eq 1 ] || fail "two mounts on $mnt"
kill -0 "$mpid" || fail "the first daemon died"
pass "a mountpoint that is already a matfs mount is refused, by name"

# --- rm of a shard while it computes: EBUSY, and the result lands ---
[ "$(cat "$mnt/slow/shard-00001")" = other ] || fail "shard 1"
fp=$(basename "$(readlink "$mnt/slow")")
: >"$pipes/hold"
cat "$mnt/slow/shard-00000" >"$tmp/got" 2>"$tmp/cat.err" & reader=$!
# the state read at each poll, not once when wait_for is called
state_is() { [ "$(xattr "$1" state)" = "$2" ]; }
wait_for 10 state_is "$mnt/slow/shard-00000" running ||
  fail "shard 0 never ran: $(xattr "$mnt/slow/shard-00000" state)"
out=$(rm "$mnt/slow/shard-00000" 2>&1) && fail "rm of a running shard succeeded"
[[ $out == *"Device or resource busy"* ]] || fail "rm of a running shard: '$out'"
[ "$(xattr "$mnt/slow/shard-00000" state)" = running ] || fail "rm changed the state"
out=$(rmdir "$mnt/$fp" 2>&1) && fail "rmdir of a snapshot with a running shard succeeded"
[[ $out == *"Device or resource busy"* ]] || fail "rmdir of a computing snapshot: '$out'"
[ "$(xattr "$mnt/slow/shard-00001" state)" = absent ] || fail "rmdir left shard 1"
out=$("$matctl" --store "$store" rm slow 2>&1) && fail "matctl rm of a computing snapshot exited 0"
[ "$out" = "matctl: rm 'slow': a shard is being computed (Device or resource busy): the others expired; rm again once it lands" ] ||
  fail "matctl rm of a computing snapshot: '$out'"
[ "$(xattr "$mnt/slow/shard-00001" state)" = absent ] || fail "matctl rm left shard 1"
[ "$(xattr "$mnt/slow/shard-00000" state)" = running ] || fail "rmdir or matctl rm changed shard 0"
rm -f "$pipes/hold"
wait "$reader" || fail "the reader failed: $(cat "$tmp/cat.err")"
[ "$(cat "$tmp/got")" = payload ] || fail "the reader got '$(cat "$tmp/got")'"
# the read can end before the commit of what it read (served sealed)
wait_for 20 eval '[ "$(xattr "$mnt/slow/shard-00000" state)" = materialized ]' ||
  fail "state after the computation: $(xattr "$mnt/slow/shard-00000" state)"
[ "$(cat "$mnt/slow/shard-00001")" = other ] || fail "shard 1 again"
rm "$mnt/slow/shard-00000" || fail "rm once materialized"
[ "$(xattr "$mnt/slow/shard-00000" state)" = absent ] || fail "state after rm"
[ "$(calls "$pipes/calls")" -eq 3 ] || fail "$(calls "$pipes/calls") runs (want shard 1 twice, shard 0 once)"
pass "rm of a shard being computed, rmdir of its snapshot and matctl rm are refused with EBUSY; the result lands"

umount_fs "$mnt" "$mpid"
