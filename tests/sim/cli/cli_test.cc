// Tests the paceline executable: exit codes, one-line errors, JSON output.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/support/run_cli.h"
#include "tests/support/temp_path.h"

namespace {

using paceline::testing::CliOutcome;
using paceline::testing::run_cli;

TEST(Cli, RunPrintsASummary) {
  const CliOutcome o = run_cli("run scenarios/gpt-1.7b-1xa100.yaml");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("iteration time"), std::string::npos);
}

TEST(Cli, JsonIsOneObject) {
  const CliOutcome o = run_cli("run scenarios/gpt-1.7b-1xa100.yaml --json");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.output.front(), '{');
  EXPECT_NE(o.output.find("\"iteration_time_s\""), std::string::npos);
}

TEST(Cli, SearchAndSweepCountWhatTheyHaveSimulatedOnStderrWhenAsked) {
  // A search shows each stage in turn, each line written over the one before (spaces over what
  // a longer one left); the last count is the whole, on a line of its own.
  const CliOutcome search = run_cli("search scenarios/gpt-1.7b-1xa100.yaml --progress");
  EXPECT_EQ(search.exit_code, 0) << search.output;
  const size_t graphs = search.output.find(" layer graphs built");
  const size_t bounded = search.output.find(" of 15 layouts bounded");  // all it considers
  const size_t report = search.output.find("\ngpt-1.7b on 1 A100\n");
  ASSERT_LT(graphs, bounded) << search.output;
  ASSERT_LT(bounded, report) << search.output;
  const size_t last = search.output.rfind('\r', report);
  const std::string shown = search.output.substr(last, report - last);
  EXPECT_TRUE(shown.starts_with("\rsearch: 13 layouts simulated")) << shown;
  EXPECT_EQ(shown.find_first_not_of(' ', std::string("\rsearch: 13 layouts simulated").size()), std::string::npos)
      << shown;
  EXPECT_NE(search.output.find("13 simulated"), std::string::npos) << search.output;
  const CliOutcome sweep = run_cli("sweep scenarios/gpt-1.7b-1xa100.yaml --set training.micro_batch=1,2,4 --progress");
  EXPECT_EQ(sweep.exit_code, 0) << sweep.output;
  EXPECT_NE(sweep.output.find("\rsweep: 3 of 3 configurations done\ntraining.micro_batch"), std::string::npos)
      << sweep.output;
  // Unasked, neither writes a count.
  EXPECT_EQ(run_cli("search scenarios/gpt-1.7b-1xa100.yaml").output.find('\r'), std::string::npos);
  EXPECT_EQ(run_cli("sweep scenarios/gpt-1.7b-1xa100.yaml --set training.micro_batch=1,2").output.find('\r'),
            std::string::npos);
}

TEST(Cli, BadInputIsOneLineAndExitCodeTwo) {
  const std::string path = paceline::testing::temp_path("bad.yaml");
  std::ofstream(path) << "model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\ntraining: {global_batch: 8}\nfoo: 1\n";
  const CliOutcome o = run_cli("run " + path);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.output, "paceline: " + path +
                          ":4:1: unknown key 'foo' in the document; expected one of: cluster, collectives, model, name, "
                          "parallelism, simulation, training\n");
}

TEST(Cli, ValidateOverlayErrorsExitTwoAndUnmatchedRulesWarn) {
  const std::string cases = paceline::testing::temp_path("overlay-cases.yaml");
  std::ofstream(cases) << R"(- {id: one, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
)";
  const std::string unmatched = paceline::testing::temp_path("unmatched-overlay.yaml");
  std::ofstream(unmatched) << "- cases: [no-such-case]\n  set: {training.recompute: full}\n  why: a test\n";
  const CliOutcome warned = run_cli("validate " + cases + " --overlay " + unmatched);
  EXPECT_EQ(warned.exit_code, 0);
  EXPECT_NE(warned.output.find("paceline: warning: " + unmatched +
                               ":1:3: cases no-such-case match no case id of the validation files; the rule sets "
                               "nothing\n"),
            std::string::npos);

  const std::string invalid = paceline::testing::temp_path("invalid-overlay.yaml");
  std::ofstream(invalid) << "- cases: [one]\n  set: {training.recompute: sometimes}\n  why: a test\n";
  const CliOutcome failed = run_cli("validate " + cases + " --overlay " + invalid);
  EXPECT_EQ(failed.exit_code, 2);
  EXPECT_EQ(failed.output.find("paceline: " + invalid + ":1:3: case one with the overlay: "), 0u) << failed.output;
  EXPECT_EQ(std::count(failed.output.begin(), failed.output.end(), '\n'), 1);
}

