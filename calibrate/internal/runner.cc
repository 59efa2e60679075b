#include "calibrate/internal/runner.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "calibrate/grid.h"
#include "calibrate/internal/bench.h"
#include "calibrate/internal/device_info.h"
#include "calibrate/internal/families.h"
#include "calibrate/internal/kernels.cuh"
#include "calibrate/internal/timer.h"
#include "calibrate/profile.h"
#include "calibrate/resume.h"

namespace paceline::calibrate::internal {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ProfileSink appends rows to a table and rewrites the profile file at most every two seconds,
// so that an interrupted run loses little.
class ProfileSink final : public RowSink {
 public:
  ProfileSink(Profile& profile, Table& table, const std::string& output,
              Clock::time_point family_deadline, Clock::time_point run_deadline,
              const std::atomic<bool>& stop)
      : profile_(profile),
        table_(table),
        output_(output),
        family_deadline_(family_deadline),
        run_deadline_(run_deadline),
        stop_(stop) {}

  void add(YamlNode row) override {
    table_.rows.push_back(std::move(row));
    ++added_;
    if (seconds_since(last_write_) >= 2.0) {
      write_file_atomically(output_, to_yaml(profile_));
      last_write_ = Clock::now();
    }
  }

  bool out_of_time() const override {
    Clock::time_point now = Clock::now();
    if (stop_.load()) {
      reason_ = "interrupted";
      return true;
    }
    if (now >= family_deadline_) {
      reason_ = "family time cap";
      return true;
    }
    if (now >= run_deadline_) {
      reason_ = "run time budget (--budget-s)";
      return true;
    }
    return false;
  }

  int added() const { return added_; }
  const std::string& stop_reason() const { return reason_; }

 private:
  Profile& profile_;
  Table& table_;
  const std::string& output_;
  Clock::time_point family_deadline_;
  Clock::time_point run_deadline_;
  const std::atomic<bool>& stop_;
  Clock::time_point last_write_ = Clock::now();
  int added_ = 0;
  mutable std::string reason_;
};

template <typename Point>
std::vector<Point> select(const std::vector<Point>& points, const std::vector<size_t>& indices) {
  std::vector<Point> out;
  for (size_t i : indices) out.push_back(points[i]);
  return out;
}

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

}  // namespace

int print_plan(const Options& options, std::ostream& out) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) gpus = 1;
  cudaGetLastError();
  Plan plan = make_plan(options.mode, gpus);
  // Only the families --families and --skip select run.
  std::vector<FamilyEstimate> estimates = estimate(plan);
  std::erase_if(estimates, [&](const FamilyEstimate& e) {
    return std::ranges::find(options.families, e.family) == options.families.end();
  });
  out << describe_plan(plan, estimates);
  return kExitOk;
}

