#include "sim/report/result.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include "base/check.h"
#include "base/input_error.h"
#include "base/yaml_reader.h"
#include "hardware/collective_model.h"

namespace paceline {
namespace {

// Matmul parameters a token passes through in one block (MoE: its top-k experts, of which the
// capacity factor drops a share), of whose attention `count` has the projections.
double active_matmul_parameters(const ModelSpec& m, const ParameterCount& count, bool moe) {
  const double h = static_cast<double>(m.hidden);
  const double matrices = m.gated_mlp() ? 3.0 : 2.0;
  const double parameters = static_cast<double>(count.attention_matmuls_per_layer);
  if (!moe) return parameters + matrices * h * static_cast<double>(m.ffn_hidden);
  const MoeSpec& e = *m.moe;
  return parameters + h * e.experts +
         e.kept_share() * e.top_k * matrices * h * static_cast<double>(e.ffn_hidden) +
         e.shared_experts * matrices * h * static_cast<double>(e.shared_ffn_hidden);
}

// The transfers whose time with no compute beside it the breakdown reports, in its order.
constexpr std::array kExposedTags = {ActivityTag::kTensorComm, ActivityTag::kContextComm, ActivityTag::kExpertComm,
                                     ActivityTag::kDataComm,   ActivityTag::kPipelineComm, ActivityTag::kHostTransfer};

// Time on the critical rank: compute (by kind), exposed communication (by group), and idle.
Breakdown breakdown_of(const RunResult& run, uint32_t rank, const StageProgram& stage) {
  struct Edge {
    SimTime time;
    int delta;
    uint8_t tag;
  };
  std::vector<Edge> edges;
  for (const TaskSpan& span : run.spans) {
    if (span.rank != rank || span.end == span.start) continue;
    const uint8_t tag = stage.program.task(span.task).tag;
    edges.push_back({span.start, +1, tag});
    edges.push_back({span.end, -1, tag});
  }
  std::stable_sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.time < b.time; });
  std::array<int, kNumActivityTags> active{};
  // When several transfers run with no compute beside them, the time is charged to the
  // first of: pipeline, tensor, context, expert, data, host.
  constexpr std::array kExposureOrder = {ActivityTag::kPipelineComm, ActivityTag::kTensorComm,
                                         ActivityTag::kContextComm,  ActivityTag::kExpertComm,
                                         ActivityTag::kDataComm,     ActivityTag::kHostTransfer};
  Breakdown b;
  SimTime previous = SimTime::zero();
  const SimTime end = run.end;
  auto account = [&](SimTime until) {
    if (until <= previous) return;
    const Seconds length = to_seconds(until) - to_seconds(previous);
    if (active[static_cast<int>(ActivityTag::kCompute)] > 0) {
      b.compute += length;
    } else if (active[static_cast<int>(ActivityTag::kRecompute)] > 0) {
      b.recompute += length;
    } else if (active[static_cast<int>(ActivityTag::kOptimizer)] > 0) {
      b.optimizer += length;
    } else {
      bool charged = false;
      for (const ActivityTag tag : kExposureOrder) {
        if (!charged && active[static_cast<int>(tag)] > 0) {
          b.exposed_by_tag[static_cast<int>(tag)] += length;
          b.exposed_communication += length;
          charged = true;
        }
      }
      if (!charged) b.pipeline_bubble += length;
    }
    previous = until;
  };
  for (const Edge& e : edges) {
    account(e.time);
    active[e.tag] += e.delta;
  }
  account(end);
  // Compute that ran longer than its kernels take alone lost the difference to communication
  // beside it (interference): moved from compute into overlap_slowdown.
  for (const TaskSpan& span : run.spans) {
    if (span.rank != rank) continue;
    const Task task = stage.program.task(span.task);
    if (task.tag != static_cast<uint8_t>(ActivityTag::kCompute) && task.tag != static_cast<uint8_t>(ActivityTag::kRecompute)) {
      continue;
    }
    const Seconds slowed = to_seconds(span.end - span.start) - to_seconds(task.duration);
    if (slowed <= Seconds(0)) continue;
    b.overlap_slowdown += slowed;
    if (task.tag == static_cast<uint8_t>(ActivityTag::kCompute)) {
      b.compute -= slowed;
    } else {
      b.recompute -= slowed;
    }
  }
  return b;
}

