// Tests sim/search/sweep.h: the order of configurations, invalid configurations as rows, and
// results equal to single simulations whatever the thread count.
#include "sim/search/sweep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "base/input_error.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

constexpr const char* kBase = R"(name: sweep
model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 8}
training: {global_batch: 16, seq_len: 1024}
)";

TEST(Sweep, LastAxisVariesFastest) {
  const std::vector<SweepAxis> axes = {{"a", {"1", "2", "3"}}, {"b", {"x", "y"}}};
  EXPECT_EQ(sweep_size(axes), 6u);
  // Index 3 = 1·2 + 1: a's second value, b's second value.
  const std::vector<Override> third = sweep_configuration(axes, 3);
  ASSERT_EQ(third.size(), 2u);
  EXPECT_EQ(third[0].path, "a");
  EXPECT_EQ(third[0].value, "2");
  EXPECT_EQ(third[1].value, "y");
  EXPECT_EQ(sweep_configuration(axes, 4)[0].value, "3");
  EXPECT_EQ(sweep_size({}), 1u);
}

TEST(Sweep, FailsWhenNoConfigurationReadsWhateverTheOrder) {
  // An invalid value is a row in either place; an error outside the axes fails the sweep; a
  // field on two axes would label rows by one value and run another.
  const ScenarioSource base{kBase, "sweep.yaml"};
  check_sweep(base, {{"parallelism.tp", {"5", "1"}}});
  check_sweep(base, {{"parallelism.tp", {"1", "5"}}});
  const auto error_of = [](const auto& body) -> std::string {
    try {
      body();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of([&] { check_sweep(base, {{"parallelism.tp", {"3", "5"}}}); }).rfind("sweep.yaml with parallelism.tp=3:", 0),
            0u);
  // 4096^3 configurations: refused before any is read.
  const std::vector<std::string> many(4096, "1");
  EXPECT_EQ(error_of([&] {
              check_sweep(base,
                          {{"training.micro_batch", many}, {"training.global_batch", many}, {"model.layers", many}});
            }),
            "sweep.yaml: the sweep has more than 16777216 configurations (4096 training.micro_batch × 4096 "
            "training.global_batch × 4096 model.layers); split it into sweeps of fewer");
  // An axis without values makes no configuration (it once crashed the check).
  EXPECT_EQ(
      error_of([&] {
        check_sweep(base, {{"parallelism.tp", {"1"}}, {"training.global_batch", {}}});
      }),
      "sweep.yaml: the sweep's axis training.global_batch has no values; give it one or more");
  EXPECT_EQ(error_of([&] { check_sweep({"model: nope\n", "bad.yaml"}, {{"training.global_batch", {"1", "2"}}}); })
                .rfind("bad.yaml:1:8: model = 'nope'", 0),
            0u);
  // Checked before any configuration is read, citing where the axis was given.
  EXPECT_EQ(
      error_of([&] {
        check_sweep(base, {{"training", {"1"}, "--set"}, {"training.micro_batch", {"4"}, "--set"}});
      }),
      "--set: the sweep sets training.micro_batch on two axes (training and training.micro_batch); "
      "give each "
      "field one axis");
  EXPECT_EQ(error_of([&] {
              run_sweep(base, {{"parallelism.tp", {"1", "2"}}, {"parallelism.tp", {"4"}}}, 0, 2, {.threads = 1});
            }),
            "sweep.yaml: the sweep sets parallelism.tp on two axes (parallelism.tp and parallelism.tp); give each "
            "field one axis");
  EXPECT_EQ(error_of([&] {
              run_sweep(base, {{"training.micro_batch", {"1", "2"}}, {"training", {"{global_batch: 4}"}}}, 0, 2,
                        {.threads = 1});
            }),
            "sweep.yaml: the sweep sets training.micro_batch on two axes (training.micro_batch and training); give "
            "each field one axis");
}

TEST(Sweep, AConfigurationBeyondThisMachinesMemoryIsARow) {
  // A billion sequences of one micro-batch each: terabytes of engine tasks, refused by the
  // estimate before lowering, as paceline run refuses it.
  const SweepTable table = run_sweep({kBase, "sweep.yaml"}, {{"training.global_batch", {"8", "1000000000"}}}, 0, 2, {});
  EXPECT_EQ(table.error[0], "");
  EXPECT_NE(table.error[1].find("GiB of memory allowed"), std::string::npos) << table.error[1];
  EXPECT_TRUE(std::isnan(table.iteration_time_s[1]));
}

TEST(Sweep, RowsCarryTheSimulationsWarnings) {
  // One NIC per node: with stages innermost, every stage's data-parallel pair leaves through it.
  const ScenarioSource base{R"(model: gpt-1.7b
cluster: {gpu: a100-sxm4-80gb, nodes: 2, gpus_per_node: 8, inter_node: {nics_per_node: 1, nic_bandwidth: 200 Gb/s}}
parallelism: {pp: 8, dp: 2}
training: {global_batch: 16, seq_len: 1024}
)",
                            "few-nics.yaml"};
  const std::vector<SweepAxis> axes = {{"parallelism.rank_order", {"pp-cp-tp-dp", "tp-cp-dp-pp"}}};
  const SweepTable table = run_sweep(base, axes, 0, 2, {.threads = 1});
  ASSERT_EQ(table.warnings[0].size(), 1u);
  EXPECT_NE(table.warnings[0][0].find("data-parallel groups of 8 pipeline stages"), std::string::npos);
  EXPECT_TRUE(table.warnings[1].empty());
  const Json json = to_json(axes, 0, table);
  EXPECT_EQ(json.elements()[0].at("warnings").elements()[0].string(), table.warnings[0][0]);
  EXPECT_TRUE(json.elements()[1].at("warnings").elements().empty());
  EXPECT_NE(to_text(axes, 0, table).find("warning (rows 1): " + table.warnings[0][0]), std::string::npos);
  // CSV quotes the field: the warning holds commas.
  EXPECT_NE(to_csv(axes, 0, table).find(",\"" + table.warnings[0][0] + "\"\n"), std::string::npos);
}

