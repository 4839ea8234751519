#!/usr/bin/env bash
# test_install.sh - `meson install` into a temporary DESTDIR, then what was
# installed, used as a user would: the programs run, each man page renders
# without a groff warning and covers every option and command of --help,
# the systemd unit verifies (when systemd-analyze is there) and its
# command line mounts and unmounts on SIGTERM, pkg-config finds libmatgpu
# and a program builds and runs against it, the bash completion offers
# matctl's commands, flags and names, and `mount -t fuse.matfs` mounts
# through the installed matfs (in a mount namespace of its own, where the
# installed matfs is the one mount(8)'s PATH finds). Parts that need FUSE
# or root say so and are left out; with all of them missing it skips (77).
set -uo pipefail
src=${MF_SOURCE_ROOT:?} build=${MF_BUILD_ROOT:?}
tmp=$(mktemp -d /tmp/mf-install.XXXXXX)
dest=$tmp/dest
daemon=
cleanup() {
  if [ -n "$daemon" ]; then
    grep -q " $tmp/umnt fuse" /proc/self/mounts && umount -l "$tmp/umnt"
    kill -9 "$daemon" 2>/dev/null
    wait "$daemon" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
skip() { echo "skip - $*"; }

meson install -C "$build" --destdir "$dest" --no-rebuild --quiet \
  >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "meson install"; }
# where the configured prefix put things, as found in DESTDIR
found() { find "$dest" -path "$1" \( -type f -o -type l \) | head -n 1; }
matctl=$(found '*/bin/matctl')
matfs=$(found '*/bin/matfs')
[ -x "$matctl" ] || fail "no bin/matctl installed"
bin=$(dirname "$matctl")
for f in '*/man1/matctl.1' '*/man5/matfs-spec.5' '*/man8/matfs.8' \
    '*/include/matgpu.h' '*/pkgconfig/matgpu.pc' '*/libmatgpu.so' \
    '*/completions/matctl'; do
  [ -n "$(found "$f")" ] || fail "nothing installed as $f"
done
if [ -n "$matfs" ]; then
  unit=$(found '*/lib/systemd/system/matfs@.service')
  conf=$(found '*/matfs/example.conf')
  if [ -z "$unit" ] || [ -z "$conf" ]; then
    fail "no matfs@.service or example.conf"
  fi
fi
pass "meson install puts programs, pages, library, unit and completion in DESTDIR"

# --- the installed programs run, and not from the build tree ---
ver=$("$matctl" --version) || fail "matctl --version"
grep -qx 'matctl [0-9.]*' <<<"$ver" || fail "matctl --version"
"$matctl" --help >"$tmp/matctl.help" || fail "matctl --help"
grep -q '^usage: matctl' "$tmp/matctl.help" || fail "matctl --help: $(head -1 "$tmp/matctl.help")"
if [ -n "$matfs" ]; then
  ver=$("$matfs" --version) || fail "matfs --version"
  grep -q '^matfs [0-9.]* (libfuse' <<<"$ver" || fail "matfs --version"
  "$matfs" --help >"$tmp/matfs.help" || fail "matfs --help"
fi
for p in "$matctl" "$matfs" "$(found '*/libmatgpu.so.*.*')"; do
  [ -n "$p" ] || continue
  dyn=$(readelf -d "$p") && rpath=$(grep -E 'RPATH|RUNPATH' <<<"$dyn") &&
    grep -q "$build" <<<"$rpath" &&
    fail "$p still looks for libraries in the build tree"
done
cp -r "$src/examples" "$tmp/ex"
fp=$("$matctl" fingerprint "$tmp/ex/pipelines/tokens.yaml") || fail "matctl fingerprint"
[[ $fp =~ ^[0-9a-f]{64}$ ]] || fail "matctl fingerprint printed '$fp'"
pass "installed matfs and matctl run (--version, --help, fingerprint)"

