// cuDNN SDPA (fused flash attention) operation graphs, built with the backend API the way
// cudnn-frontend lowers its SDPA node for cuDNN 9.x before 9.21 (see attention_family.cc for the
// graphs and their sources). Used by the attention family and by its deviceless test.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "calibrate/internal/bench.h"
#include "calibrate/internal/libraries.h"

#if PACELINE_HAVE_CUDNN
namespace paceline::calibrate::internal {

// Unique ids of the graphs' non-virtual tensors (the variant pack's keys).
enum SdpaUid : int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kStats = 5,
  kScale = 6,
  kNegInf = 7,
  kDO = 8,
  kDQ = 9,
  kDK = 10,
  kDV = 11,
  kOne = 12,
  kSoftmaxSum = 13,
  kDQAccum = 14,
  kFirstVirtual = 100,
};

using Dims = std::array<int64_t, 4>;

// packed_strides are the strides of a contiguous tensor of `dims`.
inline Dims packed_strides(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// CudnnGraph builds one cuDNN operation graph and owns every descriptor it creates.
class CudnnGraph {
 public:
  // `device_properties` (a finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, cuDNN >= 9.8) replaces
  // the handle for heuristics and plans: it lets a plan be built for a GPU that is not present.
  CudnnGraph(const CudnnApi& api, cudnnHandle_t handle,
             cudnnBackendDescriptor_t device_properties = nullptr)
      : api_(api), handle_(handle), device_properties_(device_properties) {}
  ~CudnnGraph() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it)
      api_.cudnnBackendDestroyDescriptor(*it);
  }
  CudnnGraph(const CudnnGraph&) = delete;
  CudnnGraph& operator=(const CudnnGraph&) = delete;

  cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type, std::string_view what) {
    cudnnBackendDescriptor_t d = nullptr;
    check(api_.cudnnBackendCreateDescriptor(type, &d), std::string("create ") + std::string(what));
    owned_.push_back(d);
    return d;
  }

  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void* value,
           std::string_view what) {
    check(api_.cudnnBackendSetAttribute(d, name, type, count, value), "set " + std::string(what));
  }

  void finalize(cudnnBackendDescriptor_t d, std::string_view what) {
    check(api_.cudnnBackendFinalize(d), "finalize " + std::string(what));
  }

  // tensor creates a tensor; `uid` 0 makes a virtual tensor with a fresh id.
  cudnnBackendDescriptor_t tensor(int64_t uid, const Dims& dims, const Dims& strides,
                                  cudnnDataType_t type, bool by_value = false) {
    const bool is_virtual = uid == 0;
    if (is_virtual) uid = next_virtual_++;
    const std::string what = "tensor " + std::to_string(uid);
    cudnnBackendDescriptor_t t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t alignment = 16;
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what + " id");
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what + " type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), what + " dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), what + " strides");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, what + " alignment");
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what + " virtual");
    if (by_value)
      set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what + " by value");
    finalize(t, what);
    return t;
  }

  // scalar is a by-value fp32 scalar tensor (its value is passed in the variant pack).
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, /*by_value=*/true);
  }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
              std::string_view name) {
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, name);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, name);
    finalize(desc, name);
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, name);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, name);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, name);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc, name);
    finalize(op, name);
    ops_.push_back(op);
  }

  // pointwise adds y = mode(x[, b[, t]]); `axis` is GEN_INDEX's axis.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 std::string_view name, cudnnBackendDescriptor_t b = nullptr,
                 cudnnBackendDescriptor_t t = nullptr, cudnnDataType_t compute = CUDNN_DATA_FLOAT,
                 int64_t axis = -1) {
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name);
    set(desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, name);
    set(desc, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, name);
    if (axis >= 0) set(desc, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, name);
    finalize(desc, name);
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc,
        name);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, name);
    if (b != nullptr)
      set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, name);
    if (t != nullptr)
      set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, name);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, name);
    finalize(op, name);
    ops_.push_back(op);
  }

  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 std::string_view name) {
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(desc, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, name);
    set(desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, name);
    finalize(desc, name);
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, name);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, name);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc, name);
    finalize(op, name);
    ops_.push_back(op);
  }

  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, std::string_view name) {
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, name);
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, name);
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, name);
    finalize(op, name);
    ops_.push_back(op);
  }

  // count_engine_configs finalizes the operation graph and returns how many engine
  // configurations cuDNN's heuristics (mode A) offer for it: 0 means no engine runs this graph.
  int64_t count_engine_configs(std::string_view graph_name) {
    cudnnBackendDescriptor_t graph = finalize_graph(graph_name);
    cudnnBackendDescriptor_t heuristics = heuristics_for(graph, CUDNN_HEUR_MODE_A);
    // The count query alone reports candidates before cuDNN's support checks; fetching the
    // configurations applies them.
    int64_t count = 0;
    check(api_.cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
          "heuristic results");
    if (count <= 0) return 0;
    std::vector<cudnnBackendDescriptor_t> configs;
    for (int64_t i = 0; i < count; ++i)
      configs.push_back(create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
    int64_t returned = 0;
    check(api_.cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                        configs.data()),
          "heuristic results");
    return returned;
  }

  // build_plan finalizes the operation graph and returns the first execution plan cuDNN's
  // heuristics (mode A, then the fallback list) can finalize, with its workspace size.
  cudnnBackendDescriptor_t build_plan(std::string_view graph_name, int64_t* workspace_bytes) {
    cudnnBackendDescriptor_t graph = finalize_graph(graph_name);
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    std::string last_error = "no engine configuration";
    int64_t configs_tried = 0;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      cudnnBackendDescriptor_t heuristics = nullptr;
      try {
        heuristics = heuristics_for(graph, mode);
      } catch (const BenchError& e) {
        last_error = e.what();
        continue;
      }
      int64_t count = 0;
      status = api_.cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
      if (status != CUDNN_STATUS_SUCCESS || count <= 0) {
        if (status != CUDNN_STATUS_SUCCESS)
          last_error = "heuristic results: " + api_.describe(status);
        continue;
      }
      count = std::min<int64_t>(count, 16);
      std::vector<cudnnBackendDescriptor_t> configs;
      for (int64_t i = 0; i < count; ++i)
        configs.push_back(create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
      int64_t returned = 0;
      status = api_.cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                             configs.data());
      if (status != CUDNN_STATUS_SUCCESS) {
        last_error = "heuristic results: " + api_.describe(status);
        continue;
      }
      for (int64_t i = 0; i < std::min(returned, count); ++i) {
        ++configs_tried;
        cudnnBackendDescriptor_t plan =
            create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        if (handle_ != nullptr) {
          api_.cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                        1, &handle_);
        }
        if (device_properties_ != nullptr) {
          set(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
              &device_properties_, "plan device properties");
        }
        status = api_.cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[i]);
        if (status == CUDNN_STATUS_SUCCESS) status = api_.cudnnBackendFinalize(plan);
        if (status != CUDNN_STATUS_SUCCESS) {
          last_error = api_.describe(status);
          continue;
        }
        int64_t returned_count = 0;
        *workspace_bytes = 0;
        check(api_.cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &returned_count, workspace_bytes),
              "plan workspace size");
        return plan;
      }
    }
    throw BenchError("cuDNN has no engine for the " + std::string(graph_name) + " graph (" +
                     std::to_string(configs_tried) + " configurations tried; last: " + last_error +
                     ")");
  }

  // variant_pack binds uids to pointers for one execution.
  cudnnBackendDescriptor_t variant_pack(const std::vector<int64_t>& uids,
                                        const std::vector<void*>& pointers, void* workspace) {
    cudnnBackendDescriptor_t pack = create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
        static_cast<int64_t>(uids.size()), uids.data(), "variant pack ids");
    set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
        static_cast<int64_t>(pointers.size()), pointers.data(), "variant pack pointers");
    set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
        "variant pack workspace");
    finalize(pack, "variant pack");
    return pack;
  }

  // finalize_graph makes the operation graph of every operation added so far.
  cudnnBackendDescriptor_t finalize_graph(std::string_view graph_name) {
    cudnnBackendDescriptor_t graph = create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph_name);
    // The handle attribute is deprecated in cuDNN 9 but still read by older 9.x releases.
    if (handle_ != nullptr) {
      api_.cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                    &handle_);
    }
    set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops_.size()), ops_.data(), std::string(graph_name) + " ops");
    cudnnStatus_t status = api_.cudnnBackendFinalize(graph);
    if (status != CUDNN_STATUS_SUCCESS) {
      throw BenchError("cuDNN rejected the " + std::string(graph_name) +
                       " graph: " + api_.describe(status));
    }
    return graph;
  }

  // heuristics_for runs cuDNN's heuristics in `mode` on a finalized graph.
  cudnnBackendDescriptor_t heuristics_for(cudnnBackendDescriptor_t graph,
                                          cudnnBackendHeurMode_t mode) {
    cudnnBackendDescriptor_t heuristics = create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    set(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph,
        "heuristics");
    set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    if (device_properties_ != nullptr) {
      set(heuristics, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &device_properties_, "heuristics device properties");
    }
    finalize(heuristics, "heuristics");
    return heuristics;
  }

  void check(cudnnStatus_t status, const std::string& what) const {
    if (status != CUDNN_STATUS_SUCCESS)
      throw BenchError("cuDNN " + what + ": " + api_.describe(status));
  }

 private:
  const CudnnApi& api_;
  cudnnHandle_t handle_;
  cudnnBackendDescriptor_t device_properties_;
  std::vector<cudnnBackendDescriptor_t> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

// SdpaShape of one attention problem (batch, heads, KV heads, sequence, head dim).
struct SdpaShape {
  int64_t b, h, hk, s, d;
  bool causal;
  bool operator==(const SdpaShape&) const = default;
};

// causal_mask adds the top-left causal mask to scores `s` of `dims`: keep S[row][col] where
// row >= col, else `neg_inf` (cudnn-frontend's CompositeDiagonalBandMaskNode, right bound 0).
cudnnBackendDescriptor_t causal_mask(CudnnGraph& g, cudnnBackendDescriptor_t s, const Dims& dims,
                                     cudnnBackendDescriptor_t neg_inf);

// build_forward adds the SDPA forward graph (Q, K, V → O, Stats) to `g`.
void build_forward(CudnnGraph& g, const SdpaShape& x);

// build_backward adds the SDPA backward graph (Q, K, V, O, dO, Stats → dQ, dK, dV) to `g`.
void build_backward(CudnnGraph& g, const SdpaShape& x);

}  // namespace paceline::calibrate::internal
#endif  // PACELINE_HAVE_CUDNN
