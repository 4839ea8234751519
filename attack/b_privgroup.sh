#!/usr/bin/env bash
# A user v whose primary gid is u's "private" group (no gr_mem, so
# group_is_private() says yes) can write u's 0775 spec folder and have
# code of v's run as u by the root daemon.
export MF_SOURCE_ROOT=${MF_SOURCE_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}; export MF_BUILD_ROOT=${MF_BUILD_ROOT:-$MF_SOURCE_ROOT/build/dev}
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user; u=$user; ugid=$(id -g "$u")
v=mfsv$$; useradd -M -N -g "$ugid" -s /bin/sh "$v"; users+=("$v")
d=$tmp/u; install -d -o "$u" -g "$u" -m 0755 "$d"
install -d -o "$u" -g "$u" -m 0775 "$d/p"
runuser -u "$u" -- sh -c 'umask 002; mkdir "$1/in"; echo x >"$1/in/a.txt"' sh "$d/p"
runuser -u "$u" -- tee "$d/p/s.yaml" >/dev/null <<'YAML'
name: s
inputs: in/*.txt
stages:
  - exec: [./tool.sh]
YAML
# u's own program, made with u's umask 002 (mode 0775)
runuser -u "$u" -- sh -c 'umask 002; printf "#!/bin/sh\necho u-tool\n" >"$1/tool.sh"; chmod +x "$1/tool.sh"' sh "$d/p"
# v (in group u only through its primary gid) rewrites it
runuser -u "$v" -- sh -c 'printf "#!/bin/sh\necho run-by-v-as; id\n" >"$1/tool.sh"' sh "$d/p" || fail "v cannot write"
ls -l "$d/p/tool.sh"
mnt=$tmp/mnt; mount_fs "$mnt" "$tmp/store" "$d/p"
wait_for 20 has_name "$mnt" s || { tail "$log"; fail "s not registered"; }
cat "$mnt/s/shard-00000"
umount_fs "$mnt" "$mpid"
