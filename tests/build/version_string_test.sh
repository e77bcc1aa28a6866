#!/usr/bin/env bash
# cmake/Version.cmake's script mode, on a scratch git checkout: the version string follows
# the checkout when the build runs (a commit after configuring changes it, an edit marks it
# -dirty), and the header is not rewritten when nothing changed (so nothing recompiles).
#   version_string_test.sh <cmake> <source dir>
set -euo pipefail
cmake_bin="$1"
script="$2/cmake/Version.cmake"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
repo="$work/repo"
out="$work/out/dpinfer/util/version_string.h"
mkdir -p "$repo"
git_in() { git -C "$repo" -c user.name=t -c user.email=t@t -c commit.gpgsign=false "$@"; }
write() { "$cmake_bin" -DSOURCE_DIR="$repo" -DPROJECT_VERSION=9.8.7 -DGIT_EXECUTABLE="$(command -v git)" \
                       -DOUT="$out" -P "$script"; }
version() { sed -n 's/^#define DPINFER_VERSION "\(.*\)"$/\1/p' "$out"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Not a checkout: the project version.
write
[ "$(version)" = "9.8.7" ] || fail "outside git: got '$(version)'"

git_in init -q
echo one > "$repo/f"
git_in add f
git_in commit -q -m one
first="$(git_in rev-parse --short HEAD)"
write
[ "$(version)" = "9.8.7+g$first" ] || fail "after commit one: got '$(version)', expected 9.8.7+g$first"

# Unchanged: the file keeps its mtime.
touch -d '2000-01-01' "$out"
write
[ "$(date -r "$out" +%Y)" = "2000" ] || fail "rewritten although the version did not change"

# An edit: -dirty. A new commit: its hash, not the first configure's.
echo two > "$repo/f"
write
[ "$(version)" = "9.8.7+g$first-dirty" ] || fail "after an edit: got '$(version)'"
git_in commit -q -am two
second="$(git_in rev-parse --short HEAD)"
write
[ "$(version)" = "9.8.7+g$second" ] || fail "after commit two: got '$(version)', expected 9.8.7+g$second"
git_in tag v9.8.7
write
[ "$(version)" = "9.8.7+gv9.8.7" ] || fail "at a tag: got '$(version)'"
echo "ok: $(version)"
