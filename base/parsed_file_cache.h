// ParsedFileCache: what a YAML file parses to, kept while the file's bytes stay the same.
//
// A search, a sweep or a validation reads a scenario again for every configuration, and every
// read resolves the same catalog and profile files: a measured profile is over half a megabyte
// of YAML, which takes longer to parse than most simulations take to run. The cache keeps each
// file's value beside its text. A later read whose path is written the same, names the same
// file from the same working directory (a parse may resolve relative paths against it) and
// finds the text byte for byte the same gets the kept value; anything else is parsed afresh, and
// a file that fails to parse is not kept. So a kept value is never stale, and what a read
// returns never depends on what was read before it: the cache is a memo of a pure function of
// the path and the file's bytes, the one kind of state shared across scenarios (and threads)
// that cannot change a result.
//
// Loaders hold one each for the life of the process, never destroyed, so that a thread still
// loading while the process exits finds it whole:
//
//   static auto* const links = new ParsedFileCache<LinkSpec>(read_link_document);
//   const LinkSpec link = *links->get(path);
#ifndef PACELINE_BASE_PARSED_FILE_CACHE_H_
#define PACELINE_BASE_PARSED_FILE_CACHE_H_

#include <filesystem>
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
  // different files do not wait for one another; threads that miss together each parse, and
  // the last keeps its equal value). Throws what reading or parsing throws.
  std::shared_ptr<const T> get(const std::string& path) {
    std::string text = read_text_file(path);
    std::error_code error;
    const std::filesystem::path absolute = std::filesystem::absolute(path, error);
    // Without a working directory to tell where a relative path leads, nothing is kept.
    if (error) return std::make_shared<const T>(parse_(load_yaml_text(text, path)));
    Key key{path, absolute.string()};
    {
      std::lock_guard lock(mutex_);
      if (const auto it = kept_.find(key); it != kept_.end() && it->second.text == text) {
        return it->second.value;
      }
    }
    auto value = std::make_shared<const T>(parse_(load_yaml_text(text, path)));
    std::lock_guard lock(mutex_);
    kept_.insert_or_assign(std::move(key), Kept{std::move(text), value});
    return value;
  }

 private:
  using Key = std::pair<std::string, std::string>;  // the path as given, and made absolute
  struct Kept {
    std::string text;
    std::shared_ptr<const T> value;
  };
  const std::function<T(const YamlDocument&)> parse_;
  std::mutex mutex_;
  std::map<Key, Kept> kept_;
};

}  // namespace paceline

#endif  // PACELINE_BASE_PARSED_FILE_CACHE_H_
