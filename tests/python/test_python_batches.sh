#!/usr/bin/env bash
# test_python_batches.sh - matfs.BatchDataset and matfs.BatchLoader on a
# real mount: each batch is the batch file's bytes as a (B, *shape)
# tensor (or a list of records for lines, tar and index); an epoch at
# W=1 holds every record once but the dropped tail; 2 DataLoader workers
# yield the same sequence as none; set_epoch and seeds change it,
# seed=None is the shards' order; state_dict/load_state_dict resume in
# process and on another batch size; a plain DataLoader with workers
# cannot count (RuntimeError); real ranks (torch.distributed, gloo on
# loopback) with 2-worker loaders read equal counts, and a job saved on
# 2 ranks resumes on 3 with every record of the epoch read exactly once;
# then the guide's DDP example runs under torchrun on 2 ranks, stops,
# and resumes on 3.
# Runs /usr/bin/python3 with PYTHONPATH at python/ (meson sets it).
# shellcheck source-path=SCRIPTDIR source=../mount/lib.sh
. "$(dirname "$0")/../mount/lib.sh"

"$py" -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' ||
  { echo "skip: this torch has no gloo backend"; exit 77; }

mkdir -p "$tmp/pipes" "$tmp/data" "$tmp/text" "$tmp/tars"
# 8 inputs of 40..75 records of 16 bytes: (input, record) as two int64
"$py" - "$tmp" <<'PY'
import io, os, sys, tarfile
import numpy as np
tmp = sys.argv[1]
for i in range(8):
    recs = np.array([(i, r) for r in range(40 + 5 * i)], dtype="<i8")
    recs.tofile(os.path.join(tmp, "data", "f%d.bin" % i))
    with open(os.path.join(tmp, "text", "t%d.txt" % i), "w") as f:
        f.writelines("text %d line %d\n" % (i, r) for r in range(7 + i))
    # members without end blocks, so that cat makes one archive of them
    buf = io.BytesIO()
    t = tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT)
    for r in range(3 + i):
        for ext in ("txt", "cls"):
            data = ("%s of %d/%d" % (ext, i, r)).encode()
            info = tarfile.TarInfo("s%d_%03d.%s" % (i, r, ext))
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    with open(os.path.join(tmp, "tars", "s%d.tar" % i), "wb") as f:
        f.write(buf.getvalue()[:t.offset])
    # every input names its samples 000, 001, ...: keys repeat across shards
    buf = io.BytesIO()
    t = tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT)
    for r in range(3):
        data = ("same-key %d/%d" % (i, r)).encode()
        info = tarfile.TarInfo("%03d.txt" % r)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    os.makedirs(os.path.join(tmp, "samekey"), exist_ok=True)
    with open(os.path.join(tmp, "samekey", "s%d.tar" % i), "wb") as f:
        f.write(buf.getvalue()[:t.offset])
