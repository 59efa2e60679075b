#include "sim/validate/validation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "base/input_error.h"
#include "base/parallel_for.h"
#include "base/yaml_reader.h"
#include "sim/simulator/simulator.h"

namespace paceline {
namespace {

ValidationCase read_case(const YAML::Node& node, const std::string& file, size_t index) {
  YamlMap map(node, file, fmt::format("cases[{}]", index));
  ValidationCase c;
  c.id = map.required<std::string>("id");
  c.source = map.required<std::string>("source");
  c.id_location = map.location("id");
  if (map.has("confidence")) c.confidence = map.choice("confidence", {"high", "medium", "low"});
  YamlMap measured = map.map("measured");
  c.measured_iteration_time_s = measured.required<double>("iteration_time_s");
  if (c.measured_iteration_time_s <= 0.0) measured.fail("iteration_time_s", "must be positive (seconds)");
  c.measured_peak_memory_bytes = measured.optional<double>("peak_memory_bytes");
  if (c.measured_peak_memory_bytes && !(*c.measured_peak_memory_bytes >= 1.0)) {
    measured.fail("peak_memory_bytes", "must be positive (bytes)");
  }
  measured.finish();
  // Provenance fields are for readers; they are known but not interpreted.
  for (const char* key : {"published", "derivation", "flops_convention", "notes"}) map.node(key);
  YamlMap scenario = map.map("scenario");
  c.scenario_node = scenario.raw();  // shares the document; an overlay edits a clone
  c.file = file;
  c.scenario_path = scenario.path();
  try {
    c.scenario = std::make_shared<const Scenario>(read_scenario(scenario));
  } catch (const InputError& e) {
    c.unsupported_reason = e.what();
  }
  map.finish();
  return c;
}

OverlayRule read_rule(YamlMap& map) {
  OverlayRule rule;
  rule.location = map.location();
  if (!map.has("cases")) map.fail("cases", "is required");
  const YAML::Node cases = map.node("cases");
  if (cases.IsScalar()) {
    rule.case_patterns.push_back(cases.Scalar());
  } else if (cases.IsSequence() && cases.size() > 0) {
    for (const YAML::Node& pattern : cases) {
      if (!pattern.IsScalar()) map.fail("cases", "must be a case id pattern or a list of them");
      rule.case_patterns.push_back(pattern.Scalar());
    }
  } else {
    map.fail("cases", "must be a case id pattern or a non-empty list of them");
  }
  // The keys are field paths, checked when the scenarios are read again.
  const YamlMap settings = map.map("set");
  for (const auto& entry : settings.raw()) {
    YAML::Emitter value;
    value << YAML::Flow << entry.second;
    rule.settings.push_back(Override{entry.first.Scalar(), value.c_str()});
  }
  if (rule.settings.empty()) map.fail("set", "must set at least one field");
  if (map.required<std::string>("why").empty()) map.fail("why", "must cite the source that states the setting");
  map.finish();
  return rule;
}

bool matches(const std::string& pattern, const std::string& id) {
  return fnmatch(pattern.c_str(), id.c_str(), 0) == 0;
}

bool matches(const std::vector<std::string>& patterns, const std::string& id) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& pattern) { return matches(pattern, id); });
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// Sources of one publication share their start and differ at the end (the table, the section),
// so a long one keeps both ends.
std::string short_source(const std::string& source) {
  constexpr size_t kHead = 30, kTail = 42;
  if (source.size() <= kHead + kTail + 3) return source;
  return source.substr(0, kHead) + "..." + source.substr(source.size() - kTail);
}

int cases_overlaid(const ValidationReport& report) {
  return static_cast<int>(std::count_if(report.cases.begin(), report.cases.end(), [](const CaseOutcome& o) {
    return !o.validation_case->overlay.empty();
  }));
}

std::string out_of_memory_line(const ValidationReport& report) {
  const bool one = report.out_of_memory == 1;
  return fmt::format(
      "{} measured {} predicted not to fit in GPU memory: the memory model, or a memory saving the case "
      "does not state (recomputation, sharding), is off for {}",
      report.out_of_memory, one ? "run is" : "runs are", one ? "it" : "them");
}

