#!/usr/bin/env bash
# A user with 4 specs whose dep is a sparse 1 TiB file (hashing takes
# minutes, nothing hangs) holds every registration slot: another spec
# registers only after -o spec_timeout, and with 4k such specs after k
# timeouts.
export MF_SOURCE_ROOT=${MF_SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}; export MF_BUILD_ROOT=${MF_BUILD_ROOT:-$MF_SOURCE_ROOT/build/dev}
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user
u=$tmp/u; install -d -o "$user" -g "$user" -m 0755 "$u"
as_user mkdir "$u/p" "$u/p/in"
as_user sh -c 'echo x >"$1/in/a.txt"; truncate -s 1T "$1/big.bin"' sh "$u/p"
for i in $(seq 1 ${N:-8}); do
as_user tee "$u/p/a$i.yaml" >/dev/null <<YAML
name: a$i
inputs: in/*.txt
stages:
  - exec: [cat]
    deps: [big.bin]
YAML
done
mnt=$tmp/mnt
t0=$(date +%s)
mount_fs "$mnt" "$tmp/store" "$u/p" -o spec_timeout=10
t0=$(date +%s); sleep 1
as_user tee "$u/p/zz.yaml" >/dev/null <<'YAML'
name: zz
inputs: in/*.txt
stages:
  - exec: [cat]
YAML

wait_for 60 has_name "$mnt" zz || fail "zz never registered"
echo "zz registered after $(( $(date +%s) - t0 )) s (spec_timeout=10)"
echo "threads of the daemon: $(ls /proc/$mpid/task | wc -l)"
grep -i "took longer" "$log" | head
umount_fs "$mnt" "$mpid" || true
