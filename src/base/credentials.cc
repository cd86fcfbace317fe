#include "base/credentials.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>

#include "base/private_dir.h"
#include "base/private_file.h"

namespace perftracker {
namespace {

std::string Errno() { return std::strerror(errno); }

// Writes DATA to PATH, created 0600 (an earlier file is replaced, never followed if a link).
Status WritePrivate(const std::string& path, const std::string& data) {
  const Status st = WritePrivateFileAtomically(path, data, AtPath::kReplace);
  return st.ok() ? st : Unavailable("cannot write: " + st.message());
}

std::string Trimmed(std::string line) {
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  line.erase(line.begin(), std::find_if(line.begin(), line.end(), not_space));
  line.erase(std::find_if(line.rbegin(), line.rend(), not_space).base(), line.end());
  return line;
}

}  // namespace

StatusOr<std::string> NewToken() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Internal(fmt::format("cannot make a token: getrandom: {}", Errno()));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return InvalidArgument(fmt::format("{}: cannot read token file: {}", path, Errno()));
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    return InvalidArgument(
        fmt::format("{}: token file is readable by others (mode {:04o}); chmod 600 it", path,
                    st.st_mode & 07777));
  }
  std::ifstream in(path);
  if (!in) return InvalidArgument(fmt::format("{}: cannot read token file", path));
  std::string line;
  std::getline(in, line);
  line = Trimmed(std::move(line));
  if (line.empty()) return InvalidArgument(fmt::format("{}: token file is empty", path));
  if (line.size() < kMinTokenLength) {
    return InvalidArgument(fmt::format("{}: token is {} characters; use at least {}", path,
                                       line.size(), kMinTokenLength));
  }
  return line;
}

namespace {

StatusOr<std::string> ReadPem(const std::string& path, const char* what, bool secret) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return InvalidArgument(fmt::format("{}: cannot read {}: {}", path, what, Errno()));
  if (secret && (st.st_mode & (S_IRWXG | S_IRWXO))) {
    return InvalidArgument(fmt::format("{}: {} is readable by others (mode {:04o}); chmod 600 it",
                                       path, what, st.st_mode & 07777));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxPemBytes)
    return InvalidArgument(fmt::format("{}: {} is over 1 MiB: not a PEM file", path, what));
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof())
    return InvalidArgument(fmt::format("{}: cannot read {}", path, what));
  if (data.find("-----BEGIN ") == std::string::npos)
    return InvalidArgument(fmt::format("{}: {} is not PEM (no -----BEGIN line)", path, what));
  return data;
}

}  // namespace

StatusOr<TlsPem> ReadTls(const TlsFiles& f, bool server) {
  if (server && (f.cert.empty() || f.key.empty()))
    return InvalidArgument("TLS: a server needs --tls-cert and --tls-key");
  if (!server && f.ca.empty())
    return InvalidArgument("TLS: a client needs --tls-ca to check the server's certificate");
  if (f.cert.empty() != f.key.empty())
    return InvalidArgument("TLS: --tls-cert and --tls-key go together");
  TlsPem pem;
  if (!f.cert.empty()) {
    PT_ASSIGN_OR_RETURN(pem.cert, ReadPem(f.cert, "TLS certificate", false));
    PT_ASSIGN_OR_RETURN(pem.key, ReadPem(f.key, "TLS key", true));
  }
  if (!f.ca.empty()) {
    PT_ASSIGN_OR_RETURN(pem.ca, ReadPem(f.ca, "TLS CA certificate", false));
  }
  return pem;
}

namespace {
std::once_flag umask_once;
mode_t user_umask = 022;
}  // namespace

void UsePrivateUmask() {
  std::call_once(umask_once, [] { user_umask = ::umask(077); });
}

mode_t UserUmask() { return user_umask; }

std::string CredentialsDir(const std::string& report_dir) { return report_dir + "/.perftracker"; }

Status WriteRunCredentials(const std::string& report_dir, const RunCredentials& c) {
  const std::string dir = CredentialsDir(report_dir);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Unavailable(fmt::format("{}: cannot create: {}", dir, Errno()));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Unavailable(fmt::format("{}: not a folder", dir));
  if (st.st_uid != ::geteuid()) return Unavailable(fmt::format("{}: belongs to another user", dir));
  if (::chmod(dir.c_str(), 0700) != 0)
    return Unavailable(fmt::format("{}: cannot make it private: {}", dir, Errno()));
  PT_RETURN_IF_ERROR(WritePrivate(dir + "/token", c.token + "\n"));
  return WritePrivate(dir + "/server", c.server + "\n");
}

StatusOr<RunCredentials> ReadRunCredentials(const std::string& report_dir) {
  const std::string dir = CredentialsDir(report_dir);
  RunCredentials c;
  PT_RETURN_IF_ERROR(CheckOwnFolder(report_dir, "report folder"));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0 &&
      (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)) {
    return InvalidArgument(fmt::format(
        "{}: not a private folder of yours (uid {}, mode {:04o}): its credentials are not "
        "trusted",
        dir, st.st_uid, st.st_mode & 07777));
  }
  std::ifstream in(dir + "/server");
  if (!in) {
    return NotFound(fmt::format(
        "{}: no run's credentials here (is it the --report-dir of a running `perftracker run`, "
        "and yours?)",
        report_dir));
  }
  std::getline(in, c.server);
  c.server = Trimmed(std::move(c.server));
  PT_ASSIGN_OR_RETURN(c.token, ReadTokenFile(dir + "/token"));
  return c;
}

}  // namespace perftracker
