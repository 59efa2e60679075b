// Tests calibrate/internal/sdpa_graph.cc without a GPU: given the device properties of an H200
// (sm_90), cuDNN's heuristics must offer engines for the SDPA forward and backward graphs, i.e.
// cuDNN recognizes them as fused attention. Plans are not built: that needs the device.
#include "calibrate/internal/sdpa_graph.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

namespace paceline::calibrate::internal {
namespace {

#if PACELINE_HAVE_CUDNN

// Device properties as cuDNN's CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION (cuDNN >= 9.8) reads
// them, with an H200 SXM's values (cudaGetDeviceProperties on sm_90; 132 SMs, 50 MiB L2,
// 227 KiB opt-in shared memory per block, 141 GB HBM3e).
constexpr std::string_view kH200Properties = R"({
  "maxGridSize": [2147483647, 65535, 65535], "maxBlockSize": [1024, 1024, 64], "regsPerBlock": 65536,
  "multiProcessorCount": 132, "warpSize": 32, "maxSharedMemoryPerBlock": 49152,
  "maxSharedMemoryPerBlockOptin": 232448, "reservedSharedMemoryPerBlock": 1024, "maxRegistersPerSM": 65536,
  "maxCtasPerSM": 32, "maxThreadsPerBlock": 1024, "maxThreadsPerSM": 2048, "pciDeviceId": 0,
  "isTccDriver": 0, "supportCoopLaunch": 1, "smClockRateKHz": 1980000, "memClockRateKHz": 3201000,
  "l2CacheSize": 52428800, "deviceName": "NVIDIA H200", "totalGlobalMem": 150754820096,
  "cudaDeviceId": 0, "deviceVer": 900, "driverVer": 13000})";

TEST(SdpaGraphTest, HeuristicsOfferEnginesOnHopper) {
  std::string error;
  std::unique_ptr<CudnnApi> api = CudnnApi::load(&error);
  if (api == nullptr) GTEST_SKIP() << error;
  if (api->cudnnGetVersion() < 90800) GTEST_SKIP() << "deviceless heuristics need cuDNN >= 9.8";
  // cuDNN's engines load the driver to set up their run-time compiler even when no kernel runs;
  // without a driver the toolkit's stub libcuda (soname libcuda.so.1) stands in.
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
#ifdef PACELINE_CUDA_STUB_LIBCUDA
    ASSERT_NE(dlopen(PACELINE_CUDA_STUB_LIBCUDA, RTLD_NOW | RTLD_GLOBAL), nullptr) << dlerror();
#else
    GTEST_SKIP() << "neither a CUDA driver nor the toolkit's stub libcuda.so";
#endif
  }
  cudnnBackendDescriptor_t properties = nullptr;
  ASSERT_EQ(api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &properties),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(api->cudnnBackendSetAttribute(
                properties, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                static_cast<int64_t>(kH200Properties.size()), kH200Properties.data()),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(api->cudnnBackendFinalize(properties), CUDNN_STATUS_SUCCESS)
      << api->describe(CUDNN_STATUS_BAD_PARAM);

  // Causal and not, MHA and GQA-8, head_dim 128, as in the quick grid.
  for (bool causal : {true, false}) {
    for (int64_t kv_heads : {8, 1}) {
      const SdpaShape shape{/*b=*/1, /*h=*/8, /*hk=*/kv_heads, /*s=*/1024, /*d=*/128, causal};
      CudnnGraph forward(*api, /*handle=*/nullptr, properties);
      build_forward(forward, shape);
      EXPECT_GT(forward.count_engine_configs("SDPA forward"), 0)
          << "causal " << causal << ", kv_heads " << kv_heads;
      CudnnGraph backward(*api, /*handle=*/nullptr, properties);
      build_backward(backward, shape);
      EXPECT_GT(backward.count_engine_configs("SDPA backward"), 0)
          << "causal " << causal << ", kv_heads " << kv_heads;
    }
  }
  api->cudnnBackendDestroyDescriptor(properties);
}

#else

TEST(SdpaGraphTest, HeuristicsOfferEnginesOnHopper) {
  GTEST_SKIP() << "built without cuDNN headers";
}

#endif

}  // namespace
}  // namespace paceline::calibrate::internal
