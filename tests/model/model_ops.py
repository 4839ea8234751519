"""model_ops.py - the model test's operations.

The operation sequence is drawn from the seed alone, before anything runs
(gen_ops): every operation is a kind and eight random integers that it
interprets against the model's state when it runs. So a seed always gives
the same operations, --ops K replays a prefix of them, and outcomes (an
open that failed, a daemon that died) never shift what comes next.

Every byte read through the mount or matctl is compared with the oracle
(model_world.py) for the fingerprint it came from (model_check.py); every
errno is either allowed where the contract allows it (counted by class)
or a violation. finish() checks the store at the end of a seed.

Not for: starting processes (model_rig.py) or the command line (model.py).
"""
import errno
import glob
import json
import os
import random
import re
import shutil
import subprocess
import threading
import time

from model_check import (GRACE, IO_TIMEOUT, NAME_LATE, NSLOTS, Checks, ename, io_call,
                         read_whole)
from model_rig import RigError

# kind -> (weight, the --no-FLAG that disables it)
OPS = {
    "read_name": (16, None),
    "read_pinned": (11, None),
    "read_batch": (6, None),
    "list": (5, None),
    "hold": (7, "holds"),
    "release": (3, "holds"),
    "spec_edit": (6, "spec-edits"),
    "deps_edit": (4, "deps-edits"),
    "input_edit": (3, "input-edits"),
    "rm_shard": (4, "rm"),
    "rm_dir": (3, "rm"),
    "matctl_rm": (4, "matctl-rm"),
    "matctl_expire": (2, "expire"),
    "matctl_gc": (2, "gc"),
    "matctl_cat": (3, "matctl-cat"),
    "cycle": (4, None),
    "race": (4, "race"),
    "remount": (2, "remount"),
    "kill": (1.5, "kill"),
    "wait": (1.5, None),
    "catalog_loss": (0.6, "catalog-loss"),
    "grow": (2, "grow"),
    "inplace_edit": (1.5, "inplace-edits"),
    "records_edit": (1.5, "records-edits"),
}
# --no-FLAG: what each leaves out (in every operation that would do it)
FLAGS = {
    "spec-edits": "spec edits (an argv word, shards, keep, expire_after, codec)",
    "deps-edits": "edits of deps files",
    "input-edits": "edits of input files",
    "rm": "rm of a shard and rm -r of a snapshot through the mount",
    "matctl-rm": "matctl rm",
    "expire": "matctl expire",
    "gc": "matctl gc",
    "matctl-cat": "matctl cat",
    "holds": "descriptors held across operations",
    "race": "concurrent readers of one shard with a disruption",
    "remount": "clean remounts",
    "kill": "kill -9 of a daemon",
    "catalog-loss": "deleting catalog.db, mounted and with the daemons stopped",
    "keep": "keep: in specs",
    "expire-after": "expire_after: in specs",
    "second-daemon": "the second daemon (one mount only)",
    "grow": "appending an input file to a pipeline (and removing it again)",
    "inplace-edits": "rewriting an input file in place (same inode)",
    "records-edits": "edits of a spec's records and shuffle_window alone",
}


def gen_ops(seed, n, disabled, only=None):
    """The first n operations of a seed: [(kind, [8 ints])], of the kinds
    in only (default: all) whose flag is not disabled."""
    rng = random.Random(seed)
    kinds = [k for k, (w, f) in OPS.items()
             if f not in disabled and (not only or k in only)]
    weights = [OPS[k][0] for k in kinds]
    return [(rng.choices(kinds, weights)[0],
             [rng.randrange(1 << 30) for _ in range(8)]) for _ in range(n)]


