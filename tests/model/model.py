#!/usr/bin/python3
"""model.py - matfs's model-based random test (docs/reliability.md).

Drives two matfs daemons on one store, matctl and the pipelines folder
with a random sequence of operations drawn from a seed, and checks every
read, held descriptor and the store against an oracle computed here.

  model.py --seed N [--ops K]     one run (replays a failure exactly)
  model.py --ci                   the fixed seeds, within --budget seconds
  model.py --soak SECONDS         fresh random seeds until time is up
  --no-CLASS                      leaves an operation class out (--help)

Exit status: 0 clean, 1 violations (or the rig failed), 77 without
/dev/fuse or fusermount3. Finds matfs and matctl in MF_BUILD_ROOT (set by
meson), else --build, else build/dev.

Not for: timings (nothing here asserts a duration but the contract's
"within about a second" for a name to follow its spec).
"""
import argparse
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model_ops import FLAGS, OPS, Model, gen_ops  # noqa: E402
from model_rig import Rig, RigError  # noqa: E402
from model_world import World  # noqa: E402

CI_SEEDS = [1, 2, 3, 4, 5, 6]
CI_OPS = 120
CI_BUDGET = 75  # seconds for all CI seeds together (runs once per build)


def parse():
    ap = argparse.ArgumentParser(description="matfs model-based random test")
    ap.add_argument("--seed", type=int, help="run this seed")
    ap.add_argument("--ops", type=int, help="operations per seed (default 150; "
                    f"{CI_OPS} with --ci, 300 with --soak)")
    ap.add_argument("--ci", action="store_true", help=f"seeds {CI_SEEDS}")
    ap.add_argument("--soak", type=float, metavar="SECONDS",
                    help="fresh random seeds until SECONDS have passed")
    ap.add_argument("--budget", type=float, metavar="SECONDS",
                    help="stop starting operations after this long (default "
                    f"{CI_BUDGET} with --ci, or $MF_MODEL_BUDGET)")
    ap.add_argument("--build", help="the meson build folder holding tools/")
    ap.add_argument("--max-violations", type=int, default=10,
                    help="stop a seed after this many operations and kinds "
                    "of violation (default 10)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print the op log of clean runs too")
    ap.add_argument("--only", metavar="KINDS", default="",
                    help="only these operation kinds, comma-separated: "
                    + ", ".join(OPS))
    for f, what in FLAGS.items():
        ap.add_argument(f"--no-{f}", dest="no_" + f.replace("-", "_"),
                        action="store_true", help=f"leave out {what}")
    a = ap.parse_args()
    a.disabled = {f for f in FLAGS if getattr(a, "no_" + f.replace("-", "_"))}
    a.only = [k for k in a.only.split(",") if k]
    for k in a.only:
        if k not in OPS:
            ap.error(f"--only: unknown operation kind '{k}'")
    return a


def replay_line(a, seed, ops):
    here = os.path.relpath(os.path.abspath(__file__))
    flags = "".join(f" --no-{f}" for f in sorted(a.disabled))
    if a.only:
        flags += " --only " + ",".join(a.only)
    return (f"MF_BUILD_ROOT={a.build} /usr/bin/python3 {here} --seed {seed} "
            f"--ops {ops}{flags}")


def run_seed(a, seed, nops, deadline):
    """One seed on a fresh store; returns the Model (stats, violations)."""
    options = {"keep": "keep" not in a.disabled,
               "expire_after": "expire-after" not in a.disabled}
    world = World(options)
    rig = Rig(a.build, two_daemons="second-daemon" not in a.disabled)
    m = Model(world, rig, a.disabled)
    err = None
    try:
        m.start()
        for kind, r in gen_ops(seed, nops, a.disabled, a.only):
            if deadline and time.monotonic() > deadline:
                m.note(f"(budget reached: stopped before op {m.op_no + 1})")
                break
            m.run_op(kind, r)
            if len(m.distinct()) >= a.max_violations:
                m.note("(too many violations: stopped)")
                break
        m.finish()
    except RigError as e:
        err = str(e)
    except BaseException:
        report(a, seed, m, rig, "interrupted")
        raise
    finally:
        m.drop_fds()
        tails = {d.label: (d.log_tail(), d.log_errors()) for d in rig.daemons}
        rig.close()
    m.tails = tails
    m.rig_error = err
    report(a, seed, m, rig, err)
    return m


