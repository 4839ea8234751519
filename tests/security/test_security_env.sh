#!/usr/bin/env bash
# test_security_env.sh - the environment a stage sees is exactly the
# documented one (docs/spec.md, "What a stage's processes get"): a root
# daemon started with extra variables (FOO=secret, HOME=/root, a PATH
# whose first folder holds a program named `env`, LD_LIBRARY_PATH) runs a
# user's stage `env -0` with none of them: PATH is the fixed one (and the
# program is looked up there), HOME, USER and LOGNAME are the user's,
# LANG, LC_* and TMPDIR are the daemon's, then the spec's env and the
# MATFS_* variables, and nothing else.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

evil=$tmp/evil
install -d -m 0755 "$evil"
printf '#!/bin/sh\necho EVIL\n' >"$evil/env"
chmod 0755 "$evil/env"

u=$tmp/u
install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/pipelines" "$u/pipelines/in"
# empty: `env` does not read its stdin
as_user touch "$u/pipelines/in/a.txt"
as_user tee "$u/pipelines/env.yaml" >/dev/null <<'YAML'
name: env
inputs: in/*.txt
env:
  PYTHONPATH: /opt/lib
stages:
  - exec: [env, -0]
YAML

daemon_env=(FOO=secret HOME=/root USER=root LOGNAME=root LANG=C.UTF-8
  TMPDIR=/tmp "PATH=$evil:$PATH" LD_LIBRARY_PATH=/root/lib)
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$u/pipelines"
wait_for 20 has_name "$mnt" env || fail "env is not registered"
as_user cat "$mnt/env/shard-00000" >"$tmp/env" || fail "env: read failed"
python3 - "$tmp/env" "$home" "$user" "$(readlink "$mnt/env")" \
  "$(realpath "$u/pipelines/in/a.txt")" <<'PY' || fail "the stage's environment"
import os, sys
path, home, user, fp, inp = sys.argv[1:]
data = open(path, "rb").read()
assert b"EVIL" not in data, "the stage ran the daemon's PATH's env"
got = dict(e.split(b"=", 1) for e in data.split(b"\0") if e)
got = {k.decode(): v.decode() for k, v in got.items()}
want = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": home, "USER": user, "LOGNAME": user,
    "LANG": "C.UTF-8", "TMPDIR": "/tmp",
    "PYTHONPATH": "/opt/lib",
    "MATFS_SHARD": "0", "MATFS_SHARDS": "1",
    "MATFS_FINGERPRINT": fp, "MATFS_INPUTS": inp,
}
import re
f = got.pop("MATFS_INPUTS_FILE", "")
assert re.fullmatch(r"/tmp/matfs-inputs-[A-Za-z0-9]{6}/inputs", f), \
    "MATFS_INPUTS_FILE=%r, not a file of the job's folder in TMPDIR" % f
assert not os.path.exists(os.path.dirname(f)), "the job's folder %s stays" % f
want.update({k: v for k, v in os.environ.items() if k.startswith("LC_")})
extra = sorted(set(got) - set(want))
missing = sorted(set(want) - set(got))
wrong = sorted(k for k in want if k in got and got[k] != want[k])
assert not extra, "variables that should not be there: %s" % extra
assert not missing, "variables missing: %s" % missing
assert not wrong, "wrong values: %s" % ["%s=%r (want %r)" % (k, got[k], want[k])
                                        for k in wrong]
PY
pass "a stage sees exactly the documented environment"
umount_fs "$mnt" "$mpid"
