#!/usr/bin/env bash
# apicheck (make apicheck): compares the exported API of every module users
# import (the library, the console, the Prometheus and OpenTelemetry
# adapters) with the last release's, using golang.org/x/exp's apidiff
# (tools/go.mod), and fails on an incompatible change that CHANGELOG.md's
# Unreleased section does not name under "### Breaking".
#
# The last release: APICHECK_BASE if set (a tag or commit), else the newest
# v* tag reachable from HEAD's parent (a release commit, tagged, is compared
# with the release before it), else the newest commit that a release
# section of CHANGELOG.md names ("## [0.1.0] - DATE (commit HASH)") and that
# comes before HEAD, so that a clone without tags finds it from main alone.
# A CHANGELOG that lists releases none of which can be found fails, unless
# HEAD is the first release's tag. APICHECK_ONLY=DIR checks one module (its
# directory: . for the library).
#
# An incompatible change passes when a "### Breaking" list of the
# Unreleased section, or of a release section newer than the base, names it
# as apicheck prints it: qualified by its package's name (the module's
# directory for the adapters), e.g. `dlock.Observers`,
# `guard.StaleFenceError.Highest`, `dlock.(*Client).Do`, `console.New`.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

base=${APICHECK_BASE:-} version=
if [ -z "$base" ] && git rev-parse -q --verify HEAD^ >/dev/null; then
	base=$(git describe --tags --match 'v[0-9]*' --abbrev=0 HEAD^ 2>/dev/null || true)
	version=${base#v}
fi
if [ -z "$base" ]; then
	while read -r v c; do
		if git merge-base --is-ancestor "$c" HEAD 2>/dev/null && [ "$(git rev-parse "$c")" != "$(git rev-parse HEAD)" ]; then
			base=$c version=$v
			break
		fi
	done < <(sed -n 's/^## \[\([0-9][^]]*\)\].*commit \([0-9a-f]\{7,40\}\).*/\1 \2/p' CHANGELOG.md)
fi
if [ -z "$base" ]; then
	releases=$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md)
	if [ -z "$releases" ] || { [ "$(wc -l <<<"$releases")" = 1 ] && git tag --points-at HEAD | grep -qx "v$releases"; }; then
		echo "apicheck: no release before this commit: nothing to compare"
		exit 0
	fi
	echo "apicheck: CHANGELOG.md lists releases ($(echo $releases)), but neither their tags nor a commit their headings name come before HEAD (fetch the tags?)"
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOWORK=off "$GO" -C tools build -o "$tmp/apidiff" golang.org/x/exp/cmd/apidiff
# The base's export data, once per commit and apidiff version (tools/go.sum):
# a release does not change.
cache=${XDG_CACHE_HOME:-$HOME/.cache}/dlock-apicheck/$(git rev-parse "$base^{commit}")-$(sha256sum tools/go.sum | cut -c1-12)
mkdir -p "$cache"

# breaking is the "### Breaking" lists above the base release's section.
breaking=$(awk -v stop="## [$version]" 'index($0, stop) == 1 && stop != "## []" {exit} /^## /{b = 0} /^### /{b = /Breaking/; next} b' CHANGELOG.md)

# check compares one module (its directory and path) with the base's and
# writes its report to $tmp/NAME.out; it fails on a change not listed.
# The library is read alone (GOWORK=off: its pattern would take in the
# modules nested in it), the others in the workspace.
check() {
	local dir=$1 path=$2 name=${1//[.\/]/_} work=auto out changes line failed=0 pkg=$1 qualified
	[ "$dir" = . ] && pkg=dlock
	[ "$dir" = . ] && work=off
	exec >"$tmp/$name.out" 2>&1
	if [ ! -f "$cache/$name.exp" ]; then
		if [ ! -d "$tmp/base" ]; then
			mkdir -p "$tmp/base.$name" && git archive "$base" | tar -x -C "$tmp/base.$name"
		fi
		if [ ! -d "$tmp/base.$name/$dir" ]; then
			echo "apicheck: $path is new since $base"
			return 0
		fi
		if ! out=$(cd "$tmp/base.$name/$dir" && GOWORK=$work "$tmp/apidiff" -m -w "$tmp/$name.exp" "$path" 2>&1); then
			echo "apicheck: $path at $base could not be read:"; echo "$out"; return 1
		fi
		mv "$tmp/$name.exp" "$cache/$name.exp"
	fi
	if ! out=$(cd "$dir" && GOWORK=$work "$tmp/apidiff" -m -incompatible "$cache/$name.exp" "$path" 2>&1); then
		echo "apicheck: $path could not be compared:"; echo "$out"; return 1
	fi
	changes=$(grep -v '^Ignoring internal package' <<<"$out" || true)
	if [ -z "$changes" ]; then
		echo "apicheck: $path: no incompatible change since $base"
		return 0
	fi
	echo "apicheck: $path: incompatible changes since $base:"
	echo "$changes" | sed 's/^/  /'
	while IFS= read -r line; do
		case $line in "- "*) ;; *) continue ;; esac
		line=${line#- }
		line=${line%%:*}
		case $line in
		./*) qualified=${line#./} ;; # a package below the module's: apidiff names it ./pkg.Name
		*) qualified=$pkg.$line ;;
		esac
		if ! grep -qwF -- "$qualified" <<<"$breaking"; then
			echo "apicheck: $path: $qualified is not listed under ### Breaking (CHANGELOG.md's Unreleased section)"
			failed=1
		fi
	done <<<"$changes"
	return $failed
}

# The modules are compared at once, each in a process of its own.
names=() pids=()
for m in .:github.com/dlock-go/dlock console:github.com/dlock-go/dlock/console \
	prometheus:github.com/dlock-go/dlock/prometheus dlockotel:github.com/dlock-go/dlock/dlockotel; do
	dir=${m%%:*}
	if [ -n "${APICHECK_ONLY:-}" ] && [ "$dir" != "$APICHECK_ONLY" ]; then
		continue
	fi
	check "$dir" "${m#*:}" &
	names+=("${dir//[.\/]/_}") pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || failed=1
	cat "$tmp/${names[$i]}.out"
done
exit $failed