// The compute, exposed-communication and bubble cells of a case's row: shares of the step.
std::vector<std::string> time_shares(const Breakdown& b) {
  const double total = b.total() / Seconds(1);
  const auto share = [&](Seconds part) { return fmt::format("{:.0f}%", 100.0 * (part / Seconds(1)) / total); };
  ActivityTag largest = ActivityTag::kDataComm;
  for (int tag = 0; tag < kNumActivityTags; ++tag) {
    if (b.exposed_by_tag[tag] > b.exposed_by_tag[static_cast<int>(largest)]) largest = static_cast<ActivityTag>(tag);
  }
  std::string communication = share(b.exposed_communication);
  if (b.exposed_communication / Seconds(1) >= 0.005 * total) {
    const std::string_view kind = to_string(largest);  // "dp_communication" and the like
    communication += fmt::format(" {}", kind.substr(0, kind.find('_')));
  }
  return {share(b.compute + b.recompute + b.optimizer + b.overlap_slowdown), communication, share(b.pipeline_bubble)};
}

// Appends `c`, escaped for XML and HTML: ampersands, angle brackets and quotes.
void append_escaped(std::string& out, char c) {
  switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    default: out += c;
  }
}

std::string xml_escaped(std::string_view text) {
  std::string out;
  for (const char c : text) append_escaped(out, c);
  return out;
}

// Text with Markdown's inline **strong** and `code` spans, as HTML; everything else escaped.
std::string html_inline(std::string_view text) {
  std::string out;
  bool strong = false, code = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!code && text.substr(i, 2) == "**") {
      out += strong ? "</strong>" : "<strong>";
      strong = !strong;
      ++i;
    } else if (text[i] == '`') {
      out += code ? "</code>" : "<code>";
      code = !code;
    } else {
      append_escaped(out, text[i]);
    }
  }
  return out;
}

// One table of the report; cells carry Markdown's inline **strong** and `code`.
struct ReportTable {
  std::string heading;
  std::string intro;
  std::vector<std::string> columns;
  std::vector<bool> right_aligned;
  std::vector<std::vector<std::string>> rows;
};

// What the report says, once, for the Markdown and the HTML renderings.
struct ReportContent {
  std::vector<std::string> summary;  // paragraphs above the plot
  std::vector<ReportTable> tables;
};

