#!/usr/bin/env bash
# test_matctl_batches.sh - matctl batches on a snapshot of 20 shards of
# 4-byte records: with every shard materialized, the batches list every
# record once at most and drop only the last partial batch, slice one
# sequence whatever the batch size, give every rank of a world the same
# count of global batches R + kW, differ by epoch and seed, are the same
# on a second run, are the shards in order with seed none, and equal what
# tests/order/order_ref.py (the reimplementation from docs/format.md)
# computes for the same fingerprint and counts; with one shard failed,
# they are a prefix of those (the first group of shards of the shard
# order, when the last shard of that order failed); one batch of
# every record comes whole, in pieces of bounded memory, its runs
# maximal; bad numbers and a spec without records are refused with exit
# 2 and 1.
set -uo pipefail
src=${MF_SOURCE_ROOT:?} build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
tmp=$(mktemp -d /tmp/mf-batches.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
m() { "$matctl" --store "$tmp/store" "$@"; }

p=$tmp/p
mkdir -p "$p/in"
for k in $(seq 0 19); do
  head -c $(( (k * 7 % 23 + 1) * 200 )) /dev/urandom >"$p/in/f$(printf %02d "$k")"
done
# the shard last in epoch 0's shard order (seed 7) fails while the file
# "fail" exists (not a dep: the fingerprint stays), so the known prefix
# is the first group of shards (order_ref.py gives the order)
cat >"$p/b.yaml" <<'EOF'
name: b
inputs: in/f*
stages:
  - exec: [sh, -c, '[ "$MATFS_SHARD" != "$(cat fail 2>/dev/null)" ] || exit 3; exec cat']
records: 4
shuffle_window: 24
EOF
fp=$(m fingerprint "$p/b.yaml") || fail "fingerprint"
last=$(python3 -c '
import hashlib, sys
sys.path.insert(0, sys.argv[1])
import order_ref
fp = bytes.fromhex(sys.argv[2])
key = hashlib.sha256(b"matfs-order-1" + fp + (7).to_bytes(8, "little")
                     + (0).to_bytes(8, "little")).digest()
print(order_ref.permute(order_ref.round_keys(key, 1, 0, 0), 20, 19))
' "$src/tests/order" "$fp") || fail "the shard order"
echo "$last" >"$p/fail"
m warm "$p/b.yaml" >/dev/null 2>&1 && fail "warm with shard $last failing succeeded"

m batches b 3 --seed 7 --epoch 0 --json >"$tmp/part.json" ||
  fail "batches of a partial snapshot: $(m batches b 3 --seed 7 --epoch 0 2>&1)"
rm "$p/fail"
m warm b >/dev/null || fail "warm"
for b in 1 3 5; do
  m batches b $b --seed 7 --epoch 0 --json >"$tmp/s7e0b$b.json" || fail "batches B=$b"
done
m batches b 3 --seed 7 --epoch 0 --json >"$tmp/again.json" || fail "batches again"
m batches b 3 --seed 7 --epoch 1 --json >"$tmp/s7e1.json" || fail "epoch 1"
m batches b 3 --seed 8 --epoch 0 --json >"$tmp/s8e0.json" || fail "seed 8"
m batches b 1 --seed none --epoch 0 --json >"$tmp/none.json" || fail "seed none"
# one batch of every record: more runs than one piece of the listing holds
total=$(( $(cat "$p"/in/f* | wc -c) / 4 ))
m batches b $total --seed 7 --epoch 0 --json >"$tmp/whole.json" || fail "one batch of $total"
for r in 0 1 2; do
  m batches b 2 --seed 7 --epoch 0 --rank $r/3 --json >"$tmp/r$r.json" || fail "rank $r/3"
done
cmp -s "$tmp/s7e0b3.json" "$tmp/again.json" || fail "a second run lists other batches"
pass "batches listed, the same on a second run"

python3 - "$tmp" "$p/in" "$fp" "$src/tests/order" <<'EOF' || fail "the batches' properties"
import json, os, sys
tmp, ind, fp, refdir = sys.argv[1:]
sys.path.insert(0, refdir)
import order_ref

def load(name):
    with open(os.path.join(tmp, name)) as f:
        return json.load(f)

def flat(v):
    return [(s, r + i) for b in v["batches"] for s, r, n in b["runs"]
            for i in range(n)]

counts = [0] * 20
for k in range(20):
    counts[k % 20] += os.path.getsize(os.path.join(ind, "f%02d" % k)) // 4
total = sum(counts)
full = load("s7e0b1.json")
assert full["complete"] and full["order"] == 1, (full["complete"], full["order"])
seq = flat(full)
assert len(seq) == total and len(set(seq)) == total, "each record once"
assert all(r < counts[s] for s, r in seq)
for b in (3, 5):
    v = load("s7e0b%d.json" % b)
    assert v["count"] == total // b, (b, v["count"])
    assert all(sum(n for _, _, n in x["runs"]) == b for x in v["batches"])
    assert flat(v) == seq[:total // b * b], "B=%d slices another sequence" % b
whole = load("whole.json")
assert whole["count"] == 1 and len(whole["batches"][0]["runs"]) > 4096
assert flat(whole) == seq, "one batch of every record"
runs = whole["batches"][0]["runs"]
assert all(not (a[0] == b[0] and a[1] + a[2] == b[1])
           for a, b in zip(runs, runs[1:])), "runs not maximal"
assert flat(load("s7e1.json")) != flat(load("s7e0b3.json")), "epochs alike"
assert flat(load("s8e0.json")) != flat(load("s7e0b3.json")), "seeds alike"
assert flat(load("none.json")) == [(s, r) for s in range(20)
                                   for r in range(counts[s])], "seed none"
ranks = [load("r%d.json" % r) for r in range(3)]
assert len({v["count"] for v in ranks}) == 1, "ranks' counts differ"
b2 = seq[:total // 2 * 2]
for r, v in enumerate(ranks):
    for k, x in enumerate(v["batches"]):
        g = r + 3 * k
        assert x["global"] == g and x["batch"] == k
        got = [(s, q + i) for s, q, n in x["runs"] for i in range(n)]
        assert got == b2[2 * g:2 * g + 2], (r, k)
assert ranks[0]["count"] == total // 2 // 3
# the reimplementation from docs/format.md, on the same inputs
_, _, windows = order_ref.order(bytes.fromhex(fp), True, 7, 0, 24, counts,
                                [4 * c for c in counts])
assert [e for w in windows for e in w[3]] == seq, "order_ref disagrees"
part = load("part.json")
# 19 of the shard order's counts known, the known records only its
# first group's (the second ends at the missing shard)
assert not part["complete"] and part["shards_known"] == 19, \
    (part["complete"], part["shards_known"])
ps = flat(part)
assert 0 < part["count"] < total // 3 and ps == seq[:len(ps)], "not a prefix"
print("properties hold: %d records, %d known of a partial epoch"
      % (total, len(ps)))
EOF
pass "each record once, one sequence for every B, ranks, epochs, seeds, seed none, the reference, the prefix"

out=$(m batches b 3 --seed 7 --epoch 0) || fail "text output"
first=$(head -1 <<<"$out")
[[ $first =~ ^batch-000000\ \ global\ 000000\ \ [0-9]+:[0-9]+ ]] || fail "text line: $first"
last=$(tail -1 <<<"$out")
[[ $last =~ ^order\ 1:\ [0-9]+\ batches,\ every\ shard\ known$ ]] || fail "text summary: $last"
pass "text output"

m batches b 0 --seed 7 --epoch 0 >/dev/null 2>&1; [ $? = 2 ] || fail "B=0 not refused with 2"
m batches b 3 --seed 7 --epoch 0 --rank 3/3 >/dev/null 2>&1; [ $? = 2 ] || fail "rank 3/3 not refused"
m batches b 3 --seed 7 >/dev/null 2>&1; [ $? = 2 ] || fail "no --epoch not refused"
m batches b 9223372036854775808 --seed 7 --epoch 0 >/dev/null 2>&1; [ $? = 2 ] ||
  fail "B=2^63 not refused"
out=$(m batches b 9223372036854775807 --seed 18446744073709551615 --epoch 0 --rank 5/9223372036854775807) ||
  fail "batches at the limits"
[[ $out == "order 1: 0 batches, every shard known" ]] || fail "at the limits: $out"
printf 'name: plain\ninputs: in/f00\nstages:\n  - exec: [cat]\n' >"$p/plain.yaml"
m warm "$p/plain.yaml" >/dev/null || fail "warm plain"
out=$(m batches plain 3 --seed 7 --epoch 0 2>&1); rc=$?
[ $rc = 1 ] || fail "a spec without records: exit $rc"
grep -q "has no 'records'" <<<"$out" || fail "a spec without records says: $out"
pass "bad numbers, the limits and a spec without records"
