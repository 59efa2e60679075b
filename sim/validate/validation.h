// Validation against published measurements: cases are ordinary scenarios with the iteration
// time (and, where published, the peak memory) their source measured.
#ifndef PACELINE_SIM_VALIDATE_VALIDATION_H_
#define PACELINE_SIM_VALIDATE_VALIDATION_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "base/input_error.h"
#include "base/json.h"
#include "sim/report/result.h"
#include "sim/scenario/scenario.h"
#include "sim/search/scenario_source.h"

namespace paceline {

struct ValidationCase {
  std::string id;
  std::string source;
  std::string confidence;
  std::shared_ptr<const Scenario> scenario;  // null when unsupported
  std::string unsupported_reason;
  double measured_iteration_time_s = 0.0;
  std::optional<double> measured_peak_memory_bytes;
  // The scenario as written, so that an overlay can set fields and read it again.
  YAML::Node scenario_node;
  std::string file;
  SourceLocation id_location;
  std::string scenario_path;  // e.g. "cases[3].scenario", for errors
  std::vector<Override> overlay;  // fields an overlay set, in the order applied
};

// Reads a validation file: a YAML list of {id, source, confidence, scenario, measured, ...}.
// A case whose scenario paceline cannot express is kept, marked unsupported with the reason.
std::vector<ValidationCase> load_validation_file(const std::string& path);

// Refuses two cases of one id, within a file or across the files validated together: the
// report and the overlay's rules name cases by id.
void check_unique_ids(const std::vector<ValidationCase>& cases);

// An overlay states what a case's scenario could not: the software its run used, as the
// source says it (a YAML list of {cases, set, why}). `cases` are globs over case ids (* any
// run of characters, ? one); `set` maps dotted scenario fields to values; `why` cites the
// source. Rules apply in file order, a later one winning on the same field.
struct OverlayRule {
  SourceLocation location;
  std::vector<std::string> case_patterns;
  std::vector<Override> settings;  // `why` is required but only read by people
};
std::vector<OverlayRule> load_overlay_file(const std::string& path);

// Sets each rule's fields on the cases it matches and reads their scenarios again. Returns a
// warning, "file:line:col: ...", for each rule that matches no case: an overlay written for the
// runs of some sources applies to any file of their cases, and sets nothing where a rule's runs
// are not among them. Throws InputError at the rule when it makes a case's scenario invalid.
std::vector<std::string> apply_overlay(std::vector<ValidationCase>& cases, const std::vector<OverlayRule>& rules);

// The cases whose ids match one of `patterns` (globs, as an overlay's `cases`), in their order.
// Throws InputError at `given_at` (where the patterns were given) when there are none, or for a
// pattern that matches no case.
std::vector<ValidationCase> select_cases(std::vector<ValidationCase> cases,
                                         const std::vector<std::string>& patterns,
                                         const SourceLocation& given_at);

// A case's scenario as a file `paceline run` reads (to study the case: --trace, --set): a comment
// naming the case, its measurement, source and the fields its overlay set, then the resolved
// scenario, which reads back as the same one from anywhere. Throws InputError at the case for
// one whose scenario paceline cannot run (unsupported).
std::string scenario_file_text(const ValidationCase& c);
// The name of that file: the case id and ".yaml". Throws InputError at the id for one that
// cannot name a file in a folder (empty, "." or "..", with a '/' or a control character).
std::string scenario_file_name(const ValidationCase& c);

struct CaseOutcome {
  const ValidationCase* validation_case = nullptr;
  std::optional<double> predicted_s;   // null: unsupported
  std::optional<double> error;         // (predicted − measured) / measured
  std::optional<int64_t> peak_memory_bytes;
  std::optional<int64_t> peak_reserved_bytes;  // Result::peak_reserved_bytes
  // The reserved peak's error against the measured peak, where published: the frameworks of the
  // cases report their caching allocator's peak (torchtitan logs max_memory_reserved).
  std::optional<double> memory_error;
  std::optional<Breakdown> breakdown;   // where the predicted step's time goes
  // The critical stage's kernels' mean time (Result::kernels): the time a host has to launch each.
  std::optional<double> mean_kernel_s;
  // False when the predicted peak exceeds the GPU's memory: the run was measured, so it fit,
  // and the memory model or a memory saving the case does not state (recomputation, sharding)
  // is off.
  bool fits = true;
  std::string reason;
};

struct ValidationReport {
  std::vector<CaseOutcome> cases;
  double mape = 0.0;  // mean |error| over supported cases
  double bias = 0.0;  // mean signed error: below zero, predictions are too fast on average
  // The supported cases that share a source or a GPU.
  struct GroupError {
    std::string name;
    double mape = 0.0;
    double bias = 0.0;
    int cases = 0;
  };
  std::vector<GroupError> by_source;  // in order of first appearance
  std::vector<GroupError> by_gpu;     // the same, by the GPU of the case's cluster
  std::optional<double> memory_mape;
  int unsupported = 0;
  int out_of_memory = 0;  // supported cases predicted not to fit
};

// Runs every case (on `threads` threads, 0: one per hardware thread; the outcome does not
// depend on it).
ValidationReport validate(const std::vector<ValidationCase>& cases, int threads = 1);

Json to_json(const ValidationReport& report);
std::string to_text(const ValidationReport& report);
// A Markdown report: the table of every case and a predicted-vs-measured plot (SVG beside it).
std::string to_markdown(const ValidationReport& report, const std::string& svg_name);
// The same report as one HTML page, the plot inline.
std::string to_html(const ValidationReport& report);
std::string predicted_vs_measured_svg(const ValidationReport& report);

}  // namespace paceline

#endif  // PACELINE_SIM_VALIDATE_VALIDATION_H_
