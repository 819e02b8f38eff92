#!/bin/sh
# Packs a CUDA build for a GPU machine that has CUDA and PyTorch but none of the Debian libraries
# mstar-c links (ZeroMQ, UCX, cmocka...): the mstar command and the tests/gpu programs into
# DEST/gpu, the Python package with its tests, benchmarks and examples into DEST/python, each
# with a lib/ folder of the shared libraries its programs need there. CUDA's own libraries
# (cudart is linked statically; cuBLAS and NCCL come with the machine's CUDA) are left out.
#
#   scripts/gpu-pack.sh [BUILD [DEST]]     (defaults: build, .carry)
#
# On the GPU machine:
#   cd DEST/gpu && LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64 MSTAR_TEST_BUILD_DIR=$PWD \
#       ./gpu_test_cuda_ipc
#   cd DEST/python && LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64 PYTHONPATH=$PWD \
#       python3 -m pytest tests/
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
dest=${2:-.carry}
[ -x "$build/mstar" ] || { echo "gpu-pack: no $build/mstar: build first (make build)"; exit 1; }
ls "$build"/tests/gpu_test_* >/dev/null 2>&1 ||
    { echo "gpu-pack: no $build/tests/gpu_test_*: build with CUDA (nvcc on PATH)"; exit 1; }

# Copy the shared libraries `$1` needs into `$2`, but for glibc's, the C++ runtime's and CUDA's.
copy_libs() {
    ldd "$1" | awk '/=> \// {print $3}' |
        grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libgcc_s|libstdc\+\+)\.so' |
        grep -v -E '/lib(cublas|cublasLt|cudart|nccl|cuda)\.so' |
        while read -r lib; do cp -L -n "$lib" "$2/" 2>/dev/null || true; done
}

rm -rf "$dest/gpu" "$dest/python"
mkdir -p "$dest/gpu/lib" "$dest/python/lib"
strip -o "$dest/gpu/mstar" "$build/mstar"
for t in "$build"/tests/gpu_test_*; do
    strip -o "$dest/gpu/$(basename "$t")" "$t"
done
for b in "$dest"/gpu/mstar "$dest"/gpu/gpu_test_*; do
    copy_libs "$b" "$dest/gpu/lib"
done
cp -r "$build/python/mstar_c" "$dest/python/"
cp -r python/tests python/bench python/examples "$dest/python/"
for so in $(find "$dest/python/mstar_c" -name '*.so*'); do
    copy_libs "$so" "$dest/python/lib"
done
du -sh "$dest/gpu" "$dest/python"
