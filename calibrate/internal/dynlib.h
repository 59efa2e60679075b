// A shared library opened at run time (dlopen), so that a missing cuDNN, NCCL, cuBLASLt or
// CUPTI makes only the families that need it fail, with a message, instead of stopping the
// program from starting.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace paceline::calibrate::internal {

class DynamicLibrary {
 public:
  // open tries `names` in order with the dynamic loader's search (LD_LIBRARY_PATH, rpath, system
  // paths) and returns the first that loads, or nullptr with `error` saying what each attempt
  // reported.
  static std::unique_ptr<DynamicLibrary> open(const std::vector<std::string>& names,
                                              std::string* error);
  ~DynamicLibrary();
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // bind resolves `name` into `fn`; on failure it appends the name to `missing` and leaves fn null.
  template <typename Fn>
  void bind(Fn*& fn, const char* name, std::string* missing) const {
    fn = reinterpret_cast<Fn*>(symbol(name));
    if (fn == nullptr) {
      if (!missing->empty()) *missing += ", ";
      *missing += name;
    }
  }

  // path is the file the loader actually opened.
  const std::string& path() const { return path_; }

 private:
  DynamicLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* symbol(const char* name) const;

  void* handle_;
  std::string path_;
};

}  // namespace paceline::calibrate::internal
