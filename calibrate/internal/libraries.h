// Function tables of the CUDA libraries paceline-calibrate opens at run time.
//
// The binary links only the static CUDA runtime; CUPTI, cuBLASLt, cuDNN, NCCL and NVML are
// dlopen'ed, so that the same binary starts on a node that lacks some of them (or on a node
// without a GPU, where it must say so and exit 2) and reports per family what is missing. The
// headers give the exact signatures; a library is found by the loader's usual search, which
// scripts/calibrate-device.sh points at CUDA's and PyTorch's library folders.
#pragma once

#include <memory>
#include <string>

#include "calibrate/internal/dynlib.h"

#if PACELINE_HAVE_CUPTI
#include <cupti.h>
#endif
#if PACELINE_HAVE_CUBLASLT
#include <cublasLt.h>
#endif
#if PACELINE_HAVE_CUDNN
#include <cudnn_graph.h>
#endif
#if PACELINE_HAVE_NCCL
#include <nccl.h>
#endif

// A member holding a pointer to the library function `name`, typed from its declaration.
#define PACELINE_LIBRARY_FUNCTION(name) decltype(&::name) name = nullptr

namespace paceline::calibrate::internal {

#if PACELINE_HAVE_CUPTI
// CuptiApi is CUPTI's Activity API (kernel, memcpy and memset records with GPU timestamps).
struct CuptiApi {
  std::unique_ptr<DynamicLibrary> library;
  PACELINE_LIBRARY_FUNCTION(cuptiGetVersion);
  PACELINE_LIBRARY_FUNCTION(cuptiGetResultString);
  PACELINE_LIBRARY_FUNCTION(cuptiActivityEnable);
  PACELINE_LIBRARY_FUNCTION(cuptiActivityDisable);
  PACELINE_LIBRARY_FUNCTION(cuptiActivityRegisterCallbacks);
  PACELINE_LIBRARY_FUNCTION(cuptiActivityFlushAll);
  PACELINE_LIBRARY_FUNCTION(cuptiActivityGetNextRecord);
  PACELINE_LIBRARY_FUNCTION(cuptiActivityGetNumDroppedRecords);
  PACELINE_LIBRARY_FUNCTION(cuptiGetTimestamp);

  // load opens libcupti; nullptr with `error` when it or a function is missing.
  static std::unique_ptr<CuptiApi> load(std::string* error);
  // describe formats a CUPTI result as "CUPTI_ERROR_... (n)".
  std::string describe(CUptiResult result) const;
};
#endif

#if PACELINE_HAVE_CUBLASLT
// CublasLtApi is the part of cuBLASLt that runs one matmul with the heuristic's first algorithm.
struct CublasLtApi {
  std::unique_ptr<DynamicLibrary> library;
  PACELINE_LIBRARY_FUNCTION(cublasLtGetVersion);
  PACELINE_LIBRARY_FUNCTION(cublasLtCreate);
  PACELINE_LIBRARY_FUNCTION(cublasLtDestroy);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatmulDescCreate);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatmulDescDestroy);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatmulDescSetAttribute);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatrixLayoutCreate);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatrixLayoutDestroy);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatmulPreferenceCreate);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatmulPreferenceDestroy);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatmulPreferenceSetAttribute);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatmulAlgoGetHeuristic);
  PACELINE_LIBRARY_FUNCTION(cublasLtMatmul);
  // Optional: older cuBLASLt lacks it.
  PACELINE_LIBRARY_FUNCTION(cublasLtGetStatusString);

  static std::unique_ptr<CublasLtApi> load(std::string* error);
  std::string describe(cublasStatus_t status) const;
};
#endif

#if PACELINE_HAVE_CUDNN
// CudnnApi is cuDNN's backend (graph) API.
struct CudnnApi {
  std::unique_ptr<DynamicLibrary> library;
  PACELINE_LIBRARY_FUNCTION(cudnnGetVersion);
  PACELINE_LIBRARY_FUNCTION(cudnnGetErrorString);
  PACELINE_LIBRARY_FUNCTION(cudnnCreate);
  PACELINE_LIBRARY_FUNCTION(cudnnDestroy);
  PACELINE_LIBRARY_FUNCTION(cudnnSetStream);
  PACELINE_LIBRARY_FUNCTION(cudnnBackendCreateDescriptor);
  PACELINE_LIBRARY_FUNCTION(cudnnBackendDestroyDescriptor);
  PACELINE_LIBRARY_FUNCTION(cudnnBackendSetAttribute);
  PACELINE_LIBRARY_FUNCTION(cudnnBackendGetAttribute);
  PACELINE_LIBRARY_FUNCTION(cudnnBackendFinalize);
  PACELINE_LIBRARY_FUNCTION(cudnnBackendExecute);
  // Optional (cuDNN >= 9.0): the detailed message of the last error on this thread.
  PACELINE_LIBRARY_FUNCTION(cudnnGetLastErrorString);

  static std::unique_ptr<CudnnApi> load(std::string* error);
  // describe formats a status with cuDNN's last error message when there is one.
  std::string describe(cudnnStatus_t status) const;
};
#endif

#if PACELINE_HAVE_NCCL
// NcclApi is the part of NCCL a single process driving all local GPUs needs.
struct NcclApi {
  std::unique_ptr<DynamicLibrary> library;
  PACELINE_LIBRARY_FUNCTION(ncclGetVersion);
  PACELINE_LIBRARY_FUNCTION(ncclGetErrorString);
  PACELINE_LIBRARY_FUNCTION(ncclCommInitAll);
  PACELINE_LIBRARY_FUNCTION(ncclCommDestroy);
  PACELINE_LIBRARY_FUNCTION(ncclGroupStart);
  PACELINE_LIBRARY_FUNCTION(ncclGroupEnd);
  PACELINE_LIBRARY_FUNCTION(ncclAllReduce);
  PACELINE_LIBRARY_FUNCTION(ncclAllGather);
  PACELINE_LIBRARY_FUNCTION(ncclReduceScatter);
  PACELINE_LIBRARY_FUNCTION(ncclSend);
  PACELINE_LIBRARY_FUNCTION(ncclRecv);

  static std::unique_ptr<NcclApi> load(std::string* error);
  std::string describe(ncclResult_t result) const;
};
#endif

// NvmlApi reads clocks and the driver version from NVML (libnvidia-ml, part of the driver).
// nvml.h is not part of the CUDA toolkit, so the few stable C signatures are declared here
// (NVML API reference, "Device Queries").
struct NvmlApi {
  using Device = struct NvmlDeviceOpaque*;
  // nvmlClockType_t values.
  static constexpr int kClockSm = 1;
  static constexpr int kClockMem = 2;

  std::unique_ptr<DynamicLibrary> library;
  int (*nvmlInit_v2)() = nullptr;
  int (*nvmlSystemGetDriverVersion)(char* version, unsigned length) = nullptr;
  int (*nvmlDeviceGetHandleByPciBusId_v2)(const char* bus_id, Device* device) = nullptr;
  int (*nvmlDeviceGetMaxClockInfo)(Device device, int type, unsigned* mhz) = nullptr;
  int (*nvmlDeviceGetClockInfo)(Device device, int type, unsigned* mhz) = nullptr;
  int (*nvmlDeviceGetPowerManagementLimit)(Device device, unsigned* milliwatts) = nullptr;

  // load opens NVML and initializes it.
  static std::unique_ptr<NvmlApi> load(std::string* error);
};

}  // namespace paceline::calibrate::internal