KernelSources kernel_sources(const Scenario& s, const StageProgram& stage) {
  KernelSources sources;
  if (s.cluster.profile) sources.profile = std::filesystem::path(s.cluster.profile->path()).stem().string();
  double measured = 0.0, total = 0.0;
  // The names of the ops the model timed matter only beside a profile's measured ones.
  const bool name_modeled = !sources.profile.empty();
  std::set<std::string> modeled;
  for (TaskId id = 0; id < stage.program.num_tasks(); ++id) {
    const TaskLabel& label = stage.labels[stage.program.task(id).label];
    if (label.plan == kNoId) continue;
    const TaskPlan& plan = *stage.plans[label.plan];
    const TaskTemplate& t = plan.tasks[label.task];
    for (uint32_t i = t.first_op; i < t.first_op + t.num_ops; ++i) {
      const PlannedOp& op = plan.ops[i];
      // An op taking no time (a holder of recomputed bytes) launches no kernel.
      if (op.kind == OpKind::kCommunication || op.duration <= Seconds(0)) continue;
      const double seconds = op.duration / Seconds(1);
      total += seconds;
      if (op.measured) {
        measured += seconds;
        sources.measured_kernels += op.launches;
      } else {
        sources.modeled_kernels += op.launches;
        if (name_modeled) modeled.insert(op.name);
      }
    }
  }
  sources.measured_time_fraction = total > 0.0 ? measured / total : 0.0;
  sources.kernel_time = Seconds(total);
  sources.modeled_ops.assign(modeled.begin(), modeled.end());
  return sources;
}

}  // namespace

Json to_json(const Breakdown& b) {
  Json json = Json::object();
  json.set("compute", b.compute / Seconds(1));
  json.set("recompute", b.recompute / Seconds(1));
  json.set("optimizer", b.optimizer / Seconds(1));
  json.set("overlap_slowdown", b.overlap_slowdown / Seconds(1));
  json.set("exposed_communication", b.exposed_communication / Seconds(1));
  for (const ActivityTag tag : kExposedTags) {
    json.set(fmt::format("exposed_{}", to_string(tag)), b.exposed_by_tag[static_cast<int>(tag)] / Seconds(1));
  }
  json.set("pipeline_bubble", b.pipeline_bubble / Seconds(1));
  return json;
}

Flop model_flop_per_iteration(const Scenario& s) {
  const ModelSpec& m = s.model;
  const ParameterCount count = count_parameters(m);
  const double attention = 6.0 * static_cast<double>(m.heads * (m.head_dim + m.value_head_dim())) *
                           static_cast<double>(s.training.seq_len);
  const double h = static_cast<double>(m.hidden);
  const double logits = 6.0 * static_cast<double>(m.vocab) * h;
  double per_token = logits;
  for (int layer = 0; layer < m.layers; ++layer) {
    per_token += 6.0 * active_matmul_parameters(m, count, m.is_moe_layer(layer)) + attention;
  }
  // Each multi-token prediction module: its projection, layer and logits.
  const double mtp_module =
      6.0 * (2.0 * h * h + active_matmul_parameters(m, count, m.mtp_layer_is_moe())) + attention +
      logits;
  per_token += m.mtp_layers * mtp_module;
  return Flop(per_token * static_cast<double>(s.tokens_per_iteration()));
}

