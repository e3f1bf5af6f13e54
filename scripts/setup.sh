#!/usr/bin/env bash
# Installs, only when missing, every Debian package attnserve builds and tests with.
# Idempotent: a second run installs nothing. Runs as root or through sudo.
set -euo pipefail

BUILD_PACKAGES=(
  g++ cmake ninja-build pkg-config ccache
  libtorch-dev libopenblas0-openmp
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libmicrohttpd-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev nlohmann-json3-dev
  libhiredis-dev libxxhash-dev libpcre2-dev libutf8proc-dev
)
# python3-jinja2: the chat templates' golden outputs (tests/golden/chat_templates);
# python3-yaml and nodejs (npm below): the deploy tests (tests/deploy); redis-server: the
# session store tests; haproxy: the gateway (scripts/cluster.sh, tests/integration/gateway_test.py).
TEST_PACKAGES=(python3-torch python3-grpcio python3-protobuf python3-jinja2 prometheus curl python3-yaml nodejs
               redis-server haproxy)

packages=("${BUILD_PACKAGES[@]}")
if [[ "${1:-}" != "--build-only" ]]; then
  packages+=("${TEST_PACKAGES[@]}")
  # Debian's npm only where there is no npm: a Node.js that bundles its own (NodeSource's
  # nodejs package) conflicts with it.
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: installed ${#missing[@]} package(s)"
