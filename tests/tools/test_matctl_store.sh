#!/usr/bin/env bash
# test_matctl_store.sh - which store matctl uses without being told:
# --store, else MATFS_STORE, else the store of the one matfs mount of the
# caller or root, else the default folder only when it exists; nothing
# found fails and creates nothing, except warm of a spec file, which
# creates the default folder and says so. HOME and XDG_CACHE_HOME point
# into a temporary folder, so the real home is never touched.
#
# The mount cases are not here (this suite mounts nothing; docs/matctl.md
# states the rule). A matfs mount of this user or root that another test or
# a user left would be found before the default folder: the cases that
# need none wait for there to be none, and the test skips (77) when one
# stays or appears under them.
set -uo pipefail
build=${MF_BUILD_ROOT:?}
matctl=$build/tools/matctl
tmp=$(mktemp -d /tmp/mf-store.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() {
  mounted && { echo "skip: a matfs mount appeared under the test: $*"; exit 77; }
  echo "FAIL: $*" >&2; exit 1
}
pass() { echo "ok - $*"; }
export HOME=$tmp/home
unset XDG_CACHE_HOME MATFS_STORE
mkdir -p "$HOME" "$tmp/p/in"
printf 'alpha\n' >"$tmp/p/in/a.txt"
spec=$tmp/p/st.yaml
printf 'name: st\ninputs: in/*.txt\nstages:\n  - exec: [cat]\n' >"$spec"
default=$HOME/.cache/matfs

# mounted: whether a fuse.matfs mount of this user or root is listed
# (matctl also asks its root; listed is enough to make a case uncertain)
mounted() {
  grep ' - fuse\.matfs ' /proc/self/mountinfo |
    grep -Eq "[ ,]user_id=($(id -u)|0)(,| |\$)"
}
for i in $(seq 60); do mounted || break; sleep 1; done
mounted && { echo "skip: a matfs mount of this user or root is there"; exit 77; }

# empty_home: HOME has nothing in it
empty_home() { [ -z "$(ls -A "$HOME")" ]; }
none="found no store: no --store, no MATFS_STORE, no matfs mount of yours or root's"

# --- nothing found: every command that needs a store fails, creating nothing ---
fp=$("$matctl" fingerprint "$spec") || fail "fingerprint needs no store: $fp"
empty_home || fail "fingerprint made $(find "$HOME" -mindepth 1 | head -3)"
for cmd in "ls" "stat st" "cat st 0" "rm st" "verify st" "gc" "expire" \
  "fsck" "log" "stats" "warm st" "warm ${fp:0:12}"; do
  out=$("$matctl" $cmd 2>&1); rc=$?
  [ $rc -eq 1 ] && [[ $out == "matctl: $none, and no '$default'; name one with --store DIR or MATFS_STORE=DIR (matctl warm SPEC creates '$default')" ]] ||
    fail "'matctl $cmd' with no store: rc=$rc '$out'"
  empty_home || fail "'matctl $cmd' with no store made $(find "$HOME" -mindepth 1 | head -3)"
done
for bad in "$tmp/p/nosuch.yaml" "$tmp/p/in"; do   # a typo creates nothing
  out=$("$matctl" warm "$bad" 2>&1); rc=$?
  why="No such file or directory"; [ -d "$bad" ] && why="not a regular file"
  [ $rc -eq 1 ] && [[ $out == "matctl: $bad: cannot open: $why (found no store, and made none for it)" ]] ||
    fail "warm of a spec that is not there: rc=$rc '$out'"
  empty_home || fail "warm '$bad' made $(find "$HOME" -mindepth 1 | head -3)"
done
out=$(MATFS_STORE= "$matctl" ls 2>&1) && fail "an empty MATFS_STORE named a store: '$out'"
[[ $out == "matctl: $none"* ]] || fail "an empty MATFS_STORE: '$out'"
out=$(XDG_CACHE_HOME=$tmp/xdg "$matctl" ls 2>&1) && fail "ls under XDG_CACHE_HOME: '$out'"
[[ $out == *"and no '$tmp/xdg/matfs'"* ]] || fail "the message under XDG_CACHE_HOME: '$out'"
[ -e "$tmp/xdg" ] && fail "ls under XDG_CACHE_HOME made $tmp/xdg"
pass "no store found: refused with how to name one, nothing created; fingerprint needs none"

# --- --store, else MATFS_STORE ---
"$matctl" --store "$tmp/s1" warm "$spec" >/dev/null || fail "warm --store"
out=$(MATFS_STORE=$tmp/s1 "$matctl" ls) || fail "ls under MATFS_STORE"
grep -q "^st " <<<"$out" || fail "MATFS_STORE: '$out'"
MATFS_STORE=$tmp/s1 "$matctl" cat st 0 | cmp -s - "$tmp/p/in/a.txt" || fail "cat under MATFS_STORE"
out=$(MATFS_STORE=$tmp/s1 "$matctl" --store "$tmp/s2" ls) || fail "--store over MATFS_STORE"
[ -z "$(sed 1d <<<"$out")" ] || fail "--store did not win over MATFS_STORE: '$out'"
empty_home || fail "--store and MATFS_STORE made $(find "$HOME" -mindepth 1 | head -3)"
pass "--store, else MATFS_STORE"

# --- warm of a spec file creates the default folder, and says so; then
# every command finds it ---
out=$("$matctl" warm "$spec" 2>&1) || fail "warm SPEC with no store: '$out'"
[[ $out == "matctl: no store yet: creating '$default' (name another with --store DIR or MATFS_STORE=DIR)"* ]] ||
  fail "warm SPEC did not say it creates '$default': '$out'"
[ -f "$default/catalog.db" ] || fail "warm SPEC made no store at $default"
out=$("$matctl" ls 2>&1) || fail "ls of the default store: '$out'"
grep -q "^st .* 1/1 " <<<"$out" || fail "ls of the default store: '$out'"
"$matctl" cat st 0 | cmp -s - "$tmp/p/in/a.txt" || fail "cat of the default store"
out=$("$matctl" warm "$spec" 2>&1) || fail "warm again: '$out'"
[[ $out == *"creating"* ]] && fail "warm said again it creates the store: '$out'"
out=$(XDG_CACHE_HOME=$tmp/xdg "$matctl" warm "$spec" 2>&1) || fail "warm under XDG_CACHE_HOME: '$out'"
[[ $out == "matctl: no store yet: creating '$tmp/xdg/matfs' "* ]] && [ -f "$tmp/xdg/matfs/catalog.db" ] ||
  fail "warm under XDG_CACHE_HOME: '$out'"
pass "warm SPEC creates the default store and says so; the others then find it"
mounted && { echo "skip: a matfs mount appeared under the test"; exit 77; }
echo "all matctl store tests passed"