ReportContent report_content(const ValidationReport& report) {
  ReportContent content;
  content.summary.push_back(fmt::format("Mean absolute percentage error: **{:.1f}%** over {} cases ({} unsupported).",
                                        100.0 * report.mape, report.cases.size() - report.unsupported,
                                        report.unsupported));
  if (report.memory_mape) {
    content.summary.push_back(fmt::format("Peak-memory MAPE: **{:.1f}%**.", 100.0 * *report.memory_mape));
  }
  if (report.out_of_memory > 0) content.summary.push_back(out_of_memory_line(report));
  if (const int overlaid = cases_overlaid(report); overlaid > 0) {
    content.summary.push_back(fmt::format("{} cases ran with fields an overlay set (listed beside them).", overlaid));
  }
  content.summary.push_back(
      fmt::format("Mean signed error: {:+.1f}% (below zero: predicted too fast).", 100.0 * report.bias));
  const auto groups = [&](const char* title, const std::vector<ValidationReport::GroupError>& errors) {
    ReportTable table{fmt::format("By {}", title), "", {"MAPE", "bias", "cases", title}, {true, true, true, false}, {}};
    for (const ValidationReport::GroupError& group : errors) {
      table.rows.push_back({fmt::format("{:.1f}%", 100.0 * group.mape), fmt::format("{:+.1f}%", 100.0 * group.bias),
                            fmt::format("{}", group.cases), group.name});
    }
    content.tables.push_back(std::move(table));
  };
  groups("source", report.by_source);
  groups("GPU", report.by_gpu);
  ReportTable cases{
      "Cases",
      "The predicted step's time: on compute (with recomputation, the optimizer and compute slowed "
      "by communication beside it), in exposed communication (its largest kind named) and in "
      "pipeline bubbles; and the mean time of the critical stage's kernels, the time a host has to "
      "launch each.",
      {"case", "measured s", "predicted s", "error", "compute", "exposed communication", "bubble",
       "mean kernel µs", "peak memory GiB", "reserved GiB", "measured GiB", "fits"},
      {false, true, true, true, true, true, true, true, true, true, true, false},
      {}};
  const auto gib = [](double bytes) { return fmt::format("{:.1f}", bytes / (1024.0 * 1024.0 * 1024.0)); };
  for (const CaseOutcome& o : report.cases) {
    const ValidationCase& c = *o.validation_case;
    if (!o.error) {
      cases.rows.push_back({c.id, fmt::format("{:.4f}", c.measured_iteration_time_s),
                            "unsupported: " + o.reason, "", "", "", "", "", "", "", "", ""});
      continue;
    }
    std::string name = c.id;
    for (const Override& setting : c.overlay) name += fmt::format(" `{}: {}`", setting.path, setting.value);
    std::vector<std::string> row = {name, fmt::format("{:.4f}", c.measured_iteration_time_s),
                                    fmt::format("{:.4f}", *o.predicted_s), fmt::format("{:+.1f}%", 100.0 * *o.error)};
    for (const std::string& share : time_shares(*o.breakdown)) row.push_back(share);
    row.push_back(o.mean_kernel_s ? fmt::format("{:.0f}", *o.mean_kernel_s * 1e6) : "");
    row.push_back(gib(static_cast<double>(*o.peak_memory_bytes)));
    row.push_back(gib(static_cast<double>(*o.peak_reserved_bytes)));
    row.push_back(c.measured_peak_memory_bytes ? gib(*c.measured_peak_memory_bytes) : "");
    row.push_back(o.fits ? "yes" : "**no**");
    cases.rows.push_back(std::move(row));
  }
  content.tables.push_back(std::move(cases));
  return content;
}

}  // namespace

std::vector<ValidationCase> load_validation_file(const std::string& path) {
  const YamlDocument document = load_yaml_file(path);
  if (!document.root.IsSequence()) {
    throw InputError(location_of(document.root, path), "a validation file is a list of cases");
  }
  // An empty list would print a MAPE of 0% over nothing.
  if (document.root.size() == 0) {
    throw InputError(location_of(document.root, path),
                     "the validation file lists no cases; expected one or more");
  }
  std::vector<ValidationCase> cases;
  for (size_t i = 0; i < document.root.size(); ++i) cases.push_back(read_case(document.root[i], path, i));
  check_unique_ids(cases);
  return cases;
}

void check_unique_ids(const std::vector<ValidationCase>& cases) {
  std::map<std::string, const ValidationCase*> seen;
  for (const ValidationCase& c : cases) {
    const auto [first, inserted] = seen.emplace(c.id, &c);
    if (!inserted) {
      throw InputError(c.id_location, fmt::format("id = '{}' is taken by the case at {}; ids are unique", c.id,
                                                  first->second->id_location.to_string()));
    }
  }
}

std::vector<OverlayRule> load_overlay_file(const std::string& path) {
  const YamlDocument document = load_yaml_file(path);
  if (!document.root.IsSequence()) {
    throw InputError(location_of(document.root, path), "an overlay is a list of {cases, set, why} rules");
  }
  std::vector<OverlayRule> rules;
  for (size_t i = 0; i < document.root.size(); ++i) {
    YamlMap map(document.root[i], path, fmt::format("rules[{}]", i));
    rules.push_back(read_rule(map));
  }
  return rules;
}

