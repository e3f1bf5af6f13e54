#!/usr/bin/env bash
# The one test command: installs what is missing, builds, runs every test with CTest.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
start=$(date +%s)
scripts/build.sh "$@"
echo "build: $(( $(date +%s) - start )) s"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 600
