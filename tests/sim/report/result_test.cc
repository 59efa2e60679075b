// Tests sim/report/result.h: the result contract's keys and the model FLOPs formula.
#include "sim/report/result.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/data_root.h"
#include "sim/simulator/simulator.h"
#include "tests/support/temp_path.h"

namespace paceline {
namespace {

TEST(Result, JsonHasEveryKeyOfTheContract) {
  const auto scenario = std::make_shared<const Scenario>(load_scenario_file("scenarios/gpt-1.7b-1xa100.yaml"));
  const Json json = to_json(simulate(scenario).result);
  for (const char* key : {"iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu",
                          "hardware_tflops_per_gpu", "hfu", "memory", "breakdown_s", "model", "scenario", "sim"}) {
    EXPECT_FALSE(json.at(key).is_null()) << key;
  }
  for (const char* key : {"peak_bytes", "peak_reserved_bytes", "capacity_bytes", "fits"})
    EXPECT_FALSE(json.at("memory").at(key).is_null()) << key;
  for (const char* key : {"parameters", "active_parameters"}) EXPECT_FALSE(json.at("model").at(key).is_null()) << key;
  for (const char* key : {"events", "ranks_simulated", "wall_s"}) EXPECT_FALSE(json.at("sim").at(key).is_null()) << key;
  for (const char* key : {"compute", "exposed_communication", "pipeline_bubble", "optimizer"}) {
    EXPECT_FALSE(json.at("breakdown_s").at(key).is_null()) << key;
  }
  // The echoed scenario shows the defaults that were applied, and optional fields only when
  // given.
  EXPECT_EQ(json.at("scenario").at("training").at("recompute").string(), "none");
  EXPECT_EQ(json.at("scenario").at("parallelism").at("schedule").string(), "1f1b");
  EXPECT_TRUE(json.at("scenario").at("training").at("recompute_layers").is_null());
}

TEST(Result, NamesTheTaskThatReachesThePeakMemory) {
  // Without recomputation a single GPU holds every layer's activations of its micro-batch when
  // the output head's forward starts, and the logits on top: the peak, first reached by the
  // first micro-batch (the gradients allocated in its backward are freed by the step's end).
  const auto scenario =
      std::make_shared<const Scenario>(load_scenario_file("scenarios/gpt-1.7b-1xa100.yaml"));
  const Result result = simulate(scenario).result;
  const Json peak = to_json(result).at("memory").at("stages").elements().at(0).at("peak_at");
  EXPECT_EQ(peak.at("block").string(), "head");
  EXPECT_EQ(peak.at("phase").string(), "forward");
  EXPECT_EQ(peak.at("microbatch").number(), 0.0);
  EXPECT_GT(peak.at("time_s").number(), 0.0);
  EXPECT_LT(peak.at("time_s").number(), result.iteration_time / Seconds(1) / result.microbatches);
  const std::string text = to_text(result);
  EXPECT_NE(text.find("on stage 0: head, forward, micro-batch 0\n    (" + peak.at("task").string() +
                      ")\n"),
            std::string::npos)
      << text;
}

TEST(Result, SaysWhatTheAllocatorReservesWhereItsPoolsHoldMore) {
  // torchtitan's FSDP2 stages its gathers in a pool of their own; one GPU uses one pool.
  const auto fsdp2 = std::make_shared<const Scenario>(
      load_scenario_file("scenarios/llama3-8b-8xh100-torchtitan.yaml"));
  const Result pooled = simulate(fsdp2).result;
  ASSERT_GT(pooled.peak_reserved_bytes, pooled.peak_memory_bytes);
  EXPECT_NE(to_text(pooled).find(fmt::format(
                "  reserved memory  {:10.2f} GiB   at most, by the caching allocator's pools\n",
                static_cast<double>(pooled.peak_reserved_bytes) / (1 << 30))),
            std::string::npos)
      << to_text(pooled);
  // At 8960 tokens the live peak still fits and the pools' peaks would not: the allocator frees
  // what it has cached before it runs out, so it never reserves more than the GPU has.
  std::ifstream in("scenarios/llama3-8b-8xh100-torchtitan.yaml");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  ASSERT_NE(text.find("seq_len: 8192"), std::string::npos);
  text.replace(text.find("seq_len: 8192"), 13, "seq_len: 8960");
  const std::string longer = testing::temp_path("longer.yaml");
  std::ofstream(longer) << text;
  const Result full = simulate(std::make_shared<const Scenario>(load_scenario_file(longer))).result;
  EXPECT_TRUE(full.fits);
  EXPECT_EQ(full.peak_reserved_bytes, full.capacity_bytes);
  const auto single =
      std::make_shared<const Scenario>(load_scenario_file("scenarios/gpt-1.7b-1xa100.yaml"));
  const Result one_pool = simulate(single).result;
  EXPECT_EQ(one_pool.peak_reserved_bytes, one_pool.peak_memory_bytes);
  EXPECT_EQ(to_text(one_pool).find("reserved memory"), std::string::npos);
}

TEST(Result, TheBreakdownIsOfARankWhoseSpansWereKept) {
  // Tensor-parallel groups of 16 on racks of 72 GPUs: under full fidelity the group of GPUs 64 to
  // 79 straddles two racks and finishes last, but spans are kept for a stage's first rank only.
  // Its time is broken down on that rank (it waits for the slow group), not on one with no spans
  // (all of its time idle).
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: llama3-8b
cluster: {system: gb200-nvl72, nodes: 36}
parallelism: {tp: 16, zero: 1}
training: {global_batch: 9, micro_batch: 1, seq_len: 4096}
simulation: {fidelity: full}
)",
                                                                            "s.yaml"));
  const Result result = simulate(scenario).result;
  EXPECT_GT(result.breakdown.compute, result.iteration_time / 5.0);
  EXPECT_GT(result.breakdown.pipeline_bubble, Seconds(0));
  EXPECT_NEAR(result.breakdown.total() / result.iteration_time, 1.0, 1e-9);
}

