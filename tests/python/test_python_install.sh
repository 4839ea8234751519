#!/usr/bin/env bash
# test_python_install.sh - the Python package installed as docs/guide.md
# says, offline (no index, no wheels folder), from a copy of python/:
#  - into a virtual environment with --system-site-packages: imported from
#    there, outside the source tree, with Debian's numpy and torch;
#  - as tools/install does it (pip --break-system-packages into /usr/local,
#    here under a --root), with libmatgpu where meson installs it under the
#    same root: matgpu finds the library with no MATGPU_LIB.
# And from a source tree, matgpu finds the newest usable build tree library.
# Skips (77) only without pip, venv or setuptools for /usr/bin/python3.
set -uo pipefail
src=${MF_SOURCE_ROOT:?} lib=${MF_LIBMATGPU:?}
py=/usr/bin/python3
for mod in pip venv setuptools wheel; do
  "$py" -c "import $mod" 2>/dev/null ||
    { echo "skip: /usr/bin/python3 has no $mod"; exit 77; }
done

tmp=$(mktemp -d /tmp/mf-pyinst.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
# withlib COMMAND...: runs a Python that loads libmatgpu, with the
# sanitizer runtimes it needs first in a sanitizer build.
withlib() { LD_PRELOAD=${MF_PY_PRELOAD:-} ASAN_OPTIONS=detect_leaks=0 "$@"; }

# Offline, whatever this machine's pip configuration says.
export PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL MATGPU_LIB PYTHONPATH
mkdir "$tmp/src"
cp -r "$src/python/pyproject.toml" "$src/python/README.md" \
  "$src/python/matfs" "$src/python/matgpu" "$tmp/src/"
find "$tmp/src" -name __pycache__ -prune -exec rm -rf {} +
# a snapshot-like folder for the imported package to list
mkdir "$tmp/snap"
for k in 0 1 2 3 4; do printf 'abcd%.0s' $(seq 0 $k) >"$tmp/snap/shard-0000$k.u32"; done
cd "$tmp" || fail "cd $tmp"

# 1. a virtual environment that sees Debian's numpy and torch
"$py" -m venv --system-site-packages "$tmp/venv" || fail "python3 -m venv"
"$tmp/venv/bin/pip" install -q --no-build-isolation "$tmp/src" \
  >"$tmp/pip1.log" 2>&1 || { cat "$tmp/pip1.log"; fail "pip install into the venv"; }
out=$("$tmp/venv/bin/python" - "$tmp" <<'EOF'
import sys, matfs
print(matfs.__file__.startswith(sys.argv[1] + "/venv/"))
print([p.rsplit("/", 1)[1] for p in matfs.shards(sys.argv[1] + "/snap", 1, 2)])
try:
    import numpy, torch
except ImportError:
    print("no torch")
else:
    ds = matfs.ShardDataset(sys.argv[1] + "/snap", "<u4", rank=0, world_size=1)
    print(sum(1 for _ in ds), ds.torch_dtype)
EOF
) 2>&1
[ "$(sed -n 1p <<<"$out")" = True ] || fail "matfs not imported from the venv: $out"
[ "$(sed -n 2p <<<"$out")" = "['shard-00001.u32', 'shard-00003.u32']" ] ||
  fail "shards() from the venv: $out"
grep -Eq '^(15 torch.int64|no torch)$' <<<"$(sed -n 3p <<<"$out")" ||
  fail "ShardDataset from the venv: $out"
pass "pip install --no-build-isolation into a venv, offline; imported from there"

# matgpu from the venv, with the library given: the binding works.
v=$(MATGPU_LIB=$lib withlib "$tmp/venv/bin/python" -c 'import matgpu; print(matgpu.__file__, matgpu.version())') ||
  fail "import matgpu from the venv: $v"
[[ $v == "$tmp/venv/"* ]] || fail "matgpu not imported from the venv: $v"
pass "matgpu from the venv loads MATGPU_LIB ($v)"

# 2. as tools/install does, under a --root instead of /
"$py" -m pip install -q --root-user-action=ignore --no-build-isolation \
  --no-deps --break-system-packages --root "$tmp/root" "$tmp/src" \
  >"$tmp/pip2.log" 2>&1 || { cat "$tmp/pip2.log"; fail "pip install --root"; }
site=$(find "$tmp/root" -type d -name matfs -path '*-packages/matfs' | head -1)
[ -n "$site" ] || fail "no matfs package under $tmp/root"
site=${site%/matfs}
case $site in
"$tmp/root/usr/local/lib/python3"*) ;;
*) fail "pip put the package in $site, not under /usr/local/lib/python3*" ;;
esac
installed=$(cd "$site" && find . -type f -name '*.py' | sort | tr '\n' ' ')
[ "$installed" = "./matfs/__init__.py ./matfs/_batches.py ./matfs/_dataset.py ./matfs/_shards.py ./matfs/_xattr.py ./matgpu/__init__.py ./matgpu/_lib.py " ] ||
  fail "installed files: $installed"
