#!/usr/bin/env bash
# Fails when a tracked C or C++ file differs from what clang-format makes of it with the repo's
# own .clang-format (Google style, 100 columns). Fix with:
#   git ls-files -z '*.cc' '*.h' '*.c' | xargs -0 clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
  echo "check_format: clang-format is not installed (deploy/install-deps.sh test installs it)" >&2
  exit 2
fi
git ls-files -z '*.cc' '*.h' '*.c' | xargs -0 clang-format --dry-run --Werror
echo "check_format: $(git ls-files '*.cc' '*.h' '*.c' | wc -l) files formatted as .clang-format says"