std::vector<std::string> apply_overlay(std::vector<ValidationCase>& cases, const std::vector<OverlayRule>& rules) {
  std::vector<std::string> unmatched;
  std::vector<const OverlayRule*> first_rule(cases.size(), nullptr);
  for (const OverlayRule& rule : rules) {
    bool matched = false;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (!matches(rule.case_patterns, cases[i].id)) continue;
      matched = true;
      if (first_rule[i] == nullptr) first_rule[i] = &rule;
      cases[i].overlay.insert(cases[i].overlay.end(), rule.settings.begin(), rule.settings.end());
    }
    if (!matched) {
      unmatched.push_back(fmt::format("{}: cases {} match no case id of the validation files; the rule sets nothing",
                                      rule.location.to_string(), fmt::join(rule.case_patterns, ", ")));
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    ValidationCase& c = cases[i];
    if (c.overlay.empty()) continue;
    YAML::Node node = YAML::Clone(c.scenario_node);
    try {
      for (const Override& setting : application_order(c.overlay))
        apply_override(node, c.file, setting);
      YamlMap scenario(node, c.file, c.scenario_path);
      c.scenario = std::make_shared<const Scenario>(read_scenario(scenario));
      c.unsupported_reason.clear();
    } catch (const InputError& e) {
      // The overlaid copy has no lines to cite: the case id and the field path name the place.
      throw InputError(first_rule[i]->location, fmt::format("case {} with the overlay: {}", c.id, e.detail()));
    }
  }
  return unmatched;
}

std::vector<ValidationCase> select_cases(std::vector<ValidationCase> cases,
                                         const std::vector<std::string>& patterns,
                                         const SourceLocation& given_at) {
  if (patterns.empty()) throw InputError(given_at, "no case id glob given");
  for (const std::string& pattern : patterns) {
    if (std::none_of(cases.begin(), cases.end(),
                     [&](const ValidationCase& c) { return matches(pattern, c.id); })) {
      throw InputError(
          given_at,
          fmt::format("'{}' matches none of the {} case ids of the validation files (globs: "
                      "* any run of characters, ? one)",
                      echoed(pattern), cases.size()));
    }
  }
  std::erase_if(cases, [&](const ValidationCase& c) { return !matches(patterns, c.id); });
  return cases;
}

namespace {

}  // namespace

std::string scenario_file_name(const ValidationCase& c) {
  if (c.id.empty() || c.id == "." || c.id == ".." || c.id.find('/') != std::string::npos ||
      std::ranges::any_of(c.id, is_control)) {
    throw InputError(
        c.id_location,
        fmt::format("case id '{}' cannot name its scenario's file: expected no '/', no "
                    "control characters, not empty, '.' or '..'",
                    echoed(c.id)));
  }
  return c.id + ".yaml";
}

std::string scenario_file_text(const ValidationCase& c) {
  if (!c.scenario) {
    throw InputError(c.id_location, fmt::format("case {} has no scenario paceline can run: {}",
                                                c.id, c.unsupported_reason));
  }
  std::string text = fmt::format("# Validation case {} ({}), measured {} s per iteration.\n",
                                 printable(c.id), printable(c.file), c.measured_iteration_time_s);
  text += fmt::format("# Source: {}\n", printable(c.source));
  for (const Override& setting : c.overlay) {
    text += fmt::format("# Overlay: {} = {}\n", printable(setting.path), printable(setting.value));
  }
  text += "# The scenario resolved, every default filled in (JSON, which YAML reads).\n";
  return text + to_json(*c.scenario).dump() + "\n";
}