TEST(Sweep, RowsEqualSingleSimulations) {
  const ScenarioSource base{kBase, "sweep.yaml"};
  // tp 5 does not divide the 8 GPUs: an error row, not a failed sweep.
  const std::vector<SweepAxis> axes = {{"parallelism.tp", {"1", "5", "8"}},
                                       {"training.micro_batch", {"1", "2"}}};
  const SweepTable table = run_sweep(base, axes, 0, 100, {.threads = 2});
  ASSERT_EQ(table.size(), 6u);
  for (size_t i = 0; i < table.size(); ++i) {
    const std::vector<Override> overrides = sweep_configuration(axes, i);
    if (overrides[0].value == "5") {
      std::string expected;
      try {
        load_scenario(base, overrides);
      } catch (const InputError& e) {
        expected = e.what();
      }
      EXPECT_EQ(table.error[i], expected);
      EXPECT_EQ(table.error[i].rfind("sweep.yaml with parallelism.tp=", 0), 0u) << table.error[i];
      EXPECT_TRUE(std::isnan(table.tokens_per_s[i]));
      EXPECT_EQ(table.peak_memory_bytes[i], -1);
      EXPECT_EQ(table.peak_reserved_bytes[i], -1);
      continue;
    }
    EXPECT_EQ(table.error[i], "");
    const Result r =
        simulate(std::make_shared<const Scenario>(load_scenario(base, overrides))).result;
    EXPECT_EQ(table.iteration_time_s[i], r.iteration_time / Seconds(1));
    EXPECT_EQ(table.tokens_per_s[i], r.tokens_per_s);
    EXPECT_EQ(table.mfu[i], r.mfu);
    EXPECT_EQ(table.peak_memory_bytes[i], r.peak_memory_bytes);
    EXPECT_EQ(table.peak_reserved_bytes[i], r.peak_reserved_bytes);
    EXPECT_EQ(table.fits[i], r.fits ? 1 : 0);
  }
}

