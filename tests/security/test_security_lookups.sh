#!/usr/bin/env bash
# test_security_lookups.sh - lookups of made-up fingerprints cost the
# daemon nothing: an unprivileged reader stats 5000 random names of 64 hex
# digits (each ENOENT); the daemon keeps no snapshot for any of them (the
# root's link count, 2 + the snapshots the mount holds, does not move, and
# its memory grows by less than 4 MiB), while a fingerprint only the
# catalog knows (an edited spec's old one) is still found and served.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

p=$tmp/p
install -d -m 0755 "$p" "$p/in"
echo x >"$p/in/a.txt"
write_spec() {
  cat >"$p/s.yaml.new" <<YAML
name: s
inputs: in/*.txt
stages:
  - exec: [/bin/sh, -c, 'cat; echo $1']
YAML
  mv "$p/s.yaml.new" "$p/s.yaml"
}
write_spec one
mnt=$tmp/mnt
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 20 has_name "$mnt" s || fail "s is not registered"
old=$(readlink "$mnt/s")
[ "$(cat "$mnt/s/shard-00000")" = "$(printf 'x\none')" ] || fail "s: bytes"
write_spec two
wait_for 20 sh -c "[ \"\$(readlink '$mnt/s')\" != $old ]" ||
  fail "the edit did not move the name"

rss() { awk '/^VmRSS/ {print $2}' "/proc/$mpid/status"; }
links() { python3 -c 'import os, sys; print(os.stat(sys.argv[1]).st_nlink)' "$mnt"; }
sleep 1.1 # past the root's attribute timeout
links0=$(links) rss0=$(rss)
as_user python3 - "$mnt" <<'PY' || fail "the lookups"
import errno, os, sys
mnt = sys.argv[1]
for i in range(5000):
    name = os.urandom(32).hex()
    try:
        os.stat(os.path.join(mnt, name))
    except OSError as e:
        assert e.errno == errno.ENOENT, (name, e)
    else:
        raise AssertionError("%s exists" % name)
PY
sleep 1.1
links1=$(links) rss1=$(rss)
[ "$links1" = "$links0" ] ||
  fail "the root's link count went from $links0 to $links1: lookups made snapshots"
# AddressSanitizer holds freed memory in quarantine: only the link count
# tells there
libs=$(ldd "$matfs" 2>/dev/null || true) # grep -q would cut ldd short
if ! grep -q libasan <<<"$libs"; then
  [ $((rss1 - rss0)) -lt 4096 ] ||
    fail "the daemon grew from $rss0 to $rss1 KiB over 5000 lookups"
fi
pass "5000 lookups of made-up fingerprints keep no snapshot"

[ "$(as_user cat "$mnt/$old/shard-00000")" = "$(printf 'x\none')" ] ||
  fail "the old fingerprint, known to the catalog only, is not served"
pass "a fingerprint only the catalog knows is still found"
umount_fs "$mnt" "$mpid"
