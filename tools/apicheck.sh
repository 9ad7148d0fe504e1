#!/usr/bin/env bash
# apicheck (make apicheck): compares the exported API of every module users
# import (the library, the console, the Prometheus and OpenTelemetry
# adapters) with the last release's, using golang.org/x/exp's apidiff
# (tools/go.mod), and fails on an incompatible change that CHANGELOG.md's
# Unreleased section does not name under "### Breaking".
#
# The last release: APICHECK_BASE if set (a tag or commit), else the newest
# v* tag reachable from HEAD, else the commit that CHANGELOG.md's newest
# release section names ("## [0.1.0] - DATE ... commit HASH"), so that a
# clone without tags finds it from main alone. APICHECK_ONLY=DIR checks one
# module (its directory: . for the library).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

base=${APICHECK_BASE:-}
if [ -z "$base" ]; then
	base=$(git describe --tags --match 'v[0-9]*' --abbrev=0 2>/dev/null || true)
fi
if [ -z "$base" ]; then
	base=$(sed -n 's/^## \[[0-9][^]]*\].*commit \([0-9a-f]\{7,40\}\).*/\1/p' CHANGELOG.md | head -1)
fi
if [ -z "$base" ]; then
	echo "apicheck: no release yet (no v* tag, no release section naming a commit in CHANGELOG.md): nothing to compare"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git archive "$base" | tar -x -C "$tmp/base"
GOWORK=off "$GO" -C tools build -o "$tmp/apidiff" golang.org/x/exp/cmd/apidiff

# breaking is the Unreleased section's "### Breaking" list.
breaking=$(awk '/^## /{u = /Unreleased/} u && /^### /{b = /Breaking/; next} u && b' CHANGELOG.md)

failed=0
# module directory and path; the library alone (GOWORK=off: its pattern
# would take in the modules nested in it), the others in the workspace.
for m in .:github.com/dlock-go/dlock console:github.com/dlock-go/dlock/console \
	prometheus:github.com/dlock-go/dlock/prometheus dlockotel:github.com/dlock-go/dlock/dlockotel; do
	dir=${m%%:*} path=${m#*:}
	if [ -n "${APICHECK_ONLY:-}" ] && [ "$dir" != "$APICHECK_ONLY" ]; then
		continue
	fi
	work=auto
	[ "$dir" = . ] && work=off
	if [ ! -d "$tmp/base/$dir" ]; then
		echo "apicheck: $path is new since $base"
		continue
	fi
	if ! out=$(cd "$tmp/base/$dir" && GOWORK=$work "$tmp/apidiff" -m -w "$tmp/old.exp" "$path" 2>&1); then
		echo "apicheck: $path at $base could not be read:"; echo "$out"; exit 1
	fi
	if ! out=$(cd "$dir" && GOWORK=$work "$tmp/apidiff" -m -incompatible "$tmp/old.exp" "$path" 2>&1); then
		echo "apicheck: $path could not be compared:"; echo "$out"; exit 1
	fi
	changes=$(grep -v '^Ignoring internal package' <<<"$out" || true)
	if [ -z "$changes" ]; then
		echo "apicheck: $path: no incompatible change since $base"
		continue
	fi
	echo "apicheck: $path: incompatible changes since $base:"
	echo "$changes" | sed 's/^/  /'
	while IFS= read -r line; do
		case $line in "- "*) ;; *) continue ;; esac
		name=${line#- }
		name=${name%%:*}
		if ! grep -qF -- "$name" <<<"$breaking"; then
			echo "apicheck: $path: $name is not listed under ### Breaking in CHANGELOG.md's Unreleased section"
			failed=1
		fi
	done <<<"$changes"
done
exit $failed