Result make_result(std::shared_ptr<const Scenario> scenario, const Lowering& lowering, const RunResult& run) {
  const Scenario& s = *scenario;
  Result r;
  r.scenario = scenario;
  r.iteration_time = to_seconds(run.end);
  const double seconds = r.iteration_time / Seconds(1);
  const double gpus = s.num_gpus();
  r.tokens_per_s = static_cast<double>(s.tokens_per_iteration()) / seconds;
  r.tokens_per_s_per_gpu = r.tokens_per_s / gpus;
  r.model_flop_per_iteration = model_flop_per_iteration(s);
  const DType peak_dtype = s.training.precision == Precision::kFp8 ? DType::kFp8 : s.compute_dtype();
  const double peak = *s.cluster.gpu.peak(peak_dtype) / FlopPerSecond(1);
  r.model_tflops_per_gpu = r.model_flop_per_iteration / Flop(1) / seconds / gpus / 1e12;
  r.mfu = r.model_tflops_per_gpu * 1e12 / peak;
  // Hardware FLOPs add recomputation, in the share the lowered programs execute it.
  Flop executed, recomputed;
  for (const auto& stage : lowering.stages) {
    executed += stage->executed_flop;
    recomputed += stage->recompute_flop;
  }
  const double recompute_share = executed > Flop(0) ? recomputed / (executed - recomputed) : 0.0;
  r.hardware_tflops_per_gpu = r.model_tflops_per_gpu * (1.0 + recompute_share);
  r.hfu = r.hardware_tflops_per_gpu * 1e12 / peak;

  // Memory: the worst rank of each stage.
  r.capacity_bytes = static_cast<int64_t>(s.cluster.gpu.memory_capacity / Bytes(1));
  r.stages.resize(lowering.stages.size());
  for (size_t i = 0; i < lowering.stages.size(); ++i) {
    const StaticMemory& st = lowering.stages[i]->static_memory;
    r.stages[i] = StageMemory{static_cast<int>(i), 0, st.total(), st.weight_bytes, st.gradient_bytes, st.optimizer_bytes};
  }
  for (size_t rank = 0; rank < run.ranks.size(); ++rank) {
    const RankOutcome& outcome = run.ranks[rank];
    StageMemory& stage = r.stages[lowering.rank_stage[rank]];
    if (outcome.peak_memory_bytes > stage.peak_bytes) {
      stage.peak_bytes = outcome.peak_memory_bytes;
      stage.peak_at.reset();
      if (outcome.peak_memory_task != kNoId) {
        const auto d =
            lowering.stages[lowering.rank_stage[rank]]->describe(outcome.peak_memory_task);
        stage.peak_at = MemoryPeak{d.name, d.block, d.phase, d.microbatch,
                                   to_seconds(outcome.peak_memory_time)};
      }
    }
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, outcome.peak_memory_bytes);
    r.peak_reserved_bytes = std::max(r.peak_reserved_bytes, outcome.peak_reserved_bytes);
  }
  r.fits = r.peak_memory_bytes <= r.capacity_bytes;
  r.peak_reserved_bytes =
      std::max(r.peak_memory_bytes, std::min(r.peak_reserved_bytes, r.capacity_bytes));

  // The critical stage: that of the first rank to finish last. Its time is broken down on the
  // rank of that stage whose spans were kept that finishes last, the critical rank itself where
  // its spans were kept (under full fidelity a rank of another tensor- or data-parallel position
  // may finish last, e.g. a tensor-parallel group straddling two NVLink domains).
  uint32_t last = 0;
  while (last + 1 < run.ranks.size() && run.ranks[last].finish != run.end) ++last;
  r.critical_stage = lowering.rank_stage[last];
  std::optional<uint32_t> critical;
  for (uint32_t rank = 0; rank < run.ranks.size(); ++rank) {
    if (lowering.rank_stage[rank] != r.critical_stage || !lowering.ranks[rank].record_spans)
      continue;
    if (!critical || run.ranks[rank].finish > run.ranks[*critical].finish) critical = rank;
  }
  PACELINE_CHECK(critical.has_value(), "no rank of the critical stage kept its spans");
  r.breakdown = breakdown_of(run, *critical, *lowering.stages[r.critical_stage]);

  r.kernels = kernel_sources(s, *lowering.stages[r.critical_stage]);
  const ParameterCount count = count_parameters(s.model);
  r.parameters = count.total;
  r.active_parameters = count.active;
  r.microbatches = lowering.microbatches;
  r.events = run.events;
  r.ranks_simulated = static_cast<int>(run.ranks.size());
  const Parallelism& p = s.parallelism;
  for (const auto& [name, step, size] : {std::tuple{"tp", lowering.fold.tp, p.tp}, std::tuple{"cp", lowering.fold.cp, p.cp},
                                         std::tuple{"dp", lowering.fold.dp, p.dp}}) {
    if (step > 0 && size / step > 1) r.folded_peers.emplace_back(name, size / step);
  }
  return r;
}

Json to_json(const ModelSpec& m) {
  Json model = Json::object();
  model.set("name", m.name).set("layers", m.layers).set("hidden", m.hidden).set("heads", m.heads);
  model.set("kv_heads", m.kv_heads).set("head_dim", m.head_dim).set("ffn_hidden", m.ffn_hidden);
  model.set("vocab", m.vocab).set("seq_len", m.seq_len).set("activation", to_string(m.activation));
  model.set("norm", to_string(m.norm)).set("position", to_string(m.position));
  model.set("tied_embeddings", m.tied_embeddings).set("bias", m.linear_bias).set("qkv_bias", m.qkv_bias);
  model.set("qk_norm", m.qk_norm).set("dropout", m.dropout);
  if (m.mtp_layers > 0) model.set("mtp_layers", m.mtp_layers);
  if (m.attention_window > 0) model.set("attention_window", m.attention_window);
  if (m.moe) {
    Json moe = Json::object();
    moe.set("experts", m.moe->experts).set("top_k", m.moe->top_k).set("ffn_hidden", m.moe->ffn_hidden);
    moe.set("every", m.moe->every).set("first_dense_layers", m.moe->first_dense_layers);
    moe.set("shared_experts", m.moe->shared_experts);
    moe.set("shared_ffn_hidden", m.moe->shared_ffn_hidden).set("capacity_factor", m.moe->capacity_factor);
    moe.set("groups", m.moe->groups).set("group_top_k", m.moe->group_top_k);
    moe.set("imbalance", m.moe->imbalance);
    model.set("moe", std::move(moe));
  }
  if (m.mla) {
    Json mla = Json::object();
    mla.set("q_lora_rank", m.mla->q_lora_rank).set("kv_lora_rank", m.mla->kv_lora_rank);
    mla.set("rope_head_dim", m.mla->rope_head_dim).set("v_head_dim", m.mla->v_head_dim);
    model.set("mla", std::move(mla));
  }
  return model;
}

