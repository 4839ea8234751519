# shellcheck shell=bash
# bench/build.sh - sourced by the bench scripts from the repository root:
# configures build/bench once (release, no tests) and builds the targets
# named in "$@" (all when none).
tools/deps build >/dev/null
[ -f build/bench/build.ninja ] || meson setup build/bench -Dbuildtype=release \
  -Dtests=disabled >/dev/null
ninja -C build/bench "$@" >/dev/null
