#!/usr/bin/env bash
# test_mount_held.sh - a descriptor held across the expiry of its shard,
# when no spec yields the snapshot any more, keeps fstat, read and mmap
# working until it is closed: after rm -r through the mount of a snapshot
# whose spec was removed, after matctl rm of a fingerprint its spec no
# longer yields, and after keep: 1 expired the previous fingerprint of an
# edited spec. Held from Python (fstat, read, a new mmap, numpy.fromfile)
# and from the shell (exec 3<, then cat <&3, which sizes from fstat).
# A mount whose connection is aborted while a descriptor is held (no
# release ever comes): the daemon ends, exits 0, and frees the handle
# (the sanitizer build's leak check says so).
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt
mkdir -p "$pipes/in"
printf 'input\n' >"$pipes/in/0.txt"
# spec NAME TAG [KEEP]: NAME and TAG make the fingerprint and the bytes
spec() {
  cat >"$pipes/$1.tmp" <<YAML
name: $1
inputs: in/*.txt
chunk_size: 16KiB
${3:+keep: $3}
stages:
  - exec: [/bin/sh, -c, 'cat; echo $1 $2; seq 1 100000']
YAML
  mv "$pipes/$1.tmp" "$pipes/$1.yaml"
}
want() { printf 'input\n%s %s\n' "$1" "$2"; seq 1 100000; }
link_is() { [ "$(readlink "$mnt/$1")" = "$2" ]; }
no_link() { ! [ -L "$mnt/$1" ]; }
gone() { local names; ! { names=$(ls "$mnt") && grep -qx "$1" <<<"$names"; }; }

# held PATH WANT TRIGGER...: opens PATH, reads part of it, runs TRIGGER,
# then checks fstat, read, mmap and numpy.fromfile on the descriptor.
held() {
  local path=$1 want=$2; shift 2
  "$py" - "$path" "$want" "$@" <<'PY'
import mmap, os, subprocess, sys, time
import numpy as np
path, want, trigger = sys.argv[1], open(sys.argv[2], "rb").read(), sys.argv[3:]
f = open(path, "rb", buffering=0)
head = f.read(50000)
assert head == want[:50000]
subprocess.run(trigger, check=True, stdout=subprocess.DEVNULL)
time.sleep(1.2)  # past the attribute timeout: fstat asks the daemon
assert os.fstat(f.fileno()).st_size == len(want), os.fstat(f.fileno())
assert head + f.read() == want
f.seek(0)
assert f.read() == want
with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
    assert mm[:] == want
f.seek(0)
assert np.fromfile(f, dtype=np.uint8).tobytes() == want
assert os.fstat(f.fileno()).st_size == len(want)
f.close()
PY
}

# shell_held PATH WANT TRIGGER...: the same with exec 3< and cat <&3
shell_held() {
  local path=$1 want=$2; shift 2
  exec 3<"$path" || return 1
  "$@" >/dev/null || { exec 3<&-; return 1; }
  sleep 1.2
  cat <&3 >"$tmp/got"
  local rc=$?
  exec 3<&-
  [ $rc -eq 0 ] && cmp -s "$tmp/got" "$want"
}

mount_fs "$mnt" "$store" "$pipes"

# --- rm -r of a snapshot whose spec was removed ---
for how in py sh; do
  name=rr$how
  spec "rr$how" one
  wait_for 10 test -L "$mnt/rr$how" || fail "no rr$how link"
  fp=$(readlink "$mnt/rr$how")
  want "$name" one >"$tmp/want"
  s=$mnt/$fp/shard-00000
  cmp "$s" "$tmp/want" || fail "rm -r ($how): first read"
  rm "$pipes/rr$how.yaml"
  wait_for 10 no_link "rr$how" || fail "a removed spec kept its name"
  if [ $how = py ]; then
    held "$s" "$tmp/want" rm -r "$mnt/$fp" || fail "rm -r: held descriptor ($how)"
  else
    shell_held "$s" "$tmp/want" rm -r "$mnt/$fp" || fail "rm -r: held descriptor ($how)"
  fi
  gone "$fp" || fail "rm -r ($how) left $fp listed"
done
pass "rm -r, no spec: a held descriptor keeps fstat, read and mmap"

# --- matctl rm of a fingerprint its edited spec no longer yields ---
for how in py sh; do
  name=mr$how
  spec "mr$how" one
  wait_for 10 test -L "$mnt/mr$how" || fail "no mr$how link"
  fp=$(readlink "$mnt/mr$how")
  want "$name" one >"$tmp/want"
  s=$mnt/$fp/shard-00000
  cmp "$s" "$tmp/want" || fail "matctl rm ($how): first read"
  spec "mr$how" two
  wait_for 10 bash -c "[ \"\$(readlink '$mnt/mr$how')\" != $fp ]" ||
    fail "an edit did not move mr$how"
  if [ $how = py ]; then
    held "$s" "$tmp/want" "$matctl" --store "$store" rm --force "$fp" ||
      fail "matctl rm: held descriptor ($how)"
  else
    shell_held "$s" "$tmp/want" "$matctl" --store "$store" rm --force "$fp" ||
      fail "matctl rm: held descriptor ($how)"
  fi
done
pass "matctl rm, spec edited: a held descriptor keeps fstat, read and mmap"

# --- keep: 1 expires the previous fingerprint of an edited spec ---
for how in py sh; do
  name=kp$how
  spec "kp$how" one 1
  wait_for 10 test -L "$mnt/kp$how" || fail "no kp$how link"
  fp=$(readlink "$mnt/kp$how")
  want "$name" one >"$tmp/want"
  s=$mnt/$fp/shard-00000
  cmp "$s" "$tmp/want" || fail "keep ($how): first read"
  # the trigger: the edit, then waiting until keep: 1 expired $fp
  trigger=(bash -c "pipes='$pipes'; $(declare -f spec); spec kp$how two 1
    for i in \$(seq 1 200); do
      ls '$mnt' | grep -qx $fp || exit 0
      sleep 0.05
    done
    exit 1")
  if [ $how = py ]; then
    held "$s" "$tmp/want" "${trigger[@]}" || fail "keep: held descriptor ($how)"
  else
    shell_held "$s" "$tmp/want" "${trigger[@]}" || fail "keep: held descriptor ($how)"
  fi
  gone "$fp" || fail "keep: 1 ($how) kept $fp"
done
pass "keep: 1, spec edited: a held descriptor keeps fstat, read and mmap"

umount_fs "$mnt" "$mpid"

# --- the connection aborted with a descriptor held ---
mount_fs "$mnt" "$store" "$pipes"
spec held t5
wait_for 10 test -L "$mnt/held" || fail "no name held"
exec 7<"$mnt/held/shard-00000"
head -c 100 <&7 >/dev/null || fail "read of the held descriptor"
conns=/sys/fs/fuse/connections fusectl=
if ! grep -q " $conns fusectl" /proc/self/mounts; then
  mount -t fusectl fusectl "$conns" || fail "cannot mount fusectl on $conns"
  fusectl=mounted
fi
conn=$(awk -v m="$mnt" '$5 == m { split($3, d, ":"); print d[2] }' /proc/self/mountinfo)
echo 1 >"$conns/$conn/abort" || fail "abort connection $conn"
[ -z "$fusectl" ] || umount "$conns"
wait_for 60 pid_gone "$mpid" || fail "matfs still runs 60 s after its connection was aborted"
exec 7<&-
wait "$mpid"; rc=$?
umount -l "$mnt" 2>/dev/null
[ $rc -eq 0 ] || fail "matfs exited $rc after its connection was aborted"
! grep -Eq 'runtime error|Sanitizer' "$log" || fail "a sanitizer reported: $(grep -A8 Sanitizer "$log" | head -20)"
pass "connection aborted with a descriptor held: the daemon exits 0, nothing leaked"
