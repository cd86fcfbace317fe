#!/usr/bin/env python3
"""Hugging Face transformers.Trainer job: DDP (gloo, CPU) of a tiny causal language model built
from a config (LlamaConfig, random weights, nothing downloaded: HF_HUB_OFFLINE=1).

Shape and roles: every rank is an identical data-parallel replica (4 ranks by default). The
external launcher starts the ranks; TrainingArguments(use_cpu=True, ddp_backend="gloo") makes
Accelerate see RANK/WORLD_SIZE/LOCAL_RANK, initialise gloo and wrap the model in
DistributedDataParallel (the Trainer does not start processes itself). Every rank has the Trainer's
DataLoader (a DistributedSampler over a synthetic, learnable token dataset: arithmetic sequences
mod the vocabulary). torch.optim.AdamW (the Trainer's default optimizer), a linear LR schedule.

Steps are timed by a TrainerCallback (on_step_begin .. on_step_end; the --step-sleep-ms wait is in
on_step_end, after the optimizer step), rank 0 prints and writes --times; the Trainer itself logs
the loss every --print-every steps.

Fault: --fault straggler --fault-rank R --fault-start K: a TrainerCallback's on_step_begin does
--fault-work extra 512x512 matrix multiplies on rank R from step K on, before the step's forward,
so the other ranks wait for it in DDP's gradient all-reduce.

Run (one rank per process, external launcher):
  torchrun --standalone --nproc-per-node 4 examples/jobs/hf_trainer.py --steps 60
  torchrun --standalone --nproc-per-node 4 examples/jobs/hf_trainer.py --fault straggler --fault-rank 2 --fault-start 20
  perftracker run --nproc 4 -- python examples/jobs/hf_trainer.py
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import end_process, DistEnv, StepTimer, Straggler, finish_job, job_parser, step_sleep  # noqa: E402


def parse_args(argv=None):
    p = job_parser(__doc__, steps=60, step_sleep_ms=60.0, fault_work=16, batch=8)
    p.add_argument("--seq", type=int, default=32, help="sequence length")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--output-dir", default="", help="Trainer output_dir (default: a temporary folder)")
    return p.parse_args(argv)


def main():
    args = parse_args()
    env = DistEnv()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Accelerate sets torch's thread count from the core count unless OMP_NUM_THREADS is set.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments
    from transformers.utils import logging as hf_logging
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()

    class ArithmeticTokens(torch.utils.data.Dataset):
        """Sequences start, start+stride, ... mod vocab: the model can learn to continue them."""

        def __init__(self, n, seq, vocab, seed):
            g = torch.Generator().manual_seed(seed + 7919)
            start = torch.randint(0, vocab, (n, 1), generator=g)
            stride = torch.randint(1, 8, (n, 1), generator=g)
            self.ids = (start + stride * torch.arange(seq)) % vocab

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    timer = StepTimer(args, env.rank, "hf_trainer")
    straggler = Straggler(args, env.rank)

    class JobCallback(TrainerCallback):
        """Step timing, the straggler (on_step_begin) and the per-step wait (on_step_end)."""

        def on_train_begin(self, targs, state, control, **kw):
            torch.set_num_threads(args.threads)

        def on_step_begin(self, targs, state, control, **kw):
            timer.start(state.global_step)
            straggler.maybe_work(state.global_step)

        def on_step_end(self, targs, state, control, **kw):
            step_sleep(args)
            timer.stop(state.global_step - 1)  # global_step was just incremented
            if timer.ends(state.global_step - 1):
                control.should_training_stop = True

    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                      num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=args.seq, tie_word_embeddings=False)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(cfg)
    tmp = None if args.output_dir else tempfile.TemporaryDirectory(prefix=f"hf_trainer_r{env.rank}_")
    out_dir = args.output_dir or tmp.name  # save_strategy="no": the Trainer writes nothing there
    targs = TrainingArguments(
        output_dir=out_dir, max_steps=args.steps, per_device_train_batch_size=args.batch,
        learning_rate=3e-3, warmup_steps=0, logging_steps=max(1, args.print_every), save_strategy="no",
        report_to="none",
        use_cpu=True, ddp_backend="gloo", ddp_find_unused_parameters=False, dataloader_num_workers=0,
        disable_tqdm=True, seed=args.seed, data_seed=args.seed, log_level="error")
    trainer = Trainer(model=model, args=targs, train_dataset=ArithmeticTokens(4096, args.seq, args.vocab, args.seed),
                      callbacks=[JobCallback()])
    if env.rank == 0:
        print(f"[hf_trainer] world {targs.world_size}, parallel mode {targs.parallel_mode}, "
              f"torch threads {torch.get_num_threads()}", flush=True)
    trainer.train()

    finish_job(timer)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
    end_process()