TEST(Result, EchoesTheLayersPartialRecomputeAndOffloadCover) {
  const auto echoed = [](const char* training) {
    const auto scenario = std::make_shared<const Scenario>(load_scenario_text(fmt::format(R"(model: gpt-1.7b
cluster: {{gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 1, host_bandwidth: 25 GB/s}}
training: {{global_batch: 2, seq_len: 2048, {}}}
)", training), "s.yaml"));
    return to_json(simulate(scenario).result).at("scenario");
  };
  EXPECT_EQ(echoed("recompute: full, recompute_layers: 6").at("training").at("recompute_layers").dump(-1), "6");
  EXPECT_TRUE(echoed("recompute: selective").at("training").at("recompute_modules").is_null());
  EXPECT_EQ(echoed("recompute_modules: [moe]").at("training").at("recompute_modules").dump(-1),
            R"(["moe"])");
  EXPECT_EQ(echoed("recompute: selective, recompute_modules: [layernorm, mlp]")
                .at("training")
                .at("recompute_modules")
                .dump(-1),
            R"(["mlp","layernorm"])");
  const Json offload = echoed("activation_offload_layers: 4");
  EXPECT_EQ(offload.at("training").at("activation_offload_layers").dump(-1), "4");
  EXPECT_EQ(offload.at("cluster").at("host_bandwidth").dump(-1), "25000000000");
}

// The echo names files by absolute path, keeps an inline GPU as written and gives every figure
// of a link, so that it reads back as the same scenario from anywhere (tests/sim/validate holds
// it for the catalog-only scenarios and every validation case).
TEST(Result, EchoReadsBackWhereverItsFilesAndGpuWereGiven) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::path(testing::temp_path("echo")) / "hardware";
  fs::create_directories(folder);
  const std::string catalog = data_root() + "/hardware/catalog";
  fs::copy_file(catalog + "/gpus/h100-sxm5-80gb.yaml", folder / "my-gpu.yaml");
  fs::copy_file(catalog + "/gpus/h200-sxm-141gb.yaml", folder / "my-h200.yaml");
  fs::copy_file(data_root() + "/hardware/profiles/h200-sxm-141gb.yaml", folder / "my-profile.yaml");
  // A system file naming its GPU file beside it, and a GPU with no default intra-node link.
  std::ifstream system_in(catalog + "/systems/dgx-h100.yaml");
  std::ofstream system_out(folder / "my-system.yaml");
  std::ofstream unlinked(folder / "unlinked-gpu.yaml");
  std::ifstream gpu_in(catalog + "/gpus/a100-sxm4-80gb.yaml");
  for (std::string line; std::getline(system_in, line);) {
    system_out << (line == "gpu: h100-sxm5-80gb" ? "gpu: my-gpu.yaml" : line) << "\n";
  }
  for (std::string line; std::getline(gpu_in, line);) {
    if (!line.starts_with("intra_node:")) unlinked << line << "\n";
  }
  system_out.close();
  unlinked.close();
  const auto written = [&](const std::string& name, const std::string& text) {
    std::ofstream(folder.parent_path() / name) << text;
    return load_scenario_file((folder.parent_path() / name).string());
  };
  std::string inline_gpu = "model: llama3-8b\ncluster:\n  gpus_per_node: 2\n  gpu:\n";
  std::ifstream a100(catalog + "/gpus/a100-sxm4-80gb.yaml");
  for (std::string line; std::getline(a100, line);) inline_gpu += "    " + line + "\n";
  inline_gpu += "training: {global_batch: 8}\n";
  const Scenario scenarios[] = {
      written("paths.yaml", "model: llama3-8b\n"
                            "cluster: {gpu: hardware/my-gpu.yaml, profile: hardware/my-profile.yaml,\n"
                            "          profile_gpu: hardware/my-h200.yaml, gpus_per_node: 8}\n"
                            "training: {global_batch: 8, seq_len: 4096}\n"),
      written("system.yaml", "model: llama3-8b\ncluster: {system: hardware/my-system.yaml, nodes: 2}\n"
                             "training: {global_batch: 16}\n"),
      written("unlinked.yaml",
              "model: gpt-1.7b\ncluster: {gpu: hardware/unlinked-gpu.yaml}\ntraining: {global_batch: 2}\n"),
      // The MI300X's default link is a mesh of 7; this one has no mesh.
      load_scenario_text("model: llama3-8b\ncluster: {gpu: mi300x, gpus_per_node: 2, intra_node: {mesh_links: 0}}\n"
                         "parallelism: {tp: 2}\ntraining: {global_batch: 8}\n",
                         "mesh.yaml"),
      // The H200's measured profile turned off: its kernels modelled.
      load_scenario_text(
          "model: llama3-8b\ncluster: {gpu: h200-sxm-141gb, profile: \"\"}\ntraining: {global_batch: 1}\n",
          "no-profile.yaml"),
      load_scenario_text(inline_gpu, "inline.yaml"),
  };
  for (const Scenario& given : scenarios) {
    const Json result = to_json(simulate(std::make_shared<const Scenario>(given)).result, false);
    // Read from the working directory, where the files are not.
    const Scenario again = load_scenario_text(result.at("scenario").dump(), "echo.json");
    EXPECT_EQ(to_json(simulate(std::make_shared<const Scenario>(again)).result, false).dump(), result.dump())
        << given.file;
  }
}

TEST(Result, WarningsOfSeveralResultsGroupOnceEach) {
  const std::vector<WarningGroup> groups = group_warnings({{"b"}, {}, {"a", "b"}, {"a"}});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].warning, "b");  // in order of first appearance
  EXPECT_EQ(groups[0].positions, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(groups[1].warning, "a");
  EXPECT_EQ(groups[1].positions, (std::vector<size_t>{3, 4}));
  EXPECT_TRUE(group_warnings({{}, {}}).empty());
}