Json to_json(const Scenario& s) {
  Json model = to_json(s.model);
  const ClusterSpec& c = s.cluster;
  Json cluster = Json::object();
  // In the scenario format (quantities as plain SI numbers), so that it reads back as the same
  // scenario; fields that are absent are left out.
  if (!c.system.empty()) cluster.set("system", c.system);
  // A system's own GPU is left to the system, which may give it memory of its own.
  if (!c.gpu_mapping.is_null()) {
    cluster.set("gpu", c.gpu_mapping);
  } else if (!c.gpu_reference.empty()) {
    cluster.set("gpu", c.gpu_reference);
  }
  cluster.set("nodes", c.nodes).set("gpus_per_node", c.gpus_per_node);
  if (c.profile) {
    cluster.set("profile", c.profile_reference).set("profile_gpu", c.profile_gpu_reference);
  } else if (!c.gpu.profile.empty()) {
    cluster.set("profile", "");  // the GPU's own profile turned off
  }
  // Every figure of a link: one read back without a catalog `link` takes the GPU's default link
  // for those it leaves out.
  auto link = [](const LinkSpec& l, const char* bandwidth_key) {
    Json json = Json::object();
    if (l.name != "inline") json.set("link", l.name);
    json.set(bandwidth_key, l.bandwidth / BytesPerSecond(1));
    json.set("latency", l.latency / Seconds(1)).set("bandwidth_efficiency", l.bandwidth_efficiency);
    return json;
  };
  if (!c.intra_node.name.empty()) {  // none where one GPU per node has no default link
    Json intra = link(c.intra_node, "bandwidth");
    intra.set("nvls_bus_efficiency", c.intra_node.nvls_bus_efficiency);
    intra.set("nvls_latency", c.intra_node.nvls_latency / Seconds(1)).set("mesh_links", c.intra_node.mesh_links);
    cluster.set("intra_node", std::move(intra));
  }
  cluster.set("nvlink_domain", c.nvlink_domain).set("nvls", c.nvls);
  if (c.host_bandwidth > BytesPerSecond(0)) cluster.set("host_bandwidth", c.host_bandwidth / BytesPerSecond(1));
  if (c.inter_node) {
    Json net = link(c.inter_node->nic, "nic_bandwidth");
    net.set("nics_per_node", c.inter_node->nics_per_node).set("topology", c.inter_node->topology);
    net.set("oversubscription", c.inter_node->oversubscription).set("nodes_per_leaf", c.inter_node->nodes_per_leaf);
    net.set("post_overhead", c.inter_node->post_overhead / Seconds(1));
    if (c.inter_node->gpu_nic_pcie > BytesPerSecond(0))
      net.set("gpu_nic_pcie", c.inter_node->gpu_nic_pcie / BytesPerSecond(1));
    cluster.set("inter_node", std::move(net));
  }
  const Parallelism& p = s.parallelism;
  Json parallelism = Json::object();
  parallelism.set("tp", p.tp).set("pp", p.pp).set("dp", p.dp).set("cp", p.cp).set("ep", p.ep);
  parallelism.set("ep_comm_overlap", p.ep_comm_overlap);
  if (p.ep > 1) parallelism.set("ep_dispatcher", to_string(p.ep_dispatcher));
  parallelism.set("virtual_stages", p.virtual_stages).set("schedule", to_string(p.schedule));
  // Settings only where they act, as the scenario format accepts them.
  parallelism.set("sequence_parallel", p.sequence_parallel).set("tp_comm_overlap", p.tp_comm_overlap);
  if (p.tp_comm_overlap) parallelism.set("tp_comm_overlap_method", to_string(p.tp_comm_overlap_method));
  if (p.tp > 1) parallelism.set("tp_implementation", to_string(p.tp_implementation));
  if (p.cp > 1) parallelism.set("cp_comm", to_string(p.cp_comm));
  if (p.cp > 1 && p.cp_comm != ContextComm::kAllToAll) parallelism.set("cp_comm_overlap", p.cp_comm_overlap);
  parallelism.set("zero", p.zero).set("zero_shard", p.zero_shard);
  if (p.zero == 3 && p.pp == 1) {
    parallelism.set("fsdp_prefetch", p.fsdp_prefetch).set("fsdp_gather", to_string(p.fsdp_gather));
    parallelism.set("fsdp_gradient_reduce", to_string(p.fsdp_gradient_reduce));
    if (p.fsdp_gather == FsdpGather::kTensor) {
      parallelism.set("fsdp_persistence_threshold", p.fsdp_persistence_threshold);
      parallelism.set("fsdp_reuse_distance", p.fsdp_reuse_distance);
    }
  } else if (p.zero == 3 && p.fsdp_gather == FsdpGather::kPerParameter) {
    parallelism.set("fsdp_gather", to_string(p.fsdp_gather));
  }
  Json stages = Json::array();
  for (const int layers : p.layers_per_stage) stages.push(layers);
  parallelism.set("layers_per_stage", std::move(stages));
  parallelism.set("rank_order", to_string(p.rank_order));
  const Training& t = s.training;
  Json training = Json::object();
  training.set("global_batch", t.global_batch).set("micro_batch", t.micro_batch).set("seq_len", t.seq_len);
  training.set("precision", to_string(t.precision)).set("recompute", to_string(t.recompute));
  if (t.recompute_layers > 0) training.set("recompute_layers", t.recompute_layers);
  if (t.recompute_modules != kDefaultRecomputeModules) {
    Json modules = Json::array();
    for (int i = 0; i < kRecomputeModuleCount; ++i) {
      const auto module = static_cast<RecomputeModule>(i);
      if (t.recompute_modules.has(module)) modules.push(to_string(module));
    }
    training.set("recompute_modules", std::move(modules));
  }
  if (t.activation_offload_layers > 0) training.set("activation_offload_layers", t.activation_offload_layers);
  training.set("attention", to_string(t.attention)).set("repeat_kv", t.repeat_kv);
  training.set("separate_projections", t.separate_projections);
  if (s.model.moe) {
    training.set("moe_weighting", to_string(t.moe_weighting))
        .set("expert_gemm", to_string(t.expert_gemm));
  }
  training.set("fusion", to_string(t.fusion));
  training.set("cross_entropy", to_string(t.cross_entropy));
  training.set("gradient_dtype", t.gradients_in_bf16 ? "bf16" : "fp32");
  if (t.precision == Precision::kFp8) training.set("fp8_param_gather", t.fp8_param_gather);
  training.set("optimizer", t.optimizer == Optimizer::kAdam ? "adam" : "sgd");
  training.set("optimizer_kernels", to_string(t.optimizer_kernels));
  training.set("overlap_grad_reduce", t.overlap_grad_reduce).set("overlap_param_gather", t.overlap_param_gather);
  training.set("grad_bucket_parameters", t.bucket_parameters(s.parallelism));
  Json collectives = Json::object();
  for (const auto& [key, kind] : {std::pair{"all_reduce", Collective::kAllReduce}, {"all_gather", Collective::kAllGather},
                                  {"reduce_scatter", Collective::kReduceScatter}, {"all_to_all", Collective::kAllToAll}}) {
    collectives.set(key, to_string(static_cast<CollectiveAlgorithm>(c.algorithms[static_cast<int>(kind)])));
  }
  Json simulation = Json::object();
  simulation.set("fidelity", to_string(s.simulation.fidelity));
  if (s.simulation.fidelity == Fidelity::kFull) {
    simulation.set("fold_symmetric_peers", s.simulation.fold_symmetric_peers);
  }
  Json json = Json::object();
  json.set("name", s.name).set("model", std::move(model)).set("cluster", std::move(cluster));
  json.set("collectives", std::move(collectives));
  json.set("parallelism", std::move(parallelism)).set("training", std::move(training));
  json.set("simulation", std::move(simulation));
  return json;
}

