"""Rank identity from any launcher's environment (python/perftracker/identity.py, issue 16):
torchrun and perftracker run, Slurm's srun, Open MPI's mpirun, MPICH/PMI; and a helper Python
of a rank stays off whichever launcher named the rank."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptest  # noqa: E402

sys.path.insert(0, os.path.join(ptest.SOURCE, "python"))
from perftracker import identity  # noqa: E402


class Identity(unittest.TestCase):
    def who(self, **env):
        return identity.identity(env, hostname="machine")

    def test_torchrun(self):
        self.assertEqual(self.who(RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", GROUP_RANK="1"),
                         {"launcher": "torch", "rank": 3, "world_size": 8, "local_rank": 1,
                          "node_rank": 1, "host": "machine", "attempt": 0})

    def test_slurm_names_the_node(self):
        self.assertEqual(self.who(SLURM_PROCID="5", SLURM_NTASKS="8", SLURM_LOCALID="1",
                                  SLURM_NODEID="2", SLURMD_NODENAME="n2"),
                         {"launcher": "slurm", "rank": 5, "world_size": 8, "local_rank": 1,
                          "node_rank": 2, "host": "n2", "attempt": 0})

    def test_open_mpi(self):
        self.assertEqual(self.who(OMPI_COMM_WORLD_RANK="2", OMPI_COMM_WORLD_SIZE="4",
                                  OMPI_COMM_WORLD_LOCAL_RANK="0", OMPI_COMM_WORLD_NODE_RANK="1"),
                         {"launcher": "openmpi", "rank": 2, "world_size": 4, "local_rank": 0,
                          "node_rank": 1, "host": "machine", "attempt": 0})

    def test_mpich_pmi(self):
        w = self.who(PMI_RANK="1", PMI_SIZE="2", MPI_LOCALRANKID="1")
        self.assertEqual((w["launcher"], w["rank"], w["world_size"], w["local_rank"]),
                         ("pmi", 1, 2, 1))

    def test_torchrun_inside_an_srun_step_is_torchruns_rank(self):
        w = self.who(RANK="7", WORLD_SIZE="16", LOCAL_RANK="3", SLURM_PROCID="1",
                     SLURM_NTASKS="2", SLURMD_NODENAME="n2")
        self.assertEqual((w["launcher"], w["rank"], w["world_size"]), ("torch", 7, 16))
        self.assertEqual(w["host"], "n2")  # still Slurm's node: several may share a machine

    def test_nothing_or_nonsense_is_unknown(self):
        for env in ({}, {"RANK": "3"}, {"RANK": "x", "WORLD_SIZE": "4"},
                    {"SLURM_PROCID": "4", "SLURM_NTASKS": "4"},
                    {"PMI_RANK": "-1", "PMI_SIZE": "2"},
                    {"RANK": "0", "WORLD_SIZE": str(1 << 21)}):
            w = self.who(**env)
            self.assertIsNone(w["launcher"], env)
            self.assertIsNone(w["rank"], env)
            self.assertEqual(w["host"], "machine")

    def test_torchrun_restart_is_the_attempt(self):
        def attempt(count):
            return self.who(RANK="1", WORLD_SIZE="4", TORCHELASTIC_RESTART_COUNT=count)["attempt"]
        self.assertEqual(attempt("2"), 2)
        for bad in ("", "x", "-1", str(1 << 21)):
            self.assertEqual(attempt(bad), 0, bad)

    def test_a_launchers_own_python_is_no_rank(self):
        py = "/venv/bin/python3"
        self.assertTrue(identity.is_launcher(["/venv/bin/torchrun", "--nproc-per-node", "2", "t.py"],
                                             [py, "/venv/bin/torchrun", "--nproc-per-node", "2", "t.py"]))
        self.assertTrue(identity.is_launcher(["-m", "t.py"],
                                             [py, "-u", "-m", "torch.distributed.run", "t.py"]))
        self.assertTrue(identity.is_launcher(["-m"], [py, "-mtorch.distributed.launch", "t.py"]))
        # A rank (the script torchrun starts), and a script whose own arguments say -m.
        self.assertFalse(identity.is_launcher(["t.py", "--x"], [py, "-u", "t.py", "--x"]))
        self.assertFalse(identity.is_launcher(["t.py", "-m", "torch.distributed.run"],
                                              [py, "t.py", "-m", "torch.distributed.run"]))
        self.assertFalse(identity.is_launcher(["-c"], [py, "-c", "pass"]))
        self.assertFalse(identity.is_launcher([], []))

    def test_each_node_finds_its_own_agent(self):
        t = "/tmp/perftracker-7-{node}.sock"
        self.assertEqual(identity.agent_socket(t, {"SLURMD_NODENAME": "n2"}), "/tmp/perftracker-7-n2.sock")
        self.assertEqual(identity.agent_socket("/tmp/a.sock", {"SLURMD_NODENAME": "n2"}), "/tmp/a.sock")

    def test_a_ranks_helper_stays_off_under_slurm(self):
        from perftracker import hooks
        env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", hooks.OWNER_ENV: "100:3"}
        self.assertTrue(hooks.is_helper_of_a_rank(env, pid=200))   # a DataLoader worker
        self.assertFalse(hooks.is_helper_of_a_rank(env, pid=100))  # the rank itself
        env[hooks.OWNER_ENV] = "100:"  # a launcher-like Python's children are ranks
        self.assertFalse(hooks.is_helper_of_a_rank(env, pid=200))


if __name__ == "__main__":
    ptest.main()
