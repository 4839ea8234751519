#!/usr/bin/env bash
# test_python_mount.sh - the matfs Python package against a real mount of
# the bundled example (examples/: tokens, two shards of uint32 tokens) and
# a spec whose stage fails: matfs.state and matfs.fingerprint read the
# xattrs (and compute nothing), matfs.shards lists through the name,
# ShardDataset under a 2-worker DataLoader reads every token the stages
# give when run by hand, a failed shard raises EIO; then the guide's
# PyTorch example, as docs/guide.md has it, runs on the mount.
# Runs /usr/bin/python3 with PYTHONPATH at python/ (meson sets it).
# shellcheck source-path=SCRIPTDIR source=../mount/lib.sh
. "$(dirname "$0")/../mount/lib.sh"

mkdir -p "$tmp/ex"
cp -r "$src/examples/pipelines" "$src/examples/data" "$tmp/ex/"
cat >"$tmp/ex/pipelines/broken.yaml" <<'EOF'
name: broken
inputs: ../data/*.txt
shards: 1
stages:
  - exec: [sh, -c, "echo no tokens today >&2; exit 3"]
EOF
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$tmp/ex/pipelines"
wait_for 10 test -L "$mnt/tokens" || fail "no tokens name"
wait_for 10 test -L "$mnt/broken" || fail "no broken name"

# the example's stages by hand: every token of the snapshot
for k in 0 1; do
  # shellcheck disable=SC2046 # the file names, one word each
  (cd "$tmp/ex/pipelines" &&
    cat $(ls ../data/*.txt | awk -v k=$k '(NR - 1) % 2 == k') |
    tr A-Z a-z | python3 tokenize.py --vocab 65536) >"$tmp/want$k"
  [ -s "$tmp/want$k" ] || fail "reference shard $k is empty"
done

"$py" - "$mnt" "$tmp/want0" "$tmp/want1" <<'PY' || fail "matfs on the mount"
import collections, errno, os, sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader
import matfs

mnt, wants = sys.argv[1], sys.argv[2:]
name = os.path.join(mnt, "tokens")
fp = os.readlink(name)
assert len(fp) == 64, fp

# before any read: the xattrs say absent, and listing computes nothing
assert matfs.fingerprint(name) == fp
assert matfs.fingerprint(os.path.join(mnt, fp)) == fp
assert matfs.state(name) == "absent", matfs.state(name)
files = matfs.shards(name)
assert files == [os.path.join(mnt, fp, "shard-%05d.u32" % k)
                 for k in range(2)], files
assert matfs.shards(name, rank=1, world_size=2) == files[1:]
assert matfs.fingerprint(files[1]) == fp
assert [matfs.state(f) for f in files] == ["absent"] * 2
for fn in (matfs.state, matfs.fingerprint):
    try:
        fn(mnt)
    except OSError as e:
        assert e.errno == errno.ENODATA, e
    else:
        raise AssertionError("%s of the root" % fn.__name__)

# every sequence of 512 tokens (records: {size: 2KiB, tail: drop}) exactly
# once through a 2-worker DataLoader; the tokens after a shard's last whole
# sequence are no record
ds = matfs.ShardDataset(name, "<u4", shuffle=True, seed=3)
assert ds.shape == (512,) and ds.tail == "drop", (ds.shape, ds.tail)
want = [tuple(s) for w in wants
        for s in np.fromfile(w, dtype="<u4")[:os.path.getsize(w) // 2048 *
                                             512].reshape(-1, 512).tolist()]
assert len(want) >= 4, len(want)
for epoch in (0, 1):
    ds.set_epoch(epoch)
    got = torch.cat(list(DataLoader(ds, batch_size=8, num_workers=2)))
    assert got.dtype == torch.int64 and got.shape[1] == 512
    assert collections.Counter(tuple(s) for s in got.tolist()) == \
        collections.Counter(want), epoch
# a shape that is not the spec's record is refused
try:
    matfs.ShardDataset(name, "<u4", shape=())
except ValueError as e:
    assert "spec's records are 2048 bytes" in str(e), e
else:
    raise AssertionError("a shape other than the record's")
# the reads can end before the commits of what they read (served sealed)
end = time.monotonic() + 20
while [matfs.state(f) for f in files] != ["materialized"] * 2:
    assert time.monotonic() < end, [matfs.state(f) for f in files]
    time.sleep(0.05)
assert matfs.state(name) == "materialized"
assert int(os.getxattr(name, "user.matfs.records")) == len(want)

# a failed stage: EIO while iterating, "failed" in the xattrs
broken = matfs.ShardDataset(os.path.join(mnt, "broken"), "<u4")
try:
    list(broken)
except OSError as e:
    assert e.errno == errno.EIO, e
else:
    raise AssertionError("a failed shard read as data")
assert matfs.state(broken.files()[0]) == "failed"
assert matfs.state(os.path.join(mnt, "broken")) == "failed"
PY
pass "state, fingerprint, shards and a 2-worker ShardDataset on the mount"

# The guide's example, as written, with the guide's mountpoint replaced.
"$py" - "$src/docs/guide.md" "$mnt" >"$tmp/example.py" <<'PY' || fail "no example"
import re, sys
text = open(sys.argv[1]).read()
blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
          if "matfs.ShardDataset(" in b]
assert len(blocks) == 1, "%d blocks use matfs.ShardDataset" % len(blocks)
print(blocks[0].replace("/mnt/data", sys.argv[2]), end="")
PY
grep -q "$mnt/tokens" "$tmp/example.py" || fail "the example reads no /mnt/data/tokens"
total=$(($(stat -c %s "$tmp/want0") / 2048 + $(stat -c %s "$tmp/want1") / 2048))
out=$(cd "$tmp" && "$py" example.py 2>&1) || fail "the guide's example: $out"
for epoch in 0 1; do
  grep -qx "epoch $epoch: $total sequences of 512 tokens from 2 shards" <<<"$out" ||
    fail "the guide's example printed: $out (want $total sequences)"
done
pass "the guide's PyTorch example runs on the mount"

umount_fs "$mnt" "$mpid"
