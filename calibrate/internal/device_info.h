// The device identity written at the top of a profile.
#pragma once

#include <cstdint>
#include <string>

#include "calibrate/internal/families.h"
#include "calibrate/internal/libraries.h"
#include "calibrate/yaml_subset.h"

namespace paceline::calibrate::internal {

// DeviceInfo is what a run needs to know about its GPU, and the profile's `device` mapping.
struct DeviceInfo {
  YamlNode fields = YamlNode::mapping(/*flow_style=*/false);
  std::string name;
  int64_t l2_bytes = 0;
};

// describe_device queries CUDA (and NVML when available) for `device`: name, compute capability,
// SMs, memory, L2, clocks, power limit, PCI id, driver and library versions, host and time.
// Throws BenchError when CUDA cannot describe the device.
DeviceInfo describe_device(int device, int num_gpus, const Libraries& libraries,
                           const NvmlApi* nvml, const std::string& cupti_version);

// utc_now is the current UTC time as ISO 8601 ("2026-11-29T21:49:03Z").
std::string utc_now();

}  // namespace paceline::calibrate::internal
