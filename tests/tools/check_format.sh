#!/usr/bin/env bash
# check_format.sh - every tracked C file is formatted as .clang-format says.
cd "${MF_SOURCE_ROOT:?}" || exit 1
command -v clang-format >/dev/null || { echo "clang-format missing"; exit 77; }
files=$(git ls-files '*.c' '*.h' 2>/dev/null) || { echo "not a git checkout"; exit 77; }
[ -n "$files" ] || exit 77
clang-format --dry-run --Werror $files
