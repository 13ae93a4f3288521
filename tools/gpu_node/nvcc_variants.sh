#!/usr/bin/env bash
# Times nvcc's output forms for one small candidate, to choose the CUDA build path (plain shared object,
# device code as cubin/fatbin plus a thin host part, or PTX for the driver to JIT). Usage: nvcc_variants.sh [ARCH]
set -euo pipefail
arch=${1:-sm_90}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/k.cu" <<'CU'
#include <crucible/kernel.h>
__global__ void relu(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
}
CRUCIBLE_API int crucible_forward(const crucible_tensor* in, int32_t, crucible_tensor* out, int32_t, void* s) {
  long n = in[0].shape[0] * in[0].shape[1];
  relu<<<(n + 255) / 256, 256, 0, (cudaStream_t)s>>>((const float*)in[0].data, (float*)out[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
CU
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
time_it() {  # label, command...: median of 5 runs
  local label=$1; shift
  local times=()
  for _ in 1 2 3 4 5; do
    local t0=$EPOCHREALTIME; "$@" > /dev/null 2>&1; local t1=$EPOCHREALTIME
    times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')")
  done
  printf '%-44s %s s\n' "$label" "$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)"
}
cd "$work"
inc="-I$root/kernels_eval/include"
time_it "shared object (Crucible's flags)" $nvcc -std=c++17 -O3 -arch=$arch -shared -Xcompiler -fPIC,-fvisibility=hidden $inc k.cu -o k.so
time_it "shared object, -O0 host code" $nvcc -std=c++17 -O0 -arch=$arch -shared -cudart shared -Xcompiler -fPIC,-fvisibility=hidden $inc k.cu -o k0.so
time_it "shared object, -O1 host code" $nvcc -std=c++17 -O3 -arch=$arch -shared -Xcompiler -fPIC,-O1 $inc k.cu -o k1.so
time_it "device code only: -cubin" $nvcc -std=c++17 -O3 -arch=$arch -cubin $inc k.cu -o k.cubin
time_it "device code only: -fatbin" $nvcc -std=c++17 -O3 -arch=$arch -fatbin $inc k.cu -o k.fatbin
time_it "device code only: -ptx (driver JIT later)" $nvcc -std=c++17 -O3 -arch=compute_${arch#sm_} -ptx $inc k.cu -o k.ptx
