// KernelProfile: kernel times measured on a real GPU by paceline-calibrate
// (docs/profile-format.md), and what the op timer asks of them.
//
// Inside each table's grid a query is answered by multilinear interpolation of log(time) over
// the log of the grid's numeric axes (exact at grid points, monotone between them when the
// measurements are). Outside the grid the answer is the profile's own fit of the roofline-with-
// efficiency model (hardware/op_timer.h), scaled to meet the measurement at the grid's edge, so
// the two agree where the grid ends. The fits are weighted linear least squares (Eigen) over
// every measured point, minimizing relative error.
#ifndef PACELINE_HARDWARE_KERNEL_PROFILE_H_
#define PACELINE_HARDWARE_KERNEL_PROFILE_H_

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "base/input_error.h"
#include "base/kernel_shapes.h"
#include "base/units.h"
#include "hardware/gpu_spec.h"

namespace paceline {

struct YamlDocument;

// A grid of measured times over 1–3 numeric axes, NaN where a point is missing.
class LogGrid {
 public:
  LogGrid() = default;
  explicit LogGrid(std::vector<std::vector<double>> axes);
  // Sets the time at the grid point with these axis values (which must be on the axes).
  void set(const std::vector<double>& point, double time_s);
  // log-space multilinear interpolation; nullopt outside the grid or where a corner is missing.
  std::optional<double> interpolate(const std::vector<double>& point) const;
  // The point clamped onto the grid's range.
  std::vector<double> clamp(const std::vector<double>& point) const;
  // The measured point nearest to `point` in log space.
  std::optional<std::pair<std::vector<double>, double>> nearest(const std::vector<double>& point) const;
  const std::vector<std::vector<double>>& axes() const { return axes_; }
  size_t measured() const;

 private:
  size_t index_of(const std::vector<size_t>& position) const;
  std::vector<std::vector<double>> axes_;
  std::vector<double> times_;
};

// Least-squares parameters of the roofline-with-efficiency model fitted to a table.
struct GemmFit {
  double inverse_efficiency = 0.0;      // 1 / max_efficiency
  double k_half_over_efficiency = 0.0;  // k_half / max_efficiency
  Seconds overhead;
  double rms_relative_error = 0.0;
};
struct AttentionFit {
  double inverse_efficiency = 0.0;
  double seq_half_over_efficiency = 0.0;
  Seconds overhead;
  double rms_relative_error = 0.0;
};
struct MemoryFit {
  BytesPerSecond bandwidth;  // effective streaming bandwidth
  Seconds overhead;
  double rms_relative_error = 0.0;
};

class KernelProfile {
 public:
  // Loads and checks a profile; `gpu` is the catalog GPU it was measured on (its tile shape
  // and peaks are the fits' model). Throws InputError naming the file, line and field.
  static KernelProfile load(const std::string& path, const GpuSpec& gpu);

  // Measured times, or nullopt where the profile has no table for the kind of kernel. A grouped
  // GEMM's time is that of one GEMM of all its groups' rows (sum_m × n × mean k), which reads one
  // weight matrix, not `count` (OpTimer::gemm scales it to the group).
  std::optional<Seconds> gemm(const GemmShape& shape) const;
  // Attention of the shape's kernel, where the profile measured that kernel (bf16, values as
  // wide as keys, at the shape's head_dim).
  std::optional<Seconds> attention(const AttentionShape& shape) const;
  std::optional<Seconds> memory_bound(MemoryKernel kernel, Bytes traffic) const;
  // A measured NCCL collective over `ranks` GPUs of one node (the link profile), `size` in the
  // collective model's convention (hardware/collective_model.h); nullopt when not measured.
  // Beyond the measured sizes it is the measurement at the nearest size, `measured_size`: a
  // table that stops before bandwidth dominates says nothing of the bandwidth.
  struct MeasuredCollective {
    Bytes measured_size;
    Seconds time;
  };
  std::optional<MeasuredCollective> collective(Collective collective, int ranks, Bytes size) const;

  const std::string& path() const { return path_; }
  const std::string& device_name() const { return device_name_; }
  // The CUDA compute capability the file says it was measured on ("9.0"), and where it says so.
  const std::string& compute_capability() const { return compute_capability_; }
  const SourceLocation& compute_capability_location() const { return compute_capability_location_; }
  const GpuSpec& gpu() const { return gpu_; }
  // The fits, by GEMM (dtype, layout), attention (kernel, backward), and memory operation.
  const std::map<std::pair<DType, GemmLayout>, GemmFit>& gemm_fits() const { return gemm_fits_; }
  const std::map<std::pair<AttentionKernel, bool>, AttentionFit>& attention_fits() const {
    return attention_fits_;
  }
  const std::map<std::string, MemoryFit>& memory_fits() const { return memory_fits_; }

 private:
  struct AttentionKey {
    AttentionKernel kernel;  // the kernel the rows measured (flash: cuDNN's; flash2)
    bool backward;
    bool causal;
    int64_t head_dim;
    int64_t group;
    auto operator<=>(const AttentionKey&) const = default;
  };

  // The measured tables of a profile document, without the GPU or the fits: what a file's
  // bytes alone decide, parsed once however many scenarios load the file.
  static KernelProfile read_measurements(const YamlDocument& document);
  // The fitted model's time for a shape (the shape of the out-of-grid answer).
  Seconds gemm_model(const GemmFit& fit, DType dtype, int64_t m, int64_t n, int64_t k) const;
  Seconds attention_model(const AttentionFit& fit, const AttentionShape& shape, double heads, double seq) const;
  void fit_gemm();
  void fit_attention();
  void fit_memory();

  std::string path_;
  std::string device_name_;
  std::string compute_capability_;
  SourceLocation compute_capability_location_;
  GpuSpec gpu_;
  // GEMMs by (dtype, layout) over (m, n, k) in the model's terms (tokens, out, in for forward).
  std::map<std::pair<DType, GemmLayout>, LogGrid> gemm_;
  // bf16 attention by key over (heads, seq) for batch 1, each kernel's rows apart.
  std::map<AttentionKey, LogGrid> attention_;
  // Memory-bound operations over bytes moved.
  std::map<std::string, LogGrid> memory_;
  // Collectives by (operation, ranks) over bytes as nccl-tests counts them.
  std::map<std::pair<std::string, int>, LogGrid> collectives_;
  std::map<std::pair<DType, GemmLayout>, GemmFit> gemm_fits_;
  std::map<std::pair<AttentionKernel, bool>, AttentionFit> attention_fits_;
  std::map<std::string, MemoryFit> memory_fits_;
};

// The GPU catalog's architecture (hardware/catalog/gpus/*.yaml) of a CUDA compute capability
// ("9.0": hopper), or nullopt for one no catalog GPU has.
std::optional<std::string> architecture_of_compute_capability(
    const std::string& compute_capability);
// The compute capabilities of a catalog architecture ("8.0" for ampere), none for one that is not
// NVIDIA's (cdna3).
std::vector<std::string> compute_capabilities_of(const std::string& architecture);

// The profile's operation for a memory-bound kernel kind (streaming kernels without their own
// measurement use the element-wise add, which moves bytes the same way).
std::string profile_operation(MemoryKernel kernel);

}  // namespace paceline

#endif  // PACELINE_HARDWARE_KERNEL_PROFILE_H_