def report(a, seed, m, rig, err):
    s = m.stats
    allowed = ", ".join(f"{k} {v}" for k, v in sorted(m.errors.items())) or "none"
    print(f"seed {seed}: {s['ops']} ops, {s['reads']} reads checked, "
          f"{s['records']} record counts checked, {s['batches']} batches checked, "
          f"{s['descriptors']} descriptors checked, {s['reused']} shards reused "
          f"({s['reuse_strict']} where a stage run was a violation, "
          f"{s['stage_runs']} stage runs counted), {len(m.violations)} violations, "
          f"{s['late_names']} names late, {s['window_kills']} kills "
          f"between serving and committing; "
          f"allowed errors: {allowed}", flush=True)
    if not m.violations and not err and not a.verbose:
        return
    if err:
        print(f"seed {seed}: the test itself failed: {err}")
    for n, kind, msg, count in m.distinct():
        more = f" (and {count - 1} more like it)" if count > 1 else ""
        print(f"  VIOLATION at op {n} [{kind}]: {msg}{more}")
    print("op log:")
    for line in m.log:
        print("  " + line)
    for label, (tail, errors) in getattr(m, "tails", {}).items():
        print(f"daemon {label} log (last lines):")
        print("    " + tail.replace("\n", "\n    "))
        if errors:
            print(f"daemon {label} log (last lines saying something failed):")
            print("    " + errors.replace("\n", "\n    "))
    if m.violations:
        first = min(m.violations[0][0], m.stats["ops"])  # finish counts as one more
        print(f"replay: {replay_line(a, seed, max(first, 1))}")
    sys.stdout.flush()


def main():
    a = parse()
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        print("skip: no /dev/fuse or fusermount3")
        return 77
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    a.build = os.path.abspath(a.build or os.environ.get("MF_BUILD_ROOT")
                              or os.path.join(root, "build", "dev"))
    budget = a.budget or float(os.environ.get("MF_MODEL_BUDGET", 0)) or (
        CI_BUDGET if a.ci else 0)
    start = time.monotonic()
    deadline = start + budget if budget else 0
    if a.ci:
        seeds, nops = CI_SEEDS, a.ops or CI_OPS
    elif a.soak:
        seeds, nops = None, a.ops or 300
    else:
        seeds, nops = [a.seed if a.seed is not None else random.randrange(1 << 31)], \
            a.ops or 150
    totals = {"ops": 0, "reads": 0, "records": 0, "batches": 0, "descriptors": 0,
              "window_kills": 0, "reused": 0, "reuse_strict": 0}
    bad = []  # (seed, violations, rig error)
    i = 0
    while True:
        if seeds is not None:
            if i >= len(seeds) or (deadline and time.monotonic() > deadline - 15):
                break  # a seed needs some time to say anything
            seed = seeds[i]
        else:
            if time.monotonic() - start > a.soak:
                break
            seed = random.SystemRandom().randrange(1 << 31)
        i += 1
        m = run_seed(a, seed, nops, deadline)
        for k in totals:
            totals[k] += m.stats[k]
        if m.violations or m.rig_error:
            bad.append((seed, m.violations, m.rig_error))
    nviol = sum(len(v) for _, v, _ in bad)
    print(f"model: {i} seeds, {totals['ops']} operations, {totals['reads']} reads checked, "
          f"{totals['records']} record counts checked, "
          f"{totals['batches']} batches checked, "
          f"{totals['descriptors']} descriptors checked, "
          f"{totals['reused']} shards reused ({totals['reuse_strict']} strictly), "
          f"{totals['window_kills']} kills between serving and committing, "
          f"{nviol} violations "
          f"in {time.monotonic() - start:.0f} s")
    for seed, v, err in bad:
        kinds = sorted({k for _, k, _ in v})
        print(f"  seed {seed}: {len(v)} violations {kinds}{' error: ' + err if err else ''}"
              f" (first at op {v[0][0] if v else '-'})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