TEST(Cli, ValidateRunsTheCasesAskedForAndWritesTheirScenarios) {
  const std::string cases = paceline::testing::temp_path("chosen-cases.yaml");
  std::ofstream(cases) << R"(- {id: small-1, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
- {id: small-2, source: test, measured: {iteration_time_s: 2.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 2, seq_len: 1024}}}
- {id: other, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, recompte: full}}}
)";
  const std::string overlay = paceline::testing::temp_path("chosen-overlay.yaml");
  std::ofstream(overlay)
      << "- cases: [small-2]\n  set: {training.recompute: full}\n  why: a test\n";
  const std::string folder = paceline::testing::temp_path("written-scenarios");
  std::filesystem::remove_all(folder);
  const CliOutcome chosen = run_cli("validate " + cases + " --overlay " + overlay +
                                    " --cases 'small-*' --write-scenarios " + folder);
  EXPECT_EQ(chosen.exit_code, 0) << chosen.output;
  EXPECT_NE(chosen.output.find("over 2 cases (0 unsupported)"), std::string::npos) << chosen.output;
  EXPECT_EQ(chosen.output.find("other"), std::string::npos) << chosen.output;
  EXPECT_FALSE(std::filesystem::exists(folder + "/other.yaml"));
  // The written scenario runs as the case did, with the overlay, and says what it is.
  std::ifstream written(folder + "/small-2.yaml");
  const std::string text((std::istreambuf_iterator<char>(written)),
                         std::istreambuf_iterator<char>());
  EXPECT_TRUE(text.starts_with("# Validation case small-2 (" + cases +
                               "), measured 2 s per iteration.\n"
                               "# Source: test\n# Overlay: training.recompute = full\n"))
      << text;
  const std::string predicted =
      run_cli("validate " + cases + " --overlay " + overlay + " --cases small-2 --json").output;
  const std::string ran = run_cli("run " + folder + "/small-2.yaml --json").output;
  const auto value_after = [](const std::string& json, const std::string& key) {
    const size_t at = json.find(key);
    return at == std::string::npos
               ? std::string("missing")
               : json.substr(at + key.size(), json.find_first_of(",\n", at) - at - key.size());
  };
  EXPECT_NE(value_after(ran, "\"iteration_time_s\": "), "missing") << ran;
  EXPECT_EQ(value_after(ran, "\"iteration_time_s\": "), value_after(predicted, "\"predicted_s\": "))
      << ran << predicted;
  EXPECT_NE(ran.find("\"recompute\": \"full\""), std::string::npos) << ran;
  // An unsupported case is named, and nothing written for it.
  const CliOutcome unsupported =
      run_cli("validate " + cases + " --cases other --write-scenarios " + folder);
  EXPECT_EQ(unsupported.exit_code, 0) << unsupported.output;
  EXPECT_NE(unsupported.output.find("paceline: warning: case other is unsupported ("),
            std::string::npos)
      << unsupported.output;
  EXPECT_FALSE(std::filesystem::exists(folder + "/other.yaml"));
  // Globs that match nothing, or are empty, are refused.
  const CliOutcome none = run_cli("validate " + cases + " --cases 'small-*,big-*'");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.output,
            "paceline: --cases small-*,big-*: 'big-*' matches none of the 3 case ids of the "
            "validation files (globs: "
            "* any run of characters, ? one)\n");
  const CliOutcome empty = run_cli("validate " + cases + " --cases small-1,");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_EQ(empty.output,
            "paceline: <command line>: --cases = 'small-1,': expected case id globs separated by "
            "commas, none empty\n");
  EXPECT_EQ(run_cli("validate " + cases + " --cases ''").output,
            "paceline: --cases : no case id glob given\n");
  // A case id that cannot name a file is refused before any file is written.
  const std::string unsafe = paceline::testing::temp_path("unsafe-ids.yaml");
  std::ofstream(unsafe) << R"(- {id: fine, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
- {id: "a/b", source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
)";
  const std::string unsafe_folder = paceline::testing::temp_path("unsafe-scenarios");
  std::filesystem::remove_all(unsafe_folder);
  const CliOutcome refused = run_cli("validate " + unsafe + " --write-scenarios " + unsafe_folder);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_EQ(refused.output.find("paceline: " + unsafe +
                                ":3:8: case id 'a/b' cannot name its scenario's file"),
            0u)
      << refused.output;
  EXPECT_FALSE(std::filesystem::exists(unsafe_folder));
}

