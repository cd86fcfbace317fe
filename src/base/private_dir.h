// Folders of this user's that nobody else may change. Whoever can write into a folder can move a
// socket aside and bind their own, plant a link where a file will be written, or replace a file
// that will be read (credentials a client sends its token to); so such a folder is either made
// fresh or, when it already exists, used only if it is this user's and nobody else may write in
// it. Someone else's folder is refused, never chmod-ed. Two strengths:
// - private (MakePrivateDir): nobody else may even enter it (0700): the agent's socket folder,
//   the folder an agent watches for traces, the Slurm per-node folder;
// - own (MakeOwnFolder, CheckOwnFolder): others may read it but not write in it: a report
//   folder (a user may keep reports in a folder of theirs that others can read; a new one is
//   made 0700 all the same).
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

// PATH, the user's WHAT ("report folder"), made as MakePrivateDir makes one, or, when it exists,
// accepted if it is a folder owned by the effective user that neither group nor others may write
// (a link to it only if the link is the user's or root's). CheckOwnFolder checks without
// creating.
Status MakeOwnFolder(const std::string& path, const char* what);
Status CheckOwnFolder(const std::string& path, const char* what);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_PRIVATE_DIR_H_
