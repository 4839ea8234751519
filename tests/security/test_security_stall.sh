#!/usr/bin/env bash
# test_security_stall.sh - an input path through a filesystem that stops
# answering holds up its own shard only. A user's input is a symlink into
# stallfs (tests/security/stallfs.c), whose root's getattr waits while a
# flag file exists (a stuck NFS server, or her own FUSE server that she
# stops), which the walk of the input's path for its watch meets (an lstat
# of each folder on it). Her shard's computation waits on it; root's shard of a local
# input is computed meanwhile (before, the watch on each input's path
# walked every path under one lock of the daemon's, and root's job waited
# for hers); once the server answers, hers is computed too.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
stallfs=$MF_BUILD_ROOT/tests/security/stallfs
[ -x "$stallfs" ] || { echo "skip: no $stallfs"; exit 77; }
add_user

s=$tmp/s flag=$tmp/STALL
releases+=("$tmp/unused") # lib.sh's cleanup touches these
mkdir -p "$s"
"$stallfs" "$flag" "$s" -o allow_other
stall_down() {
  rm -f "$flag"
  grep -q " $s fuse" /proc/mounts && { fusermount3 -u "$s" 2>/dev/null || umount -l "$s"; }
}
trap 'stall_down; cleanup' EXIT
wait_for 10 test -e "$s/d/f" || fail "stallfs does not serve"
[ "$(cat "$s/d/f")" = stalled ] || fail "stallfs's bytes"

p=$tmp/p
install -d -m 0755 "$p" "$p/local"
echo local-bytes >"$p/local/a.txt"
cat >"$p/local.yaml" <<'YAML'
name: local
inputs: local/*.txt
stages:
  - exec: [cat]
YAML
u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u" "$u/in"
as_user ln -s "$s/d/f" "$u/in/x.txt"
as_user tee "$u/stalled.yaml" >/dev/null <<'YAML'
name: stalled
inputs: in/x.txt
stages:
  - exec: [cat]
YAML
ln -s "$u/stalled.yaml" "$p/stalled.yaml"
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p" -o workers=4
wait_for 20 has_name "$mnt" local || fail "local is not registered"
wait_for 20 has_name "$mnt" stalled || fail "stalled is not registered"

touch "$flag" # stallfs stops answering getattr of its root
as_user cat "$mnt/stalled/shard-00000" >"$tmp/stalled" 2>"$tmp/stalled.err" &
reader=$!
sleep 1 # her computation reaches the stalled folder meanwhile
timeout 30 cat "$mnt/local/shard-00000" >"$tmp/local" 2>"$tmp/local.err" ||
  fail "root's shard of a local input waited for the stalled one: $(cat "$tmp/local.err")"
[ "$(cat "$tmp/local")" = local-bytes ] || fail "root's bytes: $(cat "$tmp/local")"
kill -0 "$reader" 2>/dev/null || fail "her read did not wait for the stalled server: $(cat "$tmp/stalled.err")"
pass "root's shard is computed while another input's path stalls"

rm -f "$flag" # the server answers again
wait "$reader" || fail "her read failed once the server answered: $(cat "$tmp/stalled.err")"
[ "$(cat "$tmp/stalled")" = stalled ] || fail "her bytes: $(cat "$tmp/stalled")"
pass "the stalled shard is computed once its server answers"
umount_fs "$mnt" "$mpid"