class Model(Checks):
    diverged = False  # a catalog was deleted under the daemons, not rebuilt since

    def start(self):
        self.w.write_all(self.rig.pipes)
        now = time.monotonic()
        for pi in range(len(self.w.pipelines)):
            fp = self.w.current_fp(pi)
            self.history.append([(now - 2 * GRACE, fp)])
            self.seen.append([fp])
        for pi, p in enumerate(self.w.pipelines):  # the oracle's own check
            st, out, err = self.rig.matctl("fingerprint", os.path.join(
                self.rig.pipes, p.name + ".yaml"))
            if st != 0 or out.decode().strip() != self.history[pi][-1][1]:
                raise RigError(f"the test's fingerprint of '{p.name}' is "
                               f"{self.history[pi][-1][1]}, matctl says {out!r} {err}")
            fp = self.history[pi][-1][1]
            st, out, err = self.rig.matctl("fingerprint", "--explain", os.path.join(
                self.rig.pipes, p.name + ".yaml"))
            want = [self.w.sfp(fp, k) for k in range(self.w.nshards(fp))]
            got = re.findall(r"^  ([0-9a-f]{64})  shard\[\d+\]$", out.decode(), re.M)
            if st != 0 or got != want:
                raise RigError(f"the test's shard fingerprints of '{p.name}' are "
                               f"{want}, matctl says {got} {err}")
        for d in self.d:
            d.start()

    def run_op(self, kind, r):
        self.op_no += 1
        self.count("ops")
        getattr(self, "op_" + kind)(r)
        for d in self.d:
            if d.proc is not None and d.proc.poll() is not None:
                self.violation("daemon-died", f"matfs {d.label} exited "
                               f"{d.proc.returncode}:\n{d.log_tail()}")
                d.proc = None
                d.kill()
                self.release_on(d)
                self.lost.discard(d)
                d.start()

    def op_read_name(self, r):
        d, pi = self.pick_d(r[0]), r[1] % 3
        self.note(f"read_name {d.label} {self.w.pipelines[pi].name}")
        self.read_name(d, pi, r[2], settle=r[6] % 4 == 0)

    def op_read_pinned(self, r):
        d, pi = self.pick_d(r[0]), r[1] % 3
        fp = self.pick_fp(pi, r[3])
        self.note(f"read_pinned {d.label} {self.w.pipelines[pi].name}@{self.short(fp)}")
        self.read_pinned(d, fp, r[2])

    def op_read_batch(self, r):
        """A batch of a pinned fingerprint with records, any view."""
        d, pi = self.pick_d(r[0]), r[1] % 3
        fp = self.pick_fp(pi, r[3])
        w = 1 + r[7] % 3
        view = (r[5] % 4 != 0, r[5] % 3, r[6] % 3, (1, 2, 5)[r[4] % 3], w,
                r[2] % w, (r[2] >> 4) % 4 if r[2] % 2 else 0)
        self.note(f"read_batch {d.label} {self.w.pipelines[pi].name}@{self.short(fp)}")
        self.read_batch(d, fp, view, (r[2] >> 8) % 6)

    def op_list(self, r):
        d, pi = self.pick_d(r[0]), r[1] % 3
        which = r[6] % 3
        t = time.monotonic()
        if which == 0:
            self.note(f"list {d.label}:/")
            self.list_root(d, t)
            return
        name = self.w.pipelines[pi].name
        if which == 1:
            fp = None
            cands, strict, _ = self.name_view(d, pi, t)
            top = name
        else:
            fp = self.pick_fp(pi, r[3])
            cands, strict, top = {fp}, self.yielded(fp, t), fp
        self.note(f"list {d.label}:{name if fp is None else self.short(fp)}")

        def lister():
            return {n: os.lstat(os.path.join(d.mnt, top, n)).st_size
                    for n in os.listdir(os.path.join(d.mnt, top))}
        v, e, hung = io_call(lister)
        if hung:
            self.violation("hang", f"ls -l {d.label}:{top}: no answer")
            raise RigError("a listing hung")
        if e is not None:
            if strict and d not in self.lost:
                self.violation("errno-list", f"ls -l {d.label}:{top}: {ename(e.errno)}")
            else:
                self.allowed("list", e.errno)
            return
        for c in cands:
            names = {self.w.shard_name(c, k): k for k in range(self.w.nshards(c))}
            if set(v) == set(names) and all(
                    v[n] in (0, len(self.w.expected(c, names[n]))) for n in v):
                self.note(f"  {len(v)} shards, sizes {sorted(v.values())} ok")
                return
        self.violation("listing", f"ls -l {d.label}:{top}: {v} fits no candidate "
                       f"{[self.short(c) for c in cands]} (sizes must be 0 or exact)")

    def list_root(self, d, t):
        def lister():
            out = {}
            for n in os.listdir(d.mnt):
                p = os.path.join(d.mnt, n)
                out[n] = os.readlink(p) if os.path.islink(p) else None
            return out
        v, e, hung = io_call(lister)
        if hung:
            self.violation("hang", f"ls {d.label}:/: no answer")
            raise RigError("a listing hung")
        if e is not None:
            if d in self.lost:
                self.allowed("list", e.errno)
            else:
                self.violation("errno-list", f"ls {d.label}:/: {ename(e.errno)}")
            return
        for pi, p in enumerate(self.w.pipelines):
            cur = self.history[pi][-1][1]
            # (a stale name is reported on its own, by yielded)
            if self.yielded(cur, t) and cur not in v and d not in self.lost:
                self.violation("listing", f"ls {d.label}:/: the current fingerprint "
                               f"{self.short(cur)} of {p.name} is not listed")
        for n, target in v.items():
            if target is None and n not in self.w.fp_info and n not in self.w.transient:
                self.violation("listing", f"ls {d.label}:/: unknown entry {n!r}")
        self.note(f"  {len(v)} entries ok")

    def op_hold(self, r):
        d, pi = self.pick_d(r[0]), r[1] % 3
        via_name = r[7] % 3 == 0
        fp = self.pick_fp(pi, r[3])
        frac = 0.05 + (r[6] % 85) / 100
        self.note(f"hold slot {r[4] % NSLOTS} {d.label} "
                  f"{self.w.pipelines[pi].name if via_name else self.short(fp)}")
        self.hold(r[4] % NSLOTS, d, via_name, pi, fp, r[2], frac)

    def op_release(self, r):
        s = r[4] % NSLOTS
        self.note(f"release slot {s}{'' if self.slots[s] else ' (empty)'}")
        self.release(s)

    def op_spec_edit(self, r):
        pi = r[1] % 3
        p = self.w.pipelines[pi]
        v = r[5] % len(p.spec_variants)
        self.w.configs[pi].spec = v
        self.w.write_spec(self.rig.pipes, pi)
        fp = self.changed(pi)
        self.note(f"spec_edit {p.name} -> variant {v}, fp {self.short(fp)}")

    def op_deps_edit(self, r):
        name = self.w.dep_names[r[1] % len(self.w.dep_names)]
        pi, variants = self.w.dep_files[name]
        p = self.w.pipelines[pi]
        v = r[5] % len(variants)
        deps = list(self.w.configs[pi].deps)
        deps[self.w.deps_of(p).index(name)] = v
        self.w.configs[pi].deps = tuple(deps)
        self.w.write_deps(self.rig.pipes, pi)
        fp = self.changed(pi)
        self.note(f"deps_edit {name} -> variant {v}: {p.name} fp {self.short(fp)}")

    def op_input_edit(self, r):
        pi = r[1] % 3
        p = self.w.pipelines[pi]
        i = r[2] % len(self.w.configs[pi].inputs)
        v = r[5] % len(p.inputs[i][1])
        ins = list(self.w.configs[pi].inputs)
        ins[i] = v
        self.w.configs[pi].inputs = tuple(ins)
        self.w.write_inputs(self.rig.pipes, pi)
        fp = self.changed(pi)
        self.note(f"input_edit {p.inputs[i][0]} -> variant {v}: {p.name} fp {self.short(fp)}")

    def rm_shard(self, d, via_name, pi, fp, k):
        if via_name:
            fp = self.history[pi][-1][1]
        k %= self.w.nshards(fp)
        path = self.shard_path(d, via_name, pi, fp, k)
        what = f"rm {os.path.relpath(path, self.rig.tmp)}"
        _, e, hung = io_call(lambda: os.unlink(path))
        if hung:
            self.violation("hang", f"{what}: no answer")
            raise RigError("rm hung")
        if e is None:
            self.note(f"  {what} -> ok")
        elif e.errno in (errno.ENOENT, errno.EBUSY):
            # EBUSY: the shard is being computed (a race's reader)
            self.allowed("rm", e.errno)
            self.note(f"  {what} -> {ename(e.errno)} (allowed)")
        else:
            self.violation("errno-rm", f"{what}: {ename(e.errno)} ({e.strerror})")

    def op_rm_shard(self, r):
        d, pi = self.pick_d(r[0]), r[1] % 3
        self.note("rm_shard")
        self.rm_shard(d, r[7] % 2 == 0, pi, self.pick_fp(pi, r[3]), r[2])

    def rm_dir(self, d, fp):
        path = os.path.join(d.mnt, fp)
        t = time.monotonic()
        try:
            res = subprocess.run(["rm", "-r", path], stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True, timeout=IO_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.violation("hang", f"rm -r {d.label}:{self.short(fp)}: no answer")
            raise RigError("rm -r hung")
        err = res.stderr.strip()
        y = self.yielded(fp, t)
        if res.returncode == 0:
            self.note(f"  rm -r {d.label}:{self.short(fp)} -> ok")
        elif "No such file or directory" in err and not y:
            self.allowed("rm-r", errno.ENOENT)
            self.note(f"  rm -r {d.label}:{self.short(fp)} -> ENOENT (allowed)")
        elif all("Device or resource busy" in l for l in err.splitlines()):
            # a shard of it is being computed: rm refuses that one
            self.allowed("rm-r", errno.EBUSY)
            self.note(f"  rm -r {d.label}:{self.short(fp)} -> EBUSY (allowed)")
        else:
            self.violation("errno-rm", f"rm -r {d.label}:{self.short(fp)}: {err}")
        if y and d not in self.lost and not os.path.isdir(path):
            self.violation("listing", f"after rm -r {d.label}:{self.short(fp)}, a "
                           "snapshot a spec yields left the mount")

    def op_rm_dir(self, r):
        d, pi = self.pick_d(r[0]), r[1] % 3
        self.note("rm_dir")
        self.rm_dir(d, self.pick_fp(pi, r[3]))

    def matctl_rm(self, target, fp):
        t = time.monotonic()
        # --force: an old fingerprint whose inputs changed since can no
        # longer be computed, and rm of its only copy wants it
        st, _, err = self.rig.matctl("rm", "--force", target)
        gone = "no snapshot" in err or "No such file or directory" in err
        # a shard being computed stays (the others expired): EBUSY
        busy = st == 1 and all("a shard is being computed" in l
                               for l in err.splitlines())
        ok = st == 0 or busy or (gone and (fp is None or not self.served(fp, t)))
        if st != 0 and ok:
            self.allowed("matctl-rm", errno.EBUSY if busy else errno.ENOENT)
        self.note(f"  matctl rm {self.short(target) if fp else target} -> "
                  f"{st}{' ' + err if err else ''}")
        if not ok:
            self.violation("matctl", f"matctl rm {target}: status {st}: {err}")

    def op_matctl_rm(self, r):
        pi = r[1] % 3
        self.note("matctl_rm")
        if r[6] % 3 == 0:
            self.matctl_rm(self.w.pipelines[pi].name, None)
        else:
            fp = self.pick_fp(pi, r[3])
            self.matctl_rm(fp, fp)

    def matctl_expire(self, age):
        args = ["expire"] + (["--older-than", age] if age else [])
        st, out, err = self.rig.matctl(*args)
        self.note(f"  matctl {' '.join(args)} -> {st}, "
                  f"{len(out.decode().splitlines())} lines{' ' + err if err else ''}")
        if st != 0:
            self.violation("matctl", f"matctl {' '.join(args)}: status {st}: {err}")

    def op_matctl_expire(self, r):
        self.note("matctl_expire")
        self.matctl_expire([None, "0s", "1s", "4s"][r[6] % 4])

    def op_matctl_gc(self, r):
        st, out, err = self.rig.matctl("gc")
        self.note(f"matctl gc -> {st}{' ' + err if err else ''}")
        if st != 0:
            self.violation("matctl", f"matctl gc: status {st}: {err}")

    def matctl_cat(self, fp, k):
        k %= self.w.nshards(fp)
        t = time.monotonic()
        st, out, err = self.rig.matctl("cat", fp, str(k))
        what = f"matctl cat {self.short(fp)} {k}"
        if st == 0:
            fp_ok = self.judge(what, len(out), out, {fp}, k)
            self.note(f"  {what} -> {'ok' if fp_ok else 'BAD BYTES'} {len(out)} B")
        elif not self.served(fp, t) and ("no snapshot" in err or
                                          "can no longer be computed" in err):
            self.allowed("matctl-cat", errno.ENOENT if "no snapshot" in err else errno.ESTALE)
            self.note(f"  {what} -> {st} (allowed: {err})")
        else:
            self.violation("matctl", f"{what}: status {st}: {err}")

    def op_matctl_cat(self, r):
        pi = r[1] % 3
        self.note("matctl_cat")
        self.matctl_cat(self.pick_fp(pi, r[3]), r[2])

    def op_wait(self, r):
        s = [0.2, 0.6, 1.6, 3.5][r[6] % 4]
        self.note(f"wait {s} s")
        time.sleep(s)

    # -- composite and concurrent operations --

    def op_cycle(self, r):
        """A fingerprint goes and comes back: read it (both mounts), maybe
        hold it, change the pipeline, expire the old fingerprint one way or
        another, change it back, read through the name."""
        pi = r[1] % 3
        p = self.w.pipelines[pi]
        d, other = self.pick_d(r[0]), self.pick_d(r[0] + 1)
        old = self.history[pi][-1][1]
        self.note(f"cycle {p.name} from {self.short(old)}")
        self.read_name(d, pi, r[2], settle=True)
        if len(self.d) > 1:
            self.list_dir_sizes(other, old)
        if r[7] % 2 == 0 and "holds" not in self.disabled:
            self.hold(r[4] % NSLOTS, d, False, pi, old, r[2], 0.3)
        how = self.change_kinds()[r[5] % len(self.change_kinds())]
        saved = self.change(pi, how, r[6])
        if (r[7] >> 1) % 2 == 0:
            self.settle(pi)
        expire = self.expire_kinds()[(r[7] >> 2) % len(self.expire_kinds())]
        if expire == "matctl_rm":
            self.matctl_rm(old, old)
        elif expire == "rm_dir":
            self.rm_dir(self.pick_d(r[0] >> 3), old)
        elif expire == "matctl_expire":
            self.matctl_expire("0s")
        elif expire == "rm_shard":
            self.rm_shard(self.pick_d(r[0] >> 3), False, pi, old, r[2])
        self.restore(pi, how, saved)
        if (r[7] >> 4) % 2 == 0:
            self.read_pinned(self.pick_d(r[0] >> 5), old, r[2])
        self.read_name(self.pick_d(r[0] >> 6), pi, r[2], settle=(r[7] >> 5) % 2 == 0)

    def change_kinds(self):
        out = [k for k, f in (("spec", "spec-edits"), ("deps", "deps-edits"),
                              ("input", "input-edits")) if f not in self.disabled]
        return out or ["none"]

    def expire_kinds(self):
        out = ["none"]
        out += [k for k, f in (("matctl_rm", "matctl-rm"), ("rm_dir", "rm"),
                               ("matctl_expire", "expire"), ("rm_shard", "rm"))
                if f not in self.disabled]
        return out

    def change(self, pi, how, r):
        """Moves pipeline pi to another fingerprint; returns what restores it."""
        cfg = self.w.configs[pi]
        saved = (cfg.spec, cfg.deps, cfg.inputs)
        p = self.w.pipelines[pi]
        deps = [n for n in self.w.deps_of(p) if n in self.w.dep_names]
        if how == "deps" and not deps:
            how = "input"
        if how == "spec":
            alts = [v for v in range(len(p.spec_variants))
                    if self.w.fingerprint(pi, type(cfg)(v, cfg.deps, cfg.inputs))
                    != self.w.fingerprint(pi, cfg)]
            cfg.spec = alts[r % len(alts)]
            self.w.write_spec(self.rig.pipes, pi)
        elif how == "deps":
            name = deps[r % len(deps)]
            j = self.w.deps_of(p).index(name)
            d = list(cfg.deps)
            d[j] = (d[j] + 1 + r // 7 % (len(self.w.dep_files[name][1]) - 1)) % len(
                self.w.dep_files[name][1])
            cfg.deps = tuple(d)
            self.w.write_deps(self.rig.pipes, pi)
        elif how == "input":
            i = r % len(cfg.inputs)
            ins = list(cfg.inputs)
            ins[i] = 0 if ins[i] else 1
            cfg.inputs = tuple(ins)
            self.w.write_inputs(self.rig.pipes, pi)
        else:
            return saved
        fp = self.changed(pi)
        self.note(f"  {how} change: {p.name} -> {self.short(fp)}")
        return saved

    def restore(self, pi, how, saved):
        cfg = self.w.configs[pi]
        if (cfg.spec, cfg.deps, cfg.inputs) == saved:
            return
        spec, deps, inputs = cfg.spec != saved[0], cfg.deps != saved[1], cfg.inputs != saved[2]
        cfg.spec, cfg.deps, cfg.inputs = saved
        if spec:  # only what changed: every moment on disk is a known config
            self.w.write_spec(self.rig.pipes, pi)
        if deps:
            self.w.write_deps(self.rig.pipes, pi)
        if inputs:
            self.w.write_inputs(self.rig.pipes, pi)
        fp = self.changed(pi)
        self.note(f"  change back: {self.w.pipelines[pi].name} -> {self.short(fp)}")

    def list_dir_sizes(self, d, fp):
        """stat every shard of fp through d (sizes land in the kernel's
        cache: the setting of a stale size 0)."""
        try:
            n = len(os.listdir(os.path.join(d.mnt, fp)))
            self.note(f"  ls -l {d.label}:{self.short(fp)} -> {n} entries")
        except OSError as e:
            self.note(f"  ls -l {d.label}:{self.short(fp)} -> {ename(e.errno)}")

    def op_race(self, r):
        """Readers on one shard through both mounts at once, while something
        else happens to it."""
        pi = r[1] % 3
        fp = self.pick_fp(pi, r[3])
        k = r[2] % self.w.nshards(fp)
        n = 2 + r[6] % 3
        disrupt = ["none", "matctl_rm", "rm_shard", "rm_dir", "matctl_expire",
                   "spec_edit", "matctl_cat"][r[5] % 7]
        if (disrupt in ("rm_shard", "rm_dir") and "rm" in self.disabled) or \
           (disrupt == "matctl_rm" and "matctl-rm" in self.disabled) or \
           (disrupt == "matctl_expire" and "expire" in self.disabled) or \
           (disrupt == "spec_edit" and "spec-edits" in self.disabled) or \
           (disrupt == "matctl_cat" and "matctl-cat" in self.disabled):
            disrupt = "none"
        self.note(f"race {n} readers on {self.w.pipelines[pi].name}@{self.short(fp)} "
                  f"shard {k}, with {disrupt}")
        t0 = time.monotonic()
        results = [None] * n
        paths = []
        for i in range(n):
            d = self.pick_d(r[0] + i)
            via_name = (r[7] >> i) % 2 == 1 and fp == self.history[pi][-1][1]
            paths.append((d, via_name, self.shard_path(d, via_name, pi, fp, k)))

        def reader(i):
            try:
                results[i] = ("ok", read_whole(paths[i][2]))
            except OSError as e:
                results[i] = ("err", e)
        threads = [threading.Thread(target=reader, args=(i,), daemon=True)
                   for i in range(n)]
        for t in threads:
            t.start()
        time.sleep(((r[7] >> 8) % 150) / 1000)
        if disrupt == "matctl_rm":
            self.matctl_rm(fp, fp)
        elif disrupt == "rm_shard":
            self.rm_shard(self.pick_d(r[0] >> 4), False, pi, fp, k)
        elif disrupt == "rm_dir":
            self.rm_dir(self.pick_d(r[0] >> 4), fp)
        elif disrupt == "matctl_expire":
            self.matctl_expire("0s")
        elif disrupt == "spec_edit":
            self.op_spec_edit_inner(pi, r[4])
        elif disrupt == "matctl_cat":
            self.matctl_cat(fp, k)
        for t in threads:
            t.join(IO_TIMEOUT)
            if t.is_alive():
                self.violation("hang", f"race reader on {self.short(fp)} shard {k}: "
                               f"no answer in {IO_TIMEOUT} s")
                raise RigError("a race reader hung")
        views = {d.label: self.name_view(d, pi, t0)[:2] for d in self.d}  # after any edit
        for i, (kind, v) in enumerate(results):
            d, via_name, path = paths[i]
            what = f"race reader {i} {os.path.relpath(path, self.rig.tmp)}"
            cands, strict = views[d.label] if via_name else ({fp}, self.yielded(fp, t0))
            cands = {c for c in cands if k < self.w.nshards(c)}
            allow = set() if strict else {errno.ENOENT, errno.ESTALE}
            if disrupt in ("rm_shard", "rm_dir"):
                allow = allow | {errno.ENOENT}  # the path was removed under it
            if kind == "ok":
                got = self.judge(what, v[0], v[1], cands, k)
                self.note(f"  {what} -> {'ok' if got else 'BAD'} {len(v[1])} B")
            elif v.errno in allow | self.lenient(d):
                self.allowed("race", v.errno)
                self.note(f"  {what} -> {ename(v.errno)} (allowed)")
            else:
                self.violation("errno-race", f"{what}: {getattr(v, 'phase', '')} "
                               f"{ename(v.errno)} ({v.strerror})")

    def op_spec_edit_inner(self, pi, r):
        p = self.w.pipelines[pi]
        self.w.configs[pi].spec = (self.w.configs[pi].spec + 1 + r % (
            len(p.spec_variants) - 1)) % len(p.spec_variants)
        self.w.write_spec(self.rig.pipes, pi)
        fp = self.changed(pi)
        self.note(f"  spec_edit {p.name} -> variant {self.w.configs[pi].spec}, "
                  f"fp {self.short(fp)}")

    # -- shards shared between snapshots (docs/spec.md, "Reuse") --

    def op_grow(self, r):
        """An input appended to a pipeline (its glob matches one more
        file: with one shard per input a new shard, with shards: N the
        last shard's inputs grow), or the last appended one removed again
        (an older fingerprint back)."""
        pi = r[1] % 3
        p, cfg = self.w.pipelines[pi], self.w.configs[pi]
        n = len(cfg.inputs)
        grow = n < len(p.inputs) and (n == p.base or r[6] % 3 != 0)
        if not grow and n == p.base:
            self.note(f"grow {p.name}: nothing to append or remove")
            return

        def change():
            if grow:
                cfg.inputs = cfg.inputs + (r[5] % 2,)
                self.w.write_input(self.rig.pipes, pi, n)
            else:
                cfg.inputs = cfg.inputs[:-1]
                self.w.write_input(self.rig.pipes, pi, n - 1)
            return f"{'append' if grow else 'remove'} {p.inputs[n if grow else n - 1][0]}"
        self.shared_round(pi, change, r)

    def op_inplace_edit(self, r):
        """One input rewritten in place (same inode): with content
        identity keeping its size and mtime where the variants allow (only
        the bytes say it changed), with stat identity a new mtime."""
        pi = r[1] % 3
        p, cfg = self.w.pipelines[pi], self.w.configs[pi]
        i = r[2] % len(cfg.inputs)
        old = cfg.inputs[i]
        if p.identity == "content":
            new = 2 if old == 0 else 0  # 0 and 2: the same size
        else:
            new = (old + 1 + r[5] % 2) % len(p.inputs[i][1])

        def change():
            ins = list(cfg.inputs)
            ins[i] = new
            cfg.inputs = tuple(ins)
            self.w.write_input_in_place(self.rig.pipes, pi, i, old)
            return f"rewrite {p.inputs[i][0]} in place: variant {old} -> {new}"
        self.shared_round(pi, change, r, in_place=True)

    def op_records_edit(self, r):
        """The spec's records or shuffle_window added, changed or removed,
        its stages kept: a new fingerprint whose every shard fingerprint is
        the old one's."""
        pi = r[1] % 3
        p, cfg = self.w.pipelines[pi], self.w.configs[pi]

        def siblings(u):
            cur = p.spec_variants[u]
            return [v for v, sv in enumerate(p.spec_variants)
                    if v != u and sv["argv"] == cur["argv"]
                    and sv["shards"] == cur["shards"]
                    and (sv.get("records"), sv.get("window")) != (cur.get("records"),
                                                                  cur.get("window"))]
        alts = siblings(cfg.spec)
        if not alts:  # to a variant that has some, first (a plain spec edit)
            cfg.spec = [u for u in range(len(p.spec_variants)) if siblings(u)][r[6] % 2]
            self.w.write_spec(self.rig.pipes, pi)
            fp = self.changed(pi)
            self.note(f"records_edit {p.name}: first to variant {cfg.spec}, "
                      f"fp {self.short(fp)}")
            alts = siblings(cfg.spec)
        v = alts[r[5] % len(alts)]

        def change():
            cfg.spec = v
            self.w.write_spec(self.rig.pipes, pi)
            return f"spec variant -> {v} (records {p.spec_variants[v].get('records')}, " \
                f"window {p.spec_variants[v].get('window')})"
        self.shared_round(pi, change, r)

    def shared_round(self, pi, change, r, in_place=False):
        """Every shard of the current fingerprint read and committed, then
        change() moves the pipeline to another, whose every shard is read
        (maybe with the old snapshot removed or expired before or while it
        is, and a descriptor of it held): the bytes are checked as always,
        and the stage runs logged in runs/log meanwhile against the shard
        fingerprints: a shard whose shard fingerprint the old snapshot had
        committed, named by its hint, runs no stage unless that snapshot
        went meanwhile."""
        p = self.w.pipelines[pi]
        d = self.pick_d(r[0])
        old = self.history[pi][-1][1]
        disrupt = self.shared_disrupts()[r[4] % len(self.shared_disrupts())]
        self.note(f"shared_round {p.name} from {self.short(old)} through {d.label}, "
                  f"then {disrupt}")
        self.settle(pi)
        ok = all(self.read_pinned(d, old, k).startswith("ok")
                 for k in range(self.w.nshards(old)))
        runs_of = self.committed(old) if ok else None
        if r[7] % 3 == 0 and "holds" not in self.disabled:
            self.hold(r[3] % NSLOTS, d, False, pi, old, r[2], 0.5)
        mark, logs = self.runs_mark(), {x: self.log_size(x) for x in self.d}
        what = change()
        new = self.changed(pi)
        self.note(f"  {what}: {p.name} -> {self.short(new)}")
        if new == old:
            return
        hints = {k: self.hint(self.w.sfp(new, k)) for k in range(self.w.nshards(new))}
        moved = self.wait_moved(d, pi, new)
        if in_place:
            self.note_transient(pi)
        if disrupt == "rm_old_before":
            self.matctl_rm(old, old)
        box = {}
        if disrupt in ("rm_old_while", "expire_while"):
            def disruptor():
                time.sleep(((r[6] >> 4) % 60) / 1000)
                if disrupt == "rm_old_while":
                    self.matctl_rm(old, old)
                else:
                    self.matctl_expire("0s")
            box["t"] = threading.Thread(target=disruptor, daemon=True)
            box["t"].start()
        got = [self.read_pinned(d, new, k) for k in range(self.w.nshards(new))]
        if "t" in box:
            box["t"].join(IO_TIMEOUT)
            if box["t"].is_alive():
                self.violation("hang", f"{disrupt} of {self.short(old)}: no answer")
                raise RigError("matctl hung")
        runs = self.runs_since(mark)
        gone = self.expired_since(logs)
        quiet = (disrupt == "none" and runs_of is not None and moved
                 and old[:12] not in gone and not self.diverged and d not in self.lost)
        for k in range(self.w.nshards(new)):
            n, sfp = runs.get((new, k), 0), self.w.sfp(new, k)
            donor = (old, k, runs_of[k]) if runs_of and k < len(runs_of) else None
            named = hints[k] is not None and donor is not None and hints[k][:3] == donor
            shared = k < self.w.nshards(old) and self.w.sfp(old, k) == sfp
            self.count("stage_runs", n)
            if n == 0 and shared:
                self.count("reused")
            if shared and named and quiet and got[k].startswith("ok"):
                self.count("reuse_strict")  # a stage run here is a violation
            if n and shared and named and quiet and got[k].startswith("ok"):
                self.violation("stage-ran", f"shard {k} of {self.short(new)}: its stages "
                               f"ran {n} times, though its shard fingerprint "
                               f"{self.short(sfp)} is materialized by shard {k} of "
                               f"{self.short(old)} (run {donor[2]}), which its hint "
                               f"names and nothing removed: {self.reuse_lines(logs, new, k)}")
            self.note(f"  shard {k}: {n} stage runs, shard fingerprint "
                      f"{'shared with ' + self.short(old) if shared else 'new'}"
                      f"{', hint names it' if named else ''}")
        if gone:
            self.note(f"  expired meanwhile: {sorted(gone)}")

    def shared_disrupts(self):
        out = ["none", "none"]
        if "matctl-rm" not in self.disabled:
            out += ["rm_old_before", "rm_old_while"]
        if "expire" not in self.disabled:
            out.append("expire_while")
        return out

    def wait_moved(self, d, pi, fp):
        """Polls d's name until it points at fp (it registered it), within
        GRACE + NAME_LATE; False if it did not (reported elsewhere)."""
        end = time.monotonic() + GRACE + NAME_LATE
        while time.monotonic() < end:
            if d.proc is None or self.readlink(d, pi) == fp:
                return d.proc is not None
            time.sleep(0.02)
        return False

    def note_transient(self, pi):
        """The fingerprints a daemon registered for a moment of an edit in
        place (matctl ls): known, never judged."""
        st, out, err = self.rig.matctl("ls", "--json")
        try:
            rows = json.loads(out) if st == 0 else []
        except ValueError:
            rows = []
        for row in rows:
            fp = row.get("fingerprint")
            if row.get("name") == self.w.pipelines[pi].name and fp not in self.w.fp_info \
                    and fp not in self.w.transient:
                self.w.transient.add(fp)
                self.note(f"  (a daemon registered {self.short(fp)} mid-edit)")

    def committed(self, fp):
        """[run id of each shard] once matctl stat says fp's every shard
        is materialized (a commit may trail the read it served), within 5
        s; None if not."""
        end = time.monotonic() + 5
        while True:
            st, out, err = self.rig.matctl("stat", fp, "--json")
            try:
                shards = json.loads(out)["shards"] if st == 0 else []
            except (ValueError, KeyError):
                shards = []
            if shards and all(s["state"] == "materialized" for s in shards):
                return [s["run_id"] for s in sorted(shards, key=lambda s: s["index"])]
            if time.monotonic() > end:
                return None
            time.sleep(0.05)

    def hint(self, sfp):
        """STORE/shared/SFP: (fp, shard, run id, uid), or None."""
        try:
            with open(os.path.join(self.rig.store, "shared", sfp)) as f:
                fp, k, run, uid = f.read().split()
            return fp, int(k), run, int(uid)
        except (OSError, ValueError):
            return None

    def runs_path(self):
        return os.path.join(self.rig.pipes, "runs", "log")

    def runs_mark(self):
        try:
            return os.path.getsize(self.runs_path())
        except OSError:
            return 0

    def runs_since(self, mark):
        """{(fp, shard): stage runs} that runs/log gained since mark."""
        out = {}
        try:
            with open(self.runs_path(), "rb") as f:
                f.seek(mark)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return out
        for line in lines:
            fp, _, k = line.partition(" ")
            if k.isdigit():
                out[(fp, int(k))] = out.get((fp, int(k)), 0) + 1
        return out

    def log_size(self, d):
        try:
            return os.path.getsize(d.log)
        except OSError:
            return 0

    def log_since(self, d, mark):
        try:
            with open(d.log, "rb") as f:
                f.seek(mark)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def expired_since(self, marks):
        """The fingerprint prefixes any daemon logged expiring since marks."""
        return {m for d, at in marks.items()
                for m in re.findall(r"expired snapshot ([0-9a-f]{12})", self.log_since(d, at))}

    def reuse_lines(self, marks, fp, k):
        """What the daemons logged about shard k of fp since marks."""
        key = f"shard {k} of {fp[:12]}"
        lines = [ln.strip() for d, at in marks.items()
                 for ln in self.log_since(d, at).splitlines() if key in ln]
        return "; ".join(lines[-3:]) or "nothing logged about it"

    def check_donors(self):
        """Every reuse a daemon logged is of a donor whose shard
        fingerprint, by the oracle, is the shard's own."""
        pat = re.compile(r"shard (\d+) of ([0-9a-f]{12}): reused shard (\d+) of ([0-9a-f]{12})")
        by_prefix = {fp[:12]: fp for fp in self.w.fp_info}
        n = 0
        for d in self.d:
            for k, fp, dk, dfp in pat.findall(self.log_since(d, 0)):
                a, b = by_prefix.get(fp), by_prefix.get(dfp)
                if a is None or b is None:
                    continue  # a snapshot of a moment mid-edit
                n += 1
                if int(k) >= self.w.nshards(a) or int(dk) >= self.w.nshards(b) or \
                        self.w.sfp(a, int(k)) != self.w.sfp(b, int(dk)):
                    self.violation("reuse-donor", f"{d.label} reused shard {dk} of {dfp} "
                                   f"for shard {k} of {fp}: their shard fingerprints "
                                   "differ by the oracle")
        self.note(f"  {n} reuses logged, each of a donor of the same shard fingerprint")

    # -- daemons going away --

    def stop_clean(self, d):
        self.release_on(d)
        st = d.stop()
        if st != 0:
            self.violation("daemon-exit", f"matfs {d.label} exited {st} after "
                           f"fusermount3 -u:\n{d.log_tail()}")
        rep = d.sanitizer_report()
        if rep:
            self.violation("sanitizer", f"matfs {d.label}: {rep}:\n{d.log_tail(60)}")
        self.lost.discard(d)

    def op_remount(self, r):
        d = self.pick_d(r[0])
        self.note(f"remount {d.label}")
        self.stop_clean(d)
        d.start()

    def hold_fsync(self, d):
        """strace on every thread of daemon d, holding each fsync back
        (the shard file's and its folder's: the commit), so that a kill
        lands between serving a shard and committing it. None without
        strace, or when it did not attach in 10 s."""
        if not shutil.which("strace") or d.proc is None:
            return None
        pid = d.proc.pid
        t = subprocess.Popen(["strace", "-qq", "-f", "-p", str(pid), "-o",
                              "/dev/null", "-e", "trace=fsync", "-e",
                              "inject=fsync:delay_enter=600s"],
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)

        def traced():
            for f in glob.glob(f"/proc/{pid}/task/*/status"):
                try:
                    with open(f) as fh:
                        if "TracerPid:\t0\n" in fh.read():
                            return False
                except OSError:
                    pass
            return True
        end = time.monotonic() + 10
        while not traced():
            if time.monotonic() > end or t.poll() is not None:
                t.kill()
                t.wait()
                return None
            time.sleep(0.05)
        return t

    def op_kill(self, r):
        d = self.pick_d(r[0])
        pi = r[1] % 3
        fp = self.history[pi][-1][1]
        k = r[2] % self.w.nshards(fp)
        busy = r[6] % 2 == 0
        # one busy kill in two: every fsync held back while the shard
        # is read, so that its reader is served before the commit and
        # the kill lands between the two. Another shard is read first:
        # if it is computed, the daemon's run folder is made (its fsync
        # would hold the computation back too)
        tracer = None
        if busy and r[5] % 2 == 0:
            n = self.w.nshards(fp)
            if n > 1:
                self.read_pinned(d, fp, (k + 1) % n)
            tracer = self.hold_fsync(d)
        self.note(f"kill -9 {d.label}{' while it reads ' + self.short(fp) if busy else ''}"
                  f"{', its commits held back' if tracer else ''}")
        self.release_on(d)
        box = {}
        if busy:
            path = self.shard_path(d, False, pi, fp, k)

            def reader():
                try:
                    box["v"] = read_whole(path)
                except OSError as e:
                    box["e"] = e
            t = threading.Thread(target=reader, daemon=True)
            t.start()
            if tracer:  # a shard computed here is served with fsync held
                t.join(20)
            else:
                time.sleep((r[7] % 200) / 1000)
        if tracer:
            # a traced process killed ends once its tracer lets go: the
            # tracer is killed, not detached, so no held fsync goes on
            d.proc.kill()
            tracer.kill()
            tracer.wait()
            if "v" in box:
                self.count("window_kills")
        d.kill()
        self.lost.discard(d)
        if busy:
            t.join(30)
            if t.is_alive():
                self.violation("hang", "a reader of a killed daemon did not return in 30 s")
            elif "v" in box:
                self.judge(f"read through the killed {d.label}", box["v"][0],
                           box["v"][1], {fp}, k)
                self.note("  its reader finished first: bytes checked")
            else:
                self.allowed("killed-daemon", box["e"].errno)
                self.note(f"  its reader got {ename(box['e'].errno)} (allowed)")
        d.start()
        if busy:  # the shard its claim held: another reader takes over
            self.read_pinned(self.pick_d(r[0] + 1), fp, k)

    def op_catalog_loss(self, r):
        cat = os.path.join(self.rig.store, "catalog.db")
        if r[6] % 2 == 0:
            cmd = [["ls"], ["stat", "alpha"], ["gc"], ["warm", "gamma"]][r[7] % 4]
            self.note(f"catalog_loss while mounted: read, rm catalog.db*, "
                      f"matctl {' '.join(cmd)}, read everything at once")
            for d in self.d:  # some shards materialized before the loss
                for pi in range(3):
                    self.read_pinned(d, self.history[pi][-1][1], r[2])
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.unlink(cat + suffix)
                except FileNotFoundError:
                    pass
            st, _, err = self.rig.matctl(*cmd)
            self.note(f"  matctl {' '.join(cmd)} -> {st}{' ' + err if err else ''}")
            self.lost.update(self.d)
            self.diverged = True
            # bursts of concurrent reads: more catalog connections than the
            # daemons held before, so some are opened after the loss
            jobs = [(d, self.history[pi][-1][1], k) for d in self.d for pi in range(3)
                    for k in range(self.w.nshards(self.history[pi][-1][1]))]
            for _ in range(2):
                threads = [threading.Thread(target=self.read_pinned, args=j, daemon=True)
                           for j in jobs * 2]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(IO_TIMEOUT)
                    if t.is_alive():
                        self.violation("hang", "a read after the catalog loss: no answer")
                        raise RigError("a read hung")
            return
        self.note("catalog_loss offline: stop, rm catalog.db*, one daemon start, "
                  "fsck --rebuild")
        for d in self.d:
            self.stop_clean(d)
        st, out, err = self.rig.matctl("fsck", "--json")
        try:
            garbage = {p["path"] for p in json.loads(out) if p["kind"] == "orphan-file"}
        except ValueError:
            garbage = set()
        before = set(glob.glob(os.path.join(self.rig.store, "snapshots", "*", "*",
                                            "*.mfs"))) - garbage
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(cat + suffix)
            except FileNotFoundError:
                pass
        d = self.d[0]
        d.start()
        time.sleep(1.5)  # its start-up gc pass and an expiry pass
        self.stop_clean(d)
        after = set(glob.glob(os.path.join(self.rig.store, "snapshots", "*", "*", "*.mfs")))
        # expiry by the specs' own rules (expire_after, keep) is no loss:
        # the rebuilt catalog dates last reads from the files' atimes
        ruled = d.expired_since_start()
        lost = sorted(p for p in before - after
                      if os.path.basename(os.path.dirname(os.path.dirname(p)))[:12]
                      not in ruled)
        if ruled:
            self.note(f"  expired by their rules after the loss: {sorted(ruled)}")
        if lost:
            self.violation("data-lost", f"a lost catalog and one daemon start removed "
                           f"{len(lost)} of {len(before)} committed shard files, e.g. "
                           f"{os.path.relpath(lost[0], self.rig.store)}")
        st, out, err = self.rig.matctl("fsck", "--rebuild")
        self.note(f"  {len(before)} shard files before, {len(lost)} lost; "
                  f"fsck --rebuild -> {st}")
        if st != 0:
            self.violation("matctl", f"matctl fsck --rebuild: status {st}: {err}")
        self.diverged = False
        for d in self.d:
            d.start()

    # -- the end of a run --

    def finish(self):
        """Checks every held descriptor, stops the daemons cleanly, then
        the store: fsck, SQLite's integrity_check, every current shard."""
        self.op_no += 1
        self.note("finish")
        for s in range(NSLOTS):
            self.release(s)
        for d in self.d:
            if d.proc is not None:
                self.stop_clean(d)
        st, out, err = self.rig.matctl("fsck", "--json")
        orphans = {"orphan-file", "orphan-tmp", "orphan-run", "orphan-snapshot"}
        try:
            problems = json.loads(out)
        except ValueError:
            problems = [{"kind": "output", "detail": f"status {st}: {err} {out[:200]!r}"}]
        bad = [p for p in problems if p["kind"] not in orphans]
        self.note(f"  fsck: {len(problems)} problems, {len(bad)} not orphans")
        if bad and self.diverged:  # daemons wrote to a catalog deleted under them
            for p in bad:
                self.allowed("fsck-after-catalog-loss", p["kind"])
            self.note(f"  (not judged: {', '.join(sorted({p['kind'] for p in bad}))} after "
                      "a catalog deleted while mounted)")
        elif bad:
            self.violation("fsck", "; ".join(
                f"{p['kind']}: {p.get('path')}: {p.get('detail')}" for p in bad[:5]))
        if shutil.which("sqlite3"):
            res = subprocess.run(["sqlite3", os.path.join(self.rig.store, "catalog.db"),
                                  "PRAGMA integrity_check;"], capture_output=True, text=True)
            self.note(f"  integrity_check: {res.stdout.strip()}")
            if res.stdout.strip() != "ok":
                self.violation("integrity", f"PRAGMA integrity_check: {res.stdout.strip()} "
                               f"{res.stderr.strip()}")
        for pi, p in enumerate(self.w.pipelines):  # through the spec file
            fp = self.history[pi][-1][1]
            spec = os.path.join(self.rig.pipes, p.name + ".yaml")
            for k in range(self.w.nshards(fp)):
                st, out, err = self.rig.matctl("cat", spec, str(k))
                what = f"matctl cat {p.name}.yaml {k}"
                if st != 0:
                    self.violation("matctl", f"{what}: status {st}: {err}")
                elif self.judge(what, len(out), out, {fp}, k):
                    self.note(f"  {what} -> ok {len(out)} B")
        self.check_donors()
