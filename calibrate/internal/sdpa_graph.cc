#include "calibrate/internal/sdpa_graph.h"

#if PACELINE_HAVE_CUDNN
namespace paceline::calibrate::internal {

// The causal mask: keep S[row][col] where row >= col, else -inf (top-left diagonal).
cudnnBackendDescriptor_t causal_mask(CudnnGraph& g, cudnnBackendDescriptor_t s, const Dims& dims,
                                     cudnnBackendDescriptor_t neg_inf) {
  const Dims strides = packed_strides(dims);
  auto row = g.tensor(0, dims, strides, CUDNN_DATA_INT32);
  auto col = g.tensor(0, dims, strides, CUDNN_DATA_INT32);
  auto keep = g.tensor(0, dims, strides, CUDNN_DATA_BOOLEAN);
  auto masked = g.tensor(0, dims, strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, row, "gen_row_index", nullptr, nullptr,
              CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, col, "gen_col_index", nullptr, nullptr,
              CUDNN_DATA_FLOAT, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, "row>=col", col, nullptr, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, masked, "binary_select", neg_inf, keep);
  return masked;
}

// build_forward adds the forward graph to `g`.
void build_forward(CudnnGraph& g, const SdpaShape& x) {
  const Dims q_dims{x.b, x.h, x.s, x.d};
  const Dims kv_dims{x.b, x.hk, x.s, x.d};
  const Dims kv_strides = packed_strides(kv_dims);
  const Dims s_dims{x.b, x.h, x.s, x.s};
  const Dims s_strides = packed_strides(s_dims);
  const Dims row_dims{x.b, x.h, x.s, 1};
  const Dims row_strides = packed_strides(row_dims);

  auto q = g.tensor(kQ, q_dims, packed_strides(q_dims), CUDNN_DATA_BFLOAT16);
  // Kᵀ: K stored [b, hk, s, d], viewed as [b, hk, d, s] by swapping the last two strides.
  auto kt = g.tensor(kK, {x.b, x.hk, x.d, x.s}, {kv_strides[0], kv_strides[1], 1, x.d},
                     CUDNN_DATA_BFLOAT16);
  auto v = g.tensor(kV, kv_dims, kv_strides, CUDNN_DATA_BFLOAT16);
  auto o = g.tensor(kO, q_dims, packed_strides(q_dims), CUDNN_DATA_BFLOAT16);
  auto stats = g.tensor(kStats, row_dims, row_strides, CUDNN_DATA_FLOAT);
  auto scale = g.scalar(kScale);

  auto s = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.matmul(q, kt, s, "bmm1");
  auto scaled = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, s, scaled, "attn_scale", scale);
  auto last = scaled;
  if (x.causal) last = causal_mask(g, scaled, s_dims, g.scalar(kNegInf));

  // Softmax with stats, as CompositeSoftmaxNode lowers it.
  auto max = g.tensor(0, row_dims, row_strides, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, last, max, "max");
  auto sub = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, last, sub, "sub", max);
  auto exp = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, sub, exp, "exp");
  auto sum = g.tensor(0, row_dims, row_strides, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exp, sum, "sum");
  auto log = g.tensor(0, row_dims, row_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, log, "log");
  g.pointwise(CUDNN_POINTWISE_ADD, max, stats, "stats", log);
  // P is bf16: the second matmul takes its A operand in the I/O type.
  auto p = g.tensor(0, s_dims, s_strides, CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, exp, p, "div", sum);
  g.matmul(p, v, o, "bmm2");
}

