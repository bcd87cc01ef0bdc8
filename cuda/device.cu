/* CUDA device detection; a machine without a GPU or driver reports 0 devices. */
#include <cuda_runtime.h>
#include <petscsys.h>

extern "C" PetscErrorCode FMMCUDADeviceCount(int *n)
{
  *n = 0;
  if (cudaGetDeviceCount(n) != cudaSuccess) {
    *n = 0;
    (void)cudaGetLastError(); /* clear the sticky "no device"/"no driver" error */
  }
  return 0;
}
