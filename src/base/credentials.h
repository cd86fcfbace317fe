// Who may steer a job: the shared token and where a run keeps it. The embedded server of
// `perftracker run` makes a random token per run and keeps it, with the server's address, in
// REPORT_DIR/.perftracker/ (a 0700 folder, 0600 files): the run's own agent and the user's
// `perftracker status|trigger --report-dir DIR` read it there; other local users cannot, and
// their calls are refused. Token files given with --token-file must not be readable by others
// and must be long enough to resist guessing.
#ifndef PERFTRACKER_BASE_CREDENTIALS_H_
#define PERFTRACKER_BASE_CREDENTIALS_H_

#include <sys/types.h>

#include <string>

#include "base/status.h"

namespace perftracker {

// Tokens shorter than this are refused: a few characters can be guessed over a network.
inline constexpr size_t kMinTokenLength = 16;

// 32 random bytes from the kernel, as 64 hex digits.
StatusOr<std::string> NewToken();

// Reads a token file: its first line, whitespace trimmed. Refused with one line naming the
// file: unreadable, empty, shorter than kMinTokenLength, or readable by group or others.
StatusOr<std::string> ReadTokenFile(const std::string& path);

struct RunCredentials {
  std::string server;  // address:port of the run's embedded server
  std::string token;
};

// What `run` and `server` write is their user's alone (files 0600, folders 0700) whatever the
// user's umask: UsePrivateUmask sets umask 077 for the process (once; later calls keep the
// first umask seen). The processes they start get the user's umask back (UserUmask): a
// training job's own files are not ours to restrict.
void UsePrivateUmask();
mode_t UserUmask();

// The folder a run keeps its credentials in: REPORT_DIR/.perftracker.
std::string CredentialsDir(const std::string& report_dir);

// Writes the credentials of a run (folder 0700, files 0600, replacing an earlier run's). Fails
// if the folder exists and belongs to someone else.
Status WriteRunCredentials(const std::string& report_dir, const RunCredentials& c);

// Reads what WriteRunCredentials wrote, with ReadTokenFile's checks, only from a report folder
// CheckOwnFolder accepts and a credentials folder of this user's that nobody else may read
// (else a report folder's owner could point `status` at a server of theirs and get the token).
StatusOr<RunCredentials> ReadRunCredentials(const std::string& report_dir);

// TLS for the online path off loopback, as PEM files. The server presents CERT and KEY and,
// given CA, accepts only clients whose certificate CA signed (mutual TLS); a client verifies
// the server against CA and presents CERT and KEY when given.
struct TlsFiles {
  std::string cert, key, ca;
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

struct TlsPem {
  std::string cert, key, ca;
};

// PEM files are small; anything larger is not one.
inline constexpr size_t kMaxPemBytes = 1 << 20;

// Reads FILES for a server (cert and key required) or a client (ca required; cert and key both
// or neither). A key file readable by group or others is refused, like a token file.
StatusOr<TlsPem> ReadTls(const TlsFiles& files, bool server);

}  // namespace perftracker

#endif  // PERFTRACKER_BASE_CREDENTIALS_H_