ValidationReport validate(const std::vector<ValidationCase>& cases, int threads) {
  ValidationReport report;
  report.cases.resize(cases.size());
  auto run_case = [&](size_t i) {
    const ValidationCase& c = cases[i];
    CaseOutcome& outcome = report.cases[i];
    outcome.validation_case = &c;
    if (!c.scenario) {
      outcome.reason = c.unsupported_reason;
      return;
    }
    try {
      const Prediction prediction = simulate(c.scenario);
      const double predicted = prediction.result.iteration_time / Seconds(1);
      outcome.predicted_s = predicted;
      outcome.error = (predicted - c.measured_iteration_time_s) / c.measured_iteration_time_s;
      outcome.peak_memory_bytes = prediction.result.peak_memory_bytes;
      outcome.peak_reserved_bytes = prediction.result.peak_reserved_bytes;
      outcome.fits = prediction.result.fits;
      outcome.breakdown = prediction.result.breakdown;
      if (prediction.result.kernels.launches() > 0)
        outcome.mean_kernel_s = prediction.result.kernels.mean_kernel_time() / Seconds(1);
      if (c.measured_peak_memory_bytes) {
        outcome.memory_error = (static_cast<double>(prediction.result.peak_reserved_bytes) -
                                *c.measured_peak_memory_bytes) /
                               *c.measured_peak_memory_bytes;
      }
    } catch (const std::exception& e) {
      outcome.reason = e.what();
    }
  };
  // Cases are independent; each writes only its own outcome.
  parallel_for(cases.size(), resolve_threads(threads), run_case);

  ValidationReport::GroupError all, memory;
  // Sums until every case is in.
  const auto add = [](ValidationReport::GroupError& group, double error) {
    group.mape += std::abs(error);
    group.bias += error;
    ++group.cases;
  };
  const auto add_to = [&](std::vector<ValidationReport::GroupError>& groups, const std::string& name, double error) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.name == name; });
    if (it == groups.end()) it = groups.insert(groups.end(), {name});
    add(*it, error);
  };
  for (const CaseOutcome& outcome : report.cases) {
    if (!outcome.error) {
      ++report.unsupported;
      continue;
    }
    if (!outcome.fits) ++report.out_of_memory;
    const ValidationCase& c = *outcome.validation_case;
    add(all, *outcome.error);
    add_to(report.by_source, c.source, *outcome.error);
    add_to(report.by_gpu, c.scenario->cluster.gpu.name, *outcome.error);
    if (outcome.memory_error) add(memory, *outcome.memory_error);
  }
  const auto average = [](ValidationReport::GroupError& group) {
    if (group.cases == 0) return;
    group.mape /= group.cases;
    group.bias /= group.cases;
  };
  average(all);
  report.mape = all.mape;
  report.bias = all.bias;
  for (ValidationReport::GroupError& group : report.by_source) average(group);
  for (ValidationReport::GroupError& group : report.by_gpu) average(group);
  average(memory);
  if (memory.cases > 0) report.memory_mape = memory.mape;
  return report;
}

Json to_json(const ValidationReport& report) {
  Json cases = Json::array();
  for (const CaseOutcome& outcome : report.cases) {
    const ValidationCase& c = *outcome.validation_case;
    Json json = Json::object();
    json.set("id", c.id).set("source", c.source).set("measured_s", c.measured_iteration_time_s);
    json.set("predicted_s", outcome.predicted_s ? Json(*outcome.predicted_s) : Json());
    json.set("error", outcome.error ? Json(*outcome.error) : Json());
    json.set("peak_memory_bytes", outcome.peak_memory_bytes ? Json(*outcome.peak_memory_bytes) : Json());
    json.set("peak_reserved_bytes",
             outcome.peak_reserved_bytes ? Json(*outcome.peak_reserved_bytes) : Json());
    json.set("measured_peak_memory_bytes",
             c.measured_peak_memory_bytes ? Json(*c.measured_peak_memory_bytes) : Json());
    if (outcome.predicted_s) json.set("fits", outcome.fits);
    if (outcome.breakdown) json.set("breakdown_s", to_json(*outcome.breakdown));
    if (outcome.mean_kernel_s) json.set("mean_kernel_s", *outcome.mean_kernel_s);
    if (!c.overlay.empty()) {
      Json overlay = Json::object();
      for (const Override& setting : c.overlay) overlay.set(setting.path, setting.value);
      json.set("overlay", std::move(overlay));
    }
    if (!outcome.reason.empty()) json.set("reason", outcome.reason);
    cases.push(std::move(json));
  }
  const auto groups = [](const std::vector<ValidationReport::GroupError>& errors) {
    Json json = Json::object();
    for (const ValidationReport::GroupError& group : errors) {
      Json error = Json::object();
      error.set("mape", group.mape).set("bias", group.bias).set("cases", group.cases);
      json.set(group.name, std::move(error));
    }
    return json;
  };
  Json json = Json::object();
  json.set("cases", std::move(cases)).set("mape", report.mape).set("bias", report.bias);
  json.set("by_source", groups(report.by_source)).set("by_gpu", groups(report.by_gpu));
  json.set("memory_mape", report.memory_mape ? Json(*report.memory_mape) : Json());
  json.set("unsupported", report.unsupported).set("out_of_memory", report.out_of_memory);
  return json;
}