TEST(Result, EchoesWhereExpertsAreWeightedForMoeModelsOnly) {
  const auto echoed = [](const std::string& model, const std::string& weighting) {
    const auto scenario = std::make_shared<const Scenario>(load_scenario_text(
        "model: " + model + "\ncluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}\n"
        "training: {global_batch: 8, seq_len: 2048" + weighting + "}\n", "s.yaml"));
    return to_json(simulate(scenario).result).at("scenario").at("training").at("moe_weighting");
  };
  EXPECT_EQ(echoed("mixtral-8x7b", "").string(), "tokens");
  EXPECT_EQ(echoed("mixtral-8x7b", ", moe_weighting: activation").string(), "activation");
  EXPECT_TRUE(echoed("llama3-8b", "").is_null());
}

TEST(Result, EchoesHowExpertGemmsRunForMoeModelsOnly) {
  const auto echoed = [](const std::string& model, const std::string& gemm) {
    const auto scenario = std::make_shared<const Scenario>(
        load_scenario_text("model: " + model +
                               "\ncluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}\n"
                               "training: {global_batch: 8, seq_len: 2048" +
                               gemm + "}\n",
                           "s.yaml"));
    return to_json(simulate(scenario).result).at("scenario").at("training").at("expert_gemm");
  };
  EXPECT_EQ(echoed("mixtral-8x7b", "").string(), "per_expert");
  EXPECT_EQ(echoed("mixtral-8x7b", ", expert_gemm: grouped").string(), "grouped");
  EXPECT_TRUE(echoed("llama3-8b", "").is_null());
}