std::vector<WarningGroup> group_warnings(const std::vector<std::vector<std::string>>& warnings) {
  std::vector<WarningGroup> groups;
  for (size_t i = 0; i < warnings.size(); ++i) {
    for (const std::string& warning : warnings[i]) {
      auto group = std::ranges::find(groups, warning, &WarningGroup::warning);
      if (group == groups.end()) group = groups.insert(groups.end(), {warning, {}});
      group->positions.push_back(i + 1);
    }
  }
  return groups;
}

Json to_json(const Result& r, bool include_wall_time) {
  Json json = Json::object();
  json.set("name", r.scenario->name);
  json.set("iteration_time_s", r.iteration_time / Seconds(1));
  json.set("tokens_per_s", r.tokens_per_s).set("tokens_per_s_per_gpu", r.tokens_per_s_per_gpu);
  json.set("model_tflops_per_gpu", r.model_tflops_per_gpu).set("mfu", r.mfu);
  json.set("hardware_tflops_per_gpu", r.hardware_tflops_per_gpu).set("hfu", r.hfu);
  json.set("model_flop_per_iteration", r.model_flop_per_iteration / Flop(1));
  Json memory = Json::object();
  memory.set("peak_bytes", r.peak_memory_bytes).set("peak_reserved_bytes", r.peak_reserved_bytes);
  memory.set("capacity_bytes", r.capacity_bytes).set("fits", r.fits);
  Json stages = Json::array();
  for (const StageMemory& st : r.stages) {
    Json stage = Json::object();
    stage.set("stage", st.stage).set("peak_bytes", st.peak_bytes).set("static_bytes", st.static_bytes);
    stage.set("weight_bytes", st.weight_bytes).set("gradient_bytes", st.gradient_bytes);
    stage.set("optimizer_bytes", st.optimizer_bytes);
    if (st.peak_at) {
      const MemoryPeak& at = *st.peak_at;
      Json peak = Json::object();
      peak.set("task", at.task).set("block", at.block);
      peak.set("phase", at.phase.empty() ? Json() : Json(at.phase));
      peak.set("microbatch", at.microbatch >= 0 ? Json(at.microbatch) : Json());
      peak.set("time_s", at.time / Seconds(1));
      stage.set("peak_at", std::move(peak));
    }
    stages.push(std::move(stage));
  }
  memory.set("stages", std::move(stages));
  json.set("memory", std::move(memory));
  json.set("breakdown_s", to_json(r.breakdown));
  json.set("critical_stage", r.critical_stage);
  Json kernels = Json::object();
  kernels.set("profile", r.kernels.profile.empty() ? Json() : Json(r.kernels.profile));
  kernels.set("measured_kernels", r.kernels.measured_kernels).set("modeled_kernels", r.kernels.modeled_kernels);
  kernels.set("measured_time_fraction", r.kernels.measured_time_fraction);
  kernels.set("modeled_ops", Json::array(r.kernels.modeled_ops));
  kernels.set("kernel_time_s", r.kernels.kernel_time / Seconds(1));
  json.set("kernels", std::move(kernels));
  Json model = Json::object();
  model.set("parameters", r.parameters).set("active_parameters", r.active_parameters);
  json.set("model", std::move(model));
  json.set("microbatches", r.microbatches);
  Json sim = Json::object();
  Json folded = Json::object();
  for (const auto& [dim, peers] : r.folded_peers) folded.set(dim, peers);
  sim.set("events", r.events).set("ranks_simulated", r.ranks_simulated).set("folded_peers", std::move(folded));
  sim.set("warnings", Json::array(r.warnings));
  if (include_wall_time) sim.set("wall_s", r.wall_s);
  json.set("sim", std::move(sim));
  json.set("scenario", to_json(*r.scenario));
  return json;
}

