// ParsedFileCache: what a YAML file parses to, kept while the file's bytes stay the same.
//
// A search, a sweep or a validation reads a scenario again for every configuration, and every
// read resolves the same catalog and profile files: a measured profile is over half a megabyte
// of YAML, which takes longer to parse than most simulations take to run. The cache keeps each
// file's value beside its text. A later read of the same path whose text is byte for byte the
// same gets the kept value; any other text is parsed afresh, and a file that fails to parse is
// not kept. So a kept value is never stale, and what a read returns never depends on what was
// read before it: the cache is a memo of a pure function of the file's bytes, the one kind of
// state shared across scenarios (and threads) that cannot change a result.
//
//   static ParsedFileCache<GpuSpec> gpus(read_gpu_document);
//   const GpuSpec gpu = *gpus.get(path);
#ifndef PACELINE_BASE_PARSED_FILE_CACHE_H_
#define PACELINE_BASE_PARSED_FILE_CACHE_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "base/yaml_reader.h"

namespace paceline {

template <class T>
class ParsedFileCache {
 public:
  // `parse` reads a document into a value, throwing InputError as a loader does.
  explicit ParsedFileCache(std::function<T(const YamlDocument&)> parse)
      : parse_(std::move(parse)) {}

  // The value of the file at `path`: kept, or parsed now (outside the lock, so threads reading
  // different files do not wait for one another). Throws what reading or parsing throws.
  std::shared_ptr<const T> get(const std::string& path) {
    std::string text = read_text_file(path);
    {
      std::lock_guard lock(mutex_);
      if (const auto it = kept_.find(path); it != kept_.end() && it->second.text == text)
        return it->second.value;
    }
    auto value = std::make_shared<const T>(parse_(load_yaml_text(text, path)));
    std::lock_guard lock(mutex_);
    kept_.insert_or_assign(path, Kept{std::move(text), value});
    return value;
  }

 private:
  struct Kept {
    std::string text;
    std::shared_ptr<const T> value;
  };
  const std::function<T(const YamlDocument&)> parse_;
  std::mutex mutex_;
  std::map<std::string, Kept> kept_;  // by path as given
};

}  // namespace paceline

#endif  // PACELINE_BASE_PARSED_FILE_CACHE_H_
