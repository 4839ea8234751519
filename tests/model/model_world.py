"""model_world.py - the pipelines the model test serves, and its oracle.

Three pipelines whose every knob has a few variants: the spec (an argv
word, the shard count, keep:, expire_after:, the codec), each deps file and
each input file. A configuration is one variant of each; toggling between
variants makes old fingerprints come back. For any configuration this
module writes the files, computes the fingerprint from the byte layout in
docs/spec.md, and computes every shard's bytes from the stages' own
definitions (tr, cat, a prefix, seq, a small Python script), never from
the store.

Not for: running anything or talking to the mount (model_rig.py,
model_ops.py).
"""
import hashlib
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "order"))
import order_ref  # noqa: E402 (the order as docs/format.md specifies it)

# the framings whose batches the mount serves, checked by read_batch
BATCH_FRAMINGS = {"fixed", "lines"}

SCHEME = 1
MTIME_BASE = 1_700_000_000_000_000_000  # input mtimes are fixed per variant

GEN_PY = b'''import os, sys
a = sys.argv[1:]
tag = a[a.index("--tag") + 1].encode()
rep = int(a[a.index("--rep") + 1])
words = open("vocab.txt", "rb").read().split()
lines = sys.stdin.buffer.read().split(b"\\n")
with open("runs/log", "a") as log:  # one line per stage run (the model counts them)
    log.write("%s %s\\n" % (os.environ["MATFS_FINGERPRINT"], os.environ["MATFS_SHARD"]))
out = [b"shard %s of %s\\n" % (os.environ["MATFS_SHARD"].encode(),
                               os.environ["MATFS_SHARDS"].encode())]
for r in range(rep):
    for i, line in enumerate(lines):
        out.append(b"%s%d %s %s\\n" % (tag, r, words[(r + i) % len(words)], line))
sys.stdout.buffer.write(b"".join(out))
'''

# every stage run appends "FINGERPRINT SHARD" to runs/log (gen.py too)
LOG_RUN = 'echo "$MATFS_FINGERPRINT $MATFS_SHARD" >> runs/log; '

WORDS = (b"alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu "
         b"nu xi omicron pi rho sigma tau upsilon phi chi psi omega").split()


def text(key, nlines):
    """Deterministic ASCII text (independent of the run's seed)."""
    rng = random.Random(key)
    return b"".join(b" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
                    + b"\n" for _ in range(nlines))


def variants(key, nlines, more):
    """An input's content variants: two of different sizes, then one of the
    first's size with other bytes (what an edit in place that keeps the
    size writes)."""
    v = [text(f"{key}v{i}", nlines + more * i) for i in range(2)]
    return v + [v[0].translate(bytes.maketrans(b"aeiou", b"eioua"))]


def u64(x):
    return struct.pack(">Q", x & 0xFFFFFFFFFFFFFFFF)


def pstr(b):
    return u64(len(b)) + b


def sha(b):
    return hashlib.sha256(b).digest()


