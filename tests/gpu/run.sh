#!/usr/bin/env bash
# The GPU check of attnserve's CUDA kernels, in one command:
#   tests/gpu/run.sh [--build-dir DIR] [--quick] [--only SUBSTRING]
# On a machine with an NVIDIA GPU and PyTorch (python3 -c 'import torch'), with CMake and
# nvcc but nothing else of attnserve's dependencies, it builds the kernels and
# tests/gpu/gpu_check.cc against PyTorch's LibTorch (tests/gpu/CMakeLists.txt) and runs the
# check: every kernel against a float64 reference on real sizes, timed against the measured
# copy bandwidth and matmul rate, one table last. Under 5 minutes on an H100/H200 (measured
# before the sparse attention cases were added; `--only sparse` runs those alone: the
# sparse mixer's CUDA kernel, compiled but never run before, against its masked reference).
#
# Exit status: 0 when every comparison passes, or when the check is skipped (no PyTorch, or
# no GPU visible to it: "SKIPPED: ..." is printed); 1 when a comparison fails or the build
# fails; 2 for bad arguments. Environment: PYTHON (default python3), CUDA_HOME (to find nvcc),
# ATTNSERVE_GPU_CHECK_BUILD_DIR (default build-gpu-check at the repository root), JOBS.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build_dir=${ATTNSERVE_GPU_CHECK_BUILD_DIR:-$root/build-gpu-check}
check_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir=$2; shift 2 ;;
    --quick) check_args+=(--quick); shift ;;
    --only) check_args+=(--only "$2"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

skip() { echo "gpu check: SKIPPED: $*"; exit 0; }
fail() { echo "gpu check: FAILED: $*" >&2; exit 1; }
start=$(date +%s)

python=${PYTHON:-python3}
command -v "$python" >/dev/null 2>&1 || skip "no $python"
"$python" -c 'import torch' >/dev/null 2>&1 || skip "PyTorch is not installed ($python -c 'import torch' failed)"
"$python" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1 ||
  skip "PyTorch has no CUDA (a CPU-only build)"
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 ||
  skip "no NVIDIA GPU visible to PyTorch (torch.cuda.is_available() is False)"

# From here on a GPU is there: anything missing is a failure, not a skip.
nvcc=$(command -v nvcc || true)
for candidate in "${CUDA_HOME:-}/bin/nvcc" /usr/local/cuda/bin/nvcc; do
  [[ -z "$nvcc" && -x "$candidate" ]] && nvcc=$candidate
done
[[ -n "$nvcc" ]] || fail "nvcc not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin)"
command -v cmake >/dev/null 2>&1 || fail "cmake not found"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

# Everything about torch in one Python call: version, CUDA version, GPU, arch, paths, ABI.
torch_info=$("$python" - <<'EOF'
import os, torch, torch.utils.cpp_extension as ext
major, minor = torch.cuda.get_device_capability(0)
print(torch.__version__)
print(torch.version.cuda)
print(torch.cuda.get_device_name(0))
print(f"{major}{minor}")
print(torch.utils.cmake_prefix_path)
print(";".join(ext.include_paths()))
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
EOF
) || fail "could not query PyTorch"
mapfile -t info <<<"$torch_info"
torch_version=${info[0]} torch_cuda=${info[1]} gpu_name=${info[2]} arch=${info[3]}
prefix_path=${info[4]} include_dirs=${info[5]} lib_dir=${info[6]} cxx11_abi=${info[7]}
nvcc_version=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
echo "gpu check: $gpu_name (sm_$arch); PyTorch $torch_version (CUDA $torch_cuda); nvcc $nvcc_version at $nvcc"
if [[ "${torch_cuda%%.*}" != "${nvcc_version%%.*}" ]]; then
  echo "gpu check: note: nvcc $nvcc_version and PyTorch's CUDA $torch_cuda differ in major version;" \
       "the kernels use the toolkit's runtime, LibTorch its own (the driver must support both)"
fi

jobs=${JOBS:-$(nproc)}
common=(-S "$here" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc"
        -DCMAKE_CUDA_ARCHITECTURES="$arch" "${generator[@]}")
# LibTorch from the folders PyTorch reports (robust with pip wheels); if that does not build,
# find_package(Torch) with torch.utils.cmake_prefix_path.
build() {  # mode dir
  local mode=$1 dir=$2
  shift 2
  echo "gpu check: configuring ($mode LibTorch lookup) in $dir"
  cmake "${common[@]}" -B "$dir" -DGPU_CHECK_TORCH="$mode" "$@" >"$dir.configure.log" 2>&1 ||
    { tail -n 30 "$dir.configure.log"; return 1; }
  echo "gpu check: building with $jobs jobs"
  cmake --build "$dir" --target gpu_check -j "$jobs" >"$dir.build.log" 2>&1 ||
    { tail -n 40 "$dir.build.log"; return 1; }
}
mkdir -p "$(dirname "$build_dir")"
if build python "$build_dir" -DTORCH_PY_INCLUDE_DIRS="$include_dirs" -DTORCH_PY_LIB_DIR="$lib_dir" \
     -DTORCH_PY_CXX11_ABI="$cxx11_abi"; then
  binary=$build_dir/gpu_check
elif build cmake "$build_dir-cmake" -DCMAKE_PREFIX_PATH="$prefix_path"; then
  binary=$build_dir-cmake/gpu_check
else
  fail "the build failed both ways (logs: $build_dir.*.log, $build_dir-cmake.*.log)"
fi
echo "gpu check: built in $(( $(date +%s) - start )) s; running $binary ${check_args[*]}"
echo
"$binary" "${check_args[@]}"
status=$?
echo "gpu check: total $(( $(date +%s) - start )) s, exit status $status"
exit $status
