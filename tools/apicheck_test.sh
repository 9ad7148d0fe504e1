#!/usr/bin/env bash
# apicheck_test (make test): apicheck fails on an exported function removed
# without a word in CHANGELOG.md, and passes once its Unreleased section
# lists it under Breaking. It works on a copy of the work tree (the files
# git tracks or would) made a repository of its own, whose first commit is
# the "release" (APICHECK_BASE).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c 2>/dev/null | tar -x -C "$tmp"
cd "$tmp"
git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm release
# Remove dlock.Observers; the library alone is compared (APICHECK_ONLY).
awk '/^\/\/ Observers returns/{skip=1} skip && /^}/{skip=0; next} !skip' trace.go > trace.go.new && mv trace.go.new trace.go
if grep -q 'func Observers' trace.go; then echo "apicheck_test: could not remove Observers"; exit 1; fi
if out=$(APICHECK_BASE=HEAD APICHECK_ONLY=. ./tools/apicheck.sh 2>&1); then
	echo "apicheck_test: apicheck passed with dlock.Observers removed and not listed:"; echo "$out"; exit 1
fi
grep -q 'Observers: removed' <<<"$out" || { echo "apicheck_test: apicheck failed without naming Observers:"; echo "$out"; exit 1; }
echo "apicheck_test: removed and not listed: apicheck fails, as it should:"
grep 'Observers' <<<"$out" | sed 's/^/  /'
breaking() { # breaking TEXT: TEXT as the Unreleased section's Breaking entry
	awk -v e="$1" '{print} /^### Breaking/ && !done {print "\n- " e; done=1}' CHANGELOG.md.orig > CHANGELOG.md
}
cp CHANGELOG.md CHANGELOG.md.orig
breaking '`dlock.WithObservers` is renamed.'
if APICHECK_BASE=HEAD APICHECK_ONLY=. ./tools/apicheck.sh >/dev/null 2>&1; then
	echo "apicheck_test: apicheck passed with Breaking naming dlock.WithObservers, not dlock.Observers"; exit 1
fi
breaking '`dlock.Observers` removed: pass a function that calls each observer.'
if ! out=$(APICHECK_BASE=HEAD APICHECK_ONLY=. ./tools/apicheck.sh 2>&1); then
	echo "apicheck_test: apicheck failed with the removal listed under Breaking:"; echo "$out"; exit 1
fi
echo "apicheck_test: listed under Breaking (as dlock.Observers, not as a longer name): apicheck passes"
