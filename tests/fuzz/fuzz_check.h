// The property every loader harness checks: an input either loads or throws InputError whose
// message cites `file:line:col:` — no other exception type, no crash, no hang, no leak (the
// last three are the sanitizers' and libFuzzer's to catch).
#ifndef PACELINE_TESTS_FUZZ_FUZZ_CHECK_H_
#define PACELINE_TESTS_FUZZ_FUZZ_CHECK_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>

#include "base/input_error.h"
#include "base/yaml_reader.h"

namespace paceline::fuzz {

// Stops the run: libFuzzer saves the input that got here as a crash.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what.c_str());
  std::abort();
}

// Whether the error names a file, a line and a column, and its message starts with them.
inline bool cites_position(const InputError& error) {
  const SourceLocation& at = error.where();
  if (at.file.empty() || at.line < 1 || at.column < 1) return false;
  return std::string_view(error.what()).starts_with(at.to_string() + ": ");
}

// Runs `load`; returns whether it loaded. Bad input must be an InputError that cites
// file:line:col (the fuzzed text's name, or a file it refers to); anything else is a bug.
template <typename Load>
bool loads_or_input_error(Load&& load) {
  try {
    load();
    return true;
  } catch (const InputError& e) {
    if (!cites_position(e)) fail("an InputError without file:line:col: " + std::string(e.what()));
  } catch (const std::exception& e) {
    fail(std::string("an exception other than InputError (") + typeid(e).name() + "): " + e.what());
  } catch (...) {
    fail("a non-standard exception");
  }
  return false;
}

// Reads `text` as a YAML document named `file` whose root mapping is `path` (as a catalog file
// is), with `read(root)`; returns whether it loaded, as loads_or_input_error.
template <typename Read>
bool reads_document_or_input_error(const std::string& text, const std::string& file, const std::string& path,
                                   Read&& read) {
  return loads_or_input_error([&] {
    const YamlDocument document = load_yaml_text(text, file);
    YamlMap root(document.root, document.file, path);
    read(root);
  });
}

// A file in a private temporary folder of this process, for readers that take only a path;
// the folder goes when the object does (a function-local static: at exit).
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name)
      : dir_(std::filesystem::temp_directory_path() / ("paceline-fuzz-" + std::to_string(getpid()))),
        path_((dir_ / name).string()) {
    std::filesystem::create_directories(dir_);
  }
  ~ScratchFile() {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents with the input; returns its path.
  const std::string& write(const uint8_t* data, size_t size) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    return path_;
  }
  std::string folder() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
  std::string path_;
};

}  // namespace paceline::fuzz

#endif  // PACELINE_TESTS_FUZZ_FUZZ_CHECK_H_
