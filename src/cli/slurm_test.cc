#include "cli/slurm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/testing.h"

namespace perftracker::cli {
namespace {

using testing::ScopedEnv;
using Args = std::vector<std::string>;

TEST(SlurmTest, IsSrunByAnyPath) {
  EXPECT_TRUE(IsSrun({"srun", "-N2", "python"}));
  EXPECT_TRUE(IsSrun({"/usr/bin/srun"}));
  EXPECT_FALSE(IsSrun({"torchrun", "srun"}));
  EXPECT_FALSE(IsSrun({}));
}

TEST(SlurmTest, AllocationOptionsKeepSrunsSizingOnly) {
  EXPECT_EQ(AllocationOptions({"srun", "-N", "2", "--ntasks=4", "-pgpu", "--exclusive", "--label",
                               "-o", "out.txt", "--gpus-per-node", "8", "python", "-N", "3"}),
            (Args{"-N", "2", "--ntasks=4", "-pgpu", "--exclusive", "--gpus-per-node", "8"}));
  // The program srun runs ends its options, whatever follows.
  EXPECT_EQ(AllocationOptions({"srun", "python", "-N", "2"}), Args{});
  // A sizing option without its value is left to srun.
  EXPECT_EQ(AllocationOptions({"srun", "-N"}), Args{});
}

TEST(SlurmTest, SallocRunsTheSameCommandLineInsideTheAllocation) {
  RunOptions o;
  o.command = {"srun", "--nodes=2", "-n", "4", "python", "train.py"};
  o.argv = {"perftracker", "run", "--report-dir", "r",       "--", "srun", "--nodes=2",
            "-n",          "4",   "python",       "train.py"};
  EXPECT_EQ(
      SallocArgv(o, "/opt/bin/perftracker"),
      (Args{"salloc", "--quiet", "--nodes=2", "-n", "4", "/opt/bin/perftracker", "run",
            "--report-dir", "r", "--", "srun", "--nodes=2", "-n", "4", "python", "train.py"}));
}

TEST(SlurmTest, AllocationOnlyForSrunOutsideOne) {
  ScopedEnv no_job("SLURM_JOB_ID", nullptr);
  ScopedEnv no_opt_out("PERFTRACKER_NO_SALLOC", nullptr);
  RunOptions o;
  o.command = {"srun", "python"};
  o.argv = {"perftracker", "run", "--", "srun", "python"};
  EXPECT_TRUE(NeedsAllocation(o));
  o.nproc = 2;  // the launcher spawns the ranks itself
  EXPECT_FALSE(NeedsAllocation(o));
  o.nproc = 0;
  {
    ScopedEnv opt_out("PERFTRACKER_NO_SALLOC", "1");
    EXPECT_FALSE(NeedsAllocation(o));
  }
  ScopedEnv job("SLURM_JOB_ID", "42");
  EXPECT_FALSE(NeedsAllocation(o));
}

TEST(SlurmTest, AgentsStepInsideAnAllocationWithoutAnAgentSocket) {
  ScopedEnv job("SLURM_JOB_ID", "42");
  RunOptions o;
  o.command = {"srun", "python"};
  EXPECT_TRUE(WantsAgentsStep(o));
  o.agent_socket = "/tmp/a.sock";
  EXPECT_FALSE(WantsAgentsStep(o));
  o.agent_socket.clear();
  o.command = {"torchrun", "train.py"};
  EXPECT_FALSE(WantsAgentsStep(o));
  o.command = {"srun", "python"};
  ScopedEnv no_job("SLURM_JOB_ID", nullptr);
  EXPECT_FALSE(WantsAgentsStep(o));
}

TEST(SlurmTest, NodeCountFromTheJobElseTheStepElseOne) {
  ScopedEnv job_nodes("SLURM_JOB_NUM_NODES", "3");
  ScopedEnv step_nodes("SLURM_NNODES", "2");
  EXPECT_EQ(SlurmNodeCount(), "3");
  {
    ScopedEnv none("SLURM_JOB_NUM_NODES", nullptr);
    EXPECT_EQ(SlurmNodeCount(), "2");
    ScopedEnv none_either("SLURM_NNODES", nullptr);
    EXPECT_EQ(SlurmNodeCount(), "1");
  }
}

// Issue 26: another user of a node must not be able to make the agents' folder first (a
// predictable name let them bind the socket, or move the agent's aside).
TEST(SlurmTest, AgentsStepSocketFolderIsUnguessable) {
  const std::string a = AgentsStepSocket("42", 1234);
  const std::string b = AgentsStepSocket("42", 1234);
  EXPECT_NE(a, b);
  const std::string prefix = "/tmp/perftracker-42-1234-";
  ASSERT_EQ(a.rfind(prefix, 0), 0u) << a;
  const std::string tail = "-{node}/agent.sock";
  ASSERT_EQ(a.size(), prefix.size() + 16 + tail.size()) << a;
  EXPECT_EQ(a.substr(a.size() - tail.size()), tail);
  const std::string random = a.substr(prefix.size(), 16);
  EXPECT_EQ(random.find_first_not_of("0123456789abcdef"), std::string::npos) << random;
  EXPECT_NE(RandomSuffix(), RandomSuffix());
}

TEST(SlurmTest, AgentsStepCommandLine) {
  AgentsStep step;
  step.nodes = "2";
  step.self = "/opt/bin/perftracker";
  step.server = "10.0.0.1:50551";
  step.socket = "/tmp/perftracker-42-1234-{node}/agent.sock";
  step.trace_dir = "/r/traces";
  step.job_id = "job";
  step.keep_traces = 3;
  const Args base = {"srun",
                     "--overlap",
                     "--quiet",
                     "--kill-on-bad-exit=0",
                     "--nodes=2",
                     "--ntasks=2",
                     "--ntasks-per-node=1",
                     "/opt/bin/perftracker",
                     "agent",
                     "--server",
                     "10.0.0.1:50551",
                     "--socket",
                     "/tmp/perftracker-42-1234-{node}/agent.sock",
                     "--trace-dir",
                     "/r/traces/{node}",
                     "--job-id",
                     "job",
                     "--keep-traces",
                     "3"};
  EXPECT_EQ(AgentsStepCommand(step), base);
  step.token_file = "/r/.perftracker/token";
  step.tls_ca = "ca.pem";
  Args with = base;
  for (const char* a : {"--token-file", "/r/.perftracker/token", "--tls-ca", "ca.pem"})
    with.push_back(a);
  EXPECT_EQ(AgentsStepCommand(step), with);
}

TEST(SlurmTest, DefaultsFromTheAllocationForNotGivenFlags) {
  ScopedEnv job("SLURM_JOB_ID", "42");
  ScopedEnv nodes("SLURM_JOB_NUM_NODES", "4");
  ScopedEnv node_id("SLURM_NODEID", "2");
  // No node list: MASTER_ADDR stays (scontrol is not asked).
  ScopedEnv no_list("SLURM_JOB_NODELIST", nullptr);
  ScopedEnv no_list2("SLURM_NODELIST", nullptr);
  RunOptions o;
  o.nproc = 8;
  ApplySlurmDefaults(&o, false, false, false);
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "127.0.0.1");