// build_backward adds the backward graph to `g`.
void build_backward(CudnnGraph& g, const SdpaShape& x) {
  const Dims q_dims{x.b, x.h, x.s, x.d};
  const Dims q_strides = packed_strides(q_dims);
  const Dims kv_dims{x.b, x.hk, x.s, x.d};
  const Dims kv_strides = packed_strides(kv_dims);
  const Dims kvt_dims{x.b, x.hk, x.d, x.s};
  const Dims kvt_strides{kv_strides[0], kv_strides[1], 1, x.d};
  const Dims s_dims{x.b, x.h, x.s, x.s};
  const Dims s_strides = packed_strides(s_dims);
  const Dims st_strides{s_strides[0], s_strides[1], 1, x.s};  // Sᵀ view of the same scores
  const Dims row_dims{x.b, x.h, x.s, 1};
  const Dims row_strides = packed_strides(row_dims);

  auto q = g.tensor(kQ, q_dims, q_strides, CUDNN_DATA_BFLOAT16);
  auto kt = g.tensor(kK, kvt_dims, kvt_strides, CUDNN_DATA_BFLOAT16);
  auto vt = g.tensor(kV, kvt_dims, kvt_strides, CUDNN_DATA_BFLOAT16);
  auto o = g.tensor(kO, q_dims, q_strides, CUDNN_DATA_BFLOAT16);
  auto d_o = g.tensor(kDO, q_dims, q_strides, CUDNN_DATA_BFLOAT16);
  auto stats = g.tensor(kStats, row_dims, row_strides, CUDNN_DATA_FLOAT);
  auto d_q = g.tensor(kDQ, q_dims, q_strides, CUDNN_DATA_BFLOAT16);
  auto d_k = g.tensor(kDK, kv_dims, kv_strides, CUDNN_DATA_BFLOAT16);
  auto d_v = g.tensor(kDV, kv_dims, kv_strides, CUDNN_DATA_BFLOAT16);
  auto scale = g.scalar(kScale);
  auto one = g.scalar(kOne);

  // softmax_sum = sum_row(dO ∘ O), kept in an fp32 workspace tensor.
  auto do_o = g.tensor(0, q_dims, {x.h * x.s * x.d, x.s * x.d, x.h * x.d, 1}, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, d_o, do_o, "mul_dO_O", o);
  auto do_o_sum = g.tensor(0, row_dims, row_strides, CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, do_o_sum, "reduce_dO_o");
  auto softmax_sum = g.tensor(kSoftmaxSum, row_dims, row_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, do_o_sum, softmax_sum, "scale_dropout_inv", one);

  // Recompute the probabilities from the saved stats.
  auto s = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.matmul(q, kt, s, "matmul_Q_KT");
  auto scaled = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, s, scaled, "mul_s_attn_scale", scale);
  auto shifted = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, shifted, "sub_s_m", stats);
  auto last = shifted;
  if (x.causal) last = causal_mask(g, shifted, s_dims, g.scalar(kNegInf));
  auto p = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, last, p, "exp_s");

  // A key or value gradient: a per-query-head product, summed over the query heads that share
  // each KV head when there are fewer KV heads (GQA).
  auto key_value_gradient = [&](auto a, auto b, auto out, const char* product, const char* sum) {
    if (x.h == x.hk) {
      g.matmul(a, b, out, product);
      return;
    }
    auto per_query_head = g.tensor(0, q_dims, q_strides, CUDNN_DATA_BFLOAT16);
    g.matmul(a, b, per_query_head, product);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_query_head, out, sum);
  };

  // dV = Pᵀ·dO, summed over each KV head's query heads for GQA.
  auto pt = g.tensor(0, {x.b, x.h, x.s, x.s}, st_strides, CUDNN_DATA_BFLOAT16);
  g.reshape(p, pt, "reshape_p");
  key_value_gradient(pt, d_o, d_v, "matmul_pT_dO", "red_dV_head");

  // dS = (dO·Vᵀ - softmax_sum) ∘ P · scale.
  auto dp = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.matmul(d_o, vt, dp, "matmul_dO_VT");
  auto dp_sub = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, dp_sub, "sub_dP_softmax_sum", softmax_sum);
  auto dp_p = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_sub, dp_p, "mul_dP_exp_s", p);
  auto ds = g.tensor(0, s_dims, s_strides, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_p, ds, "mul_dS_attn_scale", scale);

  // dK = dSᵀ·Q, summed over the group for GQA.
  auto dst = g.tensor(0, {x.b, x.h, x.s, x.s}, st_strides, CUDNN_DATA_BFLOAT16);
  g.reshape(ds, dst, "reshape_dS");
  key_value_gradient(dst, q, d_k, "matmul_dST_Q", "red_dK_head");

  // dQ = dS·K through an fp32 accumulator workspace.
  auto k = g.tensor(0, kv_dims, kv_strides, CUDNN_DATA_BFLOAT16);
  g.reshape(kt, k, "reshape_k");
  auto d_q_accum = g.tensor(kDQAccum, q_dims, q_strides, CUDNN_DATA_FLOAT);
  g.matmul(ds, k, d_q_accum, "matmul_dS_K");
  g.pointwise(CUDNN_POINTWISE_IDENTITY, d_q_accum, d_q, "identity_dQ");
}

}  // namespace paceline::calibrate::internal
#endif  // PACELINE_HAVE_CUDNN