class Pipeline:
    """One spec: its variants and how to compute its output.

    spec_variants: list of dicts with 'shards' (None = one per input),
    'argv' (a list of argv lists, one per stage), optional 'records' (the
    spec's records: a (framing, size, drop) triple, covered by the
    fingerprint), optional 'window' (its shuffle_window in bytes, with
    records) and optional 'extra' (YAML lines not covered by it). Stages are given by
    'argv'; 'deps' per stage is fixed. 'run(config, shard_input)' is the
    oracle of the whole stage chain."""

    def __init__(self, name, inputs, identity, deps, spec_variants,
                 suffix="", chunk_size="16KiB", run=None, base=None, glob=None):
        self.name = name
        # [(relpath, [content variants])], sorted: the first base are
        # there from the start, the rest are appended one at a time (the
        # spec names them by glob, so that a new file is a new input)
        self.inputs = inputs
        self.base = base if base is not None else len(inputs)
        self.glob = glob
        self.identity = identity
        self.deps = deps  # per stage: [relpath]
        self.spec_variants = spec_variants
        self.suffix = suffix
        self.chunk_size = chunk_size
        self.run = run

    def shards(self, cfg):
        n = self.spec_variants[cfg.spec]["shards"]
        return n if n is not None else len(cfg.inputs)

    def spec_text(self, sv, options):
        v = self.spec_variants[sv]
        lines = [f"name: {self.name}",
                 f"inputs: [{self.glob or ', '.join(p for p, _ in self.inputs)}]",
                 f"input_identity: {self.identity}",
                 f"chunk_size: {self.chunk_size}"]
        if self.suffix:
            lines.append(f"suffix: {self.suffix}")
        if v["shards"] is not None:
            lines.append(f"shards: {v['shards']}")
        rec = v.get("records")
        if rec and rec[0] == "fixed":
            lines.append("records: {size: %d, tail: %s}" %
                         (rec[1], "drop" if rec[2] else "error"))
        elif rec:
            lines.append(f"records: {rec[0]}")
        if "window" in v:
            lines.append(f"shuffle_window: {v['window']}")
        for key, val in v.get("extra", {}).items():
            if options.get(key, True):
                lines.append(f"{key}: {val}")
        lines.append("stages:")
        for argv, deps in zip(v["argv"], self.deps):
            words = ", ".join('"%s"' % w.replace("\\", "\\\\").replace('"', '\\"')
                              for w in argv)
            lines.append(f"  - exec: [{words}]")
            if deps:
                lines.append(f"    deps: [{', '.join(deps)}]")
        return ("\n".join(lines) + "\n").encode()


def _alpha_run(world, cfg, k, data):
    sv = world.alpha.spec_variants[cfg.spec]["argv"][1]
    tag, rep = sv[sv.index("--tag") + 1].encode(), int(sv[sv.index("--rep") + 1])
    words = world.dep_content("vocab.txt", cfg).split()
    lines = data.upper().split(b"\n")  # tr a-z A-Z
    out = [b"shard %d of %d\n" % (k, world.alpha.shards(cfg))]
    for r in range(rep):
        for i, line in enumerate(lines):
            out.append(b"%s%d %s %s\n" % (tag, r, words[(r + i) % len(words)], line))
    return b"".join(out)


def _beta_run(world, cfg, k, data):
    argv = world.beta.spec_variants[cfg.spec]["argv"][1]  # [tr, SET1, SET2]
    s1, s2 = (bytes(range(ord(s[0]), ord(s[2]) + 1)) for s in argv[1:3])
    return (world.dep_content("prefix.txt", cfg) + data).translate(
        bytes.maketrans(s1, s2))


def _gamma_run(world, cfg, k, data):
    n = int(world.gamma.spec_variants[cfg.spec]["argv"][0][4])
    return data + b"".join(b"%d\n" % i for i in range(1, n + 1))


class Config:
    """One variant of every knob of one pipeline (hashable)."""

    def __init__(self, spec, deps, inputs):
        self.spec, self.deps, self.inputs = spec, tuple(deps), tuple(inputs)

    def key(self):
        return (self.spec, self.deps, self.inputs)