std::string to_text(const ValidationReport& report) {
  std::string out = fmt::format("{:<40} {:>12} {:>12} {:>8} {:>10}\n", "case", "measured s", "predicted s", "error",
                                "memory err");
  for (const CaseOutcome& outcome : report.cases) {
    const ValidationCase& c = *outcome.validation_case;
    if (!outcome.error) {
      out += fmt::format("{:<40} {:>12.4f}  unsupported: {}\n", printable(c.id),
                         c.measured_iteration_time_s, outcome.reason);
      continue;
    }
    out += fmt::format(
        "{:<40} {:>12.4f} {:>12.4f} {:>+7.1f}% {:>10}{}\n", printable(c.id),
        c.measured_iteration_time_s, *outcome.predicted_s, 100.0 * *outcome.error,
        outcome.memory_error ? fmt::format("{:+.1f}%", 100.0 * *outcome.memory_error) : "",
        outcome.fits ? "" : "  does not fit");
  }
  out += fmt::format("\nMAPE {:.1f}% over {} cases ({} unsupported)\n", 100.0 * report.mape,
                     report.cases.size() - report.unsupported, report.unsupported);
  if (report.memory_mape) out += fmt::format("peak-memory MAPE {:.1f}%\n", 100.0 * *report.memory_mape);
  if (report.out_of_memory > 0) out += out_of_memory_line(report) + "\n";
  if (const int overlaid = cases_overlaid(report); overlaid > 0) {
    out += fmt::format("{} cases ran with fields an overlay set (--json lists them)\n", overlaid);
  }
  out += fmt::format("mean signed error {:+.1f}% (below zero: predicted too fast)\n", 100.0 * report.bias);
  const auto lines = [&](const std::vector<ValidationReport::GroupError>& groups, bool sources) {
    out += fmt::format("  {:>7}  {:>7}             by {}\n", "MAPE", "bias", sources ? "source" : "GPU");
    for (const ValidationReport::GroupError& group : groups) {
      out += fmt::format("  {:6.1f}%  {:+6.1f}%  {:3} cases  {}\n", 100.0 * group.mape,
                         100.0 * group.bias, group.cases,
                         printable(sources ? short_source(group.name) : group.name));
    }
  };
  lines(report.by_source, true);
  lines(report.by_gpu, false);
  return out;
}