TEST(Cli, ValidateLimitsFailTheRunWithExitOne) {
  // One measured run, 1 s and 1 GiB: the prediction is off in both, by more than 0.1% and less
  // than 100 times.
  const std::string cases = paceline::testing::temp_path("limits.yaml");
  std::ofstream(cases) << R"(- id: one
  source: test
  scenario:
    model: gpt-1.7b
    cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 1}
    training: {global_batch: 1, seq_len: 1024}
  measured: {iteration_time_s: 1.0, peak_memory_bytes: 1073741824}
)";
  EXPECT_EQ(run_cli("validate " + cases + " --max-mape 100 --max-memory-mape 100").exit_code, 0);
  const CliOutcome time = run_cli("validate " + cases + " --max-mape 0.001 --max-memory-mape 100");
  EXPECT_EQ(time.exit_code, 1);
  EXPECT_NE(time.output.find("paceline: MAPE "), std::string::npos);
  const CliOutcome memory = run_cli("validate " + cases + " --max-mape 100 --max-memory-mape 0.001");
  EXPECT_EQ(memory.exit_code, 1);
  EXPECT_NE(memory.output.find("paceline: peak-memory MAPE "), std::string::npos);
  EXPECT_EQ(run_cli("validate " + cases + " --max-memory-mape lots").exit_code, 2);

  // A case that was not predicted (here a misspelt field) fails a limit: it would otherwise
  // drop out of the MAPE the limit checks.
  const std::string misspelt = paceline::testing::temp_path("misspelt.yaml");
  std::ofstream(misspelt) << R"(- {id: one, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
- {id: two, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, recompte: full}}}
)";
  EXPECT_EQ(run_cli("validate " + misspelt).exit_code, 0);
  const CliOutcome unsupported = run_cli("validate " + misspelt + " --max-mape 100");
  EXPECT_EQ(unsupported.exit_code, 1);
  EXPECT_NE(unsupported.output.find("paceline: 1 of 2 cases were not predicted, so no limit covers them; the first, "
                                    "two: " + misspelt + ":4:92: unknown key 'recompte'"),
            std::string::npos)
      << unsupported.output;
  const std::string zero_peak = paceline::testing::temp_path("zero-peak.yaml");
  std::ofstream(zero_peak) << R"(- {id: one, source: test, measured: {iteration_time_s: 1.0, peak_memory_bytes: 0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
)";
  const CliOutcome zero = run_cli("validate " + zero_peak);
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.output.find("measured.peak_memory_bytes = 0 must be positive (bytes)"), std::string::npos)
      << zero.output;

  const std::string without_peak = paceline::testing::temp_path("no-peak.yaml");
  std::ofstream(without_peak) << R"(- {id: one, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
)";
  const CliOutcome no_peak = run_cli("validate " + without_peak + " --max-memory-mape 0.1");
  EXPECT_EQ(no_peak.exit_code, 2);
  EXPECT_NE(no_peak.output.find("--max-memory-mape: no case of the validation files has a measured peak memory"),
            std::string::npos);
}

TEST(Cli, OptionValuesAreCheckedWhole) {
  // A count is decimal digits within its range (no sign, no wrap at 32 bits), a limit a whole
  // non-negative fraction, an option given once, and a catalog listing takes no argument.
  const std::string scenario = "scenarios/gpt-1.7b-1xa100.yaml";
  const auto error = [](const std::string& command) {
    const CliOutcome o = run_cli(command);
    EXPECT_EQ(o.exit_code, 2) << command << "\n" << o.output;
    return o.output;
  };
  EXPECT_EQ(error("run " + scenario + " --threads -1"),
            "paceline: <command line>: --threads = '-1' is not a non-negative integer\n");
  EXPECT_EQ(error("search " + scenario + " --gpus 4294967304"),
            "paceline: <command line>: --gpus = 4294967304 is out of range; expected 1 to 2147483647\n");
  EXPECT_EQ(error("search " + scenario + " --gpus 0"),
            "paceline: <command line>: --gpus = 0 is out of range; expected 1 to 2147483647\n");
  EXPECT_EQ(error("search " + scenario + " --top 99999999999999999999"),
            "paceline: <command line>: --top = 99999999999999999999 is out of range; expected 1 to 2147483647\n");
  EXPECT_EQ(error("run " + scenario + " --timeout -1"),
            "paceline: <command line>: --timeout = '-1' is negative; expected at least 0\n");
  EXPECT_EQ(error("run " + scenario + " -j"),
            "paceline: <command line>: unknown option '-j'; expected one of: --set, --trace, "
            "--max-events, "
            "--timeout, --max-memory, --threads, --json, --help (a file of that name is ./-j)\n");
  error("run " + scenario + " --max-events 10x");
  error("run " + scenario + " --threads 2 --threads 1");
  error("models extra");
  const std::string cases = paceline::testing::temp_path("whole.yaml");
  std::ofstream(cases) << R"(- {id: one, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
)";
  for (const char* limit : {"5%", "0.2abc", "nan", "inf", "-1", " 0.2"}) {
    EXPECT_EQ(error("validate " + cases + " --max-mape '" + limit + "'"),
              fmt::format("paceline: <command line>: --max-mape = '{}': expected a fraction of at least 0 (e.g. "
                          "0.12 for 12%)\n", limit));
  }
  error("validate " + cases + " --overlay a.yaml --overlay b.yaml");
  // No case predicted: a limit on the MAPE cannot be met.
  const std::string unsupported = paceline::testing::temp_path("unsupported.yaml");
  std::ofstream(unsupported) << R"(- {id: one, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb, nodes: 1, gpus_per_node: 4}, parallelism: {tp: 3},
              training: {global_batch: 1, seq_len: 1024}}}
)";
  EXPECT_NE(error("validate " + unsupported + " --max-mape 0.5")
                .find("--max-mape: no case of the validation files was predicted (1 unsupported)"),
            std::string::npos);
}

