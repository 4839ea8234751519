#!/usr/bin/env bash
# test_mount_compose.sh - a pipeline whose stage reads another pipeline
# through the same mount (docs/guide.md, "Pipelines that read other
# pipelines"). With one worker, pipeline "tokens" reads "cleaned": while
# cleaned is not materialized, the stage's open fails at once with
# EDEADLK (before, the stage held the only worker while cleaned waited for
# one, until the stage timed out), tokens fails with that error and the
# log says what to do; once cleaned is warmed, tokens reads it and gets
# exact bytes; a child of the stage in a session of its own (setsid) is
# refused the same way. A shard already materialized is read by a stage as by
# anyone.
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

p=$tmp/p mnt=$tmp/mnt
mkdir -p "$p/in" "$p/one"
printf 'Hello World\n' >"$p/in/a.txt"
echo x >"$p/one/x.txt"
cat >"$p/cleaned.yaml" <<'YAML'
name: cleaned
inputs: in/*.txt
stages:
  - exec: [tr, A-Z, a-z]
YAML
cat >"$p/tokens.yaml" <<YAML
name: tokens
inputs: one/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; exec tr " " "\\n" <"\$0/cleaned/shard-00000"', $mnt]
    timeout: 30s
YAML
# the same read from a child that left the stage's session (setsid -w, as
# Python's start_new_session=True does)
cat >"$p/apart.yaml" <<YAML
name: apart
inputs: one/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat >/dev/null; exec setsid -w cat "\$0/cleaned/shard-00000"', $mnt]
    timeout: 60s
YAML
mount_fs "$mnt" "$tmp/store" "$p" -o workers=1
wait_for 10 test -L "$mnt/tokens" || fail "tokens is not registered"
wait_for 10 test -L "$mnt/cleaned" || fail "cleaned is not registered"

t0=$(now_ms)
out=$(cat "$mnt/tokens/shard-00000" 2>&1) && fail "tokens read while cleaned was cold: $out"
took=$(( $(now_ms) - t0 ))
grep -q "Input/output error" <<<"$out" || fail "tokens: $out"
grep -q "Resource deadlock avoided" <<<"$(xattr "$mnt/tokens/shard-00000" stderr)" ||
  fail "the stage's error is not EDEADLK: $(xattr "$mnt/tokens/shard-00000" stderr)"
grep -q "opened by a stage of this daemon while not materialized" "$log" ||
  fail "the refusal is not logged"
[ "$(xattr "$mnt/cleaned/shard-00000" state)" = absent ] ||
  fail "cleaned: $(xattr "$mnt/cleaned/shard-00000" state)"
pass "a stage opening a cold shard of the mount fails at once with EDEADLK (${took} ms)"

# (it held the only worker until the stage's timeout before)
wait_for 10 test -L "$mnt/apart" || fail "apart is not registered"
out=$(timeout 50 cat "$mnt/apart/shard-00000" 2>&1) && fail "apart read while cleaned was cold: $out"
grep -q "Resource deadlock avoided" <<<"$(xattr "$mnt/apart/shard-00000" stderr)" ||
  fail "apart: the stage's error is not EDEADLK: $(xattr "$mnt/apart/shard-00000" stderr) ($out)"
[ "$(xattr "$mnt/cleaned/shard-00000" state)" = absent ] ||
  fail "cleaned after apart: $(xattr "$mnt/cleaned/shard-00000" state)"
pass "a stage's child in a session of its own is refused the same way"

[ "$(cat "$mnt/cleaned/shard-00000")" = "hello world" ] || fail "cleaned"
"$matctl" --store "$tmp/store" retry tokens >/dev/null || fail "matctl retry"
[ "$(cat "$mnt/tokens/shard-00000")" = "$(printf 'hello\nworld')" ] ||
  fail "tokens over a materialized cleaned: $(cat "$mnt/tokens/shard-00000" 2>&1)"
pass "a stage reads a materialized shard of the mount"
umount_fs "$mnt" "$mpid"