std::string predicted_vs_measured_svg(const ValidationReport& report) {
  // Log-log axes from the smallest to the largest time, the y = x line and a ±10% band.
  double low = 1e30, high = 0.0;
  for (const CaseOutcome& o : report.cases) {
    if (!o.predicted_s) continue;
    low = std::min({low, *o.predicted_s, o.validation_case->measured_iteration_time_s});
    high = std::max({high, *o.predicted_s, o.validation_case->measured_iteration_time_s});
  }
  if (high <= 0.0) return "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n";
  low /= 1.5;
  high *= 1.5;
  const double size = 560.0, margin = 60.0;
  auto position = [&](double t) { return margin + (std::log(t / low) / std::log(high / low)) * (size - 2 * margin); };
  std::string svg = fmt::format(R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{0}" font-family="sans-serif" font-size="12">)svg", size);
  svg += fmt::format(R"svg(<rect width="{0}" height="{0}" fill="white"/>)svg", size);
  auto line = [&](double from, double to, double factor, const char* style) {
    svg += fmt::format(R"svg(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" {}/>)svg", position(from),
                       size - position(from * factor), position(to), size - position(to * factor), style);
  };
  line(low, high, 1.0, R"svg(stroke="black")svg");
  line(low, high / 1.1, 1.1, R"svg(stroke="gray" stroke-dasharray="4 3")svg");
  line(low * 1.1, high, 1.0 / 1.1, R"svg(stroke="gray" stroke-dasharray="4 3")svg");
  for (const CaseOutcome& o : report.cases) {
    if (!o.predicted_s) continue;
    svg += fmt::format(R"svg(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="#1f77b4"><title>{}: {:+.1f}%</title></circle>)svg",
                       position(o.validation_case->measured_iteration_time_s), size - position(*o.predicted_s),
                       xml_escaped(o.validation_case->id), 100.0 * *o.error);
  }
  svg += fmt::format(R"svg(<text x="{}" y="{}" text-anchor="middle">measured iteration time (s, log)</text>)svg", size / 2,
                     size - 20);
  svg += fmt::format(R"svg(<text x="20" y="{0}" transform="rotate(-90 20 {0})" text-anchor="middle">predicted (s, log)</text>)svg",
                     size / 2);
  svg += fmt::format(R"svg(<text x="{}" y="30" text-anchor="middle">MAPE {:.1f}% — dashed: ±10%</text>)svg", size / 2,
                     100.0 * report.mape);
  return svg + "</svg>\n";
}

std::string to_markdown(const ValidationReport& report, const std::string& svg_name) {
  const ReportContent content = report_content(report);
  std::string out = "# paceline validation report\n\n";
  for (const std::string& paragraph : content.summary) out += paragraph + "\n\n";
  out += fmt::format("![predicted against measured]({})\n\n", svg_name);
  for (const ReportTable& table : content.tables) {
    out += fmt::format("## {}\n\n", table.heading);
    if (!table.intro.empty()) out += table.intro + "\n\n";
    out += fmt::format("| {} |\n|", fmt::join(table.columns, " | "));
    for (const bool right : table.right_aligned) out += right ? "---:|" : "---|";
    out += "\n";
    for (std::vector<std::string> row : table.rows) {
      // A bar in a cell (a case id, an unsupported case's reason) would end the cell.
      for (std::string& cell : row) {
        for (size_t bar = cell.find('|'); bar != std::string::npos; bar = cell.find('|', bar + 2)) {
          cell.insert(bar, "\\");
        }
      }
      out += fmt::format("| {} |\n", fmt::join(row, " | "));
    }
    out += "\n";
  }
  return out;
}

std::string to_html(const ValidationReport& report) {
  const ReportContent content = report_content(report);
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>paceline validation report</title>\n<style>\n"
      "body { font-family: sans-serif; margin: 2em; }\n"
      "table { border-collapse: collapse; margin-bottom: 2em; }\n"
      "th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; vertical-align: top; }\n"
      "td.number { text-align: right; white-space: nowrap; }\n"
      "code { font-size: 0.85em; background: #f3f3f3; }\n"
      "</style>\n</head>\n<body>\n<h1>paceline validation report</h1>\n";
  for (const std::string& paragraph : content.summary) out += "<p>" + html_inline(paragraph) + "</p>\n";
  out += "<figure>\n" + predicted_vs_measured_svg(report) + "</figure>\n";
  for (const ReportTable& table : content.tables) {
    out += "<h2>" + xml_escaped(table.heading) + "</h2>\n";
    if (!table.intro.empty()) out += "<p>" + html_inline(table.intro) + "</p>\n";
    out += "<table>\n<tr>";
    for (const std::string& column : table.columns) out += "<th>" + xml_escaped(column) + "</th>";
    out += "</tr>\n";
    for (const std::vector<std::string>& row : table.rows) {
      out += "<tr>";
      for (size_t i = 0; i < row.size(); ++i) {
        out += table.right_aligned[i] ? "<td class=\"number\">" : "<td>";
        out += html_inline(row[i]) + "</td>";
      }
      out += "</tr>\n";
    }
    out += "</table>\n";
  }
  return out + "</body>\n</html>\n";
}

}  // namespace paceline
