#!/usr/bin/env python3
"""Lightning DDP job: lightning.Trainer(accelerator="cpu", devices=LOCAL_WORLD_SIZE,
num_nodes=WORLD_SIZE/LOCAL_WORLD_SIZE, strategy="ddp") on the external launcher's processes, gloo.

Shape and roles: every rank is an identical data-parallel replica (4 ranks by default) of a small
residual MLP classifier (a LightningModule); Lightning wraps it in DistributedDataParallel and
all-reduces (averages) its gradients in backward. Every rank has a DataLoader (Lightning adds a
DistributedSampler) over a synthetic classification dataset. torch.optim.AdamW.

Processes: Lightning does not spawn processes here. The script hands the Trainer a
TorchElasticEnvironment (plugins=[...]) whenever RANK/WORLD_SIZE/LOCAL_RANK are set, which reads
RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK, MASTER_ADDR and MASTER_PORT from the environment and
says the processes were created externally. torchrun is detected that way anyway
(TORCHELASTIC_RUN_ID); `perftracker run` sets the same variables but not TORCHELASTIC_RUN_ID, so the
plugin makes both launchers behave the same. Each rank checks at the start of training that
Lightning's global rank and world size are the launcher's.

Steps are timed by a Callback (on_train_batch_start .. on_train_batch_end; the --step-sleep-ms
wait is inside training_step, after the loss), rank 0 prints and writes --times.

Fault: --fault straggler --fault-rank R --fault-start K: inside training_step, after the forward
and before Lightning runs backward, rank R does --fault-work extra 512x512 matrix multiplies from
step K on, so the other ranks wait for it in DDP's gradient all-reduce.

Run (one rank per process, external launcher):
  torchrun --standalone --nproc-per-node 4 examples/jobs/lightning_ddp.py --steps 60
  torchrun --standalone --nproc-per-node 4 examples/jobs/lightning_ddp.py \\
      --fault straggler --fault-rank 2 --fault-start 20
  perftracker run --nproc 4 -- python examples/jobs/lightning_ddp.py
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (end_process, Straggler, SyntheticClassification, add_model_args, finish_job,  # noqa: E402
                    job_parser, mlp_block, start_job, step_sleep)


def parse_args(argv=None):
    p = job_parser(__doc__, steps=60, step_sleep_ms=60.0, fault_work=16, batch=32)
    return add_model_args(p).parse_args(argv)


def main():
    args = parse_args()
    env, torch, timer = start_job(args, "lightning_ddp")
    import lightning as L
    import torch.nn as nn
    import torch.nn.functional as F
    from lightning.pytorch.plugins.environments import TorchElasticEnvironment
    for noise in (".*does not have many workers.*", ".*The `srun` command is available.*", ".*LeafSpec.*"):
        warnings.filterwarnings("ignore", noise)

    straggler = Straggler(args, env.rank)

    class Classifier(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(*[mlp_block(args.dim) for _ in range(args.blocks)], nn.LayerNorm(args.dim),
                                     nn.Linear(args.dim, args.classes))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            straggler.maybe_work(self.global_step)  # before Lightning's backward (DDP all-reduce)
            step_sleep(args)
            self.last_loss = loss.detach()
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Timing(L.Callback):
        def on_train_start(self, trainer, module):
            torch.set_num_threads(args.threads)
            if (trainer.global_rank, trainer.world_size) != (env.rank, env.world):
                raise SystemExit(f"Lightning sees rank {trainer.global_rank}/{trainer.world_size}, "
                                 f"the launcher started rank {env.rank}/{env.world}")
            if env.rank == 0:
                print(f"[lightning_ddp] strategy {type(trainer.strategy).__name__}, "
                      f"environment {type(trainer.strategy.cluster_environment).__name__}, "
                      f"world {trainer.world_size}, processes created externally: "
                      f"{trainer.strategy.cluster_environment.creates_processes_externally}", flush=True)

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            timer.start(trainer.global_step)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            timer.stop(trainer.global_step - 1, module.last_loss.item())  # global_step counts optimizer steps done
            if timer.ends(trainer.global_step - 1):
                trainer.should_stop = True

    task = SyntheticClassification(8192, args.dim, args.classes, args.seed)
    loader = torch.utils.data.DataLoader(task.dataset(), batch_size=args.batch, shuffle=True, drop_last=True,
                                         generator=torch.Generator().manual_seed(args.seed))
    plugins = [TorchElasticEnvironment()]  # the launcher's processes and variables, never spawn
    trainer = L.Trainer(accelerator="cpu", devices=env.local_world, num_nodes=env.world // env.local_world,
                        strategy="ddp", plugins=plugins, callbacks=[Timing()], max_steps=args.steps, max_epochs=-1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=True, deterministic=False,
                        num_sanity_val_steps=0)
    torch.manual_seed(args.seed)
    trainer.fit(Classifier(), train_dataloaders=loader)

    finish_job(timer)


if __name__ == "__main__":
    main()
    end_process()