PY
cat >"$tmp/pipes/rec.yaml" <<'EOF2'
name: rec
inputs: ../data/*.bin
shards: 8
stages:
  - exec: [cat]
records: 16
shuffle_window: 1KiB
chunk_size: 4KiB
EOF2
cat >"$tmp/pipes/lines.yaml" <<'EOF2'
name: lines
inputs: ../text/*.txt
shards: 4
stages:
  - exec: [cat]
records: lines
shuffle_window: 256B
EOF2
cat >"$tmp/pipes/tar.yaml" <<'EOF2'
name: tar
inputs: ../tars/*.tar
shards: 4
stages:
  - exec: [cat]
records: tar
EOF2
# records: index, one record per input line (ends from a small script)
cat >"$tmp/pipes/ends.py" <<'EOF2'
import os, struct, sys
data = sys.stdin.buffer.read()
sys.stdout.buffer.write(data)
ends, at = [], 0
for line in data.splitlines(keepends=True):
    at += len(line)
    ends.append(at)
os.write(3, struct.pack("<%dQ" % len(ends), *ends))
EOF2
cat >"$tmp/pipes/index.yaml" <<EOF2
name: index
inputs: ../text/*.txt
shards: 2
stages:
  - exec: [$py, ends.py]
records: index
EOF2
cat >"$tmp/pipes/samekey.yaml" <<'EOF2'
name: samekey
inputs: ../samekey/*.tar
shards: 8
stages:
  - exec: [cat]
records: tar
EOF2
cat >"$tmp/pipes/gone.yaml" <<'EOF2'
name: gone
inputs: ../data/*.bin
shards: 8
stages:
  - exec: [cat]
records: 16
shuffle_window: 512B
EOF2
cat >"$tmp/pipes/bad.yaml" <<'EOF2'
name: bad
inputs: ../data/*.bin
shards: 2
stages:
  - exec: [sh, -c, "echo no records today >&2; exit 3"]
records: 16
EOF2
cat >"$tmp/pipes/plain.yaml" <<'EOF2'
name: plain
inputs: ../data/f0.bin
shards: 1
stages:
  - exec: [cat]
EOF2
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$tmp/pipes" -o workers=2
for n in rec lines tar samekey gone index bad plain; do
  wait_for 10 test -L "$mnt/$n" || fail "no $n name"
done

"$py" - "$mnt" <<'PY' || fail "BatchDataset in one process"
import errno, os, sys
import numpy as np
import torch
from torch.utils.data import DataLoader
import matfs

mnt = sys.argv[1]
name = os.path.join(mnt, "rec")
B = 8
every = sorted((i, r) for i in range(8) for r in range(40 + 5 * i))
N = len(every)

def recs(batches):
    return [tuple(x) for b in batches for x in b.tolist()]

def refused(exc, text, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc as e:
        assert text in str(e), (text, str(e))
    else:
        raise AssertionError("not refused: %s" % (text,))

refused(ValueError, "batch_size must be 1 or more", matfs.BatchDataset,
        name, 0, dtype="<i8")
refused(ValueError, "over", matfs.BatchDataset, name, 1 << 63, dtype="<i8")
refused(ValueError, "no snapshot with records", matfs.BatchDataset,
        os.path.join(mnt, "plain"), B, dtype="<i8")
refused(TypeError, "give their dtype", matfs.BatchDataset, name, B)
refused(ValueError, "spec's records are 16 bytes", matfs.BatchDataset,
        name, B, dtype="<i8", shape=(3,))
refused(ValueError, "give no dtype", matfs.BatchDataset,
        os.path.join(mnt, "lines"), B, dtype="<i8")
refused(ValueError, "seed must be an integer", matfs.BatchDataset,
        name, B, seed=-1, dtype="<i8")
refused(TypeError, "BatchLoader reads a BatchDataset", matfs.BatchLoader,
        [1, 2])

ds = matfs.BatchDataset(name, B, seed=5, dtype="<i8")
assert ds.shape == (2,) and ds.torch_dtype == torch.int64, ds.shape
assert ds.folder == os.path.realpath(name)
refused(ValueError, "takes no persistent_workers", matfs.BatchLoader, ds,
        num_workers=2, persistent_workers=True)
epoch0 = list(ds)
assert len(epoch0) == N // B, (len(epoch0), N)
assert all(b.shape == (B, 2) and b.dtype == torch.int64 for b in epoch0)
# each tensor is its batch file's bytes, and the files are the epoch's
view = ds.view(0)
assert view.endswith("/batches/8/seed-5/epoch-0/rank-0-of-1"), view
for k, b in enumerate(epoch0):
    with open(os.path.join(view, "batch-%06d" % k), "rb") as f:
        assert b.numpy().astype("<i8").tobytes() == f.read(), k
got = recs(epoch0)
assert len(set(got)) == len(got) == N // B * B, "a record twice"
assert set(got) <= set(every)
assert got != every[:len(got)], "epoch 0 of seed 5 is the shards' order"
st = ds.state_dict()
assert st["global_batch"] == N // B and st["epoch"] == 0, st
print("one epoch: %d batches of %d from %d records" % (len(epoch0), B, N))

# a new iterator starts the epoch again; two workers, the same sequence
again = list(matfs.BatchLoader(ds, num_workers=2))
assert recs(again) == got, "2 workers read another sequence"
assert ds.state_dict()["global_batch"] == N // B
plain = matfs.BatchDataset(name, B, seed=5, dtype="<i8")
assert recs(DataLoader(plain, batch_size=None, num_workers=2)) == got
refused(RuntimeError, "matfs.BatchLoader", plain.state_dict)
# counted in this process first, then read by uncounting workers: refused
mixed = matfs.BatchDataset(name, B, seed=5, dtype="<i8")
it = iter(mixed)
next(it), next(it)
del it
assert mixed.state_dict()["global_batch"] == 2
list(DataLoader(mixed, batch_size=None, num_workers=2))
refused(RuntimeError, "matfs.BatchLoader", mixed.state_dict)

# another epoch, another seed: another order of the same records
ds.set_epoch(1)
epoch1 = recs(ds)
assert epoch1 != got, "epoch 1 repeats epoch 0"
assert len(set(epoch1)) == len(epoch1) == len(got)
other = recs(matfs.BatchDataset(name, B, seed=6, dtype="<i8"))
assert other != got and len(set(other)) == len(got)
# seed None: the shards' records in shard order, the same every epoch
files = matfs.shards(name)
shard_order = [tuple(x) for f in files
               for x in np.fromfile(f, dtype="<i8").reshape(-1, 2).tolist()]
ordered = matfs.BatchDataset(name, B, seed=None, dtype="<i8")
assert recs(ordered) == shard_order[:N // B * B]
ordered.set_epoch(3)
assert recs(ordered) == shard_order[:N // B * B]
assert "seed-none" in ordered.view()

# resume in this process: 3 batches, a state, a new dataset goes on
ds = matfs.BatchDataset(name, B, seed=5, dtype="<i8")
it = iter(matfs.BatchLoader(ds))
head = [next(it) for _ in range(3)]
st = ds.state_dict()
assert st["global_batch"] == 3 and st["records"] == 3 * B, st
del it
back = matfs.BatchDataset(name, B, seed=5, dtype="<i8")
back.load_state_dict(st)
assert back.epoch == 0
assert recs(head) + recs(back) == got, "resume lost or repeated records"
# ... with another batch size: the same records from record 24 on
wide = matfs.BatchDataset(name, 3 * B, seed=5, dtype="<i8")
wide.load_state_dict(st)
rest = recs(wide)
assert rest == got[3 * B:3 * B + len(rest)] and len(rest) >= len(got) - 6 * B
refused(ValueError, "no batch boundary", matfs.BatchDataset(
    name, 5, seed=5, dtype="<i8").load_state_dict, st)
refused(ValueError, "another order", matfs.BatchDataset(
    name, B, seed=4, dtype="<i8").load_state_dict, st)
refused(ValueError, "version", back.load_state_dict, {"version": 99})
# set_epoch of the loaded epoch keeps the resume point, another drops it
back.load_state_dict(st)
back.set_epoch(0)
assert back.state_dict()["global_batch"] == 3
back.set_epoch(1)
assert back.state_dict()["global_batch"] == 0

# the framings that come as bytes
lines = matfs.BatchDataset(os.path.join(mnt, "lines"), 5, seed=2)
seen = [l for b in lines for l in b]
assert all(len(b) == 5 for b in lines)
want = [("text %d line %d\n" % (i, r)).encode()
        for i in range(8) for r in range(7 + i)]
assert len(set(seen)) == len(seen) == len(want) // 5 * 5
assert set(seen) <= set(want)
tar = matfs.BatchDataset(os.path.join(mnt, "tar"), 4, seed=1)
samples = [s for b in tar for s in b]
assert all(len(b) == 4 for b in tar)
keys = [s["__key__"] for s in samples]
assert len(set(keys)) == len(keys) == sum(3 + i for i in range(8)) // 4 * 4
for s in samples:
    i, r = s["__key__"][1:].split("_")
    assert s["txt"] == ("txt of %s/%d" % (i, int(r))).encode(), s
    assert s["cls"] == ("cls of %s/%d" % (i, int(r))).encode(), s
index = matfs.BatchDataset(os.path.join(mnt, "index"), 3, seed=9)
cut = [l for b in index for l in b]
assert len(set(cut)) == len(cut) == len(want) // 3 * 3 and set(cut) <= set(want)
refused(ValueError, "at most 8192 records", matfs.BatchDataset,
        os.path.join(mnt, "index"), 8193)
refused(ValueError, "over 1048576", matfs.BatchDataset, name, (1 << 20) + 1,
        dtype="<i8")
# samples of one key from two shards side by side stay two samples
same = matfs.BatchDataset(os.path.join(mnt, "samekey"), 4, seed=5)
texts = [s["txt"] for b in same for s in b]
assert all(len(b) == 4 for b in same)
assert len(texts) == len(set(texts)) == 24, texts
print("lines, tar and index batches as their records")

# a pipeline that fails: ShardError (EIO) naming the shard and its stderr
try:
    list(matfs.BatchDataset(os.path.join(mnt, "bad"), 2, dtype="<i8"))
except matfs.ShardError as e:
    assert e.errno == errno.EIO and "no records today" in str(e), str(e)
    assert os.path.basename(e.filename).startswith("shard-"), e.filename
else:
    raise AssertionError("a failed pipeline read as batches")
PY
pass "BatchDataset: batches, workers, epochs, seeds, resume, framings"

# the snapshot removed mid-epoch: an error, not a quiet end of the epoch
"$py" - "$mnt" "$matctl" "$tmp/store" "$tmp/pipes/gone.yaml" <<'PY' || fail "a snapshot gone mid-epoch"
import os, subprocess, sys, time
import matfs
mnt, matctl, store, spec = sys.argv[1:]
name = os.path.join(mnt, "gone")
ds = matfs.BatchDataset(name, 4, seed=3, dtype="<i8")
it = iter(ds)
next(it)
old = ds.fingerprint
with open(spec + ".new", "w") as f:
    f.write(open(spec).read().replace("512B", "1KiB"))
os.rename(spec + ".new", spec)
for _ in range(200):
    if os.readlink(name) != old:
        break
    time.sleep(0.05)
assert os.readlink(name) != old, "the name did not follow the spec"
subprocess.run([matctl, "--store", store, "rm", "--force", old], check=True,
               stdout=subprocess.DEVNULL)
try:
    for _ in it:
        pass
except FileNotFoundError as e:
    assert "is gone" in str(e), e
else:
    raise AssertionError("the epoch of a removed snapshot ended quietly")
PY
pass "a snapshot removed mid-epoch raises FileNotFoundError"

# Real ranks: torch.distributed with gloo on loopback, 2-worker loaders.
cat >"$tmp/rank.py" <<'PY'
import json, os, sys
import torch
import torch.distributed as dist
import matfs

snap, phase, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_* from the parent
ds = matfs.BatchDataset(snap, 8, seed=11, dtype="<i8")
assert (ds.rank, ds.world_size) == (dist.get_rank(), dist.get_world_size())
loader = matfs.BatchLoader(ds, num_workers=2)
if phase == "resume":
    ds.load_state_dict(json.load(open(os.path.join(out, "state.json"))))
    ds.set_epoch(ds.epoch)
seen = []
for step, batch in enumerate(loader, 1):
    seen += [tuple(x) for x in batch.tolist()]
    dist.barrier()  # a training step's collective: every rank has a batch
    if step == steps:  # state_dict() counts the batches taken: this one too
        break
counts = [None] * dist.get_world_size()
dist.all_gather_object(counts, len(seen))
assert len(set(counts)) == 1, "unequal batch counts %r" % (counts,)
state = ds.state_dict()
if dist.get_rank() == 0:
    json.dump(state, open(os.path.join(out, "state.json"), "w"))
json.dump(seen, open(os.path.join(out, "%s-%d.json" % (phase, ds.rank)), "w"))
dist.destroy_process_group()
PY
"$py" - "$mnt/rec" "$tmp" <<'PY' || fail "ranks"
import json, os, socket, subprocess, sys
import numpy as np
snap, tmp = sys.argv[1], sys.argv[2]

def run(world, phase, steps):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(tmp, "rank.py"), snap, phase, tmp,
             str(steps)], env=env))
    try:
        for p in procs:
            assert p.wait(timeout=120) == 0, "a rank exited %r" % p.returncode
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [[tuple(r) for r in json.load(open(os.path.join(
        tmp, "%s-%d.json" % (phase, k))))] for k in range(world)]

first = run(2, "first", 5)
st = json.load(open(os.path.join(tmp, "state.json")))
assert st["global_batch"] == 10 and st["world_size"] == 2, st
assert all(len(r) == 5 * 8 for r in first)
second = run(3, "resume", -1)
st2 = json.load(open(os.path.join(tmp, "state.json")))
n = len(set(second[0]))
assert all(len(r) == n for r in second), [len(r) for r in second]
# the epoch read through W=1, global batches 0.. in order
epoch = os.path.join(os.path.realpath(snap), "batches/8/seed-11/epoch-0")
total = len([e for e in os.listdir(epoch) if e.startswith("batch-")])
rounds = (total - 10) // 3
assert st2["global_batch"] == 10 + 3 * rounds, (st2, total)
want = []
for g in range(10 + 3 * rounds):
    with open(os.path.join(epoch, "batch-%06d" % g), "rb") as f:
        want += [tuple(x) for x in
                 np.frombuffer(f.read(), "<i8").reshape(-1, 2).tolist()]
got = [r for ranks in (first, second) for recs in ranks for r in recs]
assert len(got) == len(set(got)), "a record read twice across the resume"
assert sorted(got) == sorted(want), "the records of the two runs are not " \
    "global batches 0..%d" % (10 + 3 * rounds - 1)
print("2 ranks x 5 batches, then 3 ranks x %d: %d records once" %
      (rounds, len(got)))
PY
pass "ranks: equal counts, a job saved on 2 ranks resumes on 3, every record once"

# The guide's DDP example, as written, with the guide's mountpoint
# replaced: 2 ranks stop after 3 steps (STOP_AFTER), 3 ranks resume.
"$py" - "$src/docs/guide.md" "$mnt" >"$tmp/train.py" <<'PY' || fail "no example"
import re, sys
text = open(sys.argv[1]).read()
blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
          if "matfs.BatchDataset(" in b]
assert len(blocks) == 1, "%d blocks use matfs.BatchDataset" % len(blocks)
print(blocks[0].replace("/mnt/data", sys.argv[2]), end="")
PY
grep -q "$mnt/tokens" "$tmp/train.py" || fail "the DDP example reads no /mnt/data/tokens"
cp -r "$src/examples/pipelines/." "$tmp/pipes/"
cp -r "$src/examples/data/." "$tmp/data/"
wait_for 10 test -L "$mnt/tokens" || fail "no tokens name"
# Debian 12's torch 1.13 parses no --redirects 0 on Python 3.11 (its
# default): 1 and --tee 1 keep stdout on the console (docs/guide.md)
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
torchrun=("$py" -m torch.distributed.run --redirects 1 --tee 1 --nnodes 1
  --master_addr 127.0.0.1 --master_port "$port")
out=$(cd "$tmp" && STOP_AFTER=3 timeout 180 "${torchrun[@]}" --nproc_per_node 2 train.py 2>&1) ||
  fail "the DDP example on 2 ranks: $out"
grep -q "stopped at global batch 6 of epoch 0" <<<"$out" || fail "no stop: $out"
[ -f "$tmp/checkpoint.pt" ] || fail "no checkpoint"
out=$(cd "$tmp" && timeout 180 "${torchrun[@]}" --nproc_per_node 3 train.py 2>&1) ||
  fail "the DDP example resumed on 3 ranks: $out"
grep -q "resumed at global batch 6 of epoch 0" <<<"$out" || fail "no resume: $out"
grep -q "epoch 1: " <<<"$out" || fail "no second epoch: $out"
pass "the guide's DDP example stops on 2 ranks and resumes on 3"

umount_fs "$mnt" "$mpid"
