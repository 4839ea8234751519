#!/usr/bin/env bash
# bench/build.sh - used by the bench scripts: configures build/bench once
# (release, no tests) and builds the targets named (all when none).
# Usage: bench/build.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps build >/dev/null
[ -f build/bench/build.ninja ] || meson setup build/bench -Dbuildtype=release \
  -Dtests=disabled >/dev/null
ninja -C build/bench "$@" >/dev/null
