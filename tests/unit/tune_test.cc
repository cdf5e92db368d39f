// The measurement cache (partition/tune.h), the machine calibration
// (partition/machine.h) and the thread policy the host derives from what
// backends declare (backends/backend.h).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "partition/machine.h"
#include "partition/tune.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class Tune : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_tune_" + std::to_string(::getpid()) + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::shared_ptr<const Backend> native() {
    auto b = find_backend("native");
    EXPECT_TRUE(b.ok());
    return *b;
  }

  fs::path dir_;
};

partition::MachineProfile measured_machine(int threads) {
  partition::MachineProfile m = partition::identify_machine(threads);
  m.measured = true;
  m.peak_gflops = 123.5;
  m.gemm_gflops = 101.25;
  m.bandwidth_gbps = 33.0;
  m.wake_us = 6.5;
  m.clock_ghz = 3.75;
  return m;
}

TEST_F(Tune, machine_keys_follow_the_cpu_its_features_its_cores_and_the_thread_count) {
  partition::MachineProfile a = partition::identify_machine(2);
  EXPECT_FALSE(a.measured);
  EXPECT_GT(a.peak_gflops, 0);
  EXPECT_EQ(a.key(), partition::identify_machine(2).key());
  EXPECT_NE(a.key(), partition::identify_machine(1).key());
  partition::MachineProfile b = a;
  b.cpu += " (another)";
  EXPECT_NE(a.key(), b.key());
  b = a;
  b.isa += ",amx_tile";
  EXPECT_NE(a.key(), b.key());
  b = a;
  b.cores += 2;
  EXPECT_NE(a.key(), b.key());
  // Figures are not identity.
  b = a;
  b.peak_gflops *= 2;
  EXPECT_EQ(a.key(), b.key());
}

TEST_F(Tune, entries_are_keyed_by_region_backend_version_and_machine) {
  partition::TuneCache c;
  auto nat = native();
  c.put("region1", *nat, "machineA", 12.5, 10);
  ASSERT_TRUE(c.get("region1", *nat, "machineA"));
  EXPECT_DOUBLE_EQ(c.get("region1", *nat, "machineA")->us, 12.5);
  EXPECT_FALSE(c.get("region1", *nat, "machineB"));
  EXPECT_FALSE(c.get("region2", *nat, "machineA"));
}

TEST_F(Tune, a_calibration_is_saved_once_and_reused) {
  const std::string path = (dir_ / "tune.json").string();
  partition::MachineProfile m = measured_machine(2);
  m.launch_us["example|1.0"] = 4.25;
  m.handoff_us["omp|2.0"] = 480;
  {
    partition::TuneCache c = partition::TuneCache::Open(path, nullptr);
    EXPECT_FALSE(c.machine(m.key()));
    c.put_machine(m);
    ASSERT_TRUE(c.save().ok());
  }
  std::string warning;
  partition::TuneCache c = partition::TuneCache::Open(path, &warning);
  EXPECT_EQ(warning, "");
  auto back = c.machine(m.key());
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->measured);
  EXPECT_EQ(back->cpu, m.cpu);
  EXPECT_EQ(back->isa, m.isa);
  EXPECT_DOUBLE_EQ(back->peak_gflops, 123.5);
  EXPECT_DOUBLE_EQ(back->gemm_gflops, 101.25);
  EXPECT_DOUBLE_EQ(back->bandwidth_gbps, 33.0);
  EXPECT_DOUBLE_EQ(back->wake_us, 6.5);
  EXPECT_DOUBLE_EQ(back->clock_ghz, 3.75);
  EXPECT_DOUBLE_EQ(back->launch_us.at("example|1.0"), 4.25);
  EXPECT_DOUBLE_EQ(back->handoff_us.at("omp|2.0"), 480);
  // A calibrated machine with nothing missing for these backends measures
  // nothing (native needs no launch figure).
  partition::MachineProfile again = *back;
  EXPECT_FALSE(partition::calibrate_machine(&again, {native()}));
  EXPECT_DOUBLE_EQ(again.peak_gflops, 123.5);
}

TEST_F(Tune, a_verdict_of_the_end_to_end_check_is_kept_and_merged) {
  const std::string path = (dir_ / "verdicts.json").string();
  {
    partition::TuneCache c = partition::TuneCache::Open(path, nullptr);
    EXPECT_FALSE(c.verdict("model-a"));
    c.put_verdict("model-a", "dnnl,native engine first");
    ASSERT_TRUE(c.save().ok());
  }
  {
    // Another process adds its own; the first stays.
    partition::TuneCache c = partition::TuneCache::Open(path, nullptr);
    c.put_verdict("model-b", "chosen (dnnl,native)");
    ASSERT_TRUE(c.save().ok());
  }
  partition::TuneCache c = partition::TuneCache::Open(path, nullptr);
  ASSERT_TRUE(c.verdict("model-a"));
  EXPECT_EQ(*c.verdict("model-a"), "dnnl,native engine first");
  EXPECT_EQ(*c.verdict("model-b"), "chosen (dnnl,native)");
}

TEST_F(Tune, calibration_measures_this_machine_when_nothing_is_known) {
  partition::MachineProfile m = partition::identify_machine(1);
  ASSERT_FALSE(m.measured);
  EXPECT_TRUE(partition::calibrate_machine(&m, {native()}));
  EXPECT_TRUE(m.measured);
  EXPECT_GT(m.peak_gflops, 0);
  EXPECT_GT(m.gemm_gflops, 0);
  EXPECT_GT(m.bandwidth_gbps, 0);
  EXPECT_GT(m.wake_us, 0);
  EXPECT_GT(m.clock_ghz, 0.3);
  EXPECT_LT(m.clock_ghz, 10);
  EXPECT_FALSE(partition::calibrate_machine(&m, {native()}));
}

