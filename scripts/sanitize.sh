#!/usr/bin/env bash
# The test suite under AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer:
# each builds everything into build-<sanitizer> and runs every CTest entry there. Not part of
# CI (.ci/run): a fresh sanitizer build takes ~15 minutes on 2 cores on top of the normal one.
#   scripts/sanitize.sh                 # both
#   scripts/sanitize.sh address         # one
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=("$@")
[[ ${#sanitizers[@]} -gt 0 ]] || sanitizers=(address undefined)
for s in "${sanitizers[@]}"; do
  echo "== $s"
  # UBSan reports as errors (a report fails the test that hit it).
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    BUILD_DIR="build-$s" scripts/test.sh -DATTNSERVE_SANITIZE="$s" -DATTNSERVE_CUDA=OFF
done
