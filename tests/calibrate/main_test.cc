// Tests calibrate/main.cc: the built paceline-calibrate binary on a machine without a usable GPU
// (no libcuda here; CUDA_VISIBLE_DEVICES="" hides GPUs where there are some), its --help, --plan
// and command-line errors.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class BinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("paceline_calibrate_main_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Result run(const std::string& arguments,
             const std::string& environment = "CUDA_VISIBLE_DEVICES=") {
    std::string command = "env " + environment + " '" PACELINE_CALIBRATE_BINARY "' " + arguments +
                          " >'" + (dir_ / "out").string() + "' 2>'" + (dir_ / "err").string() + "'";
    int raw = std::system(command.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    r.out = slurp(dir_ / "out");
    r.err = slurp(dir_ / "err");
    return r;
  }

  std::filesystem::path dir_;
};

TEST_F(BinaryTest, NoGpuIsOneClearLineAndExitCodeTwo) {
  std::string output = (dir_ / "profile.yaml").string();
  // GPUs hidden; and, where no driver is installed, the plain environment too (a machine with a
  // driver would start measuring).
  std::vector<std::string> environments = {"CUDA_VISIBLE_DEVICES="};
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) == nullptr)
    environments.push_back("PACELINE_TEST=1");
  for (const std::string& env : environments) {
    Result r = run("--quick --output '" + output + "'", env);
    EXPECT_EQ(r.status, 2) << env << "\n" << r.out << r.err;
    EXPECT_EQ(r.err.rfind("paceline-calibrate: no usable CUDA GPU (", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("nothing measured"), std::string::npos) << r.err;
    // One line, and no profile written.
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(output));
  }
}

TEST_F(BinaryTest, HelpAndPlanNeedNoGpu) {
  Result help = run("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("usage: paceline-calibrate"), std::string::npos);
  Result plan = run("--plan --quick");
  EXPECT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("plan: quick mode"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("estimated total"), std::string::npos) << plan.out;
  // The plan of the families selected only.
  Result gemm_only = run("--plan --quick --families gemm");
  EXPECT_EQ(gemm_only.status, 0) << gemm_only.err;
  EXPECT_NE(gemm_only.out.find("  gemm "), std::string::npos) << gemm_only.out;
  EXPECT_EQ(gemm_only.out.find("memory_bound"), std::string::npos) << gemm_only.out;
  Result without_gemm = run("--plan --quick --skip gemm");
  EXPECT_EQ(without_gemm.out.find("  gemm "), std::string::npos) << without_gemm.out;
  EXPECT_NE(without_gemm.out.find("memory_bound"), std::string::npos) << without_gemm.out;
}

TEST_F(BinaryTest, BadCommandLineExitsTwo) {
  Result r = run("--quick --colour blue");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err,
            "paceline-calibrate: unknown option '--colour'; expected one of: --quick, --full, "
            "--output, --families, "
            "--skip, --device, --fresh, --budget-s, --plan, --verbose, --help (see --help)\n");
}

}  // namespace
