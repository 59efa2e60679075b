// ScenarioSource: a scenario's YAML text and the name its errors cite, kept as text so that
// many variants of one scenario (a sweep's configurations, a search's layouts) can be parsed
// and validated independently, on threads, each with its own overrides.
//
// An Override sets one field by its dotted path before the scenario is read:
//   {"parallelism.tp", "4"}, {"training.recompute", "full"}, {"model", "{layers: 2, ...}"}
// The value is YAML (so JSON too). Mappings on the path are created when absent. An overridden
// value has no line in the file, so an error about it, or about a field inside it, cites the
// override instead:
//   --set parallelism.tp=16: parallelism.tp = 16 does not divide model.heads = 96
//   gpt3.yaml with parallelism.tp=16: parallelism.tp = 16 does not divide model.heads = 96
#ifndef PACELINE_SIM_SEARCH_SCENARIO_SOURCE_H_
#define PACELINE_SIM_SEARCH_SCENARIO_SOURCE_H_

#include <yaml-cpp/yaml.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/yaml_reader.h"
#include "sim/scenario/scenario.h"

namespace paceline {

struct ScenarioSource {
  std::string text;  // YAML (or JSON) of one scenario mapping
  std::string file;  // the name errors cite: a path, or e.g. "<dict>"
};

// Reads a scenario file's text. Throws InputError naming the file when it cannot be read.
ScenarioSource read_scenario_source(const std::string& path);

struct Override {
  std::string path;   // dotted field path, e.g. "parallelism.tp"
  std::string value;  // YAML text of the value, e.g. "4", "full", "{bandwidth: 300 GB/s}"
  // Where it was given, e.g. "--set"; errors cite "ORIGIN PATH=VALUE", or "FILE with
  // PATH=VALUE" when it is empty.
  std::string origin;
};

// The place errors about `override`'s value cite (a long value cut short).
SourceLocation override_location(const std::string& file, const Override& override);

// Whether dotted field path `path` is `field` or a field inside it ("parallelism.tp" within
// "parallelism"; not "parallelism.tp_comm_overlap" within "parallelism.tp").
bool path_within(std::string_view path, std::string_view field);
// Whether one path is within the other.
bool paths_overlap(std::string_view a, std::string_view b);

// Sets `override.path` in the document `root` (a mapping) to the parsed value, and records in
// `origins`, when given, where the value and the mappings it created came from. Throws
// InputError when the path is not keys of letters, digits, '_' and '-' joined by dots, when a
// key on the path holds something other than a mapping, or when the value is not valid YAML. A
// model named by catalog name or file (`model: deepseek-v3`) is first written inline, so that
// `model.mtp_layers` and the like override one of its fields.
void apply_override(YAML::Node& root, const std::string& file, const Override& override,
                    FieldOrigins* origins = nullptr);

// Overrides in the order they apply: those naming a catalog entry whose fields others may set
// (`model`, `cluster.system`, `cluster.gpu`) first, then the rest, each in the order given. A
// field of the model, the GPU or the GPU a system names thus refines the entry named, whatever
// order the two were given in (`cluster.gpu.memory_capacity` sets the memory of the GPU of a
// `cluster.system` given after it); a mapping given whole still replaces what earlier overrides
// set inside it.
std::vector<Override> application_order(std::vector<Override> overrides);

// A scenario's document with overrides applied in application_order, and the origins of what
// they put in.
struct OverriddenDocument {
  YamlDocument document;
  std::shared_ptr<const FieldOrigins> origins;
};
OverriddenDocument apply_overrides(const ScenarioSource& source, const std::vector<Override>& overrides);

// Parses the source, applies the overrides in application_order, then reads and validates the
// scenario (the same rules and messages as `paceline run`).
Scenario load_scenario(const ScenarioSource& source, const std::vector<Override>& overrides = {});

}  // namespace paceline

#endif  // PACELINE_SIM_SEARCH_SCENARIO_SOURCE_H_
