#!/usr/bin/env bash
# test_security_queue.sh - one reader's many cold shards do not queue
# another reader's behind them. With one worker, an ordinary user opens
# the 12 cold shards of its pipeline at once; then root opens one cold
# shard of another pipeline: root's is computed next, as soon as the one
# shard that runs is done, not after all twelve (before, the queue was
# FIFO: root's ran thirteenth). And a reader who opens another's cold
# shards first does not make that other wait in its turn: the user opens
# the 12 cold shards of root's pipeline 'victim', one after another; root
# then opens the last of them, and it is computed next too (before, the
# shard was queued once, in the user's turn: root's ran twelfth).
# And with two workers, a user's slow stages, opened after root read
# something, hold one worker, not both: the other is kept for a reader
# with none running, and root's cold shard is computed at once (before,
# it waited for the user's stages to end).
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

p=$tmp/p
install -d -m 0755 "$p" "$p/mine" "$p/theirs"
order=$tmp/order
install -m 0666 /dev/null "$order"
for i in $(seq 10 21); do echo "$i" >"$p/mine/$i.txt"; done
echo root >"$p/theirs/a.txt"
install -d -m 0755 "$p/vict"
for i in $(seq 10 21); do echo "v$i" >"$p/vict/$i.txt"; done
order2=$tmp/order2
install -m 0666 /dev/null "$order2"
cat >"$p/victim.yaml" <<YAML
name: victim
inputs: vict/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo "\$MATFS_SHARD" >>$order2; sleep 0.3; cat']
YAML
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
wait_for 20 has_name "$mnt" victim || fail "victim is not registered"

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

# the pre-open attack: the user opens root's cold shards first, one
# after another (so in this order in the user's turn)
vshard() { printf '%s/victim/shard-%05d' "$mnt" "$1"; }
as_user sh -c "cat '$(vshard 0)' >/dev/null" &
first=$!
wait_for 20 test -s "$order2" || fail "no shard of victim started"
as_user sh -c "pids=''
  for k in \$(seq 1 11); do
    cat \$(printf '%s/victim/shard-%05d' '$mnt' \$k) >/dev/null &
    pids=\"\$pids \$!\"
    sleep 0.05
  done
  : >'$u/launched'
  for p in \$pids; do wait \$p || exit 1; done" &
rest=$!
wait_for 20 test -e "$u/launched" || fail "the user's readers did not start"
sleep 0.3 # the user's last opens reach the queue meanwhile
echo open >>"$order2" # after the shards started so far
cat "$(vshard 11)" >"$tmp/root2" || fail "root's read of its own shard"
[ "$(cat "$tmp/root2")" = v21 ] || fail "root's bytes of its own shard"
wait "$first" || fail "the user's read of shard 0 failed"
wait "$rest" || fail "a reader of the user failed"
[ "$(grep -cx '[0-9]*' "$order2")" -eq 12 ] ||
  fail "victim's shards ran $(grep -cx '[0-9]*' "$order2") times, not 12"
# shards started after root's open and before root's own: at most the
# one a worker took while the open was on its way
between=$(sed -n '/^open$/,/^11$/p' "$order2" | grep -cvx 'open\|11' || true)
grep -qx 11 <(sed -n '/^open$/,$p' "$order2") ||
  fail "root's shard started before its open: $(tr '\n' ' ' <"$order2")"
[ "$between" -le 1 ] ||
  fail "root's own shard, opened by the user first, waited for $between of the user's: $(tr '\n' ' ' <"$order2")"
pass "a shard another reader opened first is computed in its owner's turn too ($between of the user's before it, each shard once)"
umount_fs "$mnt" "$mpid"

# the reserve: two workers, the user's four slow shards, then root's
slow=$tmp/slow
install -m 0666 /dev/null "$slow"
as_user tee "$u/slow.yaml" >/dev/null <<YAML
name: slow
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'echo "\$MATFS_SHARD" >>$slow; until [ -e $tmp/GO ]; do sleep 0.05; done; cat']
YAML
ln -s "$u/slow.yaml" "$p/slow.yaml"
mount_fs "$mnt" "$tmp/store2" "$p" -o workers=2
wait_for 20 has_name "$mnt" slow || fail "slow is not registered"
wait_for 20 has_name "$mnt" other || fail "other is not registered (workers=2)"
cat "$mnt/other/shard-00000" >/dev/null || fail "root's first read (workers=2)"
pids=()
for k in 0 1 2 3; do
  as_user sh -c "cat '$mnt/slow/shard-$(printf %05d "$k")' >/dev/null" &
  pids+=($!)
done
wait_for 20 test -s "$slow" || fail "no slow shard of the user started"
sleep 0.5 # a second one would start meanwhile
timeout 20 cat "$(vshard 0)" >"$tmp/root3" ||
  fail "root's cold shard waited for the user's slow ones ($(wc -l <"$slow") of them running)"
[ "$(cat "$tmp/root3")" = v10 ] || fail "root's bytes (workers=2)"
running=$(wc -l <"$slow")
touch "$tmp/GO"
for pid in "${pids[@]}"; do wait "$pid" || fail "a slow reader of the user failed"; done
[ "$running" -eq 1 ] || fail "the user's slow shards held $running workers, not 1"
[ "$(wc -l <"$slow")" -eq 4 ] || fail "the user's slow shards ran $(wc -l <"$slow") times, not 4"
pass "a user's slow stages hold one of two workers; root's cold shard is computed at once"
umount_fs "$mnt" "$mpid"