# --- man pages: render without warnings, name themselves, cover --help ---
command -v man >/dev/null || fail "no man (tools/deps test installs man-db)"
for page in "$(found '*/man8/matfs.8')" "$(found '*/man1/matctl.1')" \
    "$(found '*/man5/matfs-spec.5')"; do
  MANWIDTH=80 man -l --warnings "$page" >"$tmp/page" 2>"$tmp/warn" ||
    fail "man -l $page"
  [ -s "$tmp/warn" ] && fail "man -l $page: $(head -3 "$tmp/warn")"
  grep -q '^NAME' "$tmp/page" || fail "$page has no NAME section"
  name=$(basename "$page"); name=${name%.*}
  whatis=$(lexgrog "$page") || fail "$page: whatis cannot read its NAME"
  grep -q "\"$name - " <<<"$whatis" || fail "$page: whatis cannot read its NAME"
done
# the troff text as plain words: \- is -, fonts dropped
plain() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' "$1"; }
plain "$(found '*/man1/matctl.1')" >"$tmp/matctl.txt"
cmds=$(sed -n 's/^  \([a-z]\{2,\}\) .*/\1/p' "$tmp/matctl.help")
[ "$(echo "$cmds" | wc -l)" -ge 10 ] || fail "matctl --help lists only: $cmds"
for c in $cmds; do
  grep -qE "^\.(B|BR|BI) $c( |\$)" "$tmp/matctl.txt" || fail "matctl.1 has no command '$c'"
done
flags=$(grep -o -- '--[a-z][a-z-]*' "$tmp/matctl.help" | sort -u)
for f in $flags --help --version --jobs; do
  grep -q -- "$f" "$tmp/matctl.txt" || fail "matctl.1 does not mention $f"
done
if [ -n "$matfs" ]; then
  plain "$(found '*/man8/matfs.8')" >"$tmp/matfs.txt"
  opts=$(grep -o -- '--[a-z][a-z-]*\|^       [a-z_]*=\|^       allow_other' \
    "$tmp/matfs.help" | tr -d ' =' | sort -u)
  [ "$(echo "$opts" | wc -l)" -ge 10 ] || fail "matfs --help options: $opts"
  for o in $opts -f -d -o; do
    grep -q -- "$o" "$tmp/matfs.txt" || fail "matfs.8 does not mention $o"
  done
fi
pass "man -l renders each page without warnings; pages cover every option of --help"

