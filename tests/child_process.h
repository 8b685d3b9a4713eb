// A service binary (collector, deliverer) as a child process, the way users run it: its stdout
// (JSON log lines) is read by a thread, echoed to stderr with a prefix, and kept for look-ups.
// Test-only.
#ifndef HOOKRELAY_TESTS_CHILD_PROCESS_H_
#define HOOKRELAY_TESTS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace hookrelay::test {

// How long a child may take to start or to log an expected line.
inline constexpr absl::Duration kChildWait = absl::Seconds(60);

// The path of a binary in the test's runfiles, e.g. RunfilesPath("collector/collector").
std::string RunfilesPath(std::string_view workspace_relative);

class ChildProcess {
 public:
  // Spawns `args` (args[0] is the binary) and waits until a log line whose "msg" is `ready_msg`
  // appears (kChildWait); that line is kept as ready_line(). Errors include the child's output.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(std::string name,
                                                             std::vector<std::string> args,
                                                             std::string_view ready_msg);
  // The same for any program: ready when a line of its output satisfies `ready` (`what` names
  // the wait in errors); stderr joins stdout when `merge_stderr`.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> StartWhen(
      std::string name, std::vector<std::string> args,
      const std::function<bool(const std::string&)>& ready, std::string_view what,
      bool merge_stderr);
  // SIGKILLs the child if it was not reaped yet.
  ~ChildProcess();

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& ready_line() const { return ready_line_; }
  // An integer field of ready_line() (e.g. "grpc_port"), or 0.
  int IntField(std::string_view field) const;

  // kill(pid, sig); false when it failed.
  bool Signal(int sig);
  // Reaps the child; returns its wait status.
  int Wait();

  // Waits (kChildWait) until `count` lines satisfy `pred`, or the output ends.
  bool WaitForLine(const std::function<bool(const std::string&)>& pred, int count = 1);
  // Waits for `count` lines whose "msg" starts with `msg`.
  bool WaitForMsg(const std::string& msg, int count = 1);
  // The first line whose "msg" is `msg`, or "".
  std::string FindLine(const std::string& msg);
  std::string Output();
  // Waits for the end of the child's output (it exited).
  void WaitForEof();

 private:
  ChildProcess(std::string name, pid_t pid, int fd);
  void ReadLoop();

  const std::string name_;
  const pid_t pid_;
  const int fd_;
  std::string ready_line_;
  bool reaped_ = false;
  std::thread reader_;

  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool eof_ ABSL_GUARDED_BY(mu_) = false;
};

// The collector binary on 127.0.0.1 port 0 everywhere; ready at "collector serving" (ports via
// IntField("http_port"), "grpc_port", "metrics_port").
absl::StatusOr<std::unique_ptr<ChildProcess>> StartCollectorProcess(
    const std::string& config_path, const std::string& data_dir,
    std::vector<std::string> extra_args = {});

// The deliverer binary with --allow_private_networks and metrics on port 0; ready at
// "deliverer running".
absl::StatusOr<std::unique_ptr<ChildProcess>> StartDelivererProcess(
    const std::vector<int>& collector_grpc_ports, std::vector<std::string> extra_args = {});

}  // namespace hookrelay::test

#endif  // HOOKRELAY_TESTS_CHILD_PROCESS_H_
