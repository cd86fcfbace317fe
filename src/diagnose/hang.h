// Hang diagnosis: when a job stops making progress, every rank's Python stacks and its last
// Python-level collective are collected; this module decides which ranks did not arrive at the
// collective the others wait in, and where they are (file:line). Waiting ranks sit in
// communication (torch.distributed, DDP's backward all-reduce, a Work.wait); a rank that is
// elsewhere, or whose stack differs from the majority's, is the one the job waits for.
#ifndef PERFTRACKER_DIAGNOSE_HANG_H_
#define PERFTRACKER_DIAGNOSE_HANG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "diagnose/finding.h"
#include "pattern/collected.h"

namespace perftracker::diagnose {

// The stack replies the collectors gather (pattern/collected.h).
using pattern::LastCollective;
using pattern::RankStacks;
using pattern::StackFrame;
using pattern::ThreadStack;

// One "hang" finding (class subset): ranks that did not arrive, with their location as
// functions (name "file:line in function", stack outermost first) and in evidence_text;
// ranks in EXPECTED that sent no stacks are named too (dead, or stuck holding the GIL).
// Returns a Diagnosis with job filled from the replies; no finding only when no rank was given.
Diagnosis DiagnoseHang(const std::vector<RankStacks>& replies, const std::vector<int>& expected,
                       double stalled_seconds);

// A reported hang after which the job went on: iterations resumed (at RESUMED_STEP) after
// STALLED_SECONDS without one. Slow is not hung, so each hang finding of HANG becomes what the
// stall was: a straggler where ranks were named (the rank the others waited for, at the place
// its stacks showed; why it is slow is the next window's to say), or a stall of the whole job
// where every rank stood at the same place. Other findings are kept; the hang's notes are not.
Diagnosis SlowNotHung(const Diagnosis& hang, double stalled_seconds, int64_t resumed_step);

// True when the frame is inside communication or a wait on it (torch.distributed, DDP,
// autograd's backward that runs the all-reduce hooks, Work.wait, barrier).
bool IsCommunicationFrame(const StackFrame& frame);
// Frames of the interpreter's own library, site-packages and torch are not where the user's
// code stands; the innermost frame outside them is.
bool IsLibraryFrame(const StackFrame& frame);

}  // namespace perftracker::diagnose

#endif  // PERFTRACKER_DIAGNOSE_HANG_H_
