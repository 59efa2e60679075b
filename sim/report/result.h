// Result: what one simulated training step predicts — time, throughput, utilization, memory
// and where the time went — in the keys of the result contract (README.md, "Result").
#ifndef PACELINE_SIM_REPORT_RESULT_H_
#define PACELINE_SIM_REPORT_RESULT_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/units.h"
#include "sim/engine/engine.h"
#include "sim/parallel/lowering.h"
#include "sim/scenario/scenario.h"

namespace paceline {

// Where the critical rank's step went; the parts sum to the iteration time.
struct Breakdown {
  Seconds compute;                // forward and backward kernels
  Seconds recompute;              // activation recomputation
  Seconds optimizer;              // the optimizer step
  Seconds overlap_slowdown;       // compute lost to communication running beside it
  Seconds exposed_communication;  // communication with no compute beside it (sum of the below)
  std::array<Seconds, kNumActivityTags> exposed_by_tag{};  // indexed by ActivityTag
  Seconds pipeline_bubble;        // idle: waiting on other stages
  Seconds total() const {
    return compute + recompute + optimizer + overlap_slowdown + exposed_communication + pipeline_bubble;
  }
};

// The task whose start first took a stage's worst rank to its peak (StageProgram::describe).
struct MemoryPeak {
  std::string task;
  std::string block;
  std::string phase;    // "" for a task outside a block's planned pass (StageProgram::describe)
  int microbatch = -1;  // -1: none
  Seconds time;         // into the step
};

struct StageMemory {
  int stage = 0;
  int64_t peak_bytes = 0;
  int64_t static_bytes = 0;  // weights, gradients, optimizer state
  int64_t weight_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  std::optional<MemoryPeak> peak_at;  // absent when no task raised the memory the step starts with
};

// The critical stage's forward, backward and recompute kernels in one step (on a rank of it; the
// optimizer's and the collectives' left out), and where their times came from: a measured
// profile or the roofline model.
struct KernelSources {
  std::string profile;         // the profile's name (its file's stem), "" when none
  int64_t measured_kernels = 0;  // kernel launches in one step timed from the profile
  int64_t modeled_kernels = 0;   // ... from the roofline model
  double measured_time_fraction = 0.0;  // of the stage's kernel time
  std::vector<std::string> modeled_ops;  // distinct op names that fell back to the model
  // Their time as priced, before communication beside them slows them.
  Seconds kernel_time;

  int64_t launches() const { return measured_kernels + modeled_kernels; }
  // kernel_time over the launches: the time a host has to launch each before the GPU waits on it.
  // Zero without launches.
  Seconds mean_kernel_time() const {
    return launches() > 0 ? kernel_time / static_cast<double>(launches()) : Seconds(0);
  }
};

struct Result {
  std::shared_ptr<const Scenario> scenario;
  Seconds iteration_time;
  double tokens_per_s = 0.0;
  double tokens_per_s_per_gpu = 0.0;
  double model_tflops_per_gpu = 0.0;
  double mfu = 0.0;
  double hardware_tflops_per_gpu = 0.0;
  double hfu = 0.0;
  Flop model_flop_per_iteration;
  int64_t peak_memory_bytes = 0;  // the worst rank
  // What the framework's caching allocator holds at most on the worst rank (PyTorch's
  // max_memory_reserved): each allocator pool keeps its own high-water mark, so pools beside the
  // compute stream's (PyTorch FSDP2's all-gather outputs) hold memory the live peak leaves out.
  // Never above capacity_bytes where the live peak fits: the allocator frees what it has cached
  // and retries before it runs out.
  int64_t peak_reserved_bytes = 0;
  int64_t capacity_bytes = 0;
  bool fits = true;
  std::vector<StageMemory> stages;
  Breakdown breakdown;
  KernelSources kernels;
  int critical_stage = 0;
  int64_t parameters = 0;
  int64_t active_parameters = 0;
  int64_t microbatches = 0;
  uint64_t events = 0;
  int ranks_simulated = 0;
  // Along each parallel dimension whose peers a simulated rank stands for: how many it stands for.
  std::vector<std::pair<std::string, int>> folded_peers;
  double wall_s = 0.0;  // the simulator's own wall time (not part of the prediction)
  // What the simulation knows it leaves out, one line each (the result stands regardless).
  std::vector<std::string> warnings;
};

// Model FLOPs of one step: 6 per active matmul parameter per token (output head included,
// embedding lookup not) plus 6·layers·heads·(head_dim + value head width)·seq per token for
// attention (12·layers·heads·head_dim·seq where values are as wide as keys), counted without the
// causal half as Megatron-LM, PaLM and torchtitan count it.
Flop model_flop_per_iteration(const Scenario& scenario);

// Assembles the Result from the lowering and the engine's run (spans of the recorded ranks).
Result make_result(std::shared_ptr<const Scenario> scenario, const Lowering& lowering, const RunResult& run);

// The distinct warnings of several results (their Result::warnings, in order), each once in order
// of first appearance with the positions (from 1) of the results that give it: how reports of
// many runs list them.
struct WarningGroup {
  std::string warning;
  std::vector<size_t> positions;
};
std::vector<WarningGroup> group_warnings(const std::vector<std::vector<std::string>>& warnings);

// The result contract as JSON. `include_wall_time`: false for golden comparisons.
Json to_json(const Result& result, bool include_wall_time = true);
// Reads back what to_json(Result) wrote (`name` stands for its file in errors), the scenario
// resolved again from its echo: to_json of the Result returned is the same text. Numbers
// written as null (not finite) read back as NaN. Throws InputError naming the field for a key
// missing, unknown or of the wrong type.
Result read_result(const std::string& json_text, const std::string& name);
// Where the critical stage's time goes, in seconds (the result's `breakdown_s`).
Json to_json(const Breakdown& breakdown);
// The resolved scenario, every default filled in.
Json to_json(const Scenario& scenario);
// A model in the scenario's inline form, every default filled in.
Json to_json(const ModelSpec& model);
// A readable summary for the terminal.
std::string to_text(const Result& result);

}  // namespace paceline

#endif  // PACELINE_SIM_REPORT_RESULT_H_
