// Tests calibrate/resume.cc: continuing an interrupted calibration from its partial profile.
#include "calibrate/resume.h"

#include <gtest/gtest.h>

namespace paceline::calibrate {
namespace {

YamlNode section(std::initializer_list<std::pair<const char*, YamlNode>> fields) {
  YamlNode node = YamlNode::mapping(false);
  for (const auto& [k, v] : fields) node.set(k, v);
  return node;
}

TEST(ResumeTest, PendingPointsSkipRowsAlreadyMeasuredOrFailed) {
  Plan plan = make_plan(Mode::kQuick, 1);
  Profile profile;
  Table& table = prepare_table(profile, plan, "memory_bound", "own kernels");
  // Rows for the first and third points, the third one failed.
  table.rows.push_back(identity(plan.memory_bound[0]));
  YamlNode failed = identity(plan.memory_bound[2]);
  failed.set("time_s", YamlNode::null());
  failed.set("error", YamlNode::string("out of memory"));
  table.rows.push_back(failed);

  // Written and read back, as a resumed run sees it.
  Profile reread = profile_from_yaml(to_yaml(profile), "partial.yaml");
  std::vector<size_t> pending = pending_points(plan, "memory_bound", reread);
  EXPECT_EQ(pending.size(), plan.memory_bound.size() - 2);
  EXPECT_EQ(pending.front(), 1u);
  EXPECT_EQ(pending[1], 3u);
  // A family without a table is entirely pending.
  EXPECT_EQ(pending_points(plan, "gemm", reread).size(), plan.gemm.size());
}

TEST(ResumeTest, AFamilyWithFailedRowsKeepsItsFailureNote) {
  // A resumed run found every point of a family done, failed rows included, cleared its note
  // and exited 0: the note comes back from the rows.
  Plan plan = make_plan(Mode::kQuick, 1);
  Profile profile;
  Table& table = prepare_table(profile, plan, "memory_bound", "own kernels");
  for (size_t i = 0; i < 3; ++i) table.rows.push_back(identity(plan.memory_bound[i]));
  EXPECT_EQ(failed_points_note(table), std::nullopt);
  for (const char* error : {"out of memory", "launch failed"}) {
    YamlNode failed = identity(plan.memory_bound[table.rows.size()]);
    failed.set("time_s", YamlNode::null());
    failed.set("error", YamlNode::string(error));
    table.rows.push_back(failed);
  }
  const Profile reread = profile_from_yaml(to_yaml(profile), "complete.yaml");
  EXPECT_EQ(failed_points_note(*reread.find_table("memory_bound")),
            "2 of 5 points failed; first: out of memory");
}

TEST(ResumeTest, PrepareTableKeepsRowsAndRefreshesTheShell) {
  Plan plan = make_plan(Mode::kQuick, 1);
  Profile profile;
  profile.table("copies").rows.push_back(identity(plan.copies[0]));
  Table& t = prepare_table(profile, plan, "copies", "cudaMemcpyAsync");
  EXPECT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.method, "cudaMemcpyAsync");
  EXPECT_EQ(t.key, (std::vector<std::string>{"kind", "bytes"}));
  EXPECT_NE(t.axes.find("kind"), nullptr);
}

TEST(ResumeTest, ConflictsNameTheDifference) {
  Profile existing;
  existing.device = section({{"name", YamlNode::string("NVIDIA H100 80GB HBM3")},
                             {"compute_capability", YamlNode::string("9.0")}});
  existing.method = section({{"mode", YamlNode::string("quick")},
                             {"warmup", YamlNode::integer(3)},
                             {"repetitions", YamlNode::integer(10)}});
  YamlNode same_method = existing.method;
  EXPECT_FALSE(resume_conflict(existing, existing.device, same_method).has_value());

  YamlNode h200 = existing.device;
  h200.set("name", YamlNode::string("NVIDIA H200"));
  EXPECT_EQ(resume_conflict(existing, h200, same_method).value(),
            "device.name differs: the existing profile has NVIDIA H100 80GB HBM3, this run has "
            "NVIDIA H200");
  YamlNode full = existing.method;
  full.set("mode", YamlNode::string("full"));
  EXPECT_EQ(resume_conflict(existing, existing.device, full).value(),
            "method.mode differs: the existing profile has quick, this run has full");
}

}  // namespace
}  // namespace paceline::calibrate