# --- the systemd unit ---
if [ -n "$matfs" ]; then
  for v in MATFS_STORE MATFS_PIPELINES MATFS_MOUNTPOINT MATFS_OPTIONS; do
    grep -q "^$v=" "$conf" || fail "example.conf does not set $v"
    grep -q "\${$v}" "$unit" || fail "matfs@.service does not use $v"
  done
  installed_bin=${bin#"$dest"}
  grep -q "^ExecStart=$installed_bin/matfs -f " "$unit" ||
    fail "ExecStart is not $installed_bin/matfs -f: $(grep ExecStart= "$unit")"
  if command -v systemd-analyze >/dev/null; then
    # the unit as installed, with its programs where DESTDIR has them
    mkdir -p "$tmp/units"
    sed "s|$installed_bin/|$bin/|g" "$unit" >"$tmp/units/matfs@test.service"
    MANPATH=$(dirname "$(dirname "$(found '*/man8/matfs.8')")") \
      systemd-analyze verify "$tmp/units/matfs@test.service" \
      >"$tmp/verify" 2>&1 || fail "systemd-analyze verify: $(cat "$tmp/verify")"
    [ -s "$tmp/verify" ] && fail "systemd-analyze verify: $(cat "$tmp/verify")"
    pass "systemd-analyze verify finds nothing in matfs@.service (man pages included)"
  else
    skip "no systemd-analyze here: matfs@.service not verified"
  fi
fi

# --- pkg-config and a program built against the installed libmatgpu ---
pc_dir=$(dirname "$(found '*/pkgconfig/matgpu.pc')")
pc_flags=$(PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_PATH=$pc_dir \
  pkg-config --cflags --libs matgpu) ||
  fail "pkg-config matgpu"
[[ $pc_flags == *"-I$dest"* && $pc_flags == *"-L$dest"* && $pc_flags == *-lmatgpu* ]] ||
  fail "pkg-config --cflags --libs matgpu gave '$pc_flags'"
cat >"$tmp/use.c" <<'C'
#include <matgpu.h>
#include <stdio.h>
int main(void)
{
	printf("%s %d\n", mg_version(), mg_device_count() >= 0);
	return 0;
}
C
# shellcheck disable=SC2086 # pkg-config's words
cc -o "$tmp/use" "$tmp/use.c" $pc_flags || fail "cc against the installed matgpu.h"
lib_dir=$(dirname "$(found '*/libmatgpu.so')")
# a sanitized build's library wants its runtime, which this program lacks
out=$(LD_LIBRARY_PATH=$lib_dir ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 \
  "$tmp/use") || fail "program linked with -lmatgpu: exit $?"
[[ $out =~ ^[0-9]+\.[0-9]+.*\ 1$ ]] || fail "program linked with -lmatgpu printed '$out'"
pass "pkg-config --cflags --libs matgpu; a program builds and runs against it"

# --- bash completion ---
compl=$(found '*/completions/matctl')
bash -n "$compl" || fail "bash -n $compl"
store=$tmp/cstore
"$matctl" --store "$store" warm "$tmp/ex/pipelines/tokens.yaml" >/dev/null ||
  fail "matctl warm the example"
# complete WORDS...: what the completion offers for the last word
complete_words() {
  PATH=$bin:$PATH bash -c 'source "$1"; shift
    complete -p matctl >/dev/null || exit 3
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"
    _matctl; printf "%s\n" "${COMPREPLY[@]}" | sort' _ "$compl" "$@"
}
[ "$(complete_words matctl '')" = "$(echo "$cmds" | sort)" ] ||
  fail "completion of commands: $(complete_words matctl '' | tr '\n' ' ')"
got=$(complete_words matctl --)
for f in --store --help --version; do
  grep -qx -- "$f" <<<"$got" || fail "completion of 'matctl --' lacks $f"
done
while read -r cmd want; do
  got=$(complete_words matctl "$cmd" -)
  for f in $want; do
    grep -qx -- "$f" <<<"$got" || fail "completion of 'matctl $cmd -' lacks $f"
  done
done <<'W'
ls --json
stat --json
fingerprint --explain
warm -j --jobs
expire --older-than --json
fsck --rebuild --json
W
for c in $cmds ''; do complete_words matctl ${c:+"$c"} --; done >"$tmp/offered"
for f in $(grep -o -- '--[a-z][a-z-]*' "$tmp/matctl.help" | sort -u); do
  grep -qx -- "$f" "$tmp/offered" || fail "completion never offers $f of matctl --help"
done
got=$(complete_words matctl --store "$store" stat to)
grep -qx tokens <<<"$got" || fail "completion of a name in the store: '$got'"
[ "$(complete_words matctl --store "$tmp/none" stat x)" = "" ] ||
  fail "completion offered names of a store that does not exist"
[ -e "$tmp/none" ] && fail "completion created a store"
pass "bash completion: commands, every flag of --help, names from the store"

if [ -z "$matfs" ]; then
  skip "matfs was not built (no libfuse3): no mount"
  exit 0
fi
if [ ! -e /dev/fuse ] || [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
  skip "mounting needs /dev/fuse, root and unshare: not mounted"
  exit 0
fi

# the example's stages by hand: what shard 0 must hold
# shellcheck disable=SC2046 # the file names, one word each
( cd "$tmp/ex/pipelines" &&
  cat $(ls ../data/*.txt | awk '(NR - 1) % 2 == 0') |
    tr A-Z a-z | python3 tokenize.py --vocab 65536 ) >"$tmp/want0"
[ -s "$tmp/want0" ] || fail "reference shard is empty"

# --- the unit's command line: mounts, serves, unmounts on SIGTERM ---
mkdir -p "$tmp/umnt"
(
  # shellcheck disable=SC2034 # read by the substitution below
  MATFS_STORE=$tmp/ustore MATFS_PIPELINES=$tmp/ex/pipelines \
    MATFS_MOUNTPOINT=$tmp/umnt MATFS_OPTIONS=workers=2
  line=$(sed -n "s|^ExecStart=$installed_bin/|$bin/|p" "$unit")
  for v in MATFS_STORE MATFS_PIPELINES MATFS_MOUNTPOINT MATFS_OPTIONS; do
    line=${line//\$\{$v\}/${!v}}
  done
  # shellcheck disable=SC2086 # systemd splits ExecStart on spaces too
  exec $line
) >"$tmp/unit.log" 2>&1 &
daemon=$!
for _ in $(seq 1 200); do
  grep -q " $tmp/umnt fuse.matfs " /proc/self/mounts && break
  kill -0 "$daemon" 2>/dev/null || break
  sleep 0.05
done
grep -q " $tmp/umnt fuse.matfs " /proc/self/mounts ||
  fail "the unit's ExecStart did not mount: $(cat "$tmp/unit.log")"
cmp "$tmp/umnt/tokens/shard-00000.u32" "$tmp/want0" ||
  fail "shard 0 through the unit's mount differs from the stages by hand"
kill -TERM "$daemon"
wait "$daemon"
rc=$?
daemon=
[ "$rc" -eq 0 ] || fail "matfs -f exited $rc on SIGTERM: $(cat "$tmp/unit.log")"
grep -q " $tmp/umnt fuse" /proc/self/mounts && fail "still mounted after SIGTERM"
pass "the unit's ExecStart mounts and serves; SIGTERM unmounts, exit 0"

# --- mount -t fuse.matfs: mount(8) -> mount.fuse3 -> matfs from PATH ---
# mount(8) gives helpers a fixed PATH (/usr/local/sbin:/usr/local/bin:...),
# so in a mount namespace of this test /usr/local/sbin holds the installed
# matfs, first on that PATH; the daemon's own exe proves which one ran.
[ -d /usr/local/sbin ] || { skip "no /usr/local/sbin to bind over: not mounted"; exit 0; }
mkdir -p "$tmp/sbin" "$tmp/mnt"
ln -s "$matfs" "$tmp/sbin/matfs"
unshare -m --propagation private bash -c '
  set -u
  tmp=$1 matfs=$2
  fail() { echo "FAIL: $*" >&2; exit 1; }
  trap "grep -q \" \$tmp/mnt fuse\" /proc/self/mounts && umount -l \$tmp/mnt" EXIT
  # detach the copies of other tests FUSE mounts this namespace holds:
  # they would keep those mounts, and their daemons, alive
  awk "\$3 ~ /^fuse/ { print \$2 }" /proc/self/mounts | while read -r m; do
    umount -l "$(printf "%b" "$m")" 2>/dev/null
  done
  mount --bind "$tmp/sbin" /usr/local/sbin || fail "bind over /usr/local/sbin"
  mount -t fuse.matfs matfs "$tmp/mnt" \
    -o "store=$tmp/mstore,pipelines=$tmp/ex/pipelines,nofail" ||
    fail "mount -t fuse.matfs exited $?"
  grep -q " $tmp/mnt fuse.matfs " /proc/self/mounts || fail "not in /proc/self/mounts"
  me=$(readlink /proc/self/ns/mnt) daemon=
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$me" ] &&
      [ "$(readlink "$p/exe" 2>/dev/null)" = "$(readlink -f "$matfs")" ] &&
      daemon=${p#/proc/}
  done
  [ -n "$daemon" ] || fail "no daemon running the installed matfs"
  cmp "$tmp/mnt/tokens/shard-00000.u32" "$tmp/want0" ||
    fail "shard 0 through mount -t fuse.matfs differs from the stages by hand"
  umount "$tmp/mnt" || fail "umount exited $?"
  for _ in $(seq 1 1200); do kill -0 "$daemon" 2>/dev/null || exit 0; sleep 0.05; done
  fail "the daemon $daemon did not exit 60 s after umount"
' _ "$tmp" "$matfs" || fail "mount -t fuse.matfs through the installed matfs"
pass "mount -t fuse.matfs runs the installed matfs; a shard reads right; umount ends it"
