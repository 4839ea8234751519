#!/usr/bin/env bash
# test_security_nofile.sh - an ordinary reader cannot use up the daemon's
# descriptors. The daemon runs with a hard limit of 400 descriptors (it
# raises its soft limit to that), so each reader uid may hold 100 open
# shards. The user's two processes open every shard of a 300-shard
# pipeline and keep them open: their opens past the bound fail with
# EMFILE, and meanwhile root opens, computes and reads another pipeline's
# shards. Before, the user's handles took every descriptor and root's
# opens and computations failed. Directory handles, each holding a copy
# of its listing, stop at 256 per uid.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
command -v prlimit >/dev/null || skip "no prlimit"
add_user

p=$tmp/p
install -d -m 0755 "$p" "$p/many" "$p/other"
for i in $(seq 1 300); do echo "$i" >"$p/many/$i.txt"; done
for i in 1 2 3; do echo "other $i" >"$p/other/$i.txt"; done
printf 'name: many\ninputs: many/*.txt\nstages:\n  - exec: [cat]\n' >"$p/many.yaml"
printf 'name: other\ninputs: other/*.txt\nstages:\n  - exec: [cat]\n' >"$p/other.yaml"
mnt=$tmp/mnt
mkdir -p "$mnt"
prlimit --nofile=256:400 -- "$matfs" --store "$tmp/store" --pipelines "$p" -f \
  -o allow_other "$mnt" >>"$log" 2>&1 &
mpid=$!
daemons+=("$mpid")
mounts+=("$mnt")
wait_for 20 is_mounted "$mnt" || fail "matfs did not mount"
wait_for 20 has_name "$mnt" many || fail "many is not registered"
wait_for 20 has_name "$mnt" other || fail "other is not registered"
soft=$(awk '/Max open files/ {print $4}' "/proc/$mpid/limits")
[ "$soft" = 400 ] || fail "the daemon's soft limit is $soft, not its hard 400"

# hold: opens every shard of many from offset $1 on, keeps them open until
# $2 exists, prints how many it holds and how many opens failed EMFILE
# (as the user, or as uid $as when set)
hold() {
  local run=(as_user)
  [ -n "${as:-}" ] && run=(setpriv --reuid="$as" --regid="$as" --clear-groups)
  "${run[@]}" /usr/bin/python3 - "$mnt/many" "$1" "$2" "$3" <<'PY'
import errno, os, sys, time
d, start, stop, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
names = sorted(os.listdir(d))
held, emfile = [], 0
for name in names[start:] + names[:start]:
    try:
        held.append(os.open(os.path.join(d, name), os.O_RDONLY))
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
        emfile += 1
open(out + ".tmp", "w").write("%d %d\n" % (len(held), emfile))
os.rename(out + ".tmp", out)
while not os.path.exists(stop):
    time.sleep(0.05)
PY
}
stop=$tmp/stop
releases+=("$stop")
out=$tmp/out
install -d -o "$user" -m 0755 "$out"
hold 0 "$stop" "$out/h1" &
h1=$!
hold 150 "$stop" "$out/h2" &
h2=$!
wait_for 120 test -e "$out/h1" || fail "the first reader never finished opening"
wait_for 120 test -e "$out/h2" || fail "the second reader never finished opening"
read -r held1 refused1 <"$out/h1"
read -r held2 refused2 <"$out/h2"
[ $((held1 + held2)) -eq 100 ] ||
  fail "the user holds $held1 + $held2 shards, not its bound of 100"
[ $((refused1 + refused2)) -eq 500 ] ||
  fail "$refused1 + $refused2 opens failed with EMFILE, not 500"
for i in 0 1 2; do
  got=$(cat "$mnt/other/shard-0000$i") || fail "root's read of other shard $i failed while the user holds its bound"
  [ "$got" = "other $((i + 1))" ] || fail "other shard $i: '$got'"
done
grep -q "uid $uid holds 100 open shard files" "$log" || fail "the bound is not logged"
pass "one user's open shards stop at its bound (EMFILE); root opens and computes meanwhile"
touch "$stop"
wait "$h1" "$h2"

# subordinate uids (a rootless container's, granted in /etc/subuid) are
# their user's: two of them and the user herself hold 100 shards in all
if command -v usermod >/dev/null && command -v setpriv >/dev/null; then
  sub=$((1000000000 + (uid % 10000) * 65536))
  usermod --add-subuids "$sub-$((sub + 65535))" "$user" ||
    fail "usermod --add-subuids"
  sleep 1.2 # the daemon looks at /etc/subuid once a second
  rm -f "$stop" "$out"/h*
  chmod 1777 "$out" # the subordinate uids write there too
  as=$((sub + 1)) hold 0 "$stop" "$out/h1" &
  h1=$!
  wait_for 120 test -e "$out/h1" || fail "subordinate uid 1 never finished opening"
  as=$((sub + 2)) hold 150 "$stop" "$out/h2" &
  h2=$!
  wait_for 120 test -e "$out/h2" || fail "subordinate uid 2 never finished opening"
  hold 200 "$stop" "$out/h3" &
  h3=$!
  wait_for 120 test -e "$out/h3" || fail "the user never finished opening"
  read -r held1 _ <"$out/h1"
  read -r held2 _ <"$out/h2"
  read -r held3 _ <"$out/h3"
  [ "$held1" = 100 ] && [ "$held2" = 0 ] && [ "$held3" = 0 ] ||
    fail "subordinate uids and their user hold $held1 + $held2 + $held3 shards, not 100 in all"
  got=$(cat "$mnt/other/shard-00001") || fail "root's read while the user's uids hold the bound"
  [ "$got" = "other 2" ] || fail "other shard 1: '$got'"
  pass "a user's subordinate uids count as her: 100 shards in all (EMFILE)"
  touch "$stop"
  wait "$h1" "$h2" "$h3"
fi

# directory handles each hold a listing: 256 per uid, then EMFILE
as_user python3 - "$mnt/many" <<'PY' || fail "the directory handles"
import errno, os, sys
held, refused = [], 0
for i in range(400):
    try:
        held.append(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY))
    except OSError as e:
        assert e.errno == errno.EMFILE, e
        refused += 1
assert (len(held), refused) == (256, 144), (len(held), refused)
PY
ls "$mnt/many" >/dev/null || fail "root cannot list while the user held its directory bound"
pass "one user's directory handles stop at 256 (EMFILE)"
umount_fs "$mnt" "$mpid"
