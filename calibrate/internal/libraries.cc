#include "calibrate/internal/libraries.h"

#include <string>

// Resolves member `name` of `api` from its library, collecting missing names.
#define PACELINE_BIND(api, name) (api)->library->bind((api)->name, #name, &missing)

namespace paceline::calibrate::internal {
namespace {

template <typename Api>
std::unique_ptr<Api> open_library(const std::vector<std::string>& names, std::string_view what,
                                  std::string* error) {
  std::string why;
  auto api = std::make_unique<Api>();
  api->library = DynamicLibrary::open(names, &why);
  if (api->library == nullptr) {
    *error = std::string(what) + " not found (" + why + ")";
    return nullptr;
  }
  return api;
}

bool finish(std::string_view what, const DynamicLibrary& library, const std::string& missing,
            std::string* error) {
  if (missing.empty()) return true;
  *error = std::string(what) + " at " + library.path() + " lacks " + missing;
  return false;
}

}  // namespace

#if PACELINE_HAVE_CUPTI
std::unique_ptr<CuptiApi> CuptiApi::load(std::string* error) {
  // Only CUPTI 13 matches the activity record layout compiled in (CUpti_ActivityKernel10).
  auto api = open_library<CuptiApi>({"libcupti.so.13", "libcupti.so"}, "CUPTI", error);
  if (api == nullptr) return nullptr;
  std::string missing;
  PACELINE_BIND(api, cuptiGetVersion);
  PACELINE_BIND(api, cuptiGetResultString);
  PACELINE_BIND(api, cuptiActivityEnable);
  PACELINE_BIND(api, cuptiActivityDisable);
  PACELINE_BIND(api, cuptiActivityRegisterCallbacks);
  PACELINE_BIND(api, cuptiActivityFlushAll);
  PACELINE_BIND(api, cuptiActivityGetNextRecord);
  PACELINE_BIND(api, cuptiActivityGetNumDroppedRecords);
  PACELINE_BIND(api, cuptiGetTimestamp);
  if (!finish("CUPTI", *api->library, missing, error)) return nullptr;
  return api;
}

std::string CuptiApi::describe(CUptiResult result) const {
  const char* text = nullptr;
  if (cuptiGetResultString != nullptr && cuptiGetResultString(result, &text) == CUPTI_SUCCESS &&
      text != nullptr) {
    return std::string(text) + " (" + std::to_string(static_cast<int>(result)) + ")";
  }
  return "CUPTI error " + std::to_string(static_cast<int>(result));
}
#endif

#if PACELINE_HAVE_CUBLASLT
std::unique_ptr<CublasLtApi> CublasLtApi::load(std::string* error) {
  auto api = open_library<CublasLtApi>({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
                                       "cuBLASLt", error);
  if (api == nullptr) return nullptr;
  std::string missing;
  PACELINE_BIND(api, cublasLtGetVersion);
  PACELINE_BIND(api, cublasLtCreate);
  PACELINE_BIND(api, cublasLtDestroy);
  PACELINE_BIND(api, cublasLtMatmulDescCreate);
  PACELINE_BIND(api, cublasLtMatmulDescDestroy);
  PACELINE_BIND(api, cublasLtMatmulDescSetAttribute);
  PACELINE_BIND(api, cublasLtMatrixLayoutCreate);
  PACELINE_BIND(api, cublasLtMatrixLayoutDestroy);
  PACELINE_BIND(api, cublasLtMatmulPreferenceCreate);
  PACELINE_BIND(api, cublasLtMatmulPreferenceDestroy);
  PACELINE_BIND(api, cublasLtMatmulPreferenceSetAttribute);
  PACELINE_BIND(api, cublasLtMatmulAlgoGetHeuristic);
  PACELINE_BIND(api, cublasLtMatmul);
  if (!finish("cuBLASLt", *api->library, missing, error)) return nullptr;
  std::string optional;
  api->library->bind(api->cublasLtGetStatusString, "cublasLtGetStatusString", &optional);
  return api;
}

std::string CublasLtApi::describe(cublasStatus_t status) const {
  std::string code = std::to_string(static_cast<int>(status));
  if (cublasLtGetStatusString != nullptr)
    return cublasLtGetStatusString(status) + (" (" + code + ")");
  return "cuBLAS status " + code;
}
#endif

#if PACELINE_HAVE_CUDNN
std::unique_ptr<CudnnApi> CudnnApi::load(std::string* error) {
  auto api = open_library<CudnnApi>({"libcudnn.so.9", "libcudnn.so"}, "cuDNN", error);
  if (api == nullptr) return nullptr;
  std::string missing;
  PACELINE_BIND(api, cudnnGetVersion);
  PACELINE_BIND(api, cudnnGetErrorString);
  PACELINE_BIND(api, cudnnCreate);
  PACELINE_BIND(api, cudnnDestroy);
  PACELINE_BIND(api, cudnnSetStream);
  PACELINE_BIND(api, cudnnBackendCreateDescriptor);
  PACELINE_BIND(api, cudnnBackendDestroyDescriptor);
  PACELINE_BIND(api, cudnnBackendSetAttribute);
  PACELINE_BIND(api, cudnnBackendGetAttribute);
  PACELINE_BIND(api, cudnnBackendFinalize);
  PACELINE_BIND(api, cudnnBackendExecute);
  if (!finish("cuDNN", *api->library, missing, error)) return nullptr;
  std::string optional;
  api->library->bind(api->cudnnGetLastErrorString, "cudnnGetLastErrorString", &optional);
  return api;
}

std::string CudnnApi::describe(cudnnStatus_t status) const {
  std::string out = cudnnGetErrorString != nullptr ? cudnnGetErrorString(status) : "cuDNN error";
  out += " (" + std::to_string(static_cast<int>(status)) + ")";
  if (cudnnGetLastErrorString != nullptr) {
    char message[1024] = {};
    cudnnGetLastErrorString(message, sizeof(message));
    if (message[0] != '\0') {
      std::string detail = message;
      // Keep the report on one line.
      for (char& c : detail) {
        if (c == '\n' || c == '\r') c = ' ';
      }
      out += ": " + detail;
    }
  }
  return out;
}
#endif

#if PACELINE_HAVE_NCCL
std::unique_ptr<NcclApi> NcclApi::load(std::string* error) {
  auto api = open_library<NcclApi>({"libnccl.so.2", "libnccl.so"}, "NCCL", error);
  if (api == nullptr) return nullptr;
  std::string missing;
  PACELINE_BIND(api, ncclGetVersion);
  PACELINE_BIND(api, ncclGetErrorString);
  PACELINE_BIND(api, ncclCommInitAll);
  PACELINE_BIND(api, ncclCommDestroy);
  PACELINE_BIND(api, ncclGroupStart);
  PACELINE_BIND(api, ncclGroupEnd);
  PACELINE_BIND(api, ncclAllReduce);
  PACELINE_BIND(api, ncclAllGather);
  PACELINE_BIND(api, ncclReduceScatter);
  PACELINE_BIND(api, ncclSend);
  PACELINE_BIND(api, ncclRecv);
  if (!finish("NCCL", *api->library, missing, error)) return nullptr;
  return api;
}

std::string NcclApi::describe(ncclResult_t result) const {
  std::string code = std::to_string(static_cast<int>(result));
  if (ncclGetErrorString != nullptr)
    return std::string(ncclGetErrorString(result)) + " (" + code + ")";
  return "NCCL error " + code;
}
#endif

std::unique_ptr<NvmlApi> NvmlApi::load(std::string* error) {
  auto api = open_library<NvmlApi>({"libnvidia-ml.so.1"}, "NVML", error);
  if (api == nullptr) return nullptr;
  std::string missing;
  PACELINE_BIND(api, nvmlInit_v2);
  PACELINE_BIND(api, nvmlSystemGetDriverVersion);
  PACELINE_BIND(api, nvmlDeviceGetHandleByPciBusId_v2);
  PACELINE_BIND(api, nvmlDeviceGetMaxClockInfo);
  PACELINE_BIND(api, nvmlDeviceGetClockInfo);
  PACELINE_BIND(api, nvmlDeviceGetPowerManagementLimit);
  if (!finish("NVML", *api->library, missing, error)) return nullptr;
  int status = api->nvmlInit_v2();
  if (status != 0) {
    *error = "nvmlInit failed with NVML error " + std::to_string(status);
    return nullptr;
  }
  return api;
}

}  // namespace paceline::calibrate::internal
