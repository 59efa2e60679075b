// Tests sim/validate/validation.h: loading cases, errors and MAPE per source.
#include "sim/validate/validation.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "base/parallel_for.h"
#include "sim/simulator/simulator.h"
#include "tests/support/temp_path.h"

namespace paceline {
namespace {

TEST(Validation, EveryPublicCaseRuns) {
  const std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/public.yaml");
  EXPECT_GT(cases.size(), 100u);
  const ValidationReport report = validate(cases, 2);
  EXPECT_EQ(report.unsupported, 0);
  // MAPE is the mean of |error| over the cases.
  double sum = 0.0;
  for (const CaseOutcome& o : report.cases) sum += std::abs(*o.error);
  EXPECT_NEAR(report.mape, sum / static_cast<double>(cases.size()), 1e-12);
  EXPECT_FALSE(report.by_source.empty());
}

// A result echoes its scenario with every default filled in, in the scenario format: read back,
// it is the same scenario (the same result, echo included), for every published case with the
// software the overlay states, the held-out cases and the ready scenarios.
TEST(Validation, EveryScenarioEchoReadsBackAsTheSameScenario) {
  std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/public.yaml");
  apply_overlay(cases, load_overlay_file("scenarios/validation/stated-software.yaml"));
  for (const char* held_out : {"scenarios/validation/megatron-bridge.yaml", "scenarios/validation/megatron-bridge-moe.yaml"}) {
    for (ValidationCase& c : load_validation_file(held_out)) cases.push_back(std::move(c));
  }
  std::vector<std::shared_ptr<const Scenario>> scenarios;
  for (const ValidationCase& c : cases) scenarios.push_back(c.scenario);
  for (const auto& entry : std::filesystem::directory_iterator("scenarios")) {
    if (entry.path().extension() != ".yaml") continue;
    scenarios.push_back(std::make_shared<const Scenario>(load_scenario_file(entry.path().string())));
  }
  EXPECT_GT(scenarios.size(), 160u);
  std::vector<std::string> first(scenarios.size());
  std::vector<std::string> again(scenarios.size());
  parallel_for(scenarios.size(), resolve_threads(0), [&](size_t i) {
    // The 405B scenario on 16,384 GPUs runs its pipeline stages in under a second either way.
    const Json result = to_json(simulate(scenarios[i]).result, false);
    const std::string echo = result.at("scenario").dump();
    first[i] = result.dump();
    again[i] = to_json(simulate(std::make_shared<const Scenario>(load_scenario_text(echo, "echo.json"))).result, false)
                   .dump();
  });
  for (size_t i = 0; i < scenarios.size(); ++i) EXPECT_EQ(first[i], again[i]) << scenarios[i]->name;
}

TEST(Validation, MegatronBridgeRunsKeptApartRunOnHopperAndBlackwell) {
  std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/megatron-bridge.yaml");
  EXPECT_EQ(cases.size(), 18u);
  // Their scenarios state their software themselves: no rule of the public cases' overlay
  // reaches them (a Qwen3 rule would reject a dense model).
  const std::vector<OverlayRule> rules = load_overlay_file("scenarios/validation/stated-software.yaml");
  EXPECT_EQ(apply_overlay(cases, rules).size(), rules.size());
  const ValidationReport report = validate(cases, 2);
  EXPECT_EQ(report.unsupported, 0);
  std::vector<std::string> gpus;
  for (const ValidationReport::GroupError& group : report.by_gpu) gpus.push_back(group.name);
  EXPECT_EQ(gpus, (std::vector<std::string>{"h100-sxm5-80gb", "b200"}));
  // The GB200 FSDP runs fit by offloading activations to the Grace CPUs, as their recipes do.
  EXPECT_EQ(report.out_of_memory, 0);
  EXPECT_EQ(std::ranges::count_if(cases, [](const ValidationCase& c) {
              return c.scenario->training.activation_offload_layers > 0;
            }),
            4);
}

TEST(Validation, MegatronCoreMixtureOfExpertsRunsKeptApart) {
  std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/megatron-bridge-moe.yaml");
  EXPECT_EQ(cases.size(), 19u);
  // Their scenarios state their software themselves: the ids (mbridge2511-moe_…) keep clear of
  // the overlay's rules for the public Qwen3 rows (mbridge2511_*).
  const std::vector<OverlayRule> rules = load_overlay_file("scenarios/validation/stated-software.yaml");
  EXPECT_EQ(apply_overlay(cases, rules).size(), rules.size());
  for (const ValidationCase& c : cases) {
    EXPECT_TRUE(c.scenario->model.moe.has_value()) << c.id;
    EXPECT_EQ(c.scenario->training.moe_weighting, MoeWeighting::kActivation) << c.id;
    // The 2026 recipes run HybridEP or DeepEP, overlapping their exchanges where the id says so:
    // Megatron-Bridge's before and after pull request 5094, and Megatron-LM's.
    const bool hybrid_ep = c.id.starts_with("mbridge-pr5094-") || c.id.starts_with("mlm-recipe-");
    EXPECT_EQ(c.scenario->parallelism.ep_dispatcher == TokenDispatcher::kDeduplicated, hybrid_ep)
        << c.id;
    if (hybrid_ep) {
      EXPECT_EQ(c.scenario->parallelism.ep_comm_overlap, c.id.ends_with("_overlap")) << c.id;
    }
    // Pull request 3868's run, Megatron-Core's dropless NCCL all-to-all, says so in its id.
    if (c.id.ends_with("_alltoall")) {
      EXPECT_EQ(c.scenario->parallelism.ep_dispatcher, TokenDispatcher::kAllToAll) << c.id;
      EXPECT_FALSE(c.scenario->parallelism.ep_comm_overlap) << c.id;
    }
  }
  const ValidationReport report = validate(cases, 2);
  EXPECT_EQ(report.unsupported, 0);
  EXPECT_EQ(report.out_of_memory, 0);
  std::vector<std::string> gpus;
  for (const ValidationReport::GroupError& group : report.by_gpu) gpus.push_back(group.name);
  EXPECT_EQ(gpus, (std::vector<std::string>{"b200", "h100-sxm5-80gb"}));
  // Their kernels are shorter on average than those of every dense run kept apart (README.md,
  // "Accuracy").
  const auto mean_kernel = [](const CaseOutcome& a, const CaseOutcome& b) {
    return *a.mean_kernel_s < *b.mean_kernel_s;
  };
  const ValidationReport dense =
      validate(load_validation_file("scenarios/validation/megatron-bridge.yaml"), 2);
  EXPECT_LT(*std::ranges::max_element(report.cases, mean_kernel)->mean_kernel_s,
            *std::ranges::min_element(dense.cases, mean_kernel)->mean_kernel_s);
}

TEST(Validation, StatedSoftwareOverlayAppliesToThePublicCases) {
  std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/public.yaml");
  EXPECT_TRUE(apply_overlay(cases, load_overlay_file("scenarios/validation/stated-software.yaml")).empty());
  const auto by_id = [&](const std::string& id) {
    return *std::find_if(cases.begin(), cases.end(), [&](const ValidationCase& c) { return c.id == id; })->scenario;
  };
  EXPECT_EQ(by_id("torchtitan_2412_T1_Llama-3.1-8B_fsdp_8gpu").training.fusion, Fusion::kEager);
  EXPECT_EQ(by_id("torchtitan_2412_T5_Llama-3.1-405B_3d_1f1b_512gpu").parallelism.fsdp_gather,
            FsdpGather::kPerParameter);
  EXPECT_EQ(by_id("torchtitan_2412_T1_Llama-3.1-8B_fsdp_compile_8gpu").training.fusion, Fusion::kFused);
  EXPECT_TRUE(by_id("torchtitan_2412_T4_Llama-3.1-70B_2d_asynctp_256gpu").parallelism.tp_comm_overlap);
  EXPECT_EQ(by_id("torchtitan_2412_T4_Llama-3.1-70B_2d_asynctp_256gpu").parallelism.tp_comm_overlap_method,
            TpOverlapMethod::kAsyncTp);
  EXPECT_EQ(by_id("nemo2407_Nemotron-22B_64gpu").parallelism.tp_comm_overlap_method, TpOverlapMethod::kUserbuffers);
  EXPECT_EQ(by_id("torchtitan_2412_T1_Llama-3.1-8B_fsdp_8gpu").training.optimizer_kernels, OptimizerKernels::kUnfused);
  EXPECT_EQ(by_id("llmfoundry_mpt7b_h100_80gb_8gpu_seq2048_mb6").training.optimizer_kernels,
            OptimizerKernels::kForLoop);
  EXPECT_EQ(by_id("nemo2407_GPT3-175B_128gpu").training.optimizer_kernels, OptimizerKernels::kFused);
  EXPECT_FALSE(by_id("torchtitan_2412_T4_Llama-3.1-70B_2d_256gpu").parallelism.tp_comm_overlap);
  EXPECT_TRUE(by_id("nemo2407_GPT3-20B_64gpu").training.gradients_in_bf16);
  EXPECT_FALSE(by_id("nemo2407_Nemotron-22B_64gpu").training.gradients_in_bf16);
  EXPECT_TRUE(by_id("nemo2407_Nemotron-340B_128gpu").training.gradients_in_bf16);
  EXPECT_TRUE(by_id("mbridge2511_Qwen3-30B-A3B_16gpu_FP8-CS").training.gradients_in_bf16);
  EXPECT_TRUE(by_id("mbridge2511_Qwen3-30B-A3B_16gpu_FP8-CS").training.fp8_param_gather);
  EXPECT_FALSE(by_id("nemo2407_GPT3-20B_64gpu").training.fp8_param_gather);
  EXPECT_EQ(by_id("mbridge2511_Qwen3-235B-A22B_256gpu_FP8-CS").training.moe_weighting, MoeWeighting::kActivation);
  EXPECT_EQ(by_id("sc21_t2_zero3_174B_768gpu").cluster.inter_node->post_overhead, Seconds(2e-6));
  EXPECT_EQ(by_id("korthikanti_22B_selective_sp").cluster.inter_node->post_overhead, Seconds(0));
  EXPECT_EQ(by_id("llmfoundry_mpt7b_a100_80gb_8gpu_seq2048_mb6").cluster.inter_node->post_overhead, Seconds(0));
  EXPECT_TRUE(by_id("nemo2407_Nemotron-22B_64gpu").parallelism.tp_comm_overlap);
  EXPECT_FALSE(by_id("nemo2407_GPT3-175B_128gpu").parallelism.tp_comm_overlap);
  EXPECT_TRUE(by_id("nemo2407_GPT3-175B_512gpu").parallelism.tp_comm_overlap);
  EXPECT_EQ(by_id("llmfoundry_mpt7b_h100_80gb_8gpu_seq2048_mb6").training.attention, AttentionKernel::kFlashTriton);
  EXPECT_EQ(by_id("torchtitan_2412_T1_Llama-3.1-8B_fsdp_8gpu").training.attention, AttentionKernel::kFlash2);
  EXPECT_EQ(by_id("korthikanti_22B_selective_sp").training.attention, AttentionKernel::kUnfused);
  EXPECT_EQ(by_id("mlm_readme_h100_7.1B").training.attention, AttentionKernel::kFlash);
  EXPECT_EQ(by_id("nemo2407_LLAMA3-8B_8gpu").training.attention, AttentionKernel::kFlash);
  EXPECT_EQ(by_id("nemo_longseq_llama2_7b_1024k_1024gpu").training.attention, AttentionKernel::kFlash2);
  EXPECT_EQ(by_id("sc21_t2_zero3_174B_768gpu").parallelism.fsdp_prefetch, 0);
  EXPECT_EQ(by_id("sc21_t2_ptdp_174B_768gpu").parallelism.fsdp_prefetch, 1);
  EXPECT_EQ(by_id("sc21_t2_zero3_174B_768gpu").parallelism.fsdp_gather, FsdpGather::kTensor);
  EXPECT_EQ(by_id("sc21_t2_ptdp_174B_768gpu").parallelism.fsdp_gather, FsdpGather::kBlock);
  EXPECT_EQ(by_id("torchtitan_asynctp_Llama-3.1-8B_64gpu_none_asyncTP").parallelism.fsdp_gather,
            FsdpGather::kPerParameter);
  EXPECT_EQ(by_id("llmfoundry_mpt7b_h100_80gb_8gpu_seq2048_mb6").parallelism.fsdp_gather,
            FsdpGather::kBlock);
  EXPECT_EQ(by_id("torchtitan_2412_T2_Llama-3.1-8B_cp4_8gpu").parallelism.cp_comm, ContextComm::kAllGather);
  EXPECT_EQ(by_id("torchtitan_2412_T2_Llama-3.1-8B_cp1_8gpu").parallelism.cp_comm, ContextComm::kRing);
  // Compiled: PyTorch's context-parallel exchanges are waited for where they are issued.
  EXPECT_FALSE(by_id("torchtitan_2412_T6_Llama-3.1-405B_4d_cp2_512gpu").parallelism.cp_comm_overlap);
  EXPECT_FALSE(by_id("torchtitan_2412_T2_Llama-3.1-8B_cp8_8gpu").parallelism.cp_comm_overlap);
  EXPECT_TRUE(by_id("torchtitan_2412_T6_Llama-3.1-405B_4d_cp1_512gpu").parallelism.cp_comm_overlap);
  EXPECT_TRUE(by_id("nemo_longseq_llama2_7b_128k_128gpu").parallelism.cp_comm_overlap);
  EXPECT_TRUE(by_id("torchtitan_2412_T6_Llama-3.1-405B_4d_cp8_512gpu").training.repeat_kv);
  EXPECT_FALSE(by_id("mlm_readme_h100_70B").training.repeat_kv);
  // One layer per virtual stage in every pipelined Megatron-LM README row.
  for (const auto& [id, layers_per_stage] : {std::pair{"mlm_readme_h100_70B", 42}, {"mlm_readme_h100_119B", 23},
                                             {"mlm_readme_h100_177B", 16}, {"mlm_readme_h100_314B", 12},
                                             {"mlm_readme_h100_462B", 7}}) {
    const Scenario& s = by_id(id);
    EXPECT_EQ(s.parallelism.schedule, Schedule::kInterleavedOneFOneB) << id;
    EXPECT_EQ(s.parallelism.virtual_stages, layers_per_stage) << id;
    EXPECT_EQ(s.model.layers, layers_per_stage * s.parallelism.pp) << id;
  }
  EXPECT_EQ(by_id("mlm_readme_h100_32B").parallelism.virtual_stages, 1);
}

TEST(Validation, ThreadCountDoesNotChangeTheReport) {
  const std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/public.yaml");
  const std::vector<ValidationCase> few(cases.begin(), cases.begin() + 12);
  EXPECT_EQ(to_json(validate(few, 1)).dump(), to_json(validate(few, 3)).dump());
}

// One case on one GPU, measured at 1 s.
std::string one_gpu_case(const std::string& id, const std::string& model, const std::string& gpu,
                         const std::string& training) {
  return "- id: " + id + "\n  source: test\n  scenario:\n    model: " + model + "\n    cluster: {gpu: " + gpu +
         ", nodes: 1, gpus_per_node: 1}\n    training: " + training + "\n  measured: {iteration_time_s: 1.0}\n";
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = testing::temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(Validation, MarksRunsPredictedNotToFitInMemory) {
  // Llama 3 8B with Adam on one 80 GB H100 needs 18 bytes per parameter (135 GiB) before any
  // activation; GPT 1.7B on one A100 fits.
  const std::string path =
      write_file("fits.yaml", one_gpu_case("too-big", "llama3-8b", "h100-sxm5-80gb",
                                           "{global_batch: 1, seq_len: 1024, recompute: full}") +
                                  one_gpu_case("fits", "gpt-1.7b", "a100-sxm4-80gb", "{global_batch: 1, seq_len: 1024}"));
  const std::vector<ValidationCase> cases = load_validation_file(path);
  const ValidationReport report = validate(cases, 1);
  ASSERT_EQ(report.cases.size(), 2u);
  EXPECT_FALSE(report.cases[0].fits);
  EXPECT_TRUE(report.cases[1].fits);
  EXPECT_EQ(report.out_of_memory, 1);
  EXPECT_NE(to_text(report).find("too-big"), std::string::npos);
  EXPECT_NE(to_text(report).find("does not fit"), std::string::npos);
  EXPECT_NE(to_text(report).find("1 measured run is predicted not to fit in GPU memory"), std::string::npos);
  const Json json = to_json(report);
  EXPECT_EQ(json.at("out_of_memory").number(), 1.0);
  EXPECT_EQ(json.at("cases").elements()[0].at("fits").dump(-1), "false");
  EXPECT_NE(to_markdown(report, "plot.svg").find("| **no** |"), std::string::npos);
  EXPECT_NE(to_html(report).find("<td><strong>no</strong></td>"), std::string::npos);
}

TEST(Validation, MeasuredPeaksAreComparedWithTheReservedPeak) {
  // torchtitan logs its caching allocator's max_memory_reserved. Under FSDP2 the all-gather
  // pool's peak comes on top of the compute pool's, so the reserved peak the error is taken
  // against is above the live peak.
  std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/public.yaml");
  EXPECT_TRUE(
      apply_overlay(cases, load_overlay_file("scenarios/validation/stated-software.yaml")).empty());
  const std::vector<ValidationCase> selected = select_cases(
      cases, {"torchtitan_2412_T1_Llama-3.1-8B_fsdp_compile_8gpu"}, SourceLocation{"--cases"});
  const ValidationReport report = validate(selected, 1);
  ASSERT_EQ(report.cases.size(), 1u);
  const CaseOutcome& outcome = report.cases[0];
  ASSERT_TRUE(outcome.memory_error && outcome.peak_reserved_bytes && outcome.peak_memory_bytes);
  EXPECT_GT(*outcome.peak_reserved_bytes, *outcome.peak_memory_bytes);
  const double measured = *selected[0].measured_peak_memory_bytes;
  EXPECT_DOUBLE_EQ(*outcome.memory_error,
                   (static_cast<double>(*outcome.peak_reserved_bytes) - measured) / measured);
  const Json json = to_json(report).at("cases").elements().at(0);
  EXPECT_EQ(json.at("peak_reserved_bytes").number(),
            static_cast<double>(*outcome.peak_reserved_bytes));
}

TEST(Validation, CaseIdsAreUniqueAndConfidenceIsAGrade) {
  const std::string one = one_gpu_case("same", "gpt-1.7b", "a100-sxm4-80gb", "{global_batch: 1, seq_len: 1024}");
  const auto error_of = [](const std::string& path) -> std::string {
    try {
      load_validation_file(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  // An empty list once printed a MAPE of 0% over no cases.
  const std::string none = write_file("none.yaml", "[]\n");
  EXPECT_EQ(error_of(none),
            none + ":1:1: the validation file lists no cases; expected one or more");
  const std::string twice = write_file("twice.yaml", one + one);
  EXPECT_EQ(error_of(twice).rfind(twice + ":8:7: id = 'same' is taken by the case at " + twice + ":1:7", 0), 0u)
      << error_of(twice);
  // Across files validated together as well.
  std::vector<ValidationCase> both = load_validation_file(write_file("a.yaml", one));
  both.push_back(load_validation_file(write_file("b.yaml", one)).front());
  EXPECT_THROW(check_unique_ids(both), InputError);
  std::string graded = one;
  graded.replace(graded.find("source: test"), 12, "source: test\n  confidence: meh");
  EXPECT_NE(error_of(write_file("graded.yaml", graded)).find("confidence = 'meh' is unknown; expected one of: high, medium, low"),
            std::string::npos);
  // A bar in a case id stays inside its Markdown cell.
  const std::vector<ValidationCase> barred = load_validation_file(
      write_file("bar.yaml", one_gpu_case("a|b", "gpt-1.7b", "a100-sxm4-80gb", "{global_batch: 1, seq_len: 1024}")));
  const ValidationReport report = validate(barred, 1);
  EXPECT_NE(to_markdown(report, "plot.svg").find("| a\\|b |"), std::string::npos);
}

TEST(Validation, HtmlReportIsOnePageWithThePlotInlineAndTheTextEscaped) {
  // A case id and a source with HTML's special characters, and an overlay setting, which the
  // Markdown report writes as code.
  std::string text = one_gpu_case("a<b&c", "gpt-1.7b", "a100-sxm4-80gb", "{global_batch: 1, seq_len: 1024}");
  text.replace(text.find("source: test"), 12, "source: \"R&D <lab>\"");
  std::vector<ValidationCase> cases = load_validation_file(write_file("html.yaml", text));
  cases[0].overlay.push_back(Override{"training.recompute", "full"});
  const ValidationReport report = validate(cases, 1);
  const std::string html = to_html(report);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>")) << html;
  EXPECT_TRUE(html.ends_with("</html>\n"));
  EXPECT_NE(html.find("<figure>\n<svg xmlns="), std::string::npos);
  EXPECT_NE(html.find("<title>a&lt;b&amp;c: "), std::string::npos) << "the plot's point names the case";
  EXPECT_NE(html.find("<td>a&lt;b&amp;c <code>training.recompute: full</code></td>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>R&amp;D &lt;lab&gt;</td>"), std::string::npos);
  EXPECT_EQ(html.find("a<b"), std::string::npos);
  // The same rows as the Markdown report: one per group and case, under one header each.
  const auto count = [](const std::string& haystack, const std::string& needle) {
    size_t n = 0;
    for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(html, "<tr>"), 3u + 1u + 1u + 1u);  // three headers, a source, a GPU, a case
  EXPECT_EQ(count(html, "<td class=\"number\">"), 3u + 3u + 10u);
}

TEST(Validation, EachCaseSaysWhereItsPredictedTimeGoes) {
  // One GPU: all compute. Eight GPUs gathering each weight tensor as it is needed (ZeRO-3, no
  // prefetch): communication in the open, on the data-parallel groups.
  const std::string eight =
      "- id: sharded\n  source: test\n  scenario:\n    model: gpt-1.7b\n    cluster: {gpu: h100-sxm5-80gb, nodes: 1, "
      "gpus_per_node: 8}\n    parallelism: {dp: 8, zero: 3, fsdp_prefetch: 0, fsdp_gather: tensor}\n    training: "
      "{global_batch: 8, seq_len: 1024}\n  measured: {iteration_time_s: 1.0}\n";
  const std::string path =
      write_file("shares.yaml", one_gpu_case("alone", "gpt-1.7b", "a100-sxm4-80gb", "{global_batch: 1, seq_len: 1024}") +
                                    eight);
  const std::vector<ValidationCase> cases = load_validation_file(path);
  const ValidationReport report = validate(cases, 1);
  const Json json = to_json(report);
  for (const Json& c : json.at("cases").elements()) {
    // The parts add up to the predicted step.
    const Json& b = c.at("breakdown_s");
    double sum = 0.0;
    for (const char* part : {"compute", "recompute", "optimizer", "overlap_slowdown", "exposed_communication",
                             "pipeline_bubble"}) {
      sum += b.at(part).number();
    }
    EXPECT_NEAR(sum, c.at("predicted_s").number(), 1e-9 * sum) << c.dump(-1);
  }
  const Json& alone = json.at("cases").elements()[0].at("breakdown_s");
  EXPECT_EQ(alone.at("exposed_communication").number(), 0.0);
  const Json& sharded = json.at("cases").elements()[1].at("breakdown_s");
  EXPECT_GT(sharded.at("exposed_dp_communication").number(), 0.0);
  EXPECT_EQ(sharded.at("exposed_dp_communication").number(), sharded.at("exposed_communication").number());
  // The mean time of the critical stage's kernels: their priced time over their launches.
  const KernelSources kernels = simulate(cases[0].scenario).result.kernels;
  EXPECT_DOUBLE_EQ(json.at("cases").elements()[0].at("mean_kernel_s").number(),
                   kernels.kernel_time / Seconds(1) / static_cast<double>(kernels.launches()));
  const std::string markdown = to_markdown(report, "plot.svg");
  EXPECT_NE(markdown.find("| 100% | 0% | 0% |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("% dp | 0% |"), std::string::npos) << markdown;
}

TEST(Validation, LongSourcesKeepTheEndThatTellsThemApart) {
  std::string text = one_gpu_case("a", "gpt-1.7b", "a100-sxm4-80gb", "{global_batch: 1, seq_len: 1024}") +
                     one_gpu_case("b", "gpt-1.7b", "a100-sxm4-80gb", "{global_batch: 1, seq_len: 1024}");
  const std::string publication = "an organisation/a repository docs/a long benchmarking README.md, section ";
  for (const char* section : {"'H100 80GB BF16'", "'H100 80GB BF16 (Large Scale)'"}) {
    text.replace(text.find("source: test"), 12, std::string("source: \"") + publication + section + "\"");
  }
  const std::vector<ValidationCase> cases = load_validation_file(write_file("sources.yaml", text));
  const std::string report = to_text(validate(cases, 1));
  EXPECT_NE(report.find("1 cases  an organisation/a repository d...arking README.md, section 'H100 80GB BF16'\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("1 cases  an organisation/a repository d...md, section 'H100 80GB BF16 (Large Scale)'\n"),
            std::string::npos)
      << report;
}

TEST(Validation, GroupsErrorsBySourceAndGpuWithTheirSign) {
  // Measured at 1 s; the same model on A100 and H100 is predicted to take different times, so
  // the signs of the errors and the groups' means can be checked against the cases.
  std::string text = one_gpu_case("a100", "gpt-1.7b", "a100-sxm4-80gb", "{global_batch: 8, seq_len: 1024}") +
                     one_gpu_case("h100", "gpt-1.7b", "h100-sxm5-80gb", "{global_batch: 8, seq_len: 1024}") +
                     one_gpu_case("h100-long", "gpt-1.7b", "h100-sxm5-80gb", "{global_batch: 64, seq_len: 1024}");
  text.replace(text.rfind("source: test"), 12, "source: other");
  const std::vector<ValidationCase> cases = load_validation_file(write_file("groups.yaml", text));
  const ValidationReport report = validate(cases, 1);
  const double a100 = *report.cases[0].error, h100 = *report.cases[1].error, h100_long = *report.cases[2].error;
  ASSERT_LT(h100, 0.0);  // 8 sequences of GPT 1.7B take well under a second
  ASSERT_GT(h100_long, 0.0);
  EXPECT_NEAR(report.bias, (a100 + h100 + h100_long) / 3.0, 1e-12);
  ASSERT_EQ(report.by_gpu.size(), 2u);
  EXPECT_EQ(report.by_gpu[0].name, "a100-sxm4-80gb");
  EXPECT_EQ(report.by_gpu[1].name, "h100-sxm5-80gb");
  EXPECT_EQ(report.by_gpu[1].cases, 2);
  EXPECT_NEAR(report.by_gpu[1].mape, (std::abs(h100) + h100_long) / 2.0, 1e-12);
  EXPECT_NEAR(report.by_gpu[1].bias, (h100 + h100_long) / 2.0, 1e-12);
  ASSERT_EQ(report.by_source.size(), 2u);
  EXPECT_EQ(report.by_source[1].name, "other");
  EXPECT_NEAR(report.by_source[0].bias, (a100 + h100) / 2.0, 1e-12);

  const Json json = to_json(report);
  EXPECT_NEAR(json.at("by_gpu").at("h100-sxm5-80gb").at("bias").number(), (h100 + h100_long) / 2.0, 1e-12);
  EXPECT_EQ(json.at("by_source").at("other").at("cases").number(), 1.0);
  const std::string text_report = to_text(report);
  EXPECT_NE(text_report.find(fmt::format("{:+6.1f}%    2 cases  h100-sxm5-80gb\n", 100.0 * (h100 + h100_long) / 2.0)),
            std::string::npos)
      << text_report;
  EXPECT_NE(to_markdown(report, "plot.svg").find("## By GPU"), std::string::npos);
}

// Two small cases that differ only by id, for the overlay tests.
std::string write_two_cases(const std::string& name) {
  const std::string training = "{global_batch: 4, seq_len: 1024}";
  return write_file(name, one_gpu_case("alpha-1", "gpt-1.7b", "a100-sxm4-80gb", training) +
                              one_gpu_case("beta-1", "gpt-1.7b", "a100-sxm4-80gb", training));
}

std::string overlay_error(const std::string& cases_path, const std::string& overlay_path) {
  std::vector<ValidationCase> cases = load_validation_file(cases_path);
  try {
    apply_overlay(cases, load_overlay_file(overlay_path));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Validation, OverlaySetsFieldsOfTheCasesItMatches) {
  const std::string cases_path = write_two_cases("overlay-cases.yaml");
  std::vector<ValidationCase> plain = load_validation_file(cases_path);
  std::vector<ValidationCase> overlaid = load_validation_file(cases_path);
  const std::string overlay = write_file("overlay.yaml", R"(- cases: [alpha-*]
  set: {training.recompute: full, training.fusion: eager}
  why: a test
- cases: alpha-?
  set: {training.fusion: fused}
  why: a later rule wins
- cases: [gamma-*, delta-1]
  set: {training.recompute: selective}
  why: the runs of other validation files
)");
  const std::vector<std::string> warnings = apply_overlay(overlaid, load_overlay_file(overlay));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], overlay + ":7:3: cases gamma-*, delta-1 match no case id of the validation files; the rule "
                                   "sets nothing");
  ASSERT_EQ(overlaid[0].overlay.size(), 3u);
  EXPECT_EQ(overlaid[0].overlay[0].path, "training.recompute");
  EXPECT_EQ(overlaid[0].scenario->training.recompute, Recompute::kFull);
  EXPECT_EQ(overlaid[0].scenario->training.fusion, Fusion::kFused);
  EXPECT_TRUE(overlaid[1].overlay.empty());

  const ValidationReport before = validate(plain, 1);
  const ValidationReport after = validate(overlaid, 1);
  EXPECT_GT(*after.cases[0].predicted_s, *before.cases[0].predicted_s);  // a second forward
  EXPECT_EQ(*after.cases[1].predicted_s, *before.cases[1].predicted_s);
  EXPECT_EQ(to_json(after).at("cases").elements()[0].at("overlay").at("training.recompute").string(), "full");
  EXPECT_NE(to_text(after).find("1 cases ran with fields an overlay set"), std::string::npos);
}

TEST(Validation, OverlayErrorsNameTheRuleAndTheCase) {
  const std::string cases_path = write_two_cases("overlay-error-cases.yaml");
  const std::string invalid = write_file("invalid.yaml", "- cases: beta-1\n  set: {training.attention: flash9}\n  why: x\n");
  const std::string error = overlay_error(cases_path, invalid);
  EXPECT_EQ(error, invalid + ":1:3: case beta-1 with the overlay: cases[1].scenario.training.attention = 'flash9' is "
                             "unknown; expected one of: flash, flash2, flash3, flash_triton, unfused");

  const std::string no_source = write_file("no-why.yaml", "- cases: beta-1\n  set: {training.recompute: full}\n");
  EXPECT_NE(overlay_error(cases_path, no_source).find("why"), std::string::npos);
}

TEST(Validation, SelectsCasesByGlobInTheirOrder) {
  const std::vector<ValidationCase> cases =
      load_validation_file(write_two_cases("selected-cases.yaml"));
  const auto ids = [](const std::vector<ValidationCase>& selected) {
    std::vector<std::string> out;
    for (const ValidationCase& c : selected) out.push_back(c.id);
    return out;
  };
  const SourceLocation given_at{"--cases"};
  EXPECT_EQ(ids(select_cases(cases, {"beta-?", "alpha-*"}, given_at)),
            (std::vector<std::string>{"alpha-1", "beta-1"}));
  EXPECT_EQ(ids(select_cases(cases, {"beta-1"}, given_at)), (std::vector<std::string>{"beta-1"}));
  try {
    select_cases(cases, {"alpha-1", "gamma-*"}, given_at);
    ADD_FAILURE() << "a glob that matches no case was taken";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--cases: 'gamma-*' matches none of the 2 case ids of the validation files "
              "(globs: * any run of characters, ? one)");
  }
  EXPECT_THROW(select_cases(cases, {}, given_at), InputError);
}

// A case's scenario file reads back as the case's scenario, overlay included; one paceline
// cannot run has none.
TEST(Validation, ACaseScenarioFileReadsBackAsItsScenario) {
  std::vector<ValidationCase> cases = load_validation_file("scenarios/validation/public.yaml");
  apply_overlay(cases, load_overlay_file("scenarios/validation/stated-software.yaml"));
  cases = select_cases(std::move(cases), {"torchtitan_2412_T5_*", "sc21_t2_zero3_174B_384gpu"},
                       {"test"});
  ASSERT_EQ(cases.size(), 3u);
  for (const ValidationCase& c : cases) {
    const std::string text = scenario_file_text(c);
    EXPECT_TRUE(text.starts_with("# Validation case " + c.id +
                                 " (scenarios/validation/public.yaml), measured "))
        << text;
    EXPECT_EQ(to_json(load_scenario_text(text, "case.yaml")).dump(), to_json(*c.scenario).dump())
        << c.id;
  }
  EXPECT_NE(scenario_file_text(cases[0]).find("# Overlay: parallelism.fsdp_gather = tensor\n"),
            std::string::npos);
  ValidationCase multiline = cases[0];
  multiline.source = "a source\nover two lines";
  EXPECT_NE(scenario_file_text(multiline).find("# Source: a source\\nover two lines\n"),
            std::string::npos);
  EXPECT_EQ(to_json(load_scenario_text(scenario_file_text(multiline), "case.yaml")).dump(),
            to_json(*multiline.scenario).dump());
  EXPECT_EQ(scenario_file_name(cases[0]), cases[0].id + ".yaml");
  for (const char* id : {"", ".", "..", "a/b", "a\nb"}) {
    ValidationCase unnamed = cases[0];
    unnamed.id = id;
    EXPECT_THROW(scenario_file_name(unnamed), InputError) << id;
  }
  ValidationCase unsupported = cases[0];
  unsupported.scenario = nullptr;
  unsupported.unsupported_reason = "a reason";
  EXPECT_THROW(scenario_file_text(unsupported), InputError);
}

}  // namespace
}  // namespace paceline