namespace {

// A number of the contract: NaN where to_json wrote null for one that was not finite.
double read_number(YamlMap& map, std::string_view key) {
  if (map.has(key) && map.node(key).IsNull()) return std::numeric_limits<double>::quiet_NaN();
  return map.required<double>(key);
}

// The entries of a list of mappings, each read by `read` from its YamlMap.
template <typename Read>
void read_each(YamlMap& map, std::string_view key, const Read& read) {
  const YAML::Node list = map.node(key);
  if (!list.IsDefined()) map.fail(key, "is required");
  if (!list.IsSequence()) map.fail(key, "is not a list");
  for (size_t i = 0; i < list.size(); ++i) {
    YamlMap entry(list[i], map.file(), fmt::format("{}[{}]", map.field(key), i));
    read(entry);
    entry.finish();
  }
}

Breakdown read_breakdown(YamlMap map) {
  Breakdown b;
  b.compute = Seconds(read_number(map, "compute"));
  b.recompute = Seconds(read_number(map, "recompute"));
  b.optimizer = Seconds(read_number(map, "optimizer"));
  b.overlap_slowdown = Seconds(read_number(map, "overlap_slowdown"));
  b.exposed_communication = Seconds(read_number(map, "exposed_communication"));
  for (const ActivityTag tag : kExposedTags) {
    b.exposed_by_tag[static_cast<int>(tag)] =
        Seconds(read_number(map, fmt::format("exposed_{}", to_string(tag))));
  }
  b.pipeline_bubble = Seconds(read_number(map, "pipeline_bubble"));
  map.finish();
  return b;
}

}  // namespace