  RunOptions given;
  given.nproc = 8;
  given.nnodes = 1;
  given.node_rank = 0;
  ApplySlurmDefaults(&given, true, true, true);
  EXPECT_EQ(given.nnodes, 1);
  EXPECT_EQ(given.node_rank, 0);

  // Without --nproc the command launches the ranks: nothing to place.
  RunOptions once;
  ApplySlurmDefaults(&once, false, false, false);
  EXPECT_EQ(once.nnodes, 1);
  EXPECT_EQ(once.node_rank, 0);
}

TEST(SlurmTest, TheNodeListIsNeverReadAsACommand) {
  // Issue 40: the node list went into `scontrol show hostnames '<list>'` through a shell.
  const std::string marker = ::testing::TempDir() + "/pt_slurm_pwned";
  std::remove(marker.c_str());
  ScopedEnv job("SLURM_JOB_ID", "42");
  const std::string list = "x'; touch " + marker + "; echo '";
  ScopedEnv nodes("SLURM_JOB_NODELIST", list.c_str());
  RunOptions o;
  o.nproc = 8;
  ApplySlurmDefaults(&o, false, false, false);
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the node list ran as a command";
}

TEST(SlurmTest, DefaultsIgnoreMalformedNumbersAndFallBackToTheStep) {
  ScopedEnv job("SLURM_JOB_ID", "42");
  ScopedEnv nodes("SLURM_JOB_NUM_NODES", "4x");
  ScopedEnv step_nodes("SLURM_NNODES", "3");
  ScopedEnv node_id("SLURM_NODEID", "");
  ScopedEnv no_list("SLURM_JOB_NODELIST", nullptr);
  ScopedEnv no_list2("SLURM_NODELIST", nullptr);
  RunOptions o;
  o.nproc = 1;
  ApplySlurmDefaults(&o, false, false, true);
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 0);
}

TEST(SlurmTest, NoDefaultsOutsideAnAllocation) {
  ScopedEnv no_job("SLURM_JOB_ID", nullptr);
  ScopedEnv nodes("SLURM_JOB_NUM_NODES", "4");
  RunOptions o;
  o.nproc = 8;
  ApplySlurmDefaults(&o, false, false, false);
  EXPECT_EQ(o.nnodes, 1);
}

}  // namespace
}  // namespace perftracker::cli
