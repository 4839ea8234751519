#!/usr/bin/env bash
# test_mount_postgresql.sh - mounts whose catalog is PostgreSQL
# (--catalog postgresql://..., and a second daemon on the same store with
# -o catalog=URL carrying a password, which it warns about): two readers
# of a shard, one through each daemon, make one stage call and get the
# stages-by-hand bytes; matctl ls, cat and rm work through the
# same URL; no catalog.db appears in the store; the server restarted
# while mounted loses nothing: a materialized shard still reads, and a
# new shard still computes; a lost catalog (its schema dropped) is
# rebuilt from the store by fsck --rebuild, nothing computed again. Run inside tests/catalog/pg_server.sh, which
# gives MF_PG_URL (skips, 77, without it or without FUSE).
. "$MF_SOURCE_ROOT/tests/mount/lib.sh"
[ -n "${MF_PG_URL:-}" ] || { echo "skip: no MF_PG_URL (run inside pg_server.sh)"; exit 77; }

store=$tmp/store pipes=$tmp/p mnt=$tmp/mnt mnt2=$tmp/mnt2
mkdir -p "$pipes/in"
for k in 0 1 2 3; do printf 'line %d of input %d\n' $k $k >"$pipes/in/$k.txt"; done
cat >"$pipes/upper.yaml" <<'YAML'
name: upper
inputs: in/*.txt
shards: 2
stages:
  - exec: [/bin/sh, -c, 'echo call >> calls-$MATFS_SHARD; sleep 0.5; tr a-z A-Z']
YAML
# the stages by hand: input k belongs to shard k mod 2
by_hand() { cat "$pipes/in/$1.txt" "$pipes/in/$(($1 + 2)).txt" | tr a-z A-Z; }
by_hand 0 >"$tmp/want0"
by_hand 1 >"$tmp/want1"

mount_fs "$mnt" "$store" "$pipes" --catalog "$MF_PG_URL"
wait_for 10 test -L "$mnt/upper" || fail "upper not registered"
pw_url=${MF_PG_URL/matfs@/matfs:not-here@}
mount_fs "$mnt2" "$store" "$pipes" -o "catalog=$pw_url"
mpid2=$mpid
wait_for 10 test -L "$mnt2/upper" || fail "upper not registered by the second daemon"
grep -q "warning: catalog .* carries a password" "$log" ||
  fail "matfs did not warn of a password in argv"
grep -q not-here "$log" && fail "matfs printed the password: $(grep not-here "$log")"
[ -e "$store/catalog.db" ] && fail "a catalog.db in the store with --catalog"
pass "two daemons on a PostgreSQL catalog (--catalog, -o catalog); no catalog.db in the store"


# --- two readers, one through each daemon: one computation ---
cat "$mnt/upper/shard-00000" >"$tmp/r1" &
r1=$!
cat "$mnt2/upper/shard-00000" >"$tmp/r2" &
r2=$!
wait "$r1" || fail "reader 1"
wait "$r2" || fail "reader 2"
cmp "$tmp/r1" "$tmp/want0" || fail "reader 1's bytes differ from the stages by hand"
cmp "$tmp/r2" "$tmp/want0" || fail "reader 2's bytes differ from the stages by hand"
[ "$(calls "$pipes/calls-0")" -eq 1 ] || fail "shard 0 computed $(calls "$pipes/calls-0") times"
# the reads can end before the commit of what they read (served sealed)
wait_for 20 eval '[ "$(xattr "$mnt/upper/shard-00000" state)" = materialized ]' ||
  fail "shard 0 not materialized: $(xattr "$mnt/upper/shard-00000" state)"
pass "two readers, one stage call, the bytes by hand"

# --- matctl through the same URL ---
ctl() { "$matctl" --store "$store" --catalog "$MF_PG_URL" "$@"; }
ctl ls >"$tmp/ls" 2>&1 || fail "matctl ls: $(cat "$tmp/ls")"
grep -q upper "$tmp/ls" || fail "matctl ls does not list upper: $(cat "$tmp/ls")"
ctl cat upper 0 >"$tmp/c0" || fail "matctl cat"
cmp "$tmp/c0" "$tmp/want0" || fail "matctl cat's bytes differ"
[ "$(calls "$pipes/calls-0")" -eq 1 ] || fail "matctl cat computed again"
[ -e "$store/catalog.db" ] && fail "matctl --catalog made a catalog.db"
pass "matctl ls and cat through the URL"

umount_fs "$mnt2" "$mpid2"

# --- a password in argv is warned about; a wrong database is named ---
"$matctl" --store "$store" --catalog "$pw_url" ls >"$tmp/pw" 2>"$tmp/pw.err" ||
  fail "matctl with a password in the URL: $(cat "$tmp/pw.err")"
grep -q "warning: catalog .* carries a password" "$tmp/pw.err" ||
  fail "no warning for a password in argv: $(cat "$tmp/pw.err")"
grep -q upper "$tmp/pw" || fail "matctl ls with a password in the URL"
grep -q not-here "$tmp/pw.err" && fail "matctl printed the password: $(cat "$tmp/pw.err")"
bad_pw=${pw_url/\/matfs\?/\/no_such_db?}
"$matctl" --store "$store" --catalog "$bad_pw" ls >/dev/null 2>"$tmp/pw2.err" &&
  fail "matctl on a database that does not exist succeeded (with a password)"
grep -q 'no_such_db' "$tmp/pw2.err" || fail "the failed connect is not named: $(cat "$tmp/pw2.err")"
grep -q not-here "$tmp/pw2.err" && fail "a failed connect printed the password: $(cat "$tmp/pw2.err")"
bad_url=${MF_PG_URL/\/matfs\?/\/no_such_db?}
"$matctl" --store "$store" --catalog "$bad_url" ls >/dev/null 2>"$tmp/bad.err" &&
  fail "matctl on a database that does not exist succeeded"
grep -q 'no_such_db.*does not exist' "$tmp/bad.err" ||
  fail "the server's message is not shown: $(cat "$tmp/bad.err")"
pass "a password in argv warns, and no message shows it; a missing database is named"

# --- the server restarts while mounted ---
"$MF_PG_SERVER" restart || fail "restarting PostgreSQL"
cat "$mnt/upper/shard-00000" >"$tmp/r3" || fail "reading shard 0 after the restart"
cmp "$tmp/r3" "$tmp/want0" || fail "shard 0's bytes after the restart"
[ "$(calls "$pipes/calls-0")" -eq 1 ] || fail "shard 0 computed again after the restart"
cat "$mnt/upper/shard-00001" >"$tmp/r4" || fail "computing shard 1 after the restart"
cmp "$tmp/r4" "$tmp/want1" || fail "shard 1's bytes"
[ "$(calls "$pipes/calls-1")" -eq 1 ] || fail "shard 1 computed $(calls "$pipes/calls-1") times"
pass "after a server restart: a materialized shard reads, a new one computes"

# --- rm through the URL ---
# shard 1's read can end before its commit (served sealed), and matctl rm
# refuses a shard still being computed (EBUSY)
wait_for 20 eval '[ "$(xattr "$mnt/upper/shard-00001" state)" = materialized ]' ||
  fail "shard 1 not materialized: $(xattr "$mnt/upper/shard-00001" state)"
ctl rm upper >"$tmp/rm" 2>&1 || fail "matctl rm: $(cat "$tmp/rm")"
wait_for 10 sh -c "[ \"\$(\"$py\" -c 'import os,sys; print(os.getxattr(sys.argv[1], \"user.matfs.state\").decode())' \"$mnt/upper/shard-00000\")\" = absent ]" ||
  fail "shard 0 not absent after matctl rm: $(xattr "$mnt/upper/shard-00000" state)"
cat "$mnt/upper/shard-00000" >"$tmp/r5" || fail "reading shard 0 after rm"
cmp "$tmp/r5" "$tmp/want0" || fail "shard 0's bytes after rm"
[ "$(calls "$pipes/calls-0")" -eq 2 ] || fail "shard 0 not computed again after rm"
pass "matctl rm through the URL expires; the next read computes again"

umount_fs "$mnt" "$mpid"
pass "unmounted"

# --- a lost catalog is rebuilt from the store, in the same database ---
PGOPTIONS='-c client_min_messages=warning' \
  psql -q -X -v ON_ERROR_STOP=1 "$MF_PG_ADMIN" -c \
  'DROP SCHEMA matfs CASCADE; CREATE SCHEMA matfs AUTHORIZATION matfs' ||
  fail "dropping the catalog's schema"
ctl fsck --rebuild >"$tmp/rebuild" 2>&1 || fail "fsck --rebuild: $(cat "$tmp/rebuild")"
ctl cat upper 0 >"$tmp/c6" || fail "matctl cat after the rebuild"
cmp "$tmp/c6" "$tmp/want0" || fail "shard 0's bytes after the rebuild"
[ "$(calls "$pipes/calls-0")" -eq 2 ] ||
  fail "shard 0 computed again after the rebuild: $(cat "$tmp/rebuild")"
# shard 1 was expired by the rm and never read since: computed now
ctl cat upper 1 >"$tmp/c7" || fail "matctl cat after the rebuild"
cmp "$tmp/c7" "$tmp/want1" || fail "shard 1's bytes after the rebuild"
[ "$(calls "$pipes/calls-1")" -eq 2 ] || fail "shard 1 not computed once more"
[ -e "$store/catalog.db" ] && fail "the rebuild made a catalog.db"
pass "fsck --rebuild indexes the store into a lost PostgreSQL catalog"
