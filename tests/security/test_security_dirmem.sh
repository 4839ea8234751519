#!/usr/bin/env bash
# test_security_dirmem.sh - an ordinary reader cannot make the daemon hold
# unbounded memory in directory listings. Each open directory handle holds
# a copy of its folder's listing (about 8 MB for a snapshot of 20,000
# shards); a uid may hold 256 handles, and before, 256 handles on such a
# snapshot took the daemon past 1.2 GB. Now a uid's listings past its
# first stop at MFS_DIR_BYTES_CAP (64 MiB): its further opendirs fail with
# EMFILE, logged, while root lists the same folder; once the user closes
# its handles, it lists again.
. "$MF_SOURCE_ROOT/tests/security/lib.sh"
add_user

p=$tmp/p mnt=$tmp/mnt
install -d -m 0755 "$p" "$p/in"
(cd "$p/in" && seq -f 'f%06g.txt' 1 20000 | xargs touch)
printf 'name: s\ninputs: in/*.txt\nshards: 20000\nstages:\n  - exec: [cat]\n' >"$p/s.yaml"
mount_fs "$mnt" "$tmp/store" "$p"
wait_for 60 has_name "$mnt" s || fail "s is not registered"
fp=$(readlink "$mnt/s")

# the user opens handles on the snapshot until one fails; prints how many
# it held and the errno of the one that failed, then waits for $2
as_user python3 - "$mnt/$fp" "$tmp/go" >"$tmp/held" 2>&1 <<'PY' &
import errno, os, sys, time
its = []
err = "none"
for i in range(300):
    try:
        it = os.scandir(sys.argv[1]); next(it); its.append(it)
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno)); break
print(len(its), err, flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
PY
hp=$!
daemons+=("$hp")
wait_for 120 test -s "$tmp/held" || fail "the user's handles: no answer"
read -r held err <"$tmp/held"
[ "$err" = EMFILE ] || fail "the user's opendirs never failed EMFILE: $held held, $err"
[ "$held" -ge 1 ] && [ "$held" -lt 20 ] ||
  fail "the user held $held listings of 20,000 shards (64 MiB allows about 8)"
n=$(ls "$mnt/$fp" | wc -l)
[ "$n" = 20000 ] || fail "root lists $n entries while the user holds its listings"
wait_for 20 grep -q "MiB of directory listings, its bound" "$log" ||
  fail "the bound is not logged"
pass "a reader's listings stop at its bound ($held held, then EMFILE); root lists"

touch "$tmp/go"
wait "$hp" || fail "the user's holder exited $?"
n=$(as_user ls "$mnt/$fp" | wc -l)
[ "$n" = 20000 ] || fail "the user lists $n entries after closing its handles"
pass "closed, its listings count no more"
umount_fs "$mnt" "$mpid"