class World:
    """The pipelines folder's contents as the test wrote them."""

    def __init__(self, options):
        self.options = options  # {'keep': bool, 'expire_after': bool}
        self.alpha = Pipeline(
            "alpha",
            [(f"in/a{i}.txt", variants(f"a{i}", 50, 7)) for i in range(4)],
            "stat", [[], ["gen.py", "vocab.txt"]],
            [{"shards": 2, "argv": [["tr", "a-z", "A-Z"],
                                    ["/usr/bin/python3", "gen.py", "--tag", "x", "--rep", "24"]],
              "records": ("lines", 0, False),
              "extra": {"compression": "zstd:1"}},
             {"shards": 2, "argv": [["tr", "a-z", "A-Z"],
                                    ["/usr/bin/python3", "gen.py", "--tag", "y", "--rep", "24"]],
              "extra": {"compression": "snappy", "keep": 1}},
             {"shards": 3, "argv": [["tr", "a-z", "A-Z"],
                                    ["/usr/bin/python3", "gen.py", "--tag", "x", "--rep", "40"]],
              "extra": {"compression": "none"}},
             # variant 0's stages with other records (and none): every
             # shard fingerprint is variant 0's
             {"shards": 2, "argv": [["tr", "a-z", "A-Z"],
                                    ["/usr/bin/python3", "gen.py", "--tag", "x", "--rep", "24"]],
              "records": ("fixed", 16, True), "window": 1 << 20,
              "extra": {"compression": "zstd:3"}},
             {"shards": 2, "argv": [["tr", "a-z", "A-Z"],
                                    ["/usr/bin/python3", "gen.py", "--tag", "x", "--rep", "24"]],
              "extra": {"compression": "snappy"}}],
            suffix=".txt", run=_alpha_run, base=3, glob="in/a*.txt")
        self.beta = Pipeline(
            "beta",
            [(f"in/b{i}.txt", variants(f"b{i}", 300, 40)) for i in range(3)],
            "content", [["prefix.txt"], []],
            [{"shards": None, "argv": [["/bin/sh", "-c", LOG_RUN + "cat prefix.txt; cat"],
                                       ["tr", "a-e", "A-E"]]},
             {"shards": None, "argv": [["/bin/sh", "-c", LOG_RUN + "cat prefix.txt; cat"],
                                       ["tr", "a-e", "A-E"]],
              "extra": {"expire_after": "3s"}},
             {"shards": None, "argv": [["/bin/sh", "-c", LOG_RUN + "cat prefix.txt; cat"],
                                       ["tr", "x-z", "X-Z"]],
              "records": ("fixed", 4, True)},
             {"shards": None, "argv": [["/bin/sh", "-c", LOG_RUN + "cat prefix.txt; cat"],
                                       ["tr", "x-z", "X-Z"]],
              "records": ("lines", 0, False), "window": 65536}],
            chunk_size="4MiB", run=_beta_run, base=2, glob="in/b*.txt")
        self.gamma = Pipeline(
            "gamma",
            [(f"in/c{i}.txt", variants(f"c{i}", 5, 1)) for i in range(3)],
            "stat", [[]],
            [{"shards": None, "argv": [["/bin/sh", "-c", LOG_RUN + 'cat; seq 1 "$1"', "sh",
                                        "40000"]]},
             {"shards": None, "argv": [["/bin/sh", "-c", LOG_RUN + 'cat; seq 1 "$1"', "sh",
                                        "90000"]],
              "records": ("lines", 0, False),
              "extra": {"keep": 2}},
             {"shards": None, "argv": [["/bin/sh", "-c", LOG_RUN + 'cat; seq 1 "$1"', "sh",
                                        "90000"]]},
             {"shards": None, "argv": [["/bin/sh", "-c", LOG_RUN + 'cat; seq 1 "$1"', "sh",
                                        "90000"]],
              "records": ("fixed", 8, True), "window": 4 << 20}],
            suffix=".bin", chunk_size="64KiB", run=_gamma_run, base=2, glob="in/c*.txt")
        self.pipelines = [self.alpha, self.beta, self.gamma]
        # deps files: name -> (pipeline index, [content variants])
        self.dep_files = {
            "gen.py": (0, [GEN_PY]),
            "vocab.txt": (0, [b"red green blue\n", b"one two three four five\n"]),
            "prefix.txt": (1, [b"# prefix one\n", b"# prefix two: abcde xyz\n",
                               b"# prefix three\n" * 40]),
        }
        self.dep_names = ["vocab.txt", "prefix.txt"]  # the editable ones
        self.configs = [Config(0, [0] * len(self.deps_of(p)), [0] * p.base)
                        for p in self.pipelines]
        self.fp_info = {}  # fp -> (pipeline index, Config)
        # fingerprints of the moments inside an edit in place (a file
        # half written, its mtime not set yet) that a daemon registered
        self.transient = set()
        self._bytes = {}  # (fp, shard) -> bytes

    def deps_of(self, p):
        return sorted({d for stage in p.deps for d in stage})

    def dep_content(self, name, cfg):
        pi, variants = self.dep_files[name]
        p = self.pipelines[pi]
        return variants[cfg.deps[self.deps_of(p).index(name)]]

    def input_content(self, p, i, cfg):
        return p.inputs[i][1][cfg.inputs[i]]

    def input_mtime(self, pi, i, v):
        return MTIME_BASE + pi * 1_000_000_000 + i * 1000 + v

    # -- the fingerprint (docs/spec.md, scheme 1) --

    def fingerprint(self, pi, cfg):
        p = self.pipelines[pi]
        v = p.spec_variants[cfg.spec]
        parts = [("scheme", u64(SCHEME)), ("shards", u64(p.shards(cfg)))]
        rec = v.get("records")
        if rec:  # records, then shuffle_window (its default when not set)
            parts.append(("records", pstr(rec[0].encode()) + u64(rec[1])
                          + u64(int(rec[2]))))
            parts.append(("shuffle_window", u64(v.get("window", 256 << 20))))
        parts += self._stage_parts(p, cfg)
        parts += [self._input_part(pi, i, cfg) for i in range(len(cfg.inputs))]
        acc = b"".join(pstr(label.encode()) + sha(b) for label, b in parts)
        return hashlib.sha256(acc).hexdigest()

    def _stage_parts(self, p, cfg):
        parts = []
        for si, (argv, deps) in enumerate(zip(p.spec_variants[cfg.spec]["argv"], p.deps)):
            parts.append((f"stage[{si}].argv",
                          u64(len(argv)) + b"".join(pstr(w.encode()) for w in argv)))
            for d in sorted(set(deps)):
                parts.append((f"stage[{si}].deps[{d}]",
                              pstr(d.encode()) + sha(self.dep_content(d, cfg))))
        return parts

    def _input_part(self, pi, i, cfg):
        p = self.pipelines[pi]
        path, data = p.inputs[i][0], self.input_content(p, i, cfg)
        if p.identity == "stat":
            b = (pstr(b"stat") + pstr(path.encode()) + u64(len(data))
                 + u64(self.input_mtime(pi, i, cfg.inputs[i])))
        else:
            b = pstr(b"content") + pstr(path.encode()) + sha(data)
        return (f"input[{path}]", b)

    def shard_fingerprint(self, pi, cfg, k):
        """Shard k's own fingerprint (docs/spec.md, "The shard
        fingerprint"): the stages, its index and its own inputs."""
        p = self.pipelines[pi]
        n = p.shards(cfg)
        parts = ([("shard-scheme", u64(1))] + self._stage_parts(p, cfg)
                 + [("shard", u64(k))]
                 + [self._input_part(pi, i, cfg) for i in range(len(cfg.inputs))
                    if i % n == k])
        acc = b"".join(pstr(label.encode()) + sha(b) for label, b in parts)
        return hashlib.sha256(acc).hexdigest()

    def sfp(self, fp, k):
        pi, cfg = self.fp_info[fp]
        return self.shard_fingerprint(pi, cfg, k)

    def current_fp(self, pi):
        cfg = self.configs[pi]
        fp = self.fingerprint(pi, cfg)
        self.fp_info.setdefault(fp, (pi, Config(cfg.spec, cfg.deps, cfg.inputs)))
        return fp

    # -- the oracle --

    def expected(self, fp, k):
        """The bytes of shard k of fp, from the stages' definitions."""
        if (fp, k) not in self._bytes:
            pi, cfg = self.fp_info[fp]
            p = self.pipelines[pi]
            n = p.shards(cfg)
            data = b"".join(self.input_content(p, i, cfg)
                            for i in range(len(cfg.inputs)) if i % n == k)
            self._bytes[(fp, k)] = p.run(self, cfg, k, data)
        return self._bytes[(fp, k)]

    def records(self, fp, k):
        """The record count of shard k of fp, or None without records."""
        pi, cfg = self.fp_info[fp]
        rec = self.pipelines[pi].spec_variants[cfg.spec].get("records")
        if not rec:
            return None
        data = self.expected(fp, k)
        if rec[0] == "fixed":
            return len(data) // rec[1]
        return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)

    def batch(self, fp, shuffled, seed, epoch, b, w, r, g, k):
        """The bytes of batch k of the view rank r of w from global batch g
        (batches of b records) of fp, from the oracle's shards and the
        batch order as tests/order/order_ref.py reimplements it; None past
        the epoch's whole rounds, or for a framing batches do not serve
        here."""
        pi, cfg = self.fp_info[fp]
        v = self.pipelines[pi].spec_variants[cfg.spec]
        rec = v.get("records")
        if not rec or rec[0] not in BATCH_FRAMINGS:
            return None
        n = self.nshards(fp)
        datas = [self.expected(fp, s) for s in range(n)]
        if rec[0] == "fixed":
            size = rec[1]
            recs = [[d[i * size:(i + 1) * size] for i in range(len(d) // size)]
                    for d in datas]
            nbytes = [len(x) * size for x in recs]
        else:  # lines: each keeps or gains its newline
            recs = [[ln + b"\n" for ln in d.split(b"\n")[:-1]] +
                    ([d.rsplit(b"\n", 1)[-1] + b"\n"] if d and not d.endswith(b"\n") else [])
                    for d in datas]
            nbytes = [len(d) for d in datas]
        _, _, windows = order_ref.order(bytes.fromhex(fp), shuffled, seed, epoch,
                                        v.get("window", 256 << 20),
                                        [len(x) for x in recs], nbytes)
        seq = [e for _, _, _, q in windows for e in q]
        if (g + (k + 1) * w) * b > len(seq):
            return None
        first = (g + r + k * w) * b
        return b"".join(recs[s][i] for s, i in seq[first:first + b])

    def nshards(self, fp):
        pi, cfg = self.fp_info[fp]
        return self.pipelines[pi].shards(cfg)

    def shard_name(self, fp, k):
        pi, _ = self.fp_info[fp]
        return "shard-%05d%s" % (k, self.pipelines[pi].suffix)

    # -- writing files (each by rename, so no reader sees half of one) --

    def _put(self, path, data, mtime_ns=None):
        tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        if mtime_ns is not None:
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.rename(tmp, path)

    def write_all(self, root):
        os.makedirs(os.path.join(root, "in"), exist_ok=True)
        os.makedirs(os.path.join(root, "runs"), exist_ok=True)
        self._put(os.path.join(root, "gen.py"), GEN_PY)
        for pi in range(len(self.pipelines)):
            self.write_inputs(root, pi)
            self.write_deps(root, pi)
            self.write_spec(root, pi)

    def write_spec(self, root, pi):
        p = self.pipelines[pi]
        self._put(os.path.join(root, p.name + ".yaml"),
                  p.spec_text(self.configs[pi].spec, self.options))

    def write_deps(self, root, pi):
        for d in self.deps_of(self.pipelines[pi]):
            if d in self.dep_names:
                self._put(os.path.join(root, d), self.dep_content(d, self.configs[pi]))

    def write_inputs(self, root, pi):
        """Every input of the configuration (by rename), and none of the
        appendable ones it has not."""
        p, cfg = self.pipelines[pi], self.configs[pi]
        for i, (path, _) in enumerate(p.inputs):
            if i < len(cfg.inputs):
                self._put(os.path.join(root, path), self.input_content(p, i, cfg),
                          self.input_mtime(pi, i, cfg.inputs[i]))
            else:
                try:
                    os.unlink(os.path.join(root, path))
                except FileNotFoundError:
                    pass

    def write_input(self, root, pi, i):
        """Input i alone (by rename), or its removal when the
        configuration has fewer inputs."""
        p, cfg = self.pipelines[pi], self.configs[pi]
        path = os.path.join(root, p.inputs[i][0])
        if i < len(cfg.inputs):
            self._put(path, self.input_content(p, i, cfg),
                      self.input_mtime(pi, i, cfg.inputs[i]))
        else:
            os.unlink(path)

    def write_input_in_place(self, root, pi, i, old_v):
        """Input i of the configuration written over the file that holds
        variant old_v: same inode, the bytes overwritten, then truncated
        and its mtime set. With content identity the mtime is left as it
        was (the contract notices a rewrite that keeps size and mtime by
        the bytes alone); with stat identity it is the variant's."""
        p, cfg = self.pipelines[pi], self.configs[pi]
        path = os.path.join(root, p.inputs[i][0])
        data = self.input_content(p, i, cfg)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
        v = cfg.inputs[i] if p.identity == "stat" else old_v
        t = self.input_mtime(pi, i, v)
        os.utime(path, ns=(t, t))