TEST_F(Tune, two_processes_adding_entries_at_once_keep_all_of_them) {
  const std::string path = (dir_ / "shared.json").string();
  constexpr int kPerProcess = 60, kRounds = 6;
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Each round opens the file (seeing what the other saved so far), adds
      // its share and saves: the saves interleave.
      auto nat = native();
      for (int r = 0; r < kRounds; ++r) {
        partition::TuneCache c = partition::TuneCache::Open(path, nullptr);
        for (int i = 0; i < kPerProcess / kRounds; ++i) {
          c.put("p" + std::to_string(p) + "_r" + std::to_string(r) + "_" + std::to_string(i), *nat, "m", 1.0 + i, 3);
        }
        if (!c.save().ok()) ::_exit(1);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string warning;
  partition::TuneCache c = partition::TuneCache::Open(path, &warning);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(c.size(), static_cast<size_t>(2 * kPerProcess));
}

TEST_F(Tune, a_cache_of_the_older_format_is_ignored_with_a_warning_and_replaced) {
  const std::string path = (dir_ / "old.json").string();
  {
    std::ofstream f(path);
    f << R"({"format": "tessera-tune", "version": 1, "entries": {"k|dnnl|1|t2": {"us": 3, "runs": 4}}})";
  }
  std::string warning;
  partition::TuneCache c = partition::TuneCache::Open(path, &warning);
  EXPECT_EQ(c.size(), 0u);
  EXPECT_NE(warning.find("not a tessera tune cache"), std::string::npos) << warning;
  ASSERT_TRUE(c.save().ok());
  std::string again;
  EXPECT_EQ(partition::TuneCache::Open(path, &again).size(), 0u);
  EXPECT_EQ(again, "");
}

TEST_F(Tune, a_damaged_calibration_makes_the_file_unusable_not_the_compile) {
  const std::string path = (dir_ / "bad_machine.json").string();
  {
    std::ofstream f(path);
    f << R"({"format": "tessera-tune", "version": 2, "entries": {}, "machines": {"m": {"cpu": 3}}})";
  }
  std::string warning;
  partition::TuneCache c = partition::TuneCache::Open(path, &warning);
  EXPECT_NE(warning.find("not a tessera tune cache"), std::string::npos);
  EXPECT_FALSE(c.machine("m"));
}

TEST_F(Tune, the_measuring_budget_counts_on_its_clock) {
  partition::MeasureBudget b;
  double t = 0;
  b.clock = [&t] { return t; };
  EXPECT_FALSE(b.exhausted());
  t = 42;
  EXPECT_DOUBLE_EQ(b.now(), 42);
  b.spent_us = b.limit_us;
  EXPECT_TRUE(b.exhausted());
  b.spent_us = 0;
  b.max_measurements = 2;
  b.measurements = 2;
  EXPECT_TRUE(b.exhausted());
}

// ---- what backends declare drives the thread policy ---------------------------

TEST(ThreadPolicy, openmp_waits_passively_only_beside_another_pooled_engine) {
  using T = Threading;
  EXPECT_FALSE(engines_need_passive_wait({T::kOpenMP}));
  EXPECT_TRUE(engines_need_passive_wait({T::kOpenMP, T::kPool}));
  EXPECT_TRUE(engines_need_passive_wait({T::kPool, T::kOpenMP}));
  EXPECT_FALSE(engines_need_passive_wait({T::kOpenMP, T::kCaller}));
  EXPECT_FALSE(engines_need_passive_wait({T::kPool, T::kPool, T::kCaller}));
  // Unknown (a table of minor revision 0) may be either: the safe answer.
  EXPECT_TRUE(engines_need_passive_wait({T::kUnknown, T::kPool}));
  EXPECT_TRUE(engines_need_passive_wait({T::kOpenMP, T::kUnknown}));
  EXPECT_FALSE(engines_need_passive_wait({T::kUnknown}));
}

TEST(ThreadPolicy, the_expected_engines_choose_the_environment_by_their_declared_threading) {
  expect_engines({{"decl_omp", Threading::kOpenMP}, {"decl_pool", Threading::kPool}}, /*alone=*/false);
  EXPECT_EQ(expected_thread_policy(), "OMP_WAIT_POLICY=PASSIVE");
  expect_engines({{"decl_omp", Threading::kOpenMP}, {"decl_pool", Threading::kPool}}, /*alone=*/true);
  EXPECT_EQ(expected_thread_policy(), "GOMP_SPINCOUNT=10000");
  expect_engines({{"decl_omp", Threading::kOpenMP}, {"decl_caller", Threading::kCaller}, {"native", Threading::kPool}},
                 /*alone=*/false);
  EXPECT_EQ(expected_thread_policy(), "GOMP_SPINCOUNT=10000") << "native is priced as a hand-over, not a pool";
  expect_engines({{"decl_pool", Threading::kPool}, {"decl_caller", Threading::kCaller}}, /*alone=*/false);
  EXPECT_EQ(expected_thread_policy(), "") << "no OpenMP engine: nothing to set";
  expect_engines({{"decl_unknown", Threading::kUnknown}, {"decl_pool", Threading::kPool}}, /*alone=*/false);
  EXPECT_EQ(expected_thread_policy(), "OMP_WAIT_POLICY=PASSIVE");
  expect_engines({}, false);
}

}  // namespace
}  // namespace tessera