TEST(Cli, ValidateReportIsMarkdownWithItsPlotOrOneHtmlPage) {
  const std::string cases = paceline::testing::temp_path("report-cases.yaml");
  std::ofstream(cases) << R"(- {id: one, source: test, measured: {iteration_time_s: 1.0},
   scenario: {model: gpt-1.7b, cluster: {gpu: a100-sxm4-80gb}, training: {global_batch: 1, seq_len: 1024}}}
)";
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string markdown = paceline::testing::temp_path("report.md");
  ASSERT_EQ(run_cli("validate " + cases + " --report " + markdown).exit_code, 0);
  EXPECT_TRUE(read(markdown).starts_with("# paceline validation report"));
  EXPECT_TRUE(read(markdown.substr(0, markdown.size() - 3) + ".svg").starts_with("<svg"));
  const std::string page = paceline::testing::temp_path("report.html");
  ASSERT_EQ(run_cli("validate " + cases + " --report " + page).exit_code, 0);
  EXPECT_TRUE(read(page).starts_with("<!DOCTYPE html>"));
  EXPECT_NE(read(page).find("<svg"), std::string::npos);
  const CliOutcome other = run_cli("validate " + cases + " --report report.txt");
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_EQ(other.output, "paceline: <command line>: --report = 'report.txt': expected a path ending in .md (Markdown, "
                          "with the plot's SVG beside it) or .html (one page, the plot inline)\n");
}

TEST(Cli, WhatCannotBeWrittenWholeIsAnErrorNamingTheFile) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const CliOutcome trace = run_cli("run scenarios/gpt-1.7b-1xa100.yaml --trace /dev/full");
  EXPECT_EQ(trace.exit_code, 2);
  EXPECT_EQ(trace.output, "paceline: /dev/full: cannot write the trace: No space left on device\n");
  EXPECT_EQ(run_cli("run scenarios/gpt-1.7b-1xa100.yaml --json >/dev/full").exit_code, 2);
  // A folder where a Markdown report's plot would go: the plot is named, and no report is left.
  const std::string report = paceline::testing::temp_path("blocked.md");
  std::filesystem::create_directory(paceline::testing::temp_path("blocked.svg"));
  const CliOutcome blocked = run_cli("validate scenarios/validation/megatron-bridge.yaml --report " + report);
  EXPECT_EQ(blocked.exit_code, 2);
  EXPECT_NE(blocked.output.find(paceline::testing::temp_path("blocked.svg") + ": cannot write the report's plot"),
            std::string::npos)
      << blocked.output;
  EXPECT_FALSE(std::filesystem::exists(report));
}

TEST(Cli, MissingFileAndUnknownCommand) {
  EXPECT_EQ(run_cli("run /nonexistent.yaml").exit_code, 2);
  EXPECT_EQ(run_cli("frobnicate").exit_code, 2);
  EXPECT_EQ(run_cli("run scenarios/gpt-1.7b-1xa100.yaml --jsn").exit_code, 2);
}