TEST(Result, EchoesHowExpertExchangesSendTokensWhereThereAreSome) {
  const auto echoed = [](const std::string& parallelism) {
    const auto scenario = std::make_shared<const Scenario>(load_scenario_text(
        "model: mixtral-8x7b\ncluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}\n"
        "parallelism: {" +
            parallelism + "}\ntraining: {global_batch: 8, seq_len: 2048}\n",
        "s.yaml"));
    return to_json(simulate(scenario).result).at("scenario").at("parallelism").at("ep_dispatcher");
  };
  EXPECT_EQ(echoed("ep: 8").string(), "all_to_all");
  EXPECT_EQ(echoed("ep: 8, ep_dispatcher: deduplicated").string(), "deduplicated");
  EXPECT_TRUE(echoed("ep: 1").is_null());
  const auto summary = [](const std::string& parallelism) -> std::string {
    return to_text(
        simulate(
            std::make_shared<const Scenario>(load_scenario_text(
                "model: mixtral-8x7b\ncluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}\n"
                "parallelism: {" +
                    parallelism + "}\ntraining: {global_batch: 8, seq_len: 2048}\n",
                "s.yaml")))
            .result);
  };
  EXPECT_NE(summary("ep: 8, ep_dispatcher: deduplicated, ep_comm_overlap: true")
                .find("ep 8 (deduplicated, overlapped)"),
            std::string::npos);
  EXPECT_NE(summary("ep: 8, ep_dispatcher: deduplicated").find("ep 8 (deduplicated)   "),
            std::string::npos);
  EXPECT_NE(summary("ep: 8").find("ep 8   "), std::string::npos);
}

TEST(Result, SaysHowContextParallelismExchanges) {
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: llama3-8b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 2}
parallelism: {cp: 2, cp_comm: all_gather, cp_comm_overlap: false}
training: {global_batch: 1, seq_len: 16384}
)", "s.yaml"));
  const Result r = simulate(scenario).result;
  EXPECT_NE(to_text(r).find("cp 2 (all_gather, waited)"), std::string::npos) << to_text(r);
  EXPECT_EQ(to_json(r).at("scenario").at("parallelism").at("cp_comm_overlap").dump(-1), "false");
}

