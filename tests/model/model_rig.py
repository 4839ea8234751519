"""model_rig.py - what the model test starts and must always stop: a temp
folder, two matfs daemons on one store (two mountpoints), matctl runs.

Every daemon is unmounted and reaped and the temp folder removed on every
way out: the caller's finally, atexit, and SIGINT/SIGTERM/SIGHUP (turned
into SystemExit so that finally blocks run).

Not for: deciding what to do or what is right (model_ops.py).
"""
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

_RIGS = []


def _cleanup_all():
    for rig in list(_RIGS):
        rig.close()


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)


atexit.register(_cleanup_all)
for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _on_signal)


class RigError(Exception):
    """The test's own machinery failed (not a finding about matfs)."""


def is_mounted(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path and line.split()[2].startswith("fuse")
                   for line in f)


class Daemon:
    """One matfs mount; restarted in place by remount and kill."""

    def __init__(self, rig, label, opts):
        self.rig, self.label, self.opts = rig, label, opts
        self.mnt = os.path.join(rig.tmp, "mnt-" + label)
        self.log = os.path.join(rig.tmp, "matfs-" + label + ".log")
        self.proc = None
        self.starts = 0
        os.makedirs(self.mnt)

    def start(self):
        self.log_mark = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.rig.matfs, "--store", self.rig.store, "--pipelines",
                 self.rig.pipes, "-f", "-o", self.opts, self.mnt],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.starts += 1
        end = time.monotonic() + 15
        while not is_mounted(self.mnt):
            if self.proc.poll() is not None:
                raise RigError(f"matfs {self.label} exited {self.proc.returncode} "
                               f"before mounting: {self.log_tail()}")
            if time.monotonic() > end:
                raise RigError(f"matfs {self.label} did not mount in 15 s")
            time.sleep(0.02)

    def stop(self):
        """Clean unmount; returns the daemon's exit status (None: hung)."""
        for _ in range(50):
            r = subprocess.run(["fusermount3", "-u", self.mnt],
                               capture_output=True, text=True)
            if r.returncode == 0 or not is_mounted(self.mnt):
                break
            time.sleep(0.1)  # busy: a reader thread of ours is leaving
        else:
            raise RigError(f"fusermount3 -u {self.mnt}: {r.stderr.strip()}")
        try:
            status = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.dump_stacks()
            self.kill()
            return None
        self.proc = None
        return status

    def dump_stacks(self):
        """Every thread's stack of a hung daemon, to stderr (needs gdb)."""
        try:
            r = subprocess.run(["gdb", "-p", str(self.proc.pid), "-batch",
                                "-ex", "thread apply all bt"],
                               capture_output=True, text=True, timeout=60)
            sys.stderr.write(f"--- stacks of hung matfs {self.proc.pid}:\n"
                             f"{r.stdout}\n")
        except (OSError, subprocess.TimeoutExpired) as e:
            sys.stderr.write(f"--- no stacks of matfs {self.proc.pid}: {e}\n")

    def kill(self):
        """kill -9, then a lazy unmount (what an operator does)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt],
                           capture_output=True)

    def log_tail(self, n=25):
        try:
            with open(self.log, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def expired_since_start(self):
        """The fingerprints (12-digit prefixes) this daemon's expiry rules
        expired since its last start, from its log."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self.log_mark)
                text = f.read().decode(errors="replace")
        except OSError:
            return set()
        return set(re.findall(r"expired snapshot ([0-9a-f]{12}) of ", text))

    def log_errors(self, n=15):
        """The last n lines of the log that say something failed."""
        try:
            with open(self.log, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        keys = ("error", "fail", "corrupt", "cannot", "exited", "Sanitizer")
        return "\n".join([ln for ln in lines if any(k in ln for k in keys)][-n:])

    def sanitizer_report(self):
        try:
            with open(self.log, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        for key in ("runtime error", "Sanitizer", "ThreadSanitizer"):
            if key in text:
                return key
        return None


class Rig:
    def __init__(self, build, two_daemons=True):
        self.matfs = os.path.join(build, "tools", "matfs")
        self.matctl_bin = os.path.join(build, "tools", "matctl")
        for exe in (self.matfs, self.matctl_bin):
            if not os.access(exe, os.X_OK):
                raise RigError(f"'{exe}' is not built")
        self.tmp = tempfile.mkdtemp(prefix="mf-model.")
        self.store = os.path.join(self.tmp, "store")
        self.pipes = os.path.join(self.tmp, "p")
        os.makedirs(self.pipes)
        self.daemons = [Daemon(self, "a", "workers=2")]
        if two_daemons:
            self.daemons.append(Daemon(self, "b", "workers=1"))
        _RIGS.append(self)

    def matctl(self, *args, timeout=120):
        """Runs matctl; returns (status, stdout bytes, stderr text)."""
        try:
            r = subprocess.run([self.matctl_bin, "--store", self.store, *args],
                               stdin=subprocess.DEVNULL, capture_output=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, b"", f"timed out after {timeout} s"
        return r.returncode, r.stdout, r.stderr.decode(errors="replace").strip()

    def close(self):
        if self not in _RIGS:
            return
        _RIGS.remove(self)
        for d in self.daemons:
            try:  # a clean unmount if it is not busy, else kill -9 and -z
                if d.proc is not None and is_mounted(d.mnt):
                    r = subprocess.run(["fusermount3", "-u", d.mnt],
                                       capture_output=True, timeout=10)
                    if r.returncode == 0:
                        d.proc.wait(timeout=5)
                        d.proc = None
            except Exception:
                pass
            try:
                d.kill()
            except Exception:  # keep cleaning the rest
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
