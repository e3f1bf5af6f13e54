#!/usr/bin/env bash
# Configures and builds attnserve into ${BUILD_DIR:-build} (Release, Ninja). Extra arguments
# go to CMake's configure step, e.g. scripts/build.sh -DATTNSERVE_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -G Ninja "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
