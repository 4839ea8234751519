#!/usr/bin/env bash
# bench/python/run.sh - records/s of matfs.ShardDataset against a plain
# numpy.memmap loop over the same files, in one run (bench.py says what
# each line means). Runs Debian's /usr/bin/python3 with numpy and torch
# (tools/deps test installs them). usage: bench/python/run.sh
# (env: SHARDS, TOKENS, L, B, ROUNDS, TOKENS_DIV)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec nice /usr/bin/python3 "$here/bench.py"
