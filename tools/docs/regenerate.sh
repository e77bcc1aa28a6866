#!/usr/bin/env bash
# Rewrites the documentation generated from the code (issue 31): README.md's model table
# (`dpinfer inspect --families`, from the family rows) and docs/reference/options.md
# (`dpinfer help --markdown`, from the CLI11 definitions). Run it after changing a family
# row or an option, and commit the result; the test docs_generated_up_to_date fails until then.
#
# usage: tools/docs/regenerate.sh [BUILD_DIR]   (default: build/default, built first)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build/default}"
cmake --build "$build" --target dpinfer dpinfer-worker
exec python3 "$root/tools/docs/generated_docs.py" write --dpinfer "$build/tools/dpinfer" --repo "$root"
