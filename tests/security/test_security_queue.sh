#!/usr/bin/env bash
# test_security_queue.sh - one reader's many cold shards do not queue
# another reader's behind them. With one worker, an ordinary user opens
# the 12 cold shards of its pipeline at once; then root opens one cold
# shard of another pipeline: root's is computed next, as soon as the one
# shard that runs is done, not after all twelve (before, the queue was
# FIFO: root's ran thirteenth).
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

p=$tmp/p
install -d -m 0755 "$p" "$p/mine" "$p/theirs"
order=$tmp/order
install -m 0666 /dev/null "$order"
for i in $(seq 10 21); do echo "$i" >"$p/mine/$i.txt"; done
echo root >"$p/theirs/a.txt"
u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u" "$u/in"
for i in $(seq 10 21); do as_user sh -c "echo $i >'$u/in/$i.txt'"; done
as_user tee "$u/many.yaml" >/dev/null <<YAML
name: many
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo "user \$MATFS_SHARD" >>$order; sleep 0.3; cat']
YAML
ln -s "$u/many.yaml" "$p/many.yaml"
cat >"$p/other.yaml" <<YAML
name: other
inputs: theirs/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo "root \$MATFS_SHARD" >>$order; cat']
YAML
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p" -o workers=1
wait_for 20 has_name "$mnt" many || fail "many is not registered"
wait_for 20 has_name "$mnt" other || fail "other is not registered"

pids=()
for k in $(seq 0 11); do
  as_user sh -c "cat '$mnt/many/shard-$(printf %05d "$k")' >/dev/null" &
  pids+=($!)
done
wait_for 20 test -s "$order" || fail "no shard of the user started"
sleep 0.2 # the other eleven opens reach the queue meanwhile
cat "$mnt/other/shard-00000" >"$tmp/root" || fail "root's read"
[ "$(cat "$tmp/root")" = root ] || fail "root's bytes"
for pid in "${pids[@]}"; do wait "$pid" || fail "a reader of the user failed"; done
at=$(grep -n '^root' "$order" | cut -d: -f1)
[ -n "$at" ] && [ "$at" -le 3 ] ||
  fail "root's shard was computed as number ${at:-none} of $(wc -l <"$order"): $(tr '\n' ' ' <"$order")"
pass "another reader's cold shard is computed next, not behind one reader's twelve (number $at)"
umount_fs "$mnt" "$mpid"
