#!/usr/bin/env bash
# The one run command: installs what the build needs, builds, and starts attnserve-server on
# the built-in default models. Extra arguments go to the server (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --build-only
scripts/build.sh >&2
exec "${BUILD_DIR:-build}/server/attnserve-server" "$@"
