import sys
import torch
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
    for i in range(3):
        with torch.profiler.record_function(f"ProfilerStep#{i}"):
            with torch.profiler.record_function('say "hi" / back'):
                torch.ones(64, 64).mm(torch.ones(64, 64))
            with torch.profiler.record_function('odd "quote'):
                torch.ones(8).sum()
p.export_chrome_trace(sys.argv[1])