TEST(Cli, EveryCommandHasHelp) {
  for (const char* command :
       {"--help", "run --help", "validate --help", "sweep --help", "search --help", "models --help",
        "gpus --help", "-h", "run -h", "sweep -h"}) {
    const CliOutcome o = run_cli(command);
    EXPECT_EQ(o.exit_code, 0) << command;
    EXPECT_NE(o.output.find("usage:"), std::string::npos) << command;
  }
}

TEST(Cli, CatalogsList) {
  EXPECT_NE(run_cli("models").output.find("llama3.1-405b"), std::string::npos);
  EXPECT_NE(run_cli("gpus").output.find("h200-sxm-141gb"), std::string::npos);
}

TEST(Cli, MaxEventsGuard) {
  const CliOutcome o = run_cli("run scenarios/gpt-1.7b-1xa100.yaml --max-events 10");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.output.find("limit of 10 events"), std::string::npos) << o.output;
}

TEST(Cli, RunSetsFieldsBeforeReadingTheScenario) {
  // --set micro_batch 2 and recompute full predicts what the file written so predicts.
  const std::string path = paceline::testing::temp_path("set.yaml");
  std::ofstream(path) << "model: gpt-1.7b\ncluster: {gpu: a100-sxm4-80gb}\n"
                         "training: {global_batch: 16, micro_batch: 2, seq_len: 2048, recompute: full}\n";
  const CliOutcome written = run_cli("run " + path + " --json");
  const CliOutcome set = run_cli(
      "run scenarios/gpt-1.7b-1xa100.yaml --set training.micro_batch=2 --set training.recompute=full --json");
  ASSERT_EQ(set.exit_code, 0) << set.output;
  const CliOutcome plain = run_cli("run scenarios/gpt-1.7b-1xa100.yaml --json");
  const auto time = [](const CliOutcome& o) {
    const size_t at = o.output.find("\"iteration_time_s\":");
    return o.output.substr(at, o.output.find(',', at) - at);
  };
  EXPECT_EQ(time(set), time(written));
  EXPECT_NE(time(set), time(plain));
  // A bad value is cited by its --set; a path set twice and several values are refused.
  const CliOutcome bad = run_cli("run scenarios/gpt-1.7b-1xa100.yaml --set training.micro_batch=0");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.output, "paceline: --set training.micro_batch=0: training.micro_batch = 0 must be at least 1\n");
  const CliOutcome twice =
      run_cli("run scenarios/gpt-1.7b-1xa100.yaml --set training.micro_batch=2 --set training.micro_batch=4");
  EXPECT_EQ(twice.output,
            "paceline: --set: training.micro_batch and training.micro_batch set one field twice; give each field "
            "once\n");
  EXPECT_EQ(run_cli("run scenarios/gpt-1.7b-1xa100.yaml --set training.micro_batch=2 --set 'training={global_batch: 8}'")
                .exit_code,
            2);
  EXPECT_EQ(run_cli("run scenarios/gpt-1.7b-1xa100.yaml --set training.micro_batch=1,2").exit_code, 2);
  // search takes them too.
  const CliOutcome search =
      run_cli("search scenarios/gpt-1.7b-1xa100.yaml --set training.global_batch=32 --set training.precision=fp7");
  EXPECT_EQ(search.exit_code, 2);
  EXPECT_EQ(search.output.rfind("paceline: --set training.precision=fp7: training.precision = 'fp7' is unknown", 0),
            0u)
      << search.output;
}

TEST(Cli, SweepPrintsOneRowPerConfiguration) {
  const CliOutcome o = run_cli(
      "sweep scenarios/gpt-1.7b-1xa100.yaml --set training.micro_batch=1,2 --set training.recompute=none,full --csv");
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_EQ(o.output.rfind("training.micro_batch,training.recompute,iteration_time_s,", 0), 0u) << o.output;
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 5) << o.output;
  EXPECT_NE(o.output.find("\n2,full,"), std::string::npos) << o.output;
}

TEST(Cli, SweepErrorsAreOneLineWithExitCodeTwo) {
  for (const char* command : {"sweep scenarios/gpt-1.7b-1xa100.yaml", "sweep scenarios/gpt-1.7b-1xa100.yaml --set tp",
                              "sweep scenarios/gpt-1.7b-1xa100.yaml --set parallelism.tp=1 --csv --json",
                              "sweep scenarios/gpt-1.7b-1xa100.yaml --set model=no-such-model"}) {
    const CliOutcome o = run_cli(command);
    EXPECT_EQ(o.exit_code, 2) << command << "\n" << o.output;
    EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), 1) << command << "\n" << o.output;
  }
}

}  // namespace
