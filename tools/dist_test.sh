#!/usr/bin/env bash
# dist_test (make test): make dist, for linux/amd64 alone (the cross builds
# take minutes on a cold cache; make dist builds them all), twice into two
# directories: the same SHA256SUMS; the Debian package holds the binary,
# the manual page and the three completions (dpkg-deb -c), and its binary,
# run from an extracted copy, says its version.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for d in a b; do
	make --no-print-directory dist PLATFORMS=linux/amd64 DIST="$tmp/$d" VERSION=v0.0.0-disttest > "$tmp/$d.log" 2>&1 || { cat "$tmp/$d.log"; exit 1; }
done
if ! diff "$tmp/a/SHA256SUMS" "$tmp/b/SHA256SUMS"; then
	echo "dist_test: two builds of one tree differ"; exit 1
fi
deb=$tmp/a/dlock_v0.0.0-disttest_amd64.deb
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/dlock ./usr/share/man/man1/dlock.1.gz ./usr/share/bash-completion/completions/dlock \
	./usr/share/zsh/vendor-completions/_dlock ./usr/share/fish/vendor_completions.d/dlock.fish ./usr/share/doc/dlock/copyright; do
	grep -q " $f\$" <<<"$contents" || { echo "dist_test: the package lacks $f:"; echo "$contents"; exit 1; }
done
dpkg-deb -x "$deb" "$tmp/root"
out=$("$tmp/root/usr/bin/dlock" --version)
case $out in "dlock v0.0.0-disttest (commit "*) ;; *) echo "dist_test: the packaged dlock says $out"; exit 1 ;; esac
zcat "$tmp/root/usr/share/man/man1/dlock.1.gz" | grep -q '^\.SS dlock run$' || { echo "dist_test: the manual page has no dlock run"; exit 1; }
echo "dist_test: two builds, the same SHA256SUMS; the package's dlock says: $out"
