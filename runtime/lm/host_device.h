#pragma once
// Functions computed on the host and in kernels alike (the same bits either way): __host__ __device__ under nvcc,
// plain functions elsewhere.
#if defined(__CUDACC__)
#define CRUCIBLE_HOST_DEVICE __host__ __device__
#else
#define CRUCIBLE_HOST_DEVICE
#endif