TEST(Result, EchoesAMeshAndCountsOneNode) {
  const auto scenario = std::make_shared<const Scenario>(load_scenario_text(R"(model: llama3-8b
cluster: {gpu: mi300x, nodes: 1, gpus_per_node: 8}
parallelism: {tp: 2}
training: {global_batch: 4, seq_len: 4096}
)", "s.yaml"));
  const Result r = simulate(scenario).result;
  EXPECT_NE(to_text(r).find("on 8 × mi300x (1 node × 8)"), std::string::npos) << to_text(r);
  EXPECT_EQ(to_json(r).at("scenario").at("cluster").at("intra_node").at("mesh_links").dump(-1), "7");
}

TEST(Result, TextShowsTheNameAsOnePrintableLine) {
  Scenario s = load_scenario_text(
      "model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 1}\n", "s.yaml");
  s.name = "bell\a, two\nlines";
  const std::string text = to_text(simulate(std::make_shared<const Scenario>(s)).result);
  EXPECT_TRUE(text.starts_with("bell\\x07, two\\nlines\n")) << text.substr(0, 40);
}

TEST(Result, ModelFlopsFollowTheMegatronFormula) {
  // Narayanan et al. eq. 3 without recompute: 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) for a GPT
  // with 4h MLP; the scenario's global batch B = 8 sequences of s = 2048.
  const Scenario s = load_scenario_text(R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb}
training: {global_batch: 8}
)", "s.yaml");
  const double B = 8, seq = 2048, l = 24, h = 2304, V = 51200;
  const double expected = 72.0 * B * seq * l * h * h * (1.0 + seq / (6.0 * h) + V / (12.0 * l * h));
  EXPECT_NEAR(model_flop_per_iteration(s) / Flop(1), expected, expected * 1e-12);
}

TEST(Result, ModelFlopsCountOnlyTheTokensTheExpertsKeep) {
  // Mixtral (32 layers, hidden 4096, 8 experts of 14336, top-2, SwiGLU): at a capacity factor of
  // 0.5 the experts keep half the routed tokens, and the step loses half of 6 · 2 · 3 · h · f
  // per token and layer. Dropping nearly all of them, the step cannot pass the peak.
  Scenario s = load_scenario_text(R"(model: mixtral-8x7b
cluster: {gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}
parallelism: {ep: 8}
training: {global_batch: 8, seq_len: 2048}
)",
                                  "s.yaml");
  const double dropless = model_flop_per_iteration(s) / Flop(1);
  s.model.moe->capacity_factor = 0.5;
  const double expert_flop = 6.0 * 2 * 3 * 4096 * 14336 * 32 * 8 * 2048;
  EXPECT_NEAR(model_flop_per_iteration(s) / Flop(1), dropless - expert_flop / 2, dropless * 1e-12);
  s.model.moe->capacity_factor = 0.01;
  const Result r = simulate(std::make_shared<const Scenario>(s)).result;
  EXPECT_LT(r.mfu, 1.0);
  EXPECT_LT(r.hfu, 1.0);
}

}  // namespace
}  // namespace paceline

