// Files this user's process writes where someone else might have planted something: a folder
// that came from the environment or the command line. Each file is made afresh (O_CREAT|O_EXCL|
// O_NOFOLLOW, mode 0600), so a link planted at its name is never followed and a file already
// there is never written into: a hard link to a victim would otherwise be truncated through.
// The one place these rules live for the worker's window files, the collectives ring's dump,
// the credentials and the Flight Recorder export (a fatal signal's ring dump, which may not
// allocate, keeps its own copy in worker/collective_ring.cc).
#ifndef PERFTRACKER_BASE_PRIVATE_FILE_H_
#define PERFTRACKER_BASE_PRIVATE_FILE_H_

#include <string>
#include <string_view>

#include "base/status.h"

namespace perftracker {

// What CreatePrivateFile does with a file already at its name.
enum class IfPresent {
  kFail,            // fails (EEXIST)
  kReplaceOwnFile,  // a regular file of this user's (a writer that died left it) is removed
                    // first; a link, another user's file or anything else still fails
};

// PATH created afresh as above and DATA written into it, all of it. Errors: InvalidArgument
// "PATH: <errno text>" when it cannot be created, DataLoss "PATH: write failed: <errno text>"
// once it was; *ERR (if given) gets the errno.
Status CreatePrivateFile(const std::string& path, std::string_view data, IfPresent if_present,
                         int* err = nullptr);

// How WritePrivateFileAtomically puts the finished file in place.
enum class AtPath {
  kReplace,  // renamed over whatever file is at PATH
  kKeep,     // linked to PATH, which must not exist: a file already there fails the write
};

// DATA into PATH through PATH.tmp, created as CreatePrivateFile does (a stale one of this user's
// replaced), so that a reader sees the whole file or none. PATH.tmp is gone afterwards.
Status WritePrivateFileAtomically(const std::string& path, std::string_view data, AtPath at_path);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_PRIVATE_FILE_H_
