#!/usr/bin/env bash
# test_mount_changing.sh - an input rewritten while its shard is computed
# never gives wrong bytes. The stage reads the input only once the test
# has rewritten it in place (truncated, then other bytes of the same size)
# and exits only once the test has put the old bytes and mtime back (as
# rsync -t, cp -p or tar do), so that every check of the input before and
# after the run sees it unchanged. The feeder sees the inode's ctime move:
# the attempt is no one's, the log says the shard is computed again, and
# the shard holds the old bytes, with input_identity stat and content.
# The same for a stage that reads its input by path (MATFS_INPUTS_FILE)
# after closing stdin, of an input the pipe holds whole: the feeder's
# checks pass at once, the one after the stages ended sees the change;
# and with the input's folder swapped and put back, which the check
# after the run cannot see (the same file is there again): the names on
# the input's path are watched while the stages run.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

p=$tmp/p
mkdir -p "$p/in"
in=$p/in/a.bin
# 8 MiB: more than the pipe to the stage holds, so the feeder is still
# reading the file when the stage starts reading
"$py" -c 'import sys; sys.stdout.buffer.write(b"A" * (8 << 20))' >"$tmp/A"
"$py" -c 'import sys; sys.stdout.buffer.write(b"B" * (8 << 20))' >"$tmp/B"
# the feeder, a child of the daemon, has the input open (the daemon's own
# threads open it too, to check it: they do not count)
feeder_has_it() {
  local hits
  hits=$(find /proc/[0-9]*/fd -maxdepth 1 -lname "$in" 2>/dev/null || true)
  [ -n "$hits" ] && grep -qv "^/proc/$mpid/" <<<"$hits"
}

mnt=$tmp/mnt
for identity in stat content; do
  cp "$tmp/A" "$in"
  touch -d '2020-01-01 00:00:00' "$in"
  rm -f "$p/GO" "$p/GO2"
  cat >"$p/c.yaml" <<YAML
name: c
inputs: in/*.bin
input_identity: $identity
stages:
  - exec: [/bin/sh, -c, 'until [ -e GO ]; do sleep 0.02; done; cat; until [ -e GO2 ]; do sleep 0.02; done']
YAML
  mount_fs "$mnt" "$tmp/store-$identity" "$p"
  wait_for 10 test -L "$mnt/c" || fail "$identity: c is not registered"
  cat "$mnt/c/shard-00000" >"$tmp/out" 2>"$tmp/err" &
  reader=$!
  wait_for 20 feeder_has_it || fail "$identity: the feeder never opened the input"
  cat "$tmp/B" >"$in" # in place: truncate, then other bytes
  touch "$p/GO"
  sleep 0.5 # the stage reads B meanwhile
  cat "$tmp/A" >"$in"
  touch -d '2020-01-01 00:00:00' "$in"
  touch "$p/GO2"
  wait "$reader" || fail "$identity: the read failed: $(cat "$tmp/err")"
  cmp -s "$tmp/out" "$tmp/A" ||
    fail "$identity: the shard is not the input's bytes ($(tr -s AB <"$tmp/out" | head -c 20))"
  cmp -s "$mnt/c/shard-00000" "$tmp/A" || fail "$identity: a second read differs"
  grep -q "input '$in' changed .*computing it again" "$log" ||
    fail "$identity: the log does not say the shard was computed again"
  pass "input_identity $identity: an input rewritten and put back during the run is computed again"
  umount_fs "$mnt" "$mpid"
  : >"$log"
done

# a stage reading its input by path, long after the feeder's last byte
"$py" -c 'import sys; sys.stdout.buffer.write(b"A" * 4096)' >"$tmp/A"
"$py" -c 'import sys; sys.stdout.buffer.write(b"B" * 4096)' >"$tmp/B"
for identity in stat content; do
  cp "$tmp/A" "$in"
  touch -d '2020-01-01 00:00:00' "$in"
  rm -f "$p/GO" "$p/GO2" "$p/STARTED"
  cat >"$p/c.yaml" <<YAML
name: c
inputs: in/*.bin
input_identity: $identity
stages:
  - exec: [/bin/sh, -c, 'exec 0<&-; touch STARTED; until [ -e GO ]; do sleep 0.02; done; cat "\$(head -n 1 "\$MATFS_INPUTS_FILE")"; until [ -e GO2 ]; do sleep 0.02; done']
YAML
  mount_fs "$mnt" "$tmp/store-path-$identity" "$p"
  wait_for 10 test -L "$mnt/c" || fail "by path, $identity: c is not registered"
  cat "$mnt/c/shard-00000" >"$tmp/out" 2>"$tmp/err" &
  reader=$!
  wait_for 20 test -e "$p/STARTED" || fail "by path, $identity: the stage never started"
  cat "$tmp/B" >"$in"
  touch "$p/GO"
  sleep 0.5 # the stage reads B meanwhile
  cat "$tmp/A" >"$in"
  touch -d '2020-01-01 00:00:00' "$in"
  touch "$p/GO2"
  wait "$reader" || fail "by path, $identity: the read failed: $(cat "$tmp/err")"
  cmp -s "$tmp/out" "$tmp/A" ||
    fail "by path, $identity: the shard is not the input's bytes ($(tr -s AB <"$tmp/out" | head -c 20))"
  grep -q "input '$in' changed while the stages ran: computing it again" "$log" ||
    fail "by path, $identity: the log does not say the shard was computed again"
  pass "input_identity $identity: an input read by path, changed and put back during the run, is computed again"
  umount_fs "$mnt" "$mpid"
  : >"$log"
done

# the same stage, with the input's folder swapped for another holding
# other bytes under the same name, and put back, during the run: the
# input file is never touched, the path it is read by is
cp "$tmp/A" "$in"
touch -d '2020-01-01 00:00:00' "$in"
rm -f "$p/GO" "$p/GO2" "$p/STARTED"
mount_fs "$mnt" "$tmp/store-swap" "$p"
wait_for 10 test -L "$mnt/c" || fail "folder swap: c is not registered"
cat "$mnt/c/shard-00000" >"$tmp/out" 2>"$tmp/err" &
reader=$!
wait_for 20 test -e "$p/STARTED" || fail "folder swap: the stage never started"
mv "$p/in" "$p/in.old"
mkdir "$p/in"
cp "$tmp/B" "$p/in/a.bin"
touch -d '2020-01-01 00:00:00' "$p/in/a.bin"
touch "$p/GO"
sleep 0.5 # the stage reads B meanwhile
rm -r "$p/in"
mv "$p/in.old" "$p/in"
touch "$p/GO2"
wait "$reader" || fail "folder swap: the read failed: $(cat "$tmp/err")"
cmp -s "$tmp/out" "$tmp/A" ||
  fail "folder swap: the shard is not the input's bytes ($(tr -s AB <"$tmp/out" | head -c 20))"
grep -q "'in' in '$p', on the path of an input, changed while the stages ran: computing it again" "$log" ||
  fail "folder swap: the log does not say the shard was computed again"
pass "an input's folder swapped and put back during the run: computed again"
umount_fs "$mnt" "$mpid"
