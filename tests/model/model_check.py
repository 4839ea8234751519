"""model_check.py - what the model test knows and how it checks a read.

The model's state (which fingerprint each pipeline yields since when,
which fingerprints were ever seen, the held descriptors) and the checks
every operation shares: a whole read compared with the oracle, a name
that must follow its spec, a descriptor held across later operations and
checked when released. A violation is recorded with the number of the
operation it happened in; an allowed errno is counted by class.

Not for: choosing or running operations (model_ops.py).
"""
import errno
import mmap
import os
import threading
import time

from model_rig import RigError

GRACE = 1.5  # "within about a second" of a spec, deps or input change
IO_TIMEOUT = 90  # an open or read longer than this is a hang
NAME_LATE = 5  # seconds past GRACE before a name that has not moved is stale
NSLOTS = 4  # held descriptors at once


def ename(e):
    return errno.errorcode.get(e, str(e))


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(i + 4096, n)):
                if a[j] != b[j]:
                    return j
    return n


def io_call(fn, timeout=IO_TIMEOUT):
    """Runs fn in a thread; returns (value, OSError or None, hung)."""
    box = {}

    def run():
        try:
            box["v"] = fn()
        except OSError as e:
            box["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return None, None, True
    return box.get("v"), box.get("e"), False


def read_whole(path):
    """(fstat size after open, bytes); raises OSError with .phase set."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        e.phase = "open"
        raise
    try:
        size = os.fstat(fd).st_size
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return size, b"".join(chunks)
    except OSError as e:
        e.phase = "read"
        raise
    finally:
        os.close(fd)


class Held:
    """A descriptor opened, read in part and kept open."""

    def __init__(self, fd, path, d, cands, k, prefix, op):
        self.fd, self.path, self.d, self.cands, self.k = fd, path, d, cands, k
        self.prefix, self.op = prefix, op


class Checks:
    """The model's state and shared checks; model_ops.Model adds the
    operations."""

    def __init__(self, world, rig, disabled):
        self.w, self.rig, self.disabled = world, rig, disabled
        self.d = rig.daemons
        self.history = []  # per pipeline: [(monotonic time, fp)]
        self.seen = []  # per pipeline: distinct fps in order of appearance
        self.slots = [None] * NSLOTS
        self.lost = set()  # daemons that lived through an online catalog loss
        self.stale = set()  # (daemon, pipeline, change) whose name was found stale
        self.stale_to = {}  # (daemon, pipeline) -> the targets it was found stale at
        self.lock = threading.Lock()
        self.stats = {"ops": 0, "reads": 0, "descriptors": 0, "late_names": 0,
                      "window_kills": 0, "records": 0,
                      "batches": 0, "stage_runs": 0, "reused": 0,
                      "reuse_strict": 0}
        self.errors = {}  # "context errno" -> count
        self.violations = []  # (op number, kind, message)
        self.log = []  # op log lines
        self.op_no = 0

    # -- bookkeeping --

    def note(self, text):
        self.log.append(f"{self.op_no:4d} {text}" if not text.startswith(" ") else
                        f"     {text}")

    def violation(self, kind, msg):
        with self.lock:
            self.violations.append((self.op_no, kind, msg))
            self.log.append(f"     !! VIOLATION [{kind}] {msg}")

    def distinct(self):
        """The violations, one per operation and kind: [(op, kind, first
        message, how many)]."""
        out = {}
        for n, kind, msg in self.violations:
            if (n, kind) in out:
                out[(n, kind)][3] += 1
            else:
                out[(n, kind)] = [n, kind, msg, 1]
        return list(out.values())

    def allowed(self, ctx, err):
        """Counts an allowed error: an errno, or a word saying what."""
        with self.lock:
            key = f"{ctx} {ename(err) if isinstance(err, int) else err}"
            self.errors[key] = self.errors.get(key, 0) + 1

    def count(self, key, n=1):
        with self.lock:
            self.stats[key] += n

    def short(self, fp):
        return fp[:12] if fp else "?"

    # -- what the specs yield, and since when --

    def changed(self, pi):
        fp = self.w.current_fp(pi)
        self.history[pi].append((time.monotonic(), fp))
        if fp not in self.seen[pi]:
            self.seen[pi].append(fp)
        return fp

    def settled(self, pi, t):
        return self.history[pi][-1][0] <= t - GRACE

    def name_fps(self, pi, t):
        """The fps the name may point at for an open at time t."""
        out = set()
        for when, fp in reversed(self.history[pi]):
            out.add(fp)
            if when <= t - GRACE:
                break
        return out

    def yielded(self, fp, t):
        """fp is yielded by a spec, has been for GRACE at time t, and every
        running daemon's name points at it (a stale name is reported once,
        as name-stale, not again as each error it causes)."""
        pi = self.w.fp_info[fp][0]
        if self.history[pi][-1][1] != fp or not self.settled(pi, t):
            return False
        return all(self.wait_name(d, pi, t) == fp for d in self.d if d.proc is not None)

    def served(self, fp, t):
        """fp is yielded (above) and a running daemon serves it: it holds
        fp in the catalog, so no other process's expiry drops its row. A
        daemon that lived through an online catalog loss (until it is
        remounted) does not count: until its next heartbeat notices the
        new catalog.db, that catalog has none of its holds."""
        return self.yielded(fp, t) and any(d.proc is not None and d not in self.lost
                                           for d in self.d)

    def settle(self, pi):
        wait = self.history[pi][-1][0] + GRACE - time.monotonic()
        if wait > 0:
            time.sleep(wait + 0.05)

    # -- choosing what an op acts on, from its integers --

    def pick_fp(self, pi, r):
        if r % 2 == 0:
            return self.history[pi][-1][1]
        return self.seen[pi][(r // 2) % len(self.seen[pi])]

    def pick_d(self, r):
        return self.d[r % len(self.d)]

    def shard_path(self, d, via_name, pi, fp, k):
        top = self.w.pipelines[pi].name if via_name else fp
        return os.path.join(d.mnt, top, self.w.shard_name(fp, k))

    # -- the read check --

    def judge(self, what, size, data, cands, k):
        """Compares a successful read with the oracle of every candidate
        fingerprint; returns the one it matched, else records why not."""
        for fp in cands:
            want = self.w.expected(fp, k)
            if data == want:
                if size != len(want):
                    self.violation("fstat-size", f"{what}: fstat after open says {size}, "
                                   f"the shard has {len(want)} bytes")
                self.count("reads")
                return fp
        wants = {self.short(fp): len(self.w.expected(fp, k)) for fp in cands}
        if not data:
            self.violation("empty-read", f"{what}: open and read succeeded with 0 bytes "
                           f"(fstat {size}); want {wants}")
        else:
            diffs = {self.short(fp): first_diff(data, self.w.expected(fp, k)) for fp in cands}
            # whose bytes they are, if another known fingerprint's
            other = [self.short(f) for f in self.w.fp_info
                     if f not in cands and k < self.w.nshards(f) and
                     self.w.expected(f, k) == data]
            self.violation("wrong-bytes", f"{what}: {len(data)} bytes (fstat {size}) match "
                           f"no candidate; want sizes {wants}, first difference at {diffs}; "
                           f"the bytes of {other or 'no known fingerprint'}")
        return None

    def read_check(self, what, path, cands, k, allow, ctx):
        """Reads path whole; cands: the fingerprints it may come from (or a
        function that says so once the read is done); allow: errnos the
        contract permits here."""
        v, e, hung = io_call(lambda: read_whole(path))
        if hung:
            self.violation("hang", f"{what}: no answer in {IO_TIMEOUT} s")
            raise RigError("a read hung")
        if callable(cands):
            cands = cands()
        if e is not None:
            if e.errno in allow:
                self.allowed(ctx, e.errno)
                return f"{ename(e.errno)} (allowed)"
            self.violation(f"errno-{ctx}", f"{what}: {getattr(e, 'phase', '')} failed "
                           f"with {ename(e.errno)} ({e.strerror})")
            return f"{ename(e.errno)} VIOLATION"
        fp = self.judge(what, v[0], v[1], cands, k)
        if fp:
            self.records_check(what, path, fp, k, cands)
        return f"ok {len(v[1])} B from {self.short(fp)}" if fp else "BAD BYTES"

    def records_check(self, what, path, fp, k, cands=()):
        """A shard read whole: its user.matfs.records, once it is there
        (after the commit; a shard is served sealed before), is the
        oracle's count of its records. Through a name that may point at
        any of cands (a spec edited meanwhile), the getxattr after the read
        resolves the name again: any candidate's count is right then."""
        want = self.w.records(fp, k)
        try:
            got = int(os.getxattr(path, "user.matfs.records"))
        except OSError:
            return  # not committed yet, or gone since: nothing to say
        others = {self.w.records(c, k) for c in cands if c != fp}
        if got in others:
            self.count("records")
        elif want is None or got != want:
            self.violation("records-count", f"{what}: user.matfs.records {got}, "
                           f"the oracle counts {want}")
        else:
            self.count("records")

    def lenient(self, d):
        return {errno.EIO, errno.ENOENT, errno.ESTALE} if d in self.lost else set()

    def wait_name(self, d, pi, t):
        """readlink of the name; when the spec changed more than GRACE ago
        and the name still points elsewhere, waits up to NAME_LATE more
        seconds: a name that moves late is counted, one that never moves is
        a violation (not through a daemon whose catalog was deleted under
        it). Returns the target (an errno name when unreadable)."""
        name = self.w.pipelines[pi].name
        cur = self.history[pi][-1][1]
        key = (d.label, pi, len(self.history[pi]))  # one wait per change
        end = time.monotonic() + (0 if key in self.stale else NAME_LATE)
        waited = False
        while True:
            link = self.readlink(d, pi)
            if not self.settled(pi, t) or link == cur:
                break
            if time.monotonic() >= end or d in self.lost:
                with self.lock:  # reads after a catalog loss run in threads
                    self.stale_to.setdefault(key[:2], set()).add(link)
                    report = key not in self.stale and d not in self.lost
                    self.stale.add(key)
                if report:
                    self.violation("name-stale", f"{d.label}:{name} -> {self.short(link)} "
                                   f"{time.monotonic() - self.history[pi][-1][0]:.1f} s "
                                   f"after the change; want {self.short(cur)}")
                return link
            waited = True
            time.sleep(0.1)
        if waited:
            self.count("late_names")
            late = time.monotonic() - self.history[pi][-1][0]
            self.note(f"  {d.label}:{name} moved {late:.1f} s after the change "
                      "(late, not a violation)")
        return link

    def name_view(self, d, pi, t):
        """(fingerprints a read through d's name may give, whether errors
        are violations, where the name points): a stale name, once
        reported, adds its target and leaves its errors to that report."""
        cands = self.name_fps(pi, t)
        strict = self.settled(pi, t)
        link = self.wait_name(d, pi, t)
        if (strict and link != self.history[pi][-1][1]) or \
                link in self.stale_to.get((d.label, pi), ()):
            cands = cands | ({link} if link in self.w.fp_info else set())
            strict = False
        return cands, strict, link

    def readlink(self, d, pi):
        try:
            return os.readlink(os.path.join(d.mnt, self.w.pipelines[pi].name))
        except OSError as e:
            return ename(e.errno)

    def read_name(self, d, pi, r, settle=False):
        if settle:
            self.settle(pi)
        name = self.w.pipelines[pi].name
        t = time.monotonic()
        cur = self.history[pi][-1][1]
        k = r % self.w.nshards(cur)
        cands, strict, before = self.name_view(d, pi, t)
        allow = set() if strict else {errno.ENOENT, errno.ESTALE}
        cands = {fp for fp in cands if k < self.w.nshards(fp)}

        def narrowed():
            # the same target before and after the read says it pointed
            # there throughout only once the name has settled: before, a
            # daemon may move it away and back while the read runs (an
            # edit and its revert seen late), and the read then gives the
            # other fingerprint's bytes, rightly
            after = self.readlink(d, pi)
            return {after} if strict and after == before and after in cands else cands
        what = f"read {d.label}:{name}/{self.w.shard_name(cur, k)}"
        res = self.read_check(what, self.shard_path(d, True, pi, cur, k), narrowed, k,
                              allow | self.lenient(d), "name")
        self.note(f"  {what} (-> {self.short(before)}){' settled' if settle else ''}: {res}")
        return res

    def read_pinned(self, d, fp, k):
        pi = self.w.fp_info[fp][0]
        k %= self.w.nshards(fp)
        t = time.monotonic()
        y = self.yielded(fp, t)
        allow = set() if y else {errno.ENOENT, errno.ESTALE}
        what = f"read {d.label}:{self.short(fp)}/{self.w.shard_name(fp, k)}"
        res = self.read_check(what, self.shard_path(d, False, pi, fp, k), {fp}, k,
                              allow | self.lenient(d), "pinned" if y else "pinned-unyielded")
        self.note(f"  {what}{'' if y else ' (not yielded)'} -> {res}")
        return res

    def read_batch(self, d, fp, view, k):
        """A batch of fp's tree read whole by its path: the records the
        order places there, in their framing, or ENOENT past the epoch's
        whole rounds."""
        shuffled, seed, epoch, b, w, r, g = view
        want = self.w.batch(fp, shuffled, seed, epoch, b, w, r, g, k)
        rank = f"rank-{r}-of-{w}" + (f"-from-{g}" if g else "")
        rel = os.path.join("batches", str(b), f"seed-{seed}" if shuffled else "seed-none",
                           f"epoch-{epoch}", rank, "batch-%06d" % k)
        what = f"batch {d.label}:{self.short(fp)}/{rel}"
        y = self.yielded(fp, time.monotonic())
        allow = set() if y else {errno.ENOENT, errno.ESTALE}
        if want is None:
            allow |= {errno.ENOENT, errno.EOPNOTSUPP}
        allow |= self.lenient(d)
        v, e, hung = io_call(lambda: read_whole(os.path.join(d.mnt, fp, rel)))
        if hung:
            self.violation("hang", f"{what}: no answer in {IO_TIMEOUT} s")
            raise RigError("a read hung")
        if e is not None:
            ok = e.errno in allow
            if ok:
                self.allowed("batch", e.errno)
            else:
                self.violation("errno-batch", f"{what}: {getattr(e, 'phase', '')} "
                               f"failed with {ename(e.errno)} ({e.strerror})")
            res = f"{ename(e.errno)}{' (allowed)' if ok else ' VIOLATION'}"
        elif want is None:
            self.violation("batch-past-end", f"{what}: {len(v[1])} bytes read, the "
                           "oracle's epoch has no such batch (or it is not served)")
            res = "VIOLATION"
        elif v[1] != want or v[0] != len(want):
            self.violation("batch-bytes", f"{what}: {len(v[1])} bytes (fstat {v[0]}), "
                           f"want {len(want)}, first difference at "
                           f"{first_diff(v[1], want)}")
            res = "BAD BYTES"
        else:
            self.count("batches")
            res = f"ok {len(want)} B"
        self.note(f"  {what} -> {res}")
        return res

    # -- held descriptors --

    def hold(self, slot, d, via_name, pi, fp, k, frac):
        self.release(slot)
        t = time.monotonic()
        if via_name:
            cands, strict, before = self.name_view(d, pi, t)
            fp = self.history[pi][-1][1]
            allow = set() if strict else {errno.ENOENT, errno.ESTALE}
        else:
            cands = {fp}
            allow = set() if self.yielded(fp, t) else {errno.ENOENT, errno.ESTALE}
        k %= self.w.nshards(fp)
        cands = {c for c in cands if k < self.w.nshards(c)}
        path = self.shard_path(d, via_name, pi, fp, k)
        what = f"hold[{slot}] {os.path.relpath(path, self.rig.tmp)}"

        def opener():
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                n = max(1, int(size * frac))
                buf = b""
                while len(buf) < n:
                    b = os.read(fd, n - len(buf))
                    if not b:
                        break
                    buf += b
                return fd, size, buf
            except OSError:
                os.close(fd)
                raise
        v, e, hung = io_call(opener)
        if hung:
            self.violation("hang", f"{what}: no answer in {IO_TIMEOUT} s")
            raise RigError("an open hung")
        if e is not None:
            if e.errno in allow | self.lenient(d):
                self.allowed("hold", e.errno)
                self.note(f"  {what} -> {ename(e.errno)} (allowed)")
            else:
                self.violation("errno-hold", f"{what}: {ename(e.errno)} ({e.strerror})")
            return
        fd, size, buf = v
        if via_name and self.readlink(d, pi) == before and before in cands:
            cands = {before}  # the name pointed at one fingerprint throughout
        ok = {c for c in cands if len(self.w.expected(c, k)) == size
              and self.w.expected(c, k).startswith(buf)}
        if not ok:
            os.close(fd)
            kind = "empty-read" if size == 0 or not buf else "wrong-bytes"
            self.violation(kind, f"{what}: fstat {size} and the first {len(buf)} bytes "
                           f"match no candidate ({[self.short(c) for c in cands]})")
            return
        self.slots[slot] = Held(fd, path, d, ok, k, buf, self.op_no)
        self.note(f"  {what} -> open, {len(buf)} of {size} B read, "
                  f"from {'/'.join(self.short(c) for c in ok)}")

    def release(self, slot):
        h = self.slots[slot]
        if h is None:
            return
        self.slots[slot] = None
        what = (f"held[{slot}] (opened at op {h.op}) "
                f"{os.path.relpath(h.path, self.rig.tmp)}")

        def check():
            size = os.fstat(h.fd).st_size
            rest = b""
            while True:
                b = os.read(h.fd, 1 << 20)
                if not b:
                    break
                rest += b
            whole = b""
            while True:
                b = os.pread(h.fd, 1 << 20, len(whole))
                if not b:
                    break
                whole += b
            mapped = None
            if size > 0:
                with mmap.mmap(h.fd, size, prot=mmap.PROT_READ) as m:
                    mapped = m[:]
            return size, rest, whole, mapped
        v, e, hung = io_call(check)
        if hung:
            self.violation("hang", f"{what}: no answer in {IO_TIMEOUT} s")
            raise RigError("a held descriptor hung")
        os.close(h.fd)
        self.count("descriptors")
        if e is not None:
            self.violation("held-descriptor", f"{what}: {ename(e.errno)} ({e.strerror}) "
                           "on fstat/read/mmap")
            self.note(f"  release {what} -> {ename(e.errno)} VIOLATION")
            return
        size, rest, whole, mapped = v
        problems = []
        for fp in h.cands:
            want = self.w.expected(fp, h.k)
            p = []
            if size != len(want):
                p.append(f"fstat {size} != {len(want)}")
            if h.prefix + rest != want:
                p.append(f"read to the end gives {len(h.prefix) + len(rest)} B, "
                         f"first difference at {first_diff(h.prefix + rest, want)}")
            if whole != want:
                p.append(f"pread from 0 gives {len(whole)} B")
            if mapped is not None and mapped != want:
                p.append(f"mmap differs at {first_diff(mapped, want)}")
            if not p:
                self.note(f"  release {what} -> ok ({len(want)} B)")
                return
            problems.append(f"{self.short(fp)}: {'; '.join(p)}")
        self.violation("held-descriptor", f"{what}: {' | '.join(problems)}")
        self.note(f"  release {what} -> VIOLATION")

    def drop_fds(self):
        """Closes every held descriptor unchecked (the run is ending early)."""
        for s, h in enumerate(self.slots):
            if h is not None:
                self.slots[s] = None
                os.close(h.fd)

    def release_on(self, d):
        for s, h in enumerate(self.slots):
            if h is not None and h.d is d:
                self.release(s)

    # -- one operation --