int run_calibration(const Options& options, const std::atomic<bool>& stop, std::ostream& out,
                    std::ostream& err) {
  const Clock::time_point run_start = Clock::now();
  const Clock::time_point run_deadline =
      options.budget_s > 0
          ? run_start + std::chrono::milliseconds(static_cast<int64_t>(options.budget_s * 1000))
          : Clock::time_point::max();

  // A GPU first: without one there is nothing to measure (exit 2, one line).
  int num_gpus = 0;
  cudaError_t status = cudaGetDeviceCount(&num_gpus);
  if (status != cudaSuccess || num_gpus == 0) {
    std::string why = status != cudaSuccess ? std::string(cudaGetErrorName(status)) + ": " +
                                                  cudaGetErrorString(status)
                                            : std::string("no device");
    if (status == cudaErrorInsufficientDriver) {
      // The runtime says the same for "no driver at all" and "driver too old"; tell them apart.
      void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      int version = 0;
      cudaDriverGetVersion(&version);
      why = driver == nullptr
                ? "no NVIDIA driver: libcuda.so.1 cannot be loaded"
                : "the NVIDIA driver supports CUDA " + std::to_string(version / 1000) + "." +
                      std::to_string(version % 1000 / 10) + ", this build needs CUDA " +
                      std::to_string(CUDART_VERSION / 1000);
    } else if (status == cudaErrorNoDevice) {
      why += " (is CUDA_VISIBLE_DEVICES hiding the GPUs?)";
    }
    err << "paceline-calibrate: no usable CUDA GPU (" << why << "); nothing measured\n";
    return kExitUnusable;
  }
  if (options.device >= num_gpus) {
    err << "paceline-calibrate: --device " << options.device << " does not exist; this node has "
        << num_gpus << " GPU(s), ordinals 0.." << num_gpus - 1 << "\n";
    return kExitUnusable;
  }

  // Libraries, loaded at run time; each missing one only disables its families.
  Libraries libraries;
#if PACELINE_HAVE_CUBLASLT
  libraries.cublaslt = CublasLtApi::load(&libraries.cublaslt_error);
#endif
#if PACELINE_HAVE_CUDNN
  libraries.cudnn = CudnnApi::load(&libraries.cudnn_error);
#endif
#if PACELINE_HAVE_NCCL
  if (num_gpus >= 2) libraries.nccl = NcclApi::load(&libraries.nccl_error);
#endif
  std::string nvml_error;
  std::unique_ptr<NvmlApi> nvml = NvmlApi::load(&nvml_error);

  // CUPTI before the context exists, then the context. The timer refers to `cupti`, so it is
  // declared after it (and destroyed before it).
#if PACELINE_HAVE_CUPTI
  std::unique_ptr<CuptiApi> cupti;
#endif
  std::unique_ptr<CallTimer> timer;
  std::string cupti_error = "built without CUPTI headers";
  std::string cupti_version = "unavailable";
#if PACELINE_HAVE_CUPTI
  cupti = CuptiApi::load(&cupti_error);
  if (cupti != nullptr) {
    uint32_t v = 0;
    cupti->cuptiGetVersion(&v);
    cupti_version = std::to_string(v);
    timer = make_cupti_timer(*cupti, &cupti_error);
  }
#endif
  status = cudaSetDevice(options.device);
  if (status == cudaSuccess) status = cudaFree(nullptr);
  if (status != cudaSuccess) {
    err << "paceline-calibrate: cannot create a CUDA context on device " << options.device << " ("
        << cudaGetErrorString(status) << "); nothing measured\n";
    return kExitUnusable;
  }

  Stream stream_owner;
  BenchContext ctx;
  ctx.device = options.device;
  ctx.num_gpus = num_gpus;
  ctx.stream = stream_owner.get();
  ctx.verbose = options.verbose;
  ctx.log = &out;

  // Check that CUPTI sees our kernels; otherwise time with CUDA events and say so.
  if (timer != nullptr) {
    try {
      DeviceBuffer probe(1 << 20);
      timer->time(
          1, 2,
          [&](int) {
            check_cuda(launch_fill_uniform(probe.data(), (1 << 20) / 4, ElementType::kFp32, 1, 0, 1,
                                           ctx.stream),
                       "probe kernel");
          },
          {ctx.stream}, Aggregate::kSumOfDurations);
    } catch (const std::exception& e) {
      cupti_error = std::string("CUPTI probe failed: ") + e.what();
      timer.reset();
    }
  }
  if (timer == nullptr) {
    err << "paceline-calibrate: warning: " << one_line(cupti_error)
        << "; timing with CUDA events instead\n";
    timer = make_event_timer();
  }
  ctx.timer = timer.get();

  DeviceInfo device;
  try {
    device = describe_device(options.device, num_gpus, libraries, nvml.get(), cupti_version);
  } catch (const std::exception& e) {
    err << "paceline-calibrate: cannot describe device " << options.device << " (" << e.what()
        << ")\n";
    return kExitUnusable;
  }
  ctx.l2_bytes = device.l2_bytes;
  // Three L2s of other data between two uses of a buffer set: 50 MB L2 on H100/H200.
  ctx.rotation_bytes = 3 * std::max<int64_t>(device.l2_bytes, 8 << 20);

  Plan plan = make_plan(options.mode, num_gpus);
  ctx.warmup = plan.warmup;
  ctx.repetitions = plan.repetitions;

  YamlNode method = YamlNode::mapping(false);
  method.set("mode", YamlNode::string(to_string(options.mode)));
  method.set("warmup", YamlNode::integer(plan.warmup));
  method.set("repetitions", YamlNode::integer(plan.repetitions));
  method.set("statistic", YamlNode::string("median"));
  method.set("spread", YamlNode::string("(p90 - p10) / median"));
  method.set(
      "call_time",
      YamlNode::string("sum of the call's GPU activity durations (collectives: first start to "
                       "last end over all ranks)"));
  method.set("timer", YamlNode::string(timer->description()));
  method.set("l2_rotation_bytes", YamlNode::integer(ctx.rotation_bytes));
  method.set("data", YamlNode::string("uniform random values (splitmix64 hash), never zeros"));
  method.set("clocks", YamlNode::string("left as they are (not locked)"));
  method.set("tool", YamlNode::string("paceline-calibrate"));

  // An existing output is resumed unless --fresh.
  Profile profile;
  std::string original_measured_at;
  if (!options.fresh) {
    std::optional<std::string> existing;
    try {
      existing = read_file(options.output);
    } catch (const std::exception& e) {
      err << "paceline-calibrate: " << e.what() << "\n";
      return kExitUnusable;
    }
    if (existing.has_value()) {
      try {
        profile = profile_from_yaml(*existing, options.output);
      } catch (const ProfileError& e) {
        err << "paceline-calibrate: cannot resume " << e.what()
            << "; pass --fresh to overwrite it\n";
        return kExitUnusable;
      }
      if (auto conflict = resume_conflict(profile, device.fields, method)) {
        err << "paceline-calibrate: cannot resume " << options.output << ": " << *conflict
            << "; pass --fresh to overwrite it or choose another --output\n";
        return kExitUnusable;
      }
      if (const YamlNode* at = profile.device.find("measured_at")) original_measured_at = at->text;
      out << "resuming " << options.output << "\n";
    }
  }
  profile.device = device.fields;
  if (!original_measured_at.empty()) {
    profile.device.set("measured_at", YamlNode::string(original_measured_at));
    profile.device.set("updated_at", YamlNode::string(utc_now()));
  }
  profile.method = method;
  try {
    write_file_atomically(options.output, to_yaml(profile));
  } catch (const std::exception& e) {
    err << "paceline-calibrate: cannot write the profile: " << e.what() << "\n";
    return kExitUnusable;
  }

  std::vector<FamilyEstimate> estimates = estimate(plan);
  out << "paceline-calibrate on " << device.name << " (device " << options.device << " of "
      << num_gpus << "), writing " << options.output << "\n"
      << describe_plan(plan, estimates);
  out.flush();

  // Families, in order; a failure is reported and recorded, and the next family runs.
  std::set<std::string> failed;
  for (const std::string& family : options.families) {
    profile.clear_skipped(family);
    if (stop.load() || Clock::now() >= run_deadline) {
      profile.set_skipped(family, stop.load() ? "interrupted before it started"
                                              : "run time budget spent before it started");
      failed.insert(family);
      continue;
    }
    if (plan.num_points(family) == 0) {
      if (family == "collectives")
        profile.set_skipped(family, "1 GPU: NCCL collectives need at least 2");
      continue;
    }
    std::vector<size_t> pending = pending_points(plan, family, profile);
    if (pending.empty()) {
      out << family << ": complete (all " << plan.num_points(family)
          << " points already in the profile)\n";
      // Its failed rows are done too, and still failed: the family stays incomplete.
      if (const std::optional<std::string> note = failed_points_note(*profile.find_table(family))) {
        profile.set_skipped(family, *note);
        failed.insert(family);
        err << "paceline-calibrate: " << family << " incomplete: " << *note << "\n";
      }
      continue;
    }
    std::string method_text;
    if (family == "memory_bound") method_text = memory_bound_method();
    if (family == "copies") method_text = copies_method();
    if (family == "gemm") method_text = gemm_method(libraries);
    if (family == "collectives") method_text = collectives_method(libraries);
    if (family == "attention") method_text = attention_method(libraries);
    Table& table = prepare_table(profile, plan, family, method_text);
    // Recorded before the family starts, so that a crash inside a library leaves a trace.
    profile.set_skipped(
        family, "in progress: if this remains, paceline-calibrate died while measuring " + family +
                    " (see its log)");
    try {
      write_file_atomically(options.output, to_yaml(profile));
    } catch (const std::exception& e) {
      err << "paceline-calibrate: cannot write the profile: " << e.what() << "\n";
      return kExitUnusable;
    }
    const Clock::time_point family_start = Clock::now();
    const double cap = plan.budget_s(family);
    const Clock::time_point family_deadline =
        cap > 0 ? family_start + std::chrono::milliseconds(static_cast<int64_t>(cap * 1000))
                : Clock::time_point::max();
    ProfileSink sink(profile, table, options.output, family_deadline, run_deadline, stop);
    out << family << ": " << pending.size() << " of " << plan.num_points(family)
        << " points to measure\n";
    out.flush();
    std::string failure;
    try {
      if (family == "memory_bound") run_memory_bound(ctx, select(plan.memory_bound, pending), sink);
      if (family == "copies") run_copies(ctx, select(plan.copies, pending), sink);
      if (family == "gemm") run_gemm(ctx, libraries, select(plan.gemm, pending), sink);
      if (family == "collectives")
        run_collectives(ctx, libraries, select(plan.collectives, pending), sink);
      if (family == "attention")
        run_attention(ctx, libraries, select(plan.attention, pending), sink);
    } catch (const std::exception& e) {
      failure = one_line(e.what());
    }
    // Whatever happened, this device is the current one again.
    cudaSetDevice(options.device);
    const double elapsed = seconds_since(family_start);
    const size_t remaining = pending_points(plan, family, profile).size();
    profile.clear_skipped(family);
    if (!failure.empty()) {
      profile.set_skipped(family, failure);
    } else if (remaining > 0) {
      char text[256];
      std::snprintf(
          text, sizeof(text),
          "%s: %zu of %zu points measured in %.0f s; rerun with the same --output to resume",
          sink.stop_reason().empty() ? "stopped" : sink.stop_reason().c_str(),
          plan.num_points(family) - remaining, plan.num_points(family), elapsed);
      profile.set_skipped(family, text);
    } else if (const std::optional<std::string> note = failed_points_note(table)) {
      profile.set_skipped(family, *note);
    }
    if (const std::string* reason = profile.find_skipped(family)) {
      failed.insert(family);
      err << "paceline-calibrate: " << family << " incomplete: " << *reason << "\n";
    }
    char line[160];
    std::snprintf(line, sizeof(line), "%s: %d points in %.1f s%s\n", family.c_str(), sink.added(),
                  elapsed, failed.count(family) ? " (incomplete, see skipped)" : "");
    out << line;
    out.flush();
    try {
      write_file_atomically(options.output, to_yaml(profile));
    } catch (const std::exception& e) {
      err << "paceline-calibrate: cannot write the profile: " << e.what() << "\n";
      return kExitUnusable;
    }
  }

  char done[160];
  std::snprintf(
      done, sizeof(done), "done in %.1f s: %s\n", seconds_since(run_start),
      failed.empty() ? "every selected family measured" : "some families incomplete (see skipped)");
  out << done;
  return failed.empty() ? kExitOk : kExitIncomplete;
}

}  // namespace paceline::calibrate::internal
