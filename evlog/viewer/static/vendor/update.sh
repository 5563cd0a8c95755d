#!/bin/sh
# How the vendored front-end libraries were fetched (run by hand when upgrading; never at install time).
# Needs npm and the npm registry. The built files and licence texts are committed beside this script,
# so the dashboard works with no internet and installing evlog needs no npm step.
set -eu
cd "$(dirname "$0")"
UPLOT=1.6.32
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$UPLOT" >/dev/null && tar xzf "uplot-$UPLOT.tgz")
mkdir -p uplot
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" uplot/
cp "$tmp/package/LICENSE" uplot/LICENSE
echo "uplot@$UPLOT" > uplot/VERSION