TEST(Sweep, SameResultOnAnyThreadCountAndRange) {
  const ScenarioSource base{kBase, "sweep.yaml"};
  const std::vector<SweepAxis> axes = {{"parallelism.tp", {"1", "2", "4"}},
                                       {"training.recompute", {"none", "full"}}};
  const SweepTable one = run_sweep(base, axes, 0, 6, {.threads = 1});
  const SweepTable three = run_sweep(base, axes, 0, 6, {.threads = 3});
  EXPECT_EQ(one.iteration_time_s, three.iteration_time_s);
  EXPECT_EQ(one.peak_memory_bytes, three.peak_memory_bytes);
  // A chunk of the sweep (as a Dask worker runs it) gives the same rows.
  const SweepTable tail = run_sweep(base, axes, 4, 6, {.threads = 2});
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail.iteration_time_s[0], one.iteration_time_s[4]);
  EXPECT_EQ(tail.iteration_time_s[1], one.iteration_time_s[5]);
}

TEST(Sweep, ProgressRunsOnTheCallerAndCanCancel) {
  const ScenarioSource base{kBase, "sweep.yaml"};
  const std::vector<SweepAxis> axes = {{"training.micro_batch", {"1", "2", "4", "8"}}};
  size_t last = 0;
  run_sweep(base, axes, 0, 4, {.threads = 2, .progress = [&](size_t done, size_t total) {
                                 EXPECT_EQ(total, 4u);
                                 EXPECT_GE(done, last);
                                 last = done;
                               }});
  EXPECT_EQ(last, 4u);
  struct Cancelled {};
  EXPECT_THROW(run_sweep(base, axes, 0, 4,
                         {.threads = 1, .progress = [](size_t, size_t) { throw Cancelled{}; }}),
               Cancelled);
}

TEST(Sweep, AStopFlagStopsTheSweepRatherThanFillingARow) {
  // SimulationStopped is a SimulationLimitError, which a configuration otherwise records as its
  // row.
  const std::atomic<bool> stop{true};
  EXPECT_THROW(run_sweep({kBase, "sweep.yaml"}, {{"training.micro_batch", {"1", "2"}}}, 0, 2,
                         {.threads = 1, .stop = &stop}),
               SimulationStopped);
  // The check reads configurations until one reads: a base no value mends reads them all.
  EXPECT_THROW(
      check_sweep({"model: nope\n", "bad.yaml"}, {{"training.global_batch", {"1", "2"}}}, &stop),
      SimulationStopped);
}