arch=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("MULTIARCH") or "")')
libdir=$tmp/root/usr/local/lib${arch:+/$arch}
mkdir -p "$libdir" && cp "$lib" "$libdir/libmatgpu.so.0"
v=$(PYTHONPATH=$site withlib "$py" -c 'import matgpu, matgpu._lib as l
print(l.find_library(), matgpu.version())') || fail "import matgpu from $site: $v"
[ "${v%% *}" = "$libdir/libmatgpu.so.0" ] ||
  fail "matgpu loaded ${v%% *}, not the library beside its prefix"
pass "pip --root into /usr/local; matgpu finds PREFIX/lib/$arch/libmatgpu.so.0"

# MATGPU_LIB still wins over the installed library.
mkdir "$tmp/other" && cp "$lib" "$tmp/other/libmatgpu.so.0"
v=$(PYTHONPATH=$site MATGPU_LIB=$tmp/other/libmatgpu.so.0 withlib "$py" -c \
  'import matgpu._lib as l; print(l.find_library())') || fail "MATGPU_LIB: $v"
[ "$v" = "$tmp/other/libmatgpu.so.0" ] || fail "MATGPU_LIB ignored: $v"
pass "MATGPU_LIB wins over the installed library"

# 3. from a source tree: the build trees' libraries, newest first, leaving
# out a sanitizer build and a library still being linked (a dangling link)
tree=$tmp/tree
mkdir -p "$tree/python"
touch "$tree/meson.build"
cp -r "$tmp/src/matgpu" "$tree/python/"
for b in old new san half; do mkdir -p "$tree/build/$b/gpu" "$tree/build/$b/meson-info"; done
cp "$lib" "$tree/build/old/gpu/libmatgpu.so.0"
cp "$lib" "$tree/build/new/gpu/libmatgpu.so.0"
cp "$lib" "$tree/build/san/gpu/libmatgpu.so.0"
ln -s libmatgpu.so.0.1.0 "$tree/build/half/gpu/libmatgpu.so.0"
touch -d '-2 min' "$tree/build/old/gpu/libmatgpu.so.0"
touch -d '+1 min' "$tree/build/san/gpu/libmatgpu.so.0"
echo '[{"name": "b_sanitize", "value": "none"}]' \
  >"$tree/build/new/meson-info/intro-buildoptions.json"
echo '[{"name": "b_sanitize", "value": "address,undefined"}]' \
  >"$tree/build/san/meson-info/intro-buildoptions.json"
v=$(PYTHONPATH=$tree/python withlib "$py" -c 'import os
import matgpu._lib as l
print(" ".join(p[len(os.getcwd()) + 1:] for p in
               l._build_libs(os.path.dirname(l.__file__))))') ||
  fail "import matgpu from a source tree: $v"
[ "$v" = "tree/build/new/gpu/libmatgpu.so.0 tree/build/old/gpu/libmatgpu.so.0" ] ||
  fail "build trees' libraries: '$v'"
pass "from a source tree, matgpu takes build/*/gpu's newest unsanitized library"
