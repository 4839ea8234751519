#!/usr/bin/env bash
# check_includes.sh - every tracked C file outside tests/ includes only the
# project headers its folder may use. The allowed graph is the block of
# docs/architecture.md that follows the line "<!-- include graph -->": one
# line per folder (or per file, which then overrides its folder's line),
# "PLACE: HEADER...", each HEADER a path from the source root. A file may
# always include the headers of its own folder and mf_config.h (made by
# meson); any other project header it includes must be listed for it.
# System headers (<...>) are not checked. Exit 1 naming each file, line and
# header that breaks the graph.
set -euo pipefail
cd "${MF_SOURCE_ROOT:?}" || exit 1
git rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout"; exit 77; }

doc=docs/architecture.md
graph=$(awk '/^<!-- include graph -->$/ {on = 1; next}
	on && /^```/ {if (fenced) exit; fenced = 1; next}
	on && fenced && NF && $1 !~ /^#/ {print}' "$doc")
[ -n "$graph" ] || { echo "$doc: no include graph found"; exit 1; }

declare -A allowed=() where=()
while read -r place rest; do
	allowed[${place%:}]=" $rest "
done <<<"$graph"

# basename -> path of every tracked project header (names are unique)
while read -r h; do
	where[${h##*/}]=$h
done < <(git ls-files --cached --others --exclude-standard '*.h' | grep -v '^tests/')

# the graph line for file f: its own, else its folder's, else the nearest
# folder above that has one
rule_for() {
	local p=$1
	while :; do
		if [ -n "${allowed[$p]+x}" ]; then echo "$p"; return; fi
		[ "$p" = "${p%/*}" ] && return
		p=${p%/*}
		if [ -n "${allowed[$p/]+x}" ]; then echo "$p/"; return; fi
	done
}

bad=0
while IFS=: read -r f line text; do
	name=$(sed -n 's/^#include "\([^"]*\)".*/\1/p' <<<"$text")
	[ -n "$name" ] && [ "$name" != mf_config.h ] || continue
	h=${where[${name##*/}]:-}
	if [ -z "$h" ]; then
		echo "$f:$line: includes \"$name\", which is no tracked header"
		bad=1
		continue
	fi
	[ "${h%/*}" = "${f%/*}" ] && continue
	rule=$(rule_for "$f")
	if [ -z "$rule" ]; then
		echo "$f:$line: no line of the include graph ($doc) covers it"
		bad=1
	elif [[ ${allowed[$rule]} != *" $h "* ]]; then
		echo "$f:$line: includes $h, which '$rule' may not use ($doc)"
		bad=1
	fi
done < <(git grep --untracked -n '^#include "' -- '*.c' '*.h' ':!tests')
exit $bad