Result read_result(const std::string& json_text, const std::string& name) {
  const YamlDocument document = load_yaml_text(json_text, name);
  YamlMap root(document.root, name, "");
  Result r;
  YamlMap scenario = root.map("scenario");
  r.scenario = std::make_shared<const Scenario>(read_scenario(scenario));
  if (const auto written = root.required<std::string>("name"); written != r.scenario->name) {
    root.fail("name", fmt::format("'{}' is not the name of the scenario it echoes, '{}'",
                                  echoed(written), echoed(r.scenario->name)));
  }
  r.iteration_time = Seconds(read_number(root, "iteration_time_s"));
  r.tokens_per_s = read_number(root, "tokens_per_s");
  r.tokens_per_s_per_gpu = read_number(root, "tokens_per_s_per_gpu");
  r.model_tflops_per_gpu = read_number(root, "model_tflops_per_gpu");
  r.mfu = read_number(root, "mfu");
  r.hardware_tflops_per_gpu = read_number(root, "hardware_tflops_per_gpu");
  r.hfu = read_number(root, "hfu");
  r.model_flop_per_iteration = Flop(read_number(root, "model_flop_per_iteration"));
  YamlMap memory = root.map("memory");
  r.peak_memory_bytes = memory.required<int64_t>("peak_bytes");
  r.peak_reserved_bytes = memory.required<int64_t>("peak_reserved_bytes");
  r.capacity_bytes = memory.required<int64_t>("capacity_bytes");
  r.fits = memory.required<bool>("fits");
  read_each(memory, "stages", [&](YamlMap& stage) {
    r.stages.push_back({.stage = stage.required<int>("stage"),
                        .peak_bytes = stage.required<int64_t>("peak_bytes"),
                        .static_bytes = stage.required<int64_t>("static_bytes"),
                        .weight_bytes = stage.required<int64_t>("weight_bytes"),
                        .gradient_bytes = stage.required<int64_t>("gradient_bytes"),
                        .optimizer_bytes = stage.required<int64_t>("optimizer_bytes")});
    if (std::optional<YamlMap> peak = stage.optional_map("peak_at")) {
      MemoryPeak& at = r.stages.back().peak_at.emplace();
      at.task = peak->required<std::string>("task");
      at.block = peak->required<std::string>("block");
      // Present, and null or a value.
      const auto is_null = [&](std::string_view key) {
        if (!peak->has(key)) peak->fail(key, "is required");
        return peak->node(key).IsNull();
      };
      at.phase = is_null("phase") ? "" : peak->required<std::string>("phase");
      at.microbatch = is_null("microbatch") ? -1 : peak->required<int>("microbatch");
      at.time = Seconds(read_number(*peak, "time_s"));
      peak->finish();
    }
  });
  memory.finish();
  r.breakdown = read_breakdown(root.map("breakdown_s"));
  r.critical_stage = root.required<int>("critical_stage");
  YamlMap kernels = root.map("kernels");
  if (!kernels.has("profile")) kernels.fail("profile", "is required");
  if (!kernels.node("profile").IsNull()) {
    r.kernels.profile = kernels.required<std::string>("profile");
  }
  r.kernels.measured_kernels = kernels.required<int64_t>("measured_kernels");
  r.kernels.modeled_kernels = kernels.required<int64_t>("modeled_kernels");
  r.kernels.measured_time_fraction = read_number(kernels, "measured_time_fraction");
  r.kernels.modeled_ops = kernels.list<std::string>("modeled_ops", "is not a list of op names");
  r.kernels.kernel_time = Seconds(read_number(kernels, "kernel_time_s"));
  kernels.finish();
  YamlMap model = root.map("model");
  r.parameters = model.required<int64_t>("parameters");
  r.active_parameters = model.required<int64_t>("active_parameters");
  model.finish();
  r.microbatches = root.required<int64_t>("microbatches");
  YamlMap sim = root.map("sim");
  const int64_t events = sim.required<int64_t>("events");
  if (events < 0) sim.fail("events", fmt::format("= {} is below 0", events));
  r.events = static_cast<uint64_t>(events);
  r.ranks_simulated = sim.required<int>("ranks_simulated");
  YamlMap folded = sim.map("folded_peers");
  for (const auto& entry : folded.raw()) {
    const std::string dimension = entry.first.Scalar();
    r.folded_peers.emplace_back(dimension, folded.required<int>(dimension));
  }
  folded.finish();
  r.warnings = sim.list<std::string>("warnings", "is not a list of warnings");
  if (sim.has("wall_s")) r.wall_s = read_number(sim, "wall_s");
  sim.finish();
  root.finish();
  return r;
}

