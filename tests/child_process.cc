#include "tests/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"
#include "tests/collector_test_util.h"

extern char** environ;

namespace hookrelay::test {

std::string RunfilesPath(std::string_view workspace_relative) {
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr && *workspace != '\0' ? workspace : "hookrelay", "/",
                      common::ToAbsl(workspace_relative));
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(std::string name,
                                                                  std::vector<std::string> args,
                                                                  std::string_view ready_msg) {
  const std::string msg(ready_msg);
  return StartWhen(
      std::move(name), std::move(args),
      [msg](const std::string& line) { return JsonStr(line, "/msg") == msg; },
      absl::StrCat("log \"", msg, "\""), /*merge_stderr=*/false);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::StartWhen(
    std::string name, std::vector<std::string> args,
    const std::function<bool(const std::string&)>& ready, std::string_view what,
    bool merge_stderr) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (merge_stderr) posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("posix_spawn ", args[0], ": ", strerror(rc)));
  }
  auto process = std::unique_ptr<ChildProcess>(new ChildProcess(std::move(name), pid, fds[0]));
  if (!process->WaitForLine(ready)) {
    return absl::DeadlineExceededError(absl::StrCat(process->name_, " did not ", std::string(what),
                                                    "; its output:\n", process->Output()));
  }
  {
    absl::MutexLock lock(&process->mu_);
    for (const std::string& line : process->lines_) {
      if (ready(line)) {
        process->ready_line_ = line;
        break;
      }
    }
  }
  return process;
}

ChildProcess::ChildProcess(std::string name, pid_t pid, int fd)
    : name_(std::move(name)), pid_(pid), fd_(fd) {
  reader_ = std::thread([this] { ReadLoop(); });
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    Wait();
  }
  reader_.join();
  close(fd_);
}

int ChildProcess::IntField(std::string_view field) const {
  int value = 0;
  if (!absl::SimpleAtoi(JsonAt(ready_line_, absl::StrCat("/", common::ToAbsl(field))), &value)) {
    return 0;
  }
  return value;
}

bool ChildProcess::Signal(int sig) { return kill(pid_, sig) == 0; }

int ChildProcess::Wait() {
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  return status;
}

bool ChildProcess::WaitForLine(const std::function<bool(const std::string&)>& pred, int count) {
  absl::MutexLock lock(&mu_);
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int n = 0;
    for (const std::string& line : lines_) n += pred(line) ? 1 : 0;
    return n >= count;
  };
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return eof_ || enough(); };
  mu_.AwaitWithTimeout(absl::Condition(&ready), kChildWait);
  return enough();
}

bool ChildProcess::WaitForMsg(const std::string& msg, int count) {
  return WaitForLine(
      [&](const std::string& line) { return absl::StartsWith(JsonStr(line, "/msg"), msg); },
      count);
}

std::string ChildProcess::FindLine(const std::string& msg) {
  absl::MutexLock lock(&mu_);
  for (const std::string& line : lines_) {
    if (JsonStr(line, "/msg") == msg) return line;
  }
  return "";
}

std::string ChildProcess::Output() {
  absl::MutexLock lock(&mu_);
  return absl::StrJoin(lines_, "\n");
}

void ChildProcess::WaitForEof() {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&eof_), kChildWait);
}

void ChildProcess::ReadLoop() {
  std::string partial;
  char buf[4096];
  while (true) {
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    partial.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      std::string line = partial.substr(0, nl);
      partial.erase(0, nl + 1);
      fprintf(stderr, "[%s %d] %s\n", name_.c_str(), static_cast<int>(pid_), line.c_str());
      absl::MutexLock lock(&mu_);
      lines_.push_back(std::move(line));
    }
  }
  absl::MutexLock lock(&mu_);
  if (!partial.empty()) lines_.push_back(std::move(partial));
  eof_ = true;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> StartCollectorProcess(
    const std::string& config_path, const std::string& data_dir,
    std::vector<std::string> extra_args) {
  std::vector<std::string> args = {
      RunfilesPath("collector/collector"),
      absl::StrCat("--config=", config_path),
      absl::StrCat("--data_dir=", data_dir),
      "--grpc_address=127.0.0.1:0",
      "--http_address=127.0.0.1:0",
      "--metrics_address=127.0.0.1:0",
      "--admin_http_address=127.0.0.1:0",
  };
  for (std::string& a : extra_args) args.push_back(std::move(a));
  absl::StatusOr<std::unique_ptr<ChildProcess>> p =
      ChildProcess::Start("collector", std::move(args), "collector serving");
  if (p.ok() && ((*p)->IntField("http_port") <= 0 || (*p)->IntField("grpc_port") <= 0)) {
    return absl::InternalError(absl::StrCat("no ports in: ", (*p)->ready_line()));
  }
  return p;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> StartDelivererProcess(
    const std::vector<int>& collector_grpc_ports, std::vector<std::string> extra_args) {
  std::vector<std::string> addresses;
  for (int port : collector_grpc_ports) addresses.push_back(absl::StrCat("127.0.0.1:", port));
  std::vector<std::string> args = {
      RunfilesPath("deliverer/deliverer"),
      absl::StrCat("--collector=", absl::StrJoin(addresses, ",")),
      "--metrics_address=127.0.0.1:0",
      "--allow_private_networks",
  };
  for (std::string& a : extra_args) args.push_back(std::move(a));
  return ChildProcess::Start("deliverer", std::move(args), "deliverer running");
}

}  // namespace hookrelay::test