namespace paceline {
namespace {

TEST(Result, SaysWhichKernelsCameFromTheMeasuredProfile) {
  // The H200 catalog entry names its measured profile: GEMMs, attention and memory-bound
  // kernels of a Llama layer are all in its tables (head_dim 128).
  const auto h200 = std::make_shared<const Scenario>(load_scenario_text(R"(model: llama3-8b
cluster: {gpu: h200-sxm-141gb, nodes: 1, gpus_per_node: 8}
training: {global_batch: 8, seq_len: 8192}
)", "s.yaml"));
  const Result measured = simulate(h200).result;
  EXPECT_EQ(measured.kernels.profile, "h200-sxm-141gb");
  EXPECT_GT(measured.kernels.measured_time_fraction, 0.99);
  // The A100 has no profile: every kernel comes from the roofline model.
  const auto a100 = std::make_shared<const Scenario>(load_scenario_file("scenarios/gpt-1.7b-1xa100.yaml"));
  const Result modeled = simulate(a100).result;
  EXPECT_TRUE(modeled.kernels.profile.empty());
  EXPECT_EQ(modeled.kernels.measured_kernels, 0);
  EXPECT_GT(modeled.kernels.modeled_kernels, 0);
}

TEST(Result, CountsEveryKernelAGpuLaunches) {
  // 16 of Qwen3-30B-A3B's 128 experts on each GPU: run as a kernel per expert (Transformer
  // Engine's GroupedLinear), each of the experts' two GEMMs launches 16 kernels forward and 16
  // for each of its two gradients; as one grouped kernel, one.
  const auto launches = [](const char* expert_gemm) {
    const auto s =
        std::make_shared<const Scenario>(load_scenario_text(fmt::format(R"(model: qwen3-30b-a3b
cluster: {{gpu: h100-sxm5-80gb, nodes: 1, gpus_per_node: 8}}
parallelism: {{ep: 8}}
training: {{global_batch: 16, micro_batch: 1, seq_len: 4096, expert_gemm: {}}}
)",
                                                                        expert_gemm),
                                                            "s.yaml"));
    const Result r = simulate(s).result;
    EXPECT_EQ(r.microbatches, 2);
    EXPECT_GT(r.kernels.kernel_time, Seconds(0));
    return r.kernels.launches();
  };
  EXPECT_EQ(launches("per_expert") - launches("grouped"), 48 * 2 * 6 * 15);
}

TEST(Result, ReadsBackAsTheSameResult) {
  const char* scenarios[] = {
      // Pipeline stages, a fold of data-parallel peers and a warning (stages innermost on nodes
      // of one NIC).
      R"(model: llama3-8b
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
parallelism: {pp: 8, dp: 2, rank_order: pp-cp-tp-dp}
training: {global_batch: 16, seq_len: 4096}
)",
      // Kernels from a measured profile.
      "model: llama3-8b\ncluster: {gpu: h200-sxm-141gb, gpus_per_node: 8}\ntraining: "
      "{global_batch: 8}\n",
      // Experts, recomputation and sharded states.
      R"(model: mixtral-8x7b
cluster: {system: dgx-h100, nodes: 2}
parallelism: {tp: 2, ep: 8, dp: 8, zero: 1}
training: {global_batch: 16, seq_len: 2048, recompute: full}
)",
  };
  std::vector<Result> read;
  for (const char* text : scenarios) {
    const Result r =
        simulate(std::make_shared<const Scenario>(load_scenario_text(text, "s.yaml"))).result;
    const std::string json = to_json(r).dump();
    read.push_back(read_result(json, "r.json"));
    EXPECT_EQ(to_json(read.back()).dump(), json) << text;
    EXPECT_EQ(to_text(read.back()), to_text(r)) << text;
  }
  // Each fixture holds what it is there for.
  EXPECT_EQ(read[0].stages.size(), 8u);
  EXPECT_FALSE(read[0].folded_peers.empty());
  EXPECT_EQ(read[0].warnings.size(), 1u);
  EXPECT_EQ(read[1].kernels.profile, "h200-sxm-141gb");
  EXPECT_GT(read[2].active_parameters, 0);
  EXPECT_LT(read[2].active_parameters, read[2].parameters);
}

// The golden results of the ready scenarios (tests/golden, written without the wall time) read
// back as the same text.
TEST(Result, ReadsBackEveryGoldenResult) {
  int read = 0;
  for (const auto& entry : std::filesystem::directory_iterator("tests/golden")) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(to_json(read_result(text, entry.path().string()), false).dump(2) + "\n", text)
        << entry.path();
    ++read;
  }
  EXPECT_GE(read, 8);
}

