#!/usr/bin/env bash
# test_mount_absent.sh - the kernel never keeps the size 0 of a shard that
# is not materialized: a stat right after another process computed it
# says its real size. (A size 0 the kernel kept from a lookup that raced
# an open let fstat after that open say 0 while the read gave every byte;
# found by the model-based test.)
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
for k in 0 1 2; do seq 1 $((1000 + k)) >"$pipes/in/$k.txt"; done
cat >"$pipes/num.yaml" <<'YAML'
name: num
inputs: in/*.txt
stages:
  - exec: [cat]
YAML
mount_fs "$mnt" "$store" "$pipes"
fp=$(readlink "$mnt/num") || fail "no num link"
for k in 0 1 2; do
  f=$mnt/num/shard-0000$k
  [ "$(stat -c %s "$f")" = 0 ] || fail "shard $k is not absent at first"
  "$matctl" --store "$store" cat "$fp" $k >"$tmp/want" || fail "matctl cat $k"
  got=$(stat -c %s "$f")
  [ "$got" = "$(stat -c %s "$tmp/want")" ] ||
    fail "shard $k: stat says $got right after another process computed it"
  cmp -s "$f" "$tmp/want" || fail "shard $k: bytes"
done
pass "an absent shard's size 0 is not kept: stat sees another process's computation at once"