TEST(Sweep, AxesSplitAtCommasOutsideBracketsAndQuotes) {
  const SweepAxis tp = parse_sweep_axis("parallelism.tp=1,2,4", "--set");
  EXPECT_EQ(tp.path, "parallelism.tp");
  EXPECT_EQ(tp.values, (std::vector<std::string>{"1", "2", "4"}));
  const SweepAxis link = parse_sweep_axis("cluster.intra_node={bandwidth: 300 GB/s, latency: 1 us},[1, 2],'a,b'", "--set");
  EXPECT_EQ(link.values,
            (std::vector<std::string>{"{bandwidth: 300 GB/s, latency: 1 us}", "[1, 2]", "'a,b'"}));
  // An apostrophe inside a word is text; an escaped quote does not close a double-quoted value.
  EXPECT_EQ(parse_sweep_axis("name=Bob's run,x", "--set").values,
            (std::vector<std::string>{"Bob's run", "x"}));
  EXPECT_EQ(parse_sweep_axis(R"(name="a\"b,c",x)", "--set").values,
            (std::vector<std::string>{R"("a\"b,c")", "x"}));
  EXPECT_EQ(parse_sweep_axis("a={b: 'x,y'}", "--set").values,
            (std::vector<std::string>{"{b: 'x,y'}"}));
  // YAML's '' escape inside single quotes, and a quote after a tag or an anchor.
  EXPECT_EQ(parse_sweep_axis("name='Bob''s run, take 2',x", "--set").values,
            (std::vector<std::string>{"'Bob''s run, take 2'", "x"}));
  EXPECT_EQ(parse_sweep_axis("name=!!str 'a, b',&n 'c, d'", "--set").values,
            (std::vector<std::string>{"!!str 'a, b'", "&n 'c, d'"}));
  for (const char* bad : {"parallelism.tp", "=1,2", "parallelism.tp=", "parallelism.tp=1,,2", "a={1,2", "a='x"}) {
    EXPECT_THROW(parse_sweep_axis(bad, "--set"), InputError) << bad;
  }
  try {
    parse_sweep_axis("parallelism.tp", "--set");
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--set: 'parallelism.tp' must be written PATH=VALUE, e.g. parallelism.tp=4 (a sweep's values: "
              "parallelism.tp=1,2,4)");
  }
}

TEST(Sweep, CsvAndJsonHoldOneRowPerConfiguration) {
  const ScenarioSource base{kBase, "sweep.yaml"};
  // A value holding a comma is quoted in CSV.
  const std::vector<SweepAxis> axes = {{"parallelism.tp", {"1", "[1, 5]"}}};
  const SweepTable table = run_sweep(base, axes, 0, 2, {.threads = 1});
  const std::string csv = to_csv(axes, 0, table);
  const std::string header =
      "parallelism.tp,iteration_time_s,tokens_per_s,tokens_per_s_per_gpu,mfu,hfu,peak_memory_bytes,"
      "peak_reserved_bytes,fits,error,warnings\n";
  ASSERT_EQ(csv.rfind(header, 0), 0u) << csv;
  // tp 1 simulated (no error); the list an error row.
  const std::string first = csv.substr(header.size(), csv.find('\n', header.size()) - header.size());
  EXPECT_EQ(first.rfind("1,", 0), 0u) << first;
  EXPECT_EQ(first.back(), ',') << first;
  EXPECT_NE(csv.find("\n\"[1, 5]\",,,,,,,,,\"sweep.yaml with parallelism.tp=[1, 5]: "),
            std::string::npos)
      << csv;
  const Json json = to_json(axes, 0, table);
  ASSERT_EQ(json.elements().size(), 2u);
  EXPECT_EQ(json.elements()[0].at("parallelism.tp").string(), "1");
  EXPECT_EQ(json.elements()[1].at("parallelism.tp").string(), "[1, 5]");
  EXPECT_DOUBLE_EQ(json.elements()[0].at("iteration_time_s").number(), table.iteration_time_s[0]);
  EXPECT_TRUE(json.elements()[0].at("error").is_null());
  EXPECT_TRUE(json.elements()[1].at("iteration_time_s").is_null());
  EXPECT_EQ(json.elements()[1].at("error").string(), table.error[1]);
  const std::string text = to_text(axes, 0, table);
  EXPECT_NE(text.find("invalid: " + table.error[1]), std::string::npos) << text;
  EXPECT_NE(text.find("2 configurations, 1 valid"), std::string::npos) << text;
}

TEST(Sweep, ValuesShowAsPrintableText) {
  // A name with an escape character and a byte that is not UTF-8: escaped in CSV and text cells.
  const std::vector<SweepAxis> axes = {{"name", {"a\x1b[31m", "b\xff"}}};
  const SweepTable table =
      run_sweep(ScenarioSource{kBase, "sweep.yaml"}, axes, 0, 2, {.threads = 1});
  for (const std::string& out : {to_csv(axes, 0, table), to_text(axes, 0, table)}) {
    EXPECT_NE(out.find("a\\x1b[31m"), std::string::npos) << out;
    EXPECT_NE(out.find("b\\xff"), std::string::npos) << out;
    EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace paceline
