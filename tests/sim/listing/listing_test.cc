// Tests sim/listing/listing.h: every catalog entry listed, with figures as the simulator uses them.
#include "sim/listing/listing.h"

#include <gtest/gtest.h>

#include <cmath>

#include "hardware/gpu_spec.h"
#include "models/model_catalog.h"

namespace paceline {
namespace {

TEST(Listing, EveryGpuWithItsMemoryInWholeBytesAsAResultCountsThem) {
  const Json list = gpu_listing();
  ASSERT_EQ(list.elements().size(), catalog_gpus(default_gpu_catalog()).size());
  for (const Json& entry : list.elements()) {
    const GpuSpec gpu = resolve_gpu(entry.at("name").string(), default_gpu_catalog(), {});
    const double bytes = entry.at("memory_bytes").number();
    EXPECT_EQ(bytes, std::floor(bytes)) << entry.at("name").string();  // the B200's 178.35 GiB is not
    EXPECT_EQ(bytes, static_cast<double>(static_cast<int64_t>(gpu.memory_capacity / Bytes(1))));
  }
}

TEST(Listing, EveryModel) {
  EXPECT_EQ(model_listing().elements().size(), catalog_models(default_model_catalog()).size());
}

}  // namespace
}  // namespace paceline
