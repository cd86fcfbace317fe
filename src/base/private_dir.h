// Folders only this user may enter: the agent's socket folder, the folder an agent watches for
// traces, the Slurm per-node folder, a run's report folders. Whoever can write into such a folder
// can move a socket aside and bind their own, or plant a link where a file will be written; so
// one is either made fresh (0700) or, when it already exists, used only if it is this user's
// and nobody else may enter it. Someone else's folder is refused, never chmod-ed.
#ifndef PERFTRACKER_BASE_PRIVATE_DIR_H_
#define PERFTRACKER_BASE_PRIVATE_DIR_H_

#include <string>

#include "base/status.h"

namespace perftracker {

// PATH made a private folder: created with mode 0700 (its parents, when missing, as mkdir -p
// makes them), or, when it exists, accepted only if it is a folder (not a link to one) owned by
// the effective user with no group or other permission bits. Refused with one line naming PATH
// and what is wrong.
Status MakePrivateDir(const std::string& path);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_PRIVATE_DIR_H_