TEST(Result, RefusesWhatIsNotAResultNamingTheField) {
  const auto scenario =
      std::make_shared<const Scenario>(load_scenario_file("scenarios/gpt-1.7b-1xa100.yaml"));
  const Json json = to_json(simulate(scenario).result);
  const auto error = [](const std::string& text) {
    try {
      read_result(text, "r.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Json memory = json.at("memory");
  const std::string unknown = Json(json).set("memory", memory.set("peak_gib", 1.0)).dump();
  EXPECT_NE(error(unknown).find("unknown key 'peak_gib' in memory"), std::string::npos)
      << error(unknown);
  Json breakdown = json.at("breakdown_s");
  const std::string wrong_type =
      Json(json).set("breakdown_s", breakdown.set("compute", "soon")).dump();
  EXPECT_NE(error(wrong_type).find("breakdown_s.compute = 'soon' is not a number"),
            std::string::npos)
      << error(wrong_type);
  // The peak's place: phase and micro-batch may be null (a task outside the layers' passes), and
  // its keys are checked too.
  const auto with_peak_at = [&](Json peak_at) {
    Json stages = Json::array();
    for (const Json& stage : json.at("memory").at("stages").elements())
      stages.push(Json(stage).set("peak_at", peak_at));
    return Json(json).set("memory", Json(json.at("memory")).set("stages", std::move(stages)));
  };
  Json lone_peak = Json::object();
  lone_peak.set("task", "dp.weight_all_gather")
      .set("block", "step")
      .set("phase", Json())
      .set("microbatch", Json());
  lone_peak.set("time_s", 0.25);
  const Json lone = with_peak_at(lone_peak);
  const Result read_back = read_result(lone.dump(2), "r.json");
  ASSERT_TRUE(read_back.stages.at(0).peak_at.has_value());
  EXPECT_EQ(read_back.stages[0].peak_at->task, "dp.weight_all_gather");
  EXPECT_EQ(read_back.stages[0].peak_at->phase, "");
  EXPECT_EQ(read_back.stages[0].peak_at->microbatch, -1);
  EXPECT_EQ(to_json(read_back).at("memory").at("stages").elements().at(0).at("peak_at").dump(-1),
            lone_peak.dump(-1));
  Json no_microbatch = Json::object();
  no_microbatch.set("task", "dp.weight_all_gather")
      .set("block", "step")
      .set("phase", Json())
      .set("time_s", 0.25);
  const std::string missing = with_peak_at(no_microbatch).dump();
  EXPECT_NE(error(missing).find("memory.stages[0].peak_at.microbatch"), std::string::npos)
      << error(missing);
  EXPECT_NE(error(missing).find("is required"), std::string::npos) << error(missing);
  const std::string misplaced = with_peak_at(Json(lone_peak).set("where", "here")).dump();
  EXPECT_NE(error(misplaced).find("unknown key 'where' in memory.stages[0].peak_at"),
            std::string::npos)
      << error(misplaced);
  const std::string renamed = Json(json).set("name", "another").dump();
  EXPECT_NE(error(renamed).find("'another' is not the name of the scenario it echoes"),
            std::string::npos)
      << error(renamed);
  EXPECT_NE(error("3").find("r.json:1:1"), std::string::npos) << error("3");
  // Keys left out of the compact text.
  const std::string compact = json.dump(-1);
  std::string no_profile = compact;
  no_profile.erase(no_profile.find("\"profile\":null,"), std::string("\"profile\":null,").size());
  EXPECT_NE(error(no_profile).find("kernels.profile is required"), std::string::npos)
      << error(no_profile);
  std::string no_stages = compact;
  const size_t stages = no_stages.find(",\"stages\":[");
  no_stages.erase(stages, no_stages.find("}]", stages) + 2 - stages);
  EXPECT_NE(error(no_stages).find("memory.stages is required"), std::string::npos)
      << error(no_stages);
  std::string no_scenario = compact;
  const size_t scenario_at = no_scenario.find(",\"scenario\":");
  no_scenario.erase(scenario_at, no_scenario.size() - 1 - scenario_at);
  EXPECT_NE(error(no_scenario).find("scenario is required"), std::string::npos)
      << error(no_scenario);
}

}  // namespace
}  // namespace paceline
