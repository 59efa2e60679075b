#include "calibrate/internal/device_info.h"

#include <unistd.h>

#include <ctime>

namespace paceline::calibrate::internal {
namespace {

// version_text writes a CUDA-style version number (major·1000 + minor·10) as "13.0".
std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

}  // namespace

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

DeviceInfo describe_device(int device, int num_gpus, const Libraries& libraries,
                           const NvmlApi* nvml, const std::string& cupti_version) {
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  auto attribute = [device](cudaDeviceAttr attr) {
    int value = 0;
    return cudaDeviceGetAttribute(&value, attr, device) == cudaSuccess ? value : 0;
  };
  DeviceInfo info;
  info.name = prop.name;
  info.l2_bytes = prop.l2CacheSize;
  YamlNode& f = info.fields;
  f.set("name", YamlNode::string(prop.name));
  f.set("compute_capability",
        YamlNode::string(std::to_string(prop.major) + "." + std::to_string(prop.minor)));
  f.set("sm_count", YamlNode::integer(prop.multiProcessorCount));
  f.set("memory_bytes", YamlNode::integer(static_cast<int64_t>(prop.totalGlobalMem)));
  f.set("l2_bytes", YamlNode::integer(prop.l2CacheSize));
  f.set("memory_bus_width_bits", YamlNode::integer(prop.memoryBusWidth));

  // Peak clocks: CUDA reports them in kHz; NVML's maximum clocks when NVML is there.
  int64_t sm_mhz = attribute(cudaDevAttrClockRate) / 1000;
  int64_t mem_mhz = attribute(cudaDevAttrMemoryClockRate) / 1000;
  char bus_id[32] = {};
  cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
  std::string driver = "unknown (NVML unavailable)";
  if (nvml != nullptr) {
    char version[96] = {};
    if (nvml->nvmlSystemGetDriverVersion(version, sizeof(version)) == 0) driver = version;
    NvmlApi::Device handle = nullptr;
    if (nvml->nvmlDeviceGetHandleByPciBusId_v2(bus_id, &handle) == 0) {
      unsigned mhz = 0, milliwatts = 0;
      if (nvml->nvmlDeviceGetMaxClockInfo(handle, NvmlApi::kClockSm, &mhz) == 0) sm_mhz = mhz;
      if (nvml->nvmlDeviceGetMaxClockInfo(handle, NvmlApi::kClockMem, &mhz) == 0) mem_mhz = mhz;
      if (nvml->nvmlDeviceGetClockInfo(handle, NvmlApi::kClockSm, &mhz) == 0) {
        f.set("sm_clock_at_start_mhz", YamlNode::integer(mhz));
      }
      if (nvml->nvmlDeviceGetPowerManagementLimit(handle, &milliwatts) == 0) {
        f.set("power_limit_w", YamlNode::real(milliwatts / 1000.0));  // NVML reports milliwatts
      }
    }
  }
  f.set("sm_clock_max_mhz", YamlNode::integer(sm_mhz));
  f.set("memory_clock_max_mhz", YamlNode::integer(mem_mhz));
  f.set("pci_bus_id", YamlNode::string(bus_id));
  f.set("gpus_on_node", YamlNode::integer(num_gpus));

  int driver_api = 0, runtime = 0;
  cudaDriverGetVersion(&driver_api);
  cudaRuntimeGetVersion(&runtime);
  f.set("driver_version", YamlNode::string(driver));
  f.set("cuda_driver_version", YamlNode::string(cuda_version_text(driver_api)));
  f.set("cuda_runtime_version", YamlNode::string(cuda_version_text(runtime)));
  std::string cublaslt = "unavailable", cudnn = "unavailable", nccl = "unavailable";
#if PACELINE_HAVE_CUBLASLT
  if (libraries.cublaslt != nullptr)
    cublaslt = std::to_string(libraries.cublaslt->cublasLtGetVersion());
#endif
#if PACELINE_HAVE_CUDNN
  if (libraries.cudnn != nullptr) cudnn = std::to_string(libraries.cudnn->cudnnGetVersion());
#endif
#if PACELINE_HAVE_NCCL
  if (libraries.nccl != nullptr) {
    int v = 0;
    if (libraries.nccl->ncclGetVersion(&v) == ncclSuccess) nccl = std::to_string(v);
  }
#endif
  (void)libraries;
  f.set("cublaslt_version", YamlNode::string(cublaslt));
  f.set("cudnn_version", YamlNode::string(cudnn));
  f.set("nccl_version", YamlNode::string(nccl));
  f.set("cupti_version", YamlNode::string(cupti_version));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  f.set("host", YamlNode::string(host));
  f.set("measured_at", YamlNode::string(utc_now()));
  return info;
}

}  // namespace paceline::calibrate::internal
