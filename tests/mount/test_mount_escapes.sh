#!/usr/bin/env bash
# test_mount_escapes.sh - what a failing stage wrote on stderr reaches a
# terminal through `getfattr --only-values` as text, never as escapes:
# user.matfs.stderr and user.matfs.error are cleaned as matctl and the log
# show them (every control but tab and newline, DEL, C1 controls and bytes
# that are not UTF-8 become '?'; UTF-8 text stays). The stage writes ESC
# sequences (clear screen, an OSC title), BEL, BS, CR, NUL, DEL, a C1 CSI
# and a stray byte; none reaches the attribute, nor the message of the
# Python package's ShardError, nor matctl stat --json (which escapes them).
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
command -v getfattr >/dev/null || { echo "skip: no getfattr"; exit 77; }

p=$tmp/p
mkdir -p "$p/in"
echo x >"$p/in/a.txt"
# the first stage's output is the second's stdin, which it writes to
# stderr: so stderr holds bytes no shell quoting has touched
cat >"$p/loud.yaml" <<'YAML'
name: loud
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, "cat >/dev/null; /usr/bin/printf 'first\\t\\033[2J\\a line\\nsecond \\033]0;pwned\\007 \\b\\r\\177 \\302\\233 \\377 caf\\303\\251 \\342\\234\\223\\001gone\\nlast\\n'"]
  - exec: [/bin/sh, -c, 'cat >&2; exit 3']
YAML
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p" -o nopush
wait_for 10 test -L "$mnt/loud" || fail "loud is not registered"
shard=$mnt/loud/shard-00000
cat "$shard" >/dev/null 2>&1 && fail "the failing shard opened"

getfattr --only-values -n user.matfs.stderr "$shard" >"$tmp/stderr" ||
  fail "no user.matfs.stderr"
getfattr --only-values -n user.matfs.error "$shard" >"$tmp/error" ||
  fail "no user.matfs.error"
# raw: what the stage wrote (what the catalog keeps), JSON-escaped
"$matctl" --store "$tmp/store" stat --json loud >"$tmp/json" || fail "matctl stat --json"
/usr/bin/python3 - "$tmp/stderr" "$tmp/error" "$tmp/json" <<'PY' || fail "the attributes carry raw control bytes"
import json, re, sys
stderr, error = (open(f, "rb").read() for f in sys.argv[1:3])
bad = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")
for name, v in (("stderr", stderr), ("error", error)):
    v.decode("utf-8")  # valid UTF-8, or this raises
    m = bad.search(v)
    assert not m, "%s holds %r: %r" % (name, m.group(), v)
assert b"\n" not in error, error
want = ("first\t?[2J? line\nsecond ?]0;pwned? ??? ?? ? caf\u00e9 \u2713?gone\n"
        "last\n").encode()
assert stderr == want, "stderr is %r, not %r" % (stderr, want)
m = bad.search(open(sys.argv[3], "rb").read())
assert not m, "matctl stat --json prints %r raw" % m.group()
raw = [s["stderr_tail"] for s in json.load(open(sys.argv[3]))["shards"]
       if s.get("stderr_tail")]
assert raw and "\x1b[2J" in raw[0], "the catalog no longer keeps the raw tail: %r" % raw
PY
pass "user.matfs.stderr and .error hold no control byte of the stage's; UTF-8, tabs and newlines stay"

PYTHONPATH=$MF_SOURCE_ROOT/python /usr/bin/python3 - "$shard" <<'PY' >"$tmp/py" 2>&1 || fail "ShardError: $(cat "$tmp/py")"
import sys, matfs
try:
    matfs.open_shard(sys.argv[1])
    sys.exit("the failing shard opened")
except matfs.ShardError as e:
    s = str(e)
    assert "\x1b" not in s and "\x07" not in s and "\r" not in s, repr(s)
    assert "caf\u00e9" in e.stderr and s.endswith("last"), repr(s)
    print(s)
PY
pass "ShardError's message holds the cleaned tail: $(grep -o 'second.*' "$tmp/py")"
umount_fs "$mnt" "$mpid"