std::string to_text(const Result& r) {
  const Scenario& s = *r.scenario;
  const Parallelism& p = s.parallelism;
  auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); };
  auto ms = [](Seconds t) { return t / Milliseconds(1); };
  std::string out;
  out += fmt::format("{}\n", printable(s.name));
  out += fmt::format("  {} on {} × {} ({} node{} × {})\n", s.model.name, s.num_gpus(), s.cluster.gpu.name,
                     s.cluster.nodes, s.cluster.nodes == 1 ? "" : "s", s.cluster.gpus_per_node);
  const std::string context_exchange =
      p.cp > 1 ? fmt::format(" ({}{})", to_string(p.cp_comm), p.cp_comm_overlap ? "" : ", waited") : "";
  std::vector<std::string> expert_exchange;
  if (p.ep > 1 && p.ep_dispatcher == TokenDispatcher::kDeduplicated)
    expert_exchange.push_back("deduplicated");
  if (p.ep_comm_overlap) expert_exchange.push_back("overlapped");
  out += fmt::format(
      "  tp {} · pp {} · dp {} · cp {}{} · ep {}{}   {}{}  zero {}  {} micro-batches of {}\n", p.tp,
      p.pp, p.dp, p.cp, context_exchange, p.ep,
      expert_exchange.empty() ? "" : fmt::format(" ({})", fmt::join(expert_exchange, ", ")),
      to_string(p.schedule), p.virtual_stages > 1 ? fmt::format(" (v={})", p.virtual_stages) : "",
      p.zero, r.microbatches, s.training.micro_batch);
  out += fmt::format("\n  iteration time   {:10.2f} ms\n", ms(r.iteration_time));
  out += fmt::format("  tokens/s         {:10.0f}   ({:.0f} per GPU)\n", r.tokens_per_s, r.tokens_per_s_per_gpu);
  out += fmt::format("  model TFLOP/s    {:10.1f}   per GPU, MFU {:.1f}%\n", r.model_tflops_per_gpu, 100.0 * r.mfu);
  out += fmt::format("  hardware TFLOP/s {:10.1f}   per GPU, HFU {:.1f}%\n", r.hardware_tflops_per_gpu, 100.0 * r.hfu);
  out += fmt::format("  peak memory      {:10.2f} GiB of {:.2f} GiB   {}\n", gib(r.peak_memory_bytes),
                     gib(r.capacity_bytes), r.fits ? "fits" : "DOES NOT FIT");
  for (const StageMemory& st : r.stages) {
    if (st.peak_bytes != r.peak_memory_bytes || !st.peak_at) continue;
    const MemoryPeak& at = *st.peak_at;
    std::string where = at.block;
    if (!at.phase.empty()) where += ", " + at.phase;
    if (at.microbatch >= 0) where += fmt::format(", micro-batch {}", at.microbatch);
    out += fmt::format("    reached at {:.2f} ms on stage {}: {}\n    ({})\n", ms(at.time),
                       st.stage, where, at.task);
    break;
  }
  if (r.peak_reserved_bytes != r.peak_memory_bytes) {
    out +=
        fmt::format("  reserved memory  {:10.2f} GiB   at most, by the caching allocator's pools\n",
                    gib(r.peak_reserved_bytes));
  }
  if (!r.kernels.profile.empty()) {
    out += fmt::format("  kernel time      {:10.1f}%   from the measured profile {}, the rest modeled\n",
                       100.0 * r.kernels.measured_time_fraction, r.kernels.profile);
  }
  if (r.kernels.launches() > 0) {
    out += fmt::format(
        "  kernels          {:10}   per step on a GPU of stage {}, {:.1f} µs each on average\n",
        r.kernels.launches(), r.critical_stage, r.kernels.mean_kernel_time() / Microseconds(1));
  }
  const Breakdown& b = r.breakdown;
  const double total = r.iteration_time / Seconds(1);
  auto line = [&](const char* name, Seconds t) {
    return fmt::format("    {:<24}{:10.2f} ms  {:5.1f}%\n", name, ms(t), 100.0 * (t / Seconds(1)) / total);
  };
  out += fmt::format("\n  where the time goes (stage {}):\n", r.critical_stage);
  out += line("compute", b.compute);
  if (b.recompute > Seconds(0)) out += line("recompute", b.recompute);
  out += line("optimizer", b.optimizer);
  if (b.overlap_slowdown > Seconds(0)) out += line("overlap slowdown", b.overlap_slowdown);
  for (const ActivityTag tag : kExposedTags) {
    const Seconds t = b.exposed_by_tag[static_cast<int>(tag)];
    if (t > Seconds(0)) out += line(fmt::format("exposed {}", to_string(tag)).c_str(), t);
  }
  out += line("pipeline bubble / idle", b.pipeline_bubble);
  return out;
}

}  // namespace paceline
