/* Crucible candidate contract.
 *
 * A candidate is one source file (C++ for CPU tasks, CUDA C++ for CUDA tasks) that includes this
 * header and defines crucible_forward. The evaluator allocates every output, fills the inputs, and
 * calls crucible_forward; it returns 0 on success. Strides are in elements, not bytes.
 * `stream` is the cudaStream_t to launch on for CUDA tasks and NULL for CPU tasks.
 *
 * Candidates are built with hidden visibility: only the entry points declared here are exported,
 * and the evaluator rejects a shared object that exports anything else.
 */
#ifndef CRUCIBLE_KERNEL_H
#define CRUCIBLE_KERNEL_H

#include <stdint.h>

#ifdef __cplusplus
#define CRUCIBLE_EXTERN_C extern "C"
#else
#define CRUCIBLE_EXTERN_C
#endif

#define CRUCIBLE_API CRUCIBLE_EXTERN_C __attribute__((visibility("default")))

typedef enum crucible_dtype {
  CRUCIBLE_FLOAT32 = 0,
  CRUCIBLE_FLOAT16 = 1,
  CRUCIBLE_BFLOAT16 = 2,
  CRUCIBLE_FLOAT64 = 3,
  CRUCIBLE_INT32 = 4,
  CRUCIBLE_INT64 = 5,
  CRUCIBLE_BOOL = 6
} crucible_dtype;

typedef struct crucible_tensor {
  void* data;
  int32_t dtype; /* a crucible_dtype value */
  int32_t ndim;
  const int64_t* shape;
  const int64_t* strides; /* in elements */
} crucible_tensor;

CRUCIBLE_API int crucible_forward(const crucible_tensor* inputs, int32_t num_inputs,
                                  crucible_tensor* outputs, int32_t num_outputs, void* stream);

#endif /* CRUCIBLE_KERNEL_H */
