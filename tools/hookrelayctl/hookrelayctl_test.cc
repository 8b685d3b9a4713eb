// The hookrelayctl binary as users run it, as a child process, against an in-process Admin
// server (real RocksDbJobStore, real gRPC on 127.0.0.1:0): the dead-letter table and JSON lines,
// following pages up to --limit, filters, replay, the admin token, usage errors (exit 2) and an
// unreachable collector (exit 1); deletion requests (SPEC §6.1): create with and without
// sources, idempotent request ids, get, list newest first, the server's refusals; audiences
// (SPEC §6.2): usage errors, create / get / list / sync / delete, the server's refusals.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <simdjson.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "collector/admin/admin_test_util.h"
#include "collector/store/store.h"
#include "collector/store/rocksdb/rocksdb_job_store.h"
#include "common/time_format.h"
#include "hookrelay/v1/job.pb.h"

extern char** environ;

namespace hookrelay::hookrelayctl {
namespace {

using ::hookrelay::collector::AdminTestServer;
using ::testing::_;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr char kTokenVariable[] = "HOOKRELAY_ADMIN_TOKEN";

std::string Binary() {
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr && *workspace != '\0' ? workspace : "hookrelay",
                      "/tools/hookrelayctl/hookrelayctl");
}

struct Result {
  int exit_code = -1;  // -1 when the child did not exit normally
  std::string out;
  std::string err;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  return os << "exit " << r.exit_code << "\n--- stdout:\n" << r.out << "--- stderr:\n" << r.err;
}

// Runs the binary with `args`, this process's environment without $HOOKRELAY_ADMIN_TOKEN, plus
// `env`; returns its exit code and everything it wrote.
Result RunCtl(const std::vector<std::string>& args,
           const std::vector<std::string>& env = {}) {
  Result result;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  const std::string binary = Binary();
  std::vector<std::string> argv_storage = {binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, absl::StrCat(kTokenVariable, "="))) env_storage.push_back(*e);
  }
  env_storage.insert(env_storage.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    ADD_FAILURE() << "posix_spawn " << binary << ": " << strerror(rc);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return result;
  }
  // Both pipes are drained together so that a full one never blocks the child.
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (poll(fds, 2, 60000) <= 0) {
      if (errno == EINTR) continue;
      ADD_FAILURE() << "hookrelayctl wrote nothing for 60 s";
      kill(pid, SIGKILL);
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[65536];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// The whitespace-separated fields of a table row (no cell in these tests has a space but REASON,
// which is last).
std::vector<std::string> Fields(const std::string& row) {
  return absl::StrSplit(row, ' ', absl::SkipEmpty());
}

std::string Iso(absl::Time t) { return common::FormatIso8601Millis(t); }

class HookrelayctlTest : public ::testing::Test {
 protected:
  void StartServer(std::string token = "") {
    absl::StatusOr<std::unique_ptr<AdminTestServer>> server = AdminTestServer::Start(token);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    collector_flag_ = absl::StrCat("--admin-url=", server_->http_url());
  }

  std::vector<uint64_t> MakeDeadLetters(const std::vector<std::string>& destinations,
                                        absl::Duration step = absl::ZeroDuration()) {
    absl::StatusOr<std::vector<uint64_t>> ids = server_->MakeDeadLetters(destinations, step);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<uint64_t>{};
  }

  // hookrelayctl --collector=<server> <args...>
  Result Ctl(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), collector_flag_);
    return RunCtl(args, env);
  }

  // The ids in `dead-letters list --json` output.
  std::vector<uint64_t> JsonIds(const std::string& out) {
    std::vector<uint64_t> ids;
    simdjson::dom::parser parser;
    for (const std::string& line : Lines(out)) {
      simdjson::dom::element e;
      uint64_t id = 0;
      EXPECT_EQ(parser.parse(line).get(e), simdjson::SUCCESS) << line;
      EXPECT_EQ(e["id"].get(id), simdjson::SUCCESS) << line;
      ids.push_back(id);
    }
    return ids;
  }

  std::unique_ptr<AdminTestServer> server_;
  std::string collector_flag_;
};

// `list` prints an aligned table with one row per dead letter, oldest id first.
TEST_F(HookrelayctlTest, ListPrintsATable) {
  StartServer();
  const absl::Time t0 = server_->clock().Now();
  const std::vector<uint64_t> ids = MakeDeadLetters({"orders-hook", "d2"}, absl::Minutes(1));
  ASSERT_THAT(ids, SizeIs(2));

  const Result r = Ctl({"dead-letters", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.err, "");
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_THAT(lines, SizeIs(3)) << r;
  EXPECT_THAT(lines[0], StartsWith("ID"));
  EXPECT_THAT(Fields(lines[0]), ElementsAre("ID", "DESTINATION", "TYPE", "MESSAGE", "ID", "DIED",
                                            "ATTEMPTS", "REASON"));
  EXPECT_THAT(Fields(lines[1]),
              ElementsAre(absl::StrCat(ids[0]), "orders-hook", "track", "msg-0", Iso(t0), "1",
                          "HTTP", "410", "from", "https://hooks.example.com/orders-hook"));
  EXPECT_THAT(Fields(lines[2]),
              ElementsAre(absl::StrCat(ids[1]), "d2", "track", "msg-1",
                          Iso(t0 + absl::Minutes(1)), "1", "HTTP", "410", "from",
                          "https://hooks.example.com/d2"));
  // Columns are aligned: each cell starts under its header.
  for (const char* header : {"DESTINATION", "TYPE", "MESSAGE ID", "DIED", "ATTEMPTS", "REASON"}) {
    const size_t column = lines[0].find(header);
    ASSERT_NE(column, std::string::npos) << header;
    for (int row : {1, 2}) {
      ASSERT_GT(lines[row].size(), column) << header;
      EXPECT_NE(lines[row][column], ' ') << header << " in: " << lines[row];
      EXPECT_EQ(lines[row][column - 1], ' ') << header << " in: " << lines[row];
    }
  }
}

// --json prints one complete JSON object per line: the job, its history and its event.
TEST_F(HookrelayctlTest, ListJsonLines) {
  StartServer();
  const absl::Time t0 = server_->clock().Now();
  const std::vector<uint64_t> ids = MakeDeadLetters({"d1", "d2", "d2"}, absl::Minutes(1));
  ASSERT_THAT(ids, SizeIs(3));

  const Result r = Ctl({"dead-letters", "list", "--json", "--destination=d2"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_THAT(lines, SizeIs(2)) << r;
  simdjson::dom::parser parser;
  simdjson::dom::element job;
  ASSERT_EQ(parser.parse(lines[0]).get(job), simdjson::SUCCESS) << lines[0];
  EXPECT_EQ(uint64_t(job["id"]), ids[1]);
  EXPECT_EQ(std::string_view(job["source_id"]), "web");
  EXPECT_EQ(std::string_view(job["destination_id"]), "d2");
  EXPECT_EQ(std::string_view(job["type"]), "track");
  EXPECT_EQ(std::string_view(job["message_id"]), "msg-1");
  EXPECT_EQ(std::string_view(job["user_id"]), "u1");
  EXPECT_EQ(std::string_view(job["dead_at"]), Iso(t0 + absl::Minutes(1)));
  EXPECT_EQ(std::string_view(job["reason"]), "HTTP 410 from https://hooks.example.com/d2");
  EXPECT_EQ(int64_t(job["attempts"]), 1);
  EXPECT_EQ(int64_t(job["history"].at(0)["urls"].at(0)["status"]), 410);
  // User info and query values of receiver URLs are redacted.
  EXPECT_EQ(std::string_view(job["history"].at(0)["urls"].at(0)["url"]),
            "https://redacted@hooks.example.com/d2?token=redacted");
  EXPECT_EQ(r.out.find("t0ps3cret"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("svc:pw"), std::string::npos) << r.out;
  EXPECT_EQ(std::string_view(job["event"]["event"]), "Order Completed");
  EXPECT_EQ(std::string_view(job["event"]["messageId"]), "msg-1");
  EXPECT_EQ(JsonIds(r.out), (std::vector<uint64_t>{ids[1], ids[2]}));
}

// --from/--to select by death time, half-open, in RFC 3339 with any offset.
TEST_F(HookrelayctlTest, ListFiltersByTime) {
  StartServer();
  const absl::Time t0 = server_->clock().Now();  // 2023-11-14T22:13:20Z
  const std::vector<uint64_t> ids = MakeDeadLetters({"d1", "d1", "d1", "d1"}, absl::Minutes(1));
  ASSERT_THAT(ids, SizeIs(4));

  Result r = Ctl({"dead-letters", "list", "--json", absl::StrCat("--from=", Iso(t0 + absl::Minutes(1))),
                  "--to", Iso(t0 + absl::Minutes(3))});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(JsonIds(r.out), (std::vector<uint64_t>{ids[1], ids[2]}));

  // The same instant written with a +01:00 offset.
  r = Ctl({"dead-letters", "list", "--json", "--from=2023-11-14T23:15:20+01:00"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(JsonIds(r.out), (std::vector<uint64_t>{ids[2], ids[3]}));

  // Nothing matches: an empty table is a note on stderr, and still success.
  r = Ctl({"dead-letters", "list", "--destination=nope"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("no dead letters"));
}

// --limit follows pages (of at most 1,000) until N, and says when more remain; 100 by default.
TEST_F(HookrelayctlTest, ListFollowsPagesUpToTheLimit) {
  StartServer();
  const std::vector<uint64_t> ids = MakeDeadLetters(std::vector<std::string>(1003, "d1"));
  ASSERT_THAT(ids, SizeIs(1003));

  Result r = Ctl({"dead-letters", "list", "--json", "--limit=1002"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(JsonIds(r.out), std::vector<uint64_t>(ids.begin(), ids.begin() + 1002));
  EXPECT_THAT(r.err, HasSubstr("more"));

  r = Ctl({"dead-letters", "list", "--json", "--limit=5000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(JsonIds(r.out), ids);
  EXPECT_EQ(r.err, "");

  r = Ctl({"dead-letters", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Lines(r.out), SizeIs(101));  // header + 100
  EXPECT_THAT(r.err, HasSubstr("more"));
}

// replay --destination replays that destination's dead letters; replay --all the rest.
TEST_F(HookrelayctlTest, ReplayPrintsTheCount) {
  StartServer();
  const std::vector<uint64_t> ids = MakeDeadLetters({"d1", "d2", "d1", "d2", "d3"});
  ASSERT_THAT(ids, SizeIs(5));

  Result r = Ctl({"dead-letters", "replay", "--destination=d2"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "replayed 2 dead letters\n");
  r = Ctl({"dead-letters", "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(JsonIds(r.out), (std::vector<uint64_t>{ids[0], ids[2], ids[4]}));

  absl::StatusOr<std::vector<collector::LeasedJob>> leased =
      server_->store().Lease(100);
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_THAT(*leased, SizeIs(2));
  EXPECT_EQ((*leased)[0].job.id(), ids[1]);
  EXPECT_EQ((*leased)[1].job.id(), ids[3]);

  r = Ctl({"dead-letters", "replay", "--all"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "replayed 3 dead letters\n");
  EXPECT_EQ(server_->store().Counts().dead, 0);
}

// The admin token comes from --token or $HOOKRELAY_ADMIN_TOKEN (the flag wins); without the
// right one the collector's UNAUTHENTICATED is reported with exit 1.
TEST_F(HookrelayctlTest, AdminToken) {
  StartServer("adm_s3cret");
  ASSERT_THAT(MakeDeadLetters({"d1"}), SizeIs(1));

  Result r = Ctl({"dead-letters", "list"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: "), HasSubstr("UNAUTHENTICATED")));

  r = Ctl({"dead-letters", "list"}, {absl::StrCat(kTokenVariable, "=adm_s3cret")});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(Lines(r.out), SizeIs(2));

  r = Ctl({"--token=adm_s3cret", "dead-letters", "list"});
  EXPECT_EQ(r.exit_code, 0) << r;

  r = Ctl({"--token=wrong", "dead-letters", "replay", "--all"},
          {absl::StrCat(kTokenVariable, "=adm_s3cret")});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("UNAUTHENTICATED"));
  EXPECT_EQ(server_->store().Counts().dead, 1);
}

// Usage errors exit 2 with the usage text on stderr and send nothing; --help exits 0.
// `health` asks grpc.health.v1.Health: exit 0 only when serving; an unknown service is an error.
TEST_F(HookrelayctlTest, Health) {
  StartServer();
  server_->SetServing("hookrelay.v1.Admin", true);
  collector_flag_ = absl::StrCat("--collector=", server_->address());
  Result r = Ctl({"health"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "SERVING\n");
  r = Ctl({"health", "--service=hookrelay.v1.Admin"});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "SERVING\n");
  server_->SetServing("hookrelay.v1.Admin", false);
  r = Ctl({"health", "--service=hookrelay.v1.Admin"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "NOT_SERVING\n");
  r = Ctl({"health", "--service=no.such.Service"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r;
  r = Ctl({"health", "extra"});
  EXPECT_EQ(r.exit_code, 2) << r;
  r = Ctl({"health", "--limit=3"});
  EXPECT_EQ(r.exit_code, 2) << r;
}

TEST_F(HookrelayctlTest, UsageErrorsExit2) {
  StartServer();
  ASSERT_THAT(MakeDeadLetters({"d1"}), SizeIs(1));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "no command"},
      {{"dead-lettres", "list"}, "unknown command \"dead-lettres\""},
      {{"dead-letters"}, "list or replay"},
      {{"dead-letters", "frob"}, "unknown command \"dead-letters frob\""},
      {{"dead-letters", "list", "--from=yesterday"}, "--from"},
      {{"dead-letters", "list", "--to=2024-13-01T00:00:00Z"}, "--to"},
      {{"dead-letters", "list", "--limit=0"}, "--limit"},
      {{"dead-letters", "list", "--all"}, "--all is not a flag of dead-letters list"},
      {{"dead-letters", "list", "--frobnicate"}, "unknown flag --frobnicate"},
      {{"dead-letters", "replay"}, "--all or --destination"},
      {{"dead-letters", "replay", "--all", "--destination=d1"}, "--all"},
      {{"dead-letters", "replay", "--limit=3", "--all"}, "--limit"},
      {{"--timeout=soon", "dead-letters", "list"}, "--timeout"},
  };
  for (const auto& [args, message] : cases) {
    const Result r = Ctl(args);
    const std::string what = absl::StrJoin(args, " ");
    EXPECT_EQ(r.exit_code, 2) << what << "\n" << r;
    EXPECT_EQ(r.out, "") << what;
    EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: "), HasSubstr(message), HasSubstr("Usage:")))
        << what;
  }
  EXPECT_EQ(server_->store().Counts().dead, 1);  // Nothing was replayed.

  const Result help = RunCtl({"--help"});
  EXPECT_EQ(help.exit_code, 0) << help;
  EXPECT_THAT(help.out, AllOf(HasSubstr("Usage:"), HasSubstr("dead-letters list"),
                              HasSubstr("dead-letters replay")));
  EXPECT_EQ(help.err, "");
}

// --- deletion requests (SPEC §6.1) -------------------------------------------------------------

std::string Str(simdjson::dom::element e, std::string_view key) {
  std::string_view v;
  return e[key].get_string().get(v) == simdjson::SUCCESS ? std::string(v) : "<absent>";
}

std::vector<std::string> StrList(simdjson::dom::element e, std::string_view key) {
  std::vector<std::string> out;
  simdjson::dom::array list;
  if (e[key].get_array().get(list) != simdjson::SUCCESS) return out;
  for (simdjson::dom::element v : list) {
    std::string_view s;
    out.push_back(v.get_string().get(s) == simdjson::SUCCESS ? std::string(s) : "<not a string>");
  }
  return out;
}

// One Deletion as hookrelayctl -o json prints it: a single line of the API's JSON.
struct DeletionJson {
  std::string id, user_id, request_id, state, notifications, purged_jobs, purged_dead_letters,
      create_time;
  std::vector<std::string> source_ids;
  bool sources_from_index = false;
};

DeletionJson ParseDeletion(const std::string& line) {
  DeletionJson d;
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  EXPECT_EQ(parser.parse(line).get(e), simdjson::SUCCESS) << line;
  d.id = Str(e, "id");
  d.user_id = Str(e, "userId");
  d.request_id = Str(e, "requestId");
  d.state = Str(e, "state");
  d.notifications = Str(e, "notifications");  // uint64: a string in protobuf JSON
  d.purged_jobs = Str(e, "purgedJobs");
  d.purged_dead_letters = Str(e, "purgedDeadLetters");
  d.create_time = Str(e, "createTime");
  d.source_ids = StrList(e, "sourceIds");
  bool from_index = false;
  if (e["sourcesFromIndex"].get(from_index) == simdjson::SUCCESS) d.sources_from_index = from_index;
  return d;
}

std::vector<DeletionJson> ParseDeletions(const std::string& out) {
  std::vector<DeletionJson> all;
  for (const std::string& line : Lines(out)) all.push_back(ParseDeletion(line));
  return all;
}

// The value of `key:` in a key-value printout (`deletions create` / `get` as a table).
std::string KeyValue(const std::string& out, const std::string& key) {
  for (const std::string& line : Lines(out)) {
    if (absl::StartsWith(line, absl::StrCat(key, ":"))) {
      return std::string(absl::StripAsciiWhitespace(line.substr(key.size() + 1)));
    }
  }
  return "<absent>";
}

// Usage errors of `deletions` exit 2 before any call: the admin URL here refuses connections,
// which would be exit 1.
TEST(DeletionsUsageTest, UsageErrorsExit2WithoutCallingTheCollector) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"deletions"}, "create, list or get"},
      {{"deletions", "purge"}, "unknown command \"deletions purge\""},
      {{"deletions", "create"}, "needs --user"},
      {{"deletions", "create", "--user="}, "needs --user"},
      {{"deletions", "create", "--user"}, "--user needs a value"},
      {{"deletions", "create", "--user=u1", "--source="}, "--source needs a source id"},
      {{"deletions", "create", "--user=u1", "--request-id="}, "--request-id"},
      {{"deletions", "create", "u1"}, "needs --user"},
      {{"deletions", "create", "--user=u1", "u2"}, "unexpected argument"},
      {{"deletions", "create", "--user=u1", "--limit=3"},
       "--limit is not a flag of deletions create"},
      {{"deletions", "create", "--user=u1", "--all"}, "--all is not a flag of deletions create"},
      {{"deletions", "list", "--limit=0"}, "--limit"},
      {{"deletions", "list", "--limit=many"}, "--limit"},
      {{"deletions", "list", "--user=u1"}, "--user is not a flag of deletions list"},
      {{"deletions", "list", "extra"}, "unexpected argument \"extra\""},
      {{"deletions", "get"}, "deletions get needs an argument"},
      {{"deletions", "get", "del_1", "del_2"}, "unexpected argument \"del_2\""},
      {{"deletions", "get", "del_1", "--source=web"}, "--source is not a flag of deletions get"},
      {{"-o", "yaml", "deletions", "list"}, "-o/--output"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> full = {"--admin-url=http://127.0.0.1:1"};
    full.insert(full.end(), args.begin(), args.end());
    const Result r = RunCtl(full);
    const std::string what = absl::StrJoin(args, " ");
    EXPECT_EQ(r.exit_code, 2) << what << "\n" << r;
    EXPECT_EQ(r.out, "") << what;
    EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: "), HasSubstr(message), HasSubstr("Usage:")))
        << what;
  }

  const Result help = RunCtl({"--help"});
  EXPECT_EQ(help.exit_code, 0) << help;
  EXPECT_THAT(help.out, AllOf(HasSubstr("deletions create --user=USER [--source=ID]..."),
                              HasSubstr("deletions list [--limit=N]"),
                              HasSubstr("deletions get ID")));
}

// An unreachable collector: exit 1 with UNAVAILABLE, and the user id is not repeated.
TEST(DeletionsUsageTest, UnreachableCollectorExits1WithoutTheUserId) {
  const Result r = RunCtl({"--admin-url=http://127.0.0.1:1", "deletions", "create",
                           "--user=jane@example.com"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: creating the deletion request: "),
                           HasSubstr("UNAVAILABLE")));
  EXPECT_THAT(r.err, Not(HasSubstr("jane@example.com")));
}

// create --source (made with `sources create`, with an enabled destination): the record names
// the source, one `delete` notification, the user's dead letters there purged; COMPLETED, with a
// generated id and the creation time; get reads it back as JSON and as a table.
TEST_F(HookrelayctlTest, DeletionsCreateWithSourcesAndGet) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Ctl({"destinations", "create", "--id=hook", "--source=web",
           "--url=https://hooks.example.com/delete", "--enabled"});
  ASSERT_EQ(r.exit_code, 0) << r;
  // Two dead letters of user u1 in source web (and nothing else in the store).
  ASSERT_THAT(MakeDeadLetters({"hook", "hook"}), SizeIs(2));

  const absl::Time t0 = server_->clock().Now();
  r = Ctl({"-o", "json", "deletions", "create", "--user=u1", "--source=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.err, "");
  ASSERT_THAT(Lines(r.out), SizeIs(1)) << r;
  const DeletionJson created = ParseDeletion(r.out);
  EXPECT_THAT(created.id, StartsWith("del_"));
  EXPECT_EQ(created.user_id, "u1");
  EXPECT_THAT(created.source_ids, ElementsAre("web"));
  EXPECT_FALSE(created.sources_from_index);
  EXPECT_EQ(created.state, "COMPLETED");
  EXPECT_EQ(created.notifications, "1");  // web × its one enabled destination
  EXPECT_EQ(created.purged_dead_letters, "2");
  // protobuf's JSON prints as few fraction digits as needed: compare the instants.
  EXPECT_EQ(common::ParseIso8601(created.create_time), t0) << created.create_time;
  r = Ctl({"dead-letters", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "") << "the user's dead letters are gone";

  // get, as JSON: the same record.
  r = Ctl({"deletions", "get", created.id, "--output=json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  ASSERT_THAT(Lines(r.out), SizeIs(1)) << r;
  const DeletionJson got = ParseDeletion(r.out);
  EXPECT_EQ(got.id, created.id);
  EXPECT_EQ(got.user_id, "u1");
  EXPECT_THAT(got.source_ids, ElementsAre("web"));
  EXPECT_EQ(got.notifications, "1");
  EXPECT_EQ(got.create_time, created.create_time);

  // get, as a table: one "key: value" line per field.
  r = Ctl({"deletions", "get", created.id});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(KeyValue(r.out, "id"), created.id);
  EXPECT_EQ(KeyValue(r.out, "user"), "u1");
  EXPECT_EQ(KeyValue(r.out, "sources"), "web");
  EXPECT_EQ(KeyValue(r.out, "state"), "COMPLETED");
  EXPECT_EQ(KeyValue(r.out, "notified"), "1 delete job(s)");
  EXPECT_EQ(KeyValue(r.out, "purged dead letters"), "2");
  EXPECT_EQ(KeyValue(r.out, "created"), Iso(t0));

  // An unknown source: NOT_FOUND naming it, exit 1, nothing recorded.
  r = Ctl({"deletions", "create", "--user=u1", "--source=web", "--source=nope"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, AllOf(HasSubstr("NOT_FOUND"), HasSubstr("\"nope\"")));
  r = Ctl({"-o", "json", "deletions", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(Lines(r.out), SizeIs(1)) << r;
}

// create without --source for a user never seen: no affected source (0), said so in the table.
TEST_F(HookrelayctlTest, DeletionsCreateForAnUnseenUserAffectsNoSource) {
  StartServer();
  Result r = Ctl({"deletions", "create", "--user=never-seen"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(KeyValue(r.out, "id"), StartsWith("del_"));
  EXPECT_EQ(KeyValue(r.out, "user"), "never-seen");
  EXPECT_THAT(KeyValue(r.out, "sources"), StartsWith("none"));
  EXPECT_THAT(KeyValue(r.out, "notified"), StartsWith("0"));
  EXPECT_EQ(KeyValue(r.out, "purged jobs"), "0");
  EXPECT_EQ(KeyValue(r.out, "purged dead letters"), "0");

  r = Ctl({"deletions", "create", "--user=never-seen-2", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const DeletionJson d = ParseDeletion(r.out);
  EXPECT_THAT(d.source_ids, SizeIs(0));
  EXPECT_TRUE(d.sources_from_index);
  EXPECT_EQ(d.notifications, "0");
  EXPECT_EQ(d.purged_jobs, "0");
}

// The same --request-id twice answers the first record (same id) and records one deletion; the
// request id used for another user is refused (409, exit 1).
TEST_F(HookrelayctlTest, DeletionsRequestIdIsIdempotent) {
  StartServer();
  Result r = Ctl({"-o", "json", "deletions", "create", "--user=u7", "--request-id=r-1"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const DeletionJson first = ParseDeletion(r.out);
  EXPECT_EQ(first.request_id, "r-1");
  server_->clock().Advance(absl::Seconds(5));
  r = Ctl({"-o", "json", "deletions", "create", "--user=u7", "--request-id=r-1"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const DeletionJson again = ParseDeletion(r.out);
  EXPECT_EQ(again.id, first.id);
  EXPECT_EQ(again.create_time, first.create_time);

  r = Ctl({"-o", "json", "deletions", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(ParseDeletions(r.out), SizeIs(1)) << r.out;

  r = Ctl({"deletions", "create", "--user=someone-else", "--request-id=r-1"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: creating the deletion request: "),
                           HasSubstr("ALREADY_EXISTS")));
}

// list: newest first, as JSON lines and as a table with the documented columns; --limit stops
// early and says there are more.
TEST_F(HookrelayctlTest, DeletionsListNewestFirst) {
  StartServer();
  Result r = Ctl({"deletions", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("no deletion requests"));

  std::vector<std::string> ids;
  for (const char* user : {"a1", "b2", "c3"}) {
    r = Ctl({"-o", "json", "deletions", "create", absl::StrCat("--user=", user)});
    ASSERT_EQ(r.exit_code, 0) << r;
    ids.push_back(ParseDeletion(r.out).id);
    server_->clock().Advance(absl::Seconds(1));
  }

  r = Ctl({"deletions", "list", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.err, "");
  const std::vector<DeletionJson> listed = ParseDeletions(r.out);
  ASSERT_THAT(listed, SizeIs(3)) << r.out;
  EXPECT_EQ(listed[0].id, ids[2]);
  EXPECT_EQ(listed[0].user_id, "c3");
  EXPECT_EQ(listed[1].id, ids[1]);
  EXPECT_EQ(listed[2].id, ids[0]);
  EXPECT_EQ(listed[2].state, "COMPLETED");

  r = Ctl({"deletions", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_THAT(lines, SizeIs(4)) << r;
  EXPECT_THAT(Fields(lines[0]), ElementsAre("ID", "USER", "SOURCES", "NOTIFIED", "PURGED", "JOBS",
                                            "PURGED", "DEAD", "CREATED"));
  EXPECT_THAT(Fields(lines[1]), ElementsAre(ids[2], "c3", "-", "0", "0", "0", _)) << lines[1];
  EXPECT_THAT(Fields(lines[3]), ElementsAre(ids[0], "a1", "-", "0", "0", "0", _)) << lines[3];

  r = Ctl({"deletions", "list", "--limit=2", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::vector<DeletionJson> limited = ParseDeletions(r.out);
  ASSERT_THAT(limited, SizeIs(2)) << r.out;
  EXPECT_EQ(limited[0].id, ids[2]);
  EXPECT_EQ(limited[1].id, ids[1]);
  EXPECT_THAT(r.err, HasSubstr("more"));
}

// Refusals exit 1 with the server's code, and the field for a bad user id.
TEST_F(HookrelayctlTest, DeletionsServerErrorsExit1) {
  StartServer();
  Result r = Ctl({"deletions", "get", "del_000000000000abcd1234"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: reading deletion request del_000000000000abcd1234: "),
                           HasSubstr("NOT_FOUND")));

  // Longer than ingest accepts (256 characters).
  r = Ctl({"deletions", "create", absl::StrCat("--user=", std::string(300, 'x'))});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr("user")));

  r = Ctl({"deletions", "create", "--user=u1", "--request-id=bad id!"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr("request")));

  r = Ctl({"-o", "json", "deletions", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "") << "a refused request records nothing";
}

// --- audiences (SPEC §6.2) ---------------------------------------------------------------------

constexpr char kProRule[] =
    R"({"match":"all","conditions":[{"trait":"plan","op":"eq","value":"pro"}]})";

// A file under $TEST_TMPDIR holding `content`; its path.
std::string WriteTempFile(const std::string& name, const std::string& content) {
  const char* dir = getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
  FILE* f = fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path << ": " << strerror(errno);
  if (f != nullptr) {
    fwrite(content.data(), 1, content.size(), f);
    fclose(f);
  }
  return path;
}

// Usage errors of `audiences` exit 2 before any call (the admin URL here refuses connections,
// which would be exit 1): missing --name, --source or rule, both --rule and --rule-file, an
// unreadable rule file, a rule that is not JSON or not a rule's shape, a bad --sync-interval.
TEST(AudiencesUsageTest, UsageErrorsExit2WithoutCallingTheCollector) {
  const std::string good_file = WriteTempFile("rule.json", kProRule);
  const std::string not_json = WriteTempFile("not-json.json", "match: all\n");
  const std::string rule = absl::StrCat("--rule=", kProRule);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"audiences"}, "list, get, create, delete or sync"},
      {{"audiences", "refresh", "a1"}, "unknown command \"audiences refresh\""},
      {{"audiences", "create", "--source=web", rule}, "needs --name"},
      {{"audiences", "create", "--name=", "--source=web", rule}, "needs --name"},
      {{"audiences", "create", "Power Users", "--source=web", rule}, "needs --name"},
      {{"audiences", "create", "--name=P", "--source=web", rule, "extra"},
       "unexpected argument \"extra\""},
      {{"audiences", "create", "--name=P", rule}, "needs --source"},
      {{"audiences", "create", "--name=P", "--source=", rule}, "--source needs a source id"},
      {{"audiences", "create", "--name=P", "--source=web"}, "needs --rule=JSON or --rule-file"},
      {{"audiences", "create", "--name=P", "--source=web", rule,
        absl::StrCat("--rule-file=", good_file)},
       "--rule and --rule-file exclude each other"},
      {{"audiences", "create", "--name=P", "--source=web", "--rule-file=/nonexistent/rule.json"},
       "--rule-file: cannot read \"/nonexistent/rule.json\""},
      {{"audiences", "create", "--name=P", "--source=web", "--rule-file="},
       "--rule-file needs a file name"},
      {{"audiences", "create", "--name=P", "--source=web", absl::StrCat("--rule-file=", not_json)},
       "not JSON"},
      {{"audiences", "create", "--name=P", "--source=web", "--rule={\"match\":\"all\","},
       "--rule: not JSON"},
      {{"audiences", "create", "--name=P", "--source=web", "--rule="}, "--rule: empty"},
      {{"audiences", "create", "--name=P", "--source=web", "--rule=[]"}, "not a JSON object"},
      // Valid JSON, but not an AudienceRule: a misspelt field, a count that is not a number.
      {{"audiences", "create", "--name=P", "--source=web",
        R"(--rule={"match":"all","conditions":[{"trait":"plan","opp":"eq"}]})"},
       "opp"},
      {{"audiences", "create", "--name=P", "--source=web",
        R"(--rule={"conditions":[{"event":"Order Completed","countGte":"many"}]})"},
       "not an audience rule"},
      // The shorthand is one rule: {"all":[...]} or {"any":[...]}, not both, not mixed.
      {{"audiences", "create", "--name=P", "--source=web", R"(--rule={"all":[],"any":[]})"},
       "--rule: give \"all\" or \"any\", not both"},
      {{"audiences", "create", "--name=P", "--source=web",
        R"(--rule={"match":"all","any":[{"trait":"t","op":"exists"}]})"},
       "--rule: give match and conditions, or the shorthand"},
      {{"audiences", "create", "--name=P", "--source=web", rule, "--sync-interval=0"},
       "--sync-interval"},
      {{"audiences", "create", "--name=P", "--source=web", rule, "--sync-interval=1m"},
       "--sync-interval"},
      {{"audiences", "create", "--name=P", "--source=web", rule, "--id="}, "--id needs a value"},
      {{"audiences", "create", "--name=P", "--source=web", rule, "--user=u1"},
       "--user is not a flag of audiences create"},
      {{"audiences", "list", "--limit=5"}, "--limit is not a flag of audiences list"},
      {{"audiences", "list", "extra"}, "unexpected argument \"extra\""},
      {{"audiences", "get"}, "audiences get needs an argument"},
      {{"audiences", "get", ""}, "needs an audience id"},
      {{"audiences", "delete"}, "audiences delete needs an argument"},
      {{"audiences", "sync", "a1", "a2"}, "unexpected argument \"a2\""},
      {{"audiences", "sync", "a1", rule}, "--rule is not a flag of audiences sync"},
      {{"-o", "yaml", "audiences", "list"}, "-o/--output"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> full = {"--admin-url=http://127.0.0.1:1"};
    full.insert(full.end(), args.begin(), args.end());
    const Result r = RunCtl(full);
    const std::string what = absl::StrJoin(args, " ");
    EXPECT_EQ(r.exit_code, 2) << what << "\n" << r;
    EXPECT_EQ(r.out, "") << what;
    EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: "), HasSubstr(message), HasSubstr("Usage:")))
        << what;
  }

  // The same flags, well-formed (the rule inline or from a file), get as far as the collector.
  for (const std::string& rule_flag : {rule, absl::StrCat("--rule-file=", good_file)}) {
    const Result r = RunCtl({"--admin-url=http://127.0.0.1:1", "audiences", "create",
                             "--name=Power Users", "--source=web", "--source=app", rule_flag,
                             "--id=power", "--sync-interval=300"});
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: creating the audience: "),
                             HasSubstr("UNAVAILABLE")));
  }

  const Result help = RunCtl({"--help"});
  EXPECT_EQ(help.exit_code, 0) << help;
  EXPECT_THAT(help.out,
              AllOf(HasSubstr("audiences list | get ID | delete ID"),
                    HasSubstr("audiences create --name=NAME --source=ID... (--rule=JSON | "
                              "--rule-file=FILE)"),
                    HasSubstr("[--id=ID] [--sync-interval=SECONDS]"),
                    HasSubstr("audiences sync ID")));
}

// One AudienceResource as hookrelayctl -o json prints it: a single line of the API's JSON.
struct AudienceJson {
  std::string id, name, trait, managed_by, members, match;
  std::vector<std::string> sources;
  bool synced = false, first = false;
  std::string sync_time, evaluated, entered, exited;
  int64_t sync_interval = -1;
};

AudienceJson ParseAudience(const std::string& line) {
  AudienceJson a;
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  EXPECT_EQ(parser.parse(line).get(e), simdjson::SUCCESS) << line;
  a.id = Str(e, "id");
  a.name = Str(e, "name");
  a.trait = Str(e, "trait");
  a.managed_by = Str(e, "managedBy");
  a.members = Str(e, "members");  // uint64: a string in protobuf JSON
  a.sources = StrList(e, "sources");
  simdjson::dom::element rule;
  if (e["rule"].get(rule) == simdjson::SUCCESS) a.match = Str(rule, "match");
  int64_t interval = 0;
  if (e["syncIntervalSeconds"].get(interval) == simdjson::SUCCESS) a.sync_interval = interval;
  simdjson::dom::element sync;
  if (e["lastSync"].get(sync) == simdjson::SUCCESS) {
    a.synced = true;
    a.sync_time = Str(sync, "time");
    a.evaluated = Str(sync, "evaluated");
    a.entered = Str(sync, "entered");
    a.exited = Str(sync, "exited");
    bool first = false;
    if (sync["first"].get(first) == simdjson::SUCCESS) a.first = first;
  }
  return a;
}


// create (a source made with `sources create`, a trait rule): the audience with its trait
// snake_case(name), managedBy api and the first computation recorded; get reads it back as JSON
// and as a table; list shows its row; sync records a later sync that is not the first; delete
// removes it, after which get is NOT_FOUND.
// --rule takes the shorthand {"any":[...]} as the rule match "any" with those conditions.
TEST_F(HookrelayctlTest, AudiencesCreateTakesTheShorthandRule) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Ctl({"-o", "json", "audiences", "create", "--name=Planners", "--source=web", "--id=plan",
           R"(--rule={"any":[{"trait":"plan","op":"exists"},{"trait":"seats","op":"gte","value":5}]})"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(ParseAudience(r.out).match, "any");
  r = Ctl({"audiences", "get", "plan"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "rule"), "any of: trait plan exists; trait seats gte 5");
}

TEST_F(HookrelayctlTest, AudiencesCreateGetListSyncDelete) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Ctl({"audiences", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("no audiences"));

  const absl::Time t0 = server_->clock().Now();
  r = Ctl({"-o", "json", "audiences", "create", "--name=Power Users!", "--source=web",
           absl::StrCat("--rule=", kProRule), "--id=power", "--sync-interval=300"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.err, "");
  ASSERT_THAT(Lines(r.out), SizeIs(1)) << r;
  const AudienceJson created = ParseAudience(r.out);
  EXPECT_EQ(created.id, "power");
  EXPECT_EQ(created.name, "Power Users!");
  EXPECT_EQ(created.trait, "power_users");
  EXPECT_EQ(created.managed_by, "api");
  EXPECT_THAT(created.sources, ElementsAre("web"));
  EXPECT_EQ(created.match, "all");
  EXPECT_EQ(created.sync_interval, 300);
  EXPECT_EQ(created.members, "0");  // nobody has identified as pro
  ASSERT_TRUE(created.synced) << r.out;
  EXPECT_TRUE(created.first);
  EXPECT_EQ(common::ParseIso8601(created.sync_time), t0) << created.sync_time;
  EXPECT_EQ(created.entered, "0");

  // get, as JSON and as a table.
  r = Ctl({"audiences", "get", "power", "--output=json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const AudienceJson got = ParseAudience(r.out);
  EXPECT_EQ(got.id, "power");
  EXPECT_EQ(got.trait, "power_users");
  EXPECT_EQ(got.sync_time, created.sync_time);
  r = Ctl({"audiences", "get", "power"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(KeyValue(r.out, "id"), "power");
  EXPECT_EQ(KeyValue(r.out, "name"), "Power Users!");
  EXPECT_EQ(KeyValue(r.out, "trait"), "power_users");
  EXPECT_EQ(KeyValue(r.out, "sources"), "web");
  EXPECT_EQ(KeyValue(r.out, "rule"), "all of: trait plan eq \"pro\"");
  EXPECT_EQ(KeyValue(r.out, "sync interval"), "300 s");
  EXPECT_EQ(KeyValue(r.out, "managed by"), "api");
  EXPECT_EQ(KeyValue(r.out, "members"), "0");
  EXPECT_EQ(KeyValue(r.out, "last sync"), absl::StrCat(Iso(t0), " (first computation)"));

  // A second audience, its rule from a file, an event condition, the interval by default.
  const std::string file = WriteTempFile(
      "buyers.json",
      R"({"match":"any","conditions":[{"event":"Order Completed","countGte":3,"within":"30d"}]})");
  r = Ctl({"-o", "json", "audiences", "create", "--name=Repeat buyers", "--source=web",
           absl::StrCat("--rule-file=", file)});
  ASSERT_EQ(r.exit_code, 0) << r;
  const AudienceJson buyers = ParseAudience(r.out);
  EXPECT_THAT(buyers.id, Not(""));
  EXPECT_EQ(buyers.trait, "repeat_buyers");
  EXPECT_EQ(buyers.match, "any");

  // list: sorted by id, as JSON lines and as a table with the documented columns.
  r = Ctl({"audiences", "list", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<std::string> ids;
  for (const std::string& line : Lines(r.out)) ids.push_back(ParseAudience(line).id);
  std::vector<std::string> sorted = {"power", buyers.id};
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(ids, sorted);
  r = Ctl({"audiences", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_THAT(lines, SizeIs(3)) << r;
  EXPECT_THAT(Fields(lines[0]), ElementsAre("ID", "NAME", "TRAIT", "SOURCES", "MEMBERS", "LAST",
                                            "SYNC", "ENTERED", "EXITED"));
  const std::string& power_row = lines[buyers.id < "power" ? 2 : 1];
  // NAME has a space: "Power", "Users!".
  EXPECT_THAT(Fields(power_row), ElementsAre("power", "Power", "Users!", "power_users", "web", "0",
                                             Iso(t0), "0", "0"))
      << power_row;

  // sync: a later sync, not the first.
  server_->clock().Advance(absl::Minutes(1));
  r = Ctl({"-o", "json", "audiences", "sync", "power"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const AudienceJson synced = ParseAudience(r.out);
  EXPECT_EQ(synced.id, "power");
  ASSERT_TRUE(synced.synced) << r.out;
  EXPECT_FALSE(synced.first);
  EXPECT_EQ(common::ParseIso8601(synced.sync_time), t0 + absl::Minutes(1)) << synced.sync_time;
  EXPECT_EQ(synced.entered, "0");
  EXPECT_EQ(synced.exited, "0");
  r = Ctl({"audiences", "sync", "power"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "last sync"), Iso(t0 + absl::Minutes(1)));
  EXPECT_EQ(KeyValue(r.out, "entered"), "0");

  // delete: gone from get and list.
  r = Ctl({"audiences", "delete", "power"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, StartsWith("deleted audience power"));
  r = Ctl({"audiences", "get", "power"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND"));
  r = Ctl({"-o", "json", "audiences", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  ASSERT_THAT(Lines(r.out), SizeIs(1)) << r;
  EXPECT_EQ(ParseAudience(r.out).id, buyers.id);
}

// Stores a profile change the way ingest does for an identify in source web: `user`'s traits
// merged with {"plan": plan}; `log` as ingest sets it while some audience exists.
void StoreIdentify(collector::RocksDbJobStore& store, const std::string& user,
                   const std::string& plan, bool log, absl::Time at) {
  hookrelay::v1::ProfileDelta delta;
  (*delta.mutable_traits()->mutable_fields())["plan"].set_string_value(plan);
  delta.set_at_ms(absl::ToUnixMillis(at));
  collector::AppendItem item;
  item.dedup_key = collector::DedupKey("web", absl::StrCat("identify-", user, "-", plan));
  item.user_id = user;
  item.source_id = "web";
  item.profile_delta = delta.SerializeAsString();
  item.log_profile_change = log;
  std::vector<collector::AppendItem> items;
  items.push_back(std::move(item));
  absl::Notification appended;
  absl::Status status;
  store.Append(std::move(items), [&](absl::StatusOr<collector::AppendResult> r) {
    status = r.status();
    appended.Notify();
  });
  appended.WaitForNotification();
  EXPECT_TRUE(status.ok()) << status;
}

// Membership from stored profiles, and what it sends: with a user of plan "pro" stored before
// the audience exists (and one of plan "free"), create finds one member of two profiles and
// enqueues one identify for the enabled destination, trait power_users true with the personas
// context; a second "pro" user stored after, `audiences sync` enters (one entered, two members,
// one more identify); the table shows it.
TEST_F(HookrelayctlTest, AudiencesMembershipAndIdentifyCalls) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Ctl({"destinations", "create", "--id=hook", "--source=web",
           "--url=https://hooks.example.com/audiences", "--enabled"});
  ASSERT_EQ(r.exit_code, 0) << r;
  StoreIdentify(server_->store(), "u1", "pro", false, server_->clock().Now());
  StoreIdentify(server_->store(), "u9", "free", false, server_->clock().Now());

  r = Ctl({"-o", "json", "audiences", "create", "--name=Power Users", "--source=web",
           absl::StrCat("--rule=", kProRule), "--id=power"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const AudienceJson created = ParseAudience(r.out);
  EXPECT_EQ(created.members, "1");
  EXPECT_TRUE(created.first);
  EXPECT_EQ(created.evaluated, "2");
  EXPECT_EQ(created.entered, "1");
  EXPECT_EQ(created.exited, "0");

  // The first computation's identify calls are enqueued before create answers.
  absl::StatusOr<std::vector<collector::LeasedJob>> leased =
      server_->store().Lease(100);
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_THAT(*leased, SizeIs(1));
  const hookrelay::v1::Job& job = (*leased)[0].job;
  EXPECT_EQ(job.type(), hookrelay::v1::IDENTIFY);
  EXPECT_EQ(job.user_id(), "u1");
  EXPECT_EQ(job.destination_id(), "hook");
  simdjson::dom::parser parser;
  simdjson::dom::element body;
  ASSERT_EQ(parser.parse(job.event_json()).get(body), simdjson::SUCCESS) << job.event_json();
  bool in_audience = false;
  EXPECT_EQ(body["traits"]["power_users"].get(in_audience), simdjson::SUCCESS)
      << job.event_json();
  EXPECT_TRUE(in_audience) << job.event_json();
  EXPECT_EQ(Str(body["context"]["personas"], "computation_key"), "power_users");
  EXPECT_EQ(Str(body["context"]["personas"], "computation_id"), "power");

  StoreIdentify(server_->store(), "u2", "pro", true, server_->clock().Now());
  server_->clock().Advance(absl::Seconds(5));
  r = Ctl({"-o", "json", "audiences", "sync", "power"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const AudienceJson synced = ParseAudience(r.out);
  EXPECT_EQ(synced.members, "2");
  EXPECT_FALSE(synced.first);
  EXPECT_EQ(synced.entered, "1");
  EXPECT_EQ(synced.exited, "0");
  leased = server_->store().Lease(100);
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_THAT(*leased, SizeIs(1));
  EXPECT_EQ((*leased)[0].job.user_id(), "u2");
  EXPECT_EQ((*leased)[0].job.type(), hookrelay::v1::IDENTIFY);

  r = Ctl({"audiences", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::vector<std::string> lines = Lines(r.out);
  ASSERT_THAT(lines, SizeIs(2)) << r;
  EXPECT_THAT(Fields(lines[1]),
              ElementsAre("power", "Power", "Users", "power_users", "web", "2",
                          Iso(server_->clock().Now()), "1", "0"))
      << lines[1];
}

// Refusals exit 1 with the server's code and the field: a bad op names rule.conditions[0].op, a
// bad window rule.conditions[1].within, an unknown source the sources; a duplicate id is
// ALREADY_EXISTS; an unknown id is NOT_FOUND for get, delete and sync. Nothing is created.
TEST_F(HookrelayctlTest, AudiencesServerErrorsExit1) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;

  // Unknown ids, for the calls that need no computation.
  for (const char* verb : {"get", "delete"}) {
    r = Ctl({"audiences", verb, "no-such-audience"});
    EXPECT_EQ(r.exit_code, 1) << verb << "\n" << r;
    EXPECT_EQ(r.out, "") << verb;
    EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: "), HasSubstr("no-such-audience"),
                             HasSubstr("NOT_FOUND")))
        << verb;
  }

  r = Ctl({"audiences", "create", "--name=Pro", "--source=web",
           R"(--rule={"match":"all","conditions":[)"
           R"({"trait":"plan","op":"equals","value":"pro"}]})"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: creating the audience: "),
                           HasSubstr("INVALID_ARGUMENT"), HasSubstr("rule.conditions[0].op")));

  r = Ctl({"audiences", "create", "--name=Buyers", "--source=web",
           R"(--rule={"match":"all","conditions":[{"trait":"plan","op":"exists"},)"
           R"({"event":"Order Completed","countGte":1,"within":"soon"}]})"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr("rule.conditions[1].within")));

  r = Ctl({"audiences", "create", "--name=Pro", "--source=web", "--source=nope",
           absl::StrCat("--rule=", kProRule)});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr("sources"),
                           HasSubstr("\"nope\"")));

  r = Ctl({"-o", "json", "audiences", "list"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(r.out, "") << "a refused audience is not created";

  r = Ctl({"audiences", "create", "--name=Pro", "--source=web", "--id=pro",
           absl::StrCat("--rule=", kProRule)});
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Ctl({"audiences", "create", "--name=Pro again", "--source=web", "--id=pro",
           absl::StrCat("--rule=", kProRule)});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("ALREADY_EXISTS"));

  r = Ctl({"audiences", "sync", "no-such-audience"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: syncing audience no-such-audience: "),
                           HasSubstr("NOT_FOUND")));
}

// A port nothing listens on: UNAVAILABLE, naming the URL, exit 1.
TEST_F(HookrelayctlTest, UnreachableCollectorExits1) {
  // A bound socket that never listens refuses connections, and no one else can take its port.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0) << strerror(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0) << strerror(errno);
  const std::string collector = absl::StrCat("--admin-url=http://127.0.0.1:", ntohs(addr.sin_port));

  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"dead-letters", "list"},
        std::vector<std::string>{"dead-letters", "replay", "--all"}}) {
    std::vector<std::string> args = {collector, "--timeout=20s"};
    args.insert(args.end(), command.begin(), command.end());
    const Result r = RunCtl(args);
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_EQ(r.out, "");
    EXPECT_THAT(r.err, AllOf(StartsWith("hookrelayctl: "), HasSubstr("UNAVAILABLE"),
                             HasSubstr(collector.substr(strlen("--admin-url=")))))
        << r;
    EXPECT_THAT(Lines(r.err), SizeIs(1)) << r;
  }
  close(fd);
}

// A destination's filter from --filter-file: sent as the API's JSON, shown by `get`, refused by
// the collector naming the field when invalid (exit 1), removed by --no-filter; a file that is
// not a filter's shape, or both flags, are usage errors (exit 2) before any call.
TEST_F(HookrelayctlTest, DestinationFilterFromFile) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::string filter = WriteTempFile(
      "filter.json",
      R"({"types":["track"],"events":["Order *"],)"
      R"("where":[{"path":"properties.plan","op":"in","value":["pro","team"]}]})");
  r = Ctl({"destinations", "create", "--id=orders", "--source=web",
           "--url=https://hooks.example.com/x", absl::StrCat("--filter-file=", filter)});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "filter"),
            "types track; events Order *; where properties.plan in [\"pro\",\"team\"]");
  r = Ctl({"-o", "json", "destinations", "get", "orders"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr(R"("events":["Order *"])"));

  const std::string bad = WriteTempFile(
      "bad-filter.json", R"({"where":[{"path":"properties.plan","op":"like","value":"x"}]})");
  r = Ctl({"destinations", "update", "orders", absl::StrCat("--filter-file=", bad)});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, AllOf(HasSubstr("filter.where[0].op"), HasSubstr("unknown op \"like\"")));

  r = Ctl({"destinations", "update", "orders", "--no-filter"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "filter"), "none");

  const std::string misspelt = WriteTempFile("misspelt.json", R"({"wher":[]})");
  for (const auto& [args, message] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"destinations", "update", "orders", absl::StrCat("--filter-file=", misspelt)},
            "not a filter such as"},
           {{"destinations", "update", "orders", "--filter-file=/nonexistent/f.json"},
            "--filter-file: cannot read \"/nonexistent/f.json\""},
           {{"destinations", "update", "orders", "--no-filter",
             absl::StrCat("--filter-file=", filter)},
            "--filter-file and --no-filter exclude each other"}}) {
    r = Ctl(args);
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_THAT(r.err, HasSubstr(message)) << r;
  }
}

// destinations rotate-secret: the new secret from a file, the overlap as a duration; the output
// shows until when the previous secret also signs; usage mistakes exit 2, the server's refusals
// exit 1 naming the field.
TEST_F(HookrelayctlTest, DestinationRotateSecret) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::string first = WriteTempFile("first.secret", "first-secret-value\n");
  const std::string second = WriteTempFile("second.secret", "second-secret-value\n");
  r = Ctl({"destinations", "create", "--id=orders", "--source=web",
           "--url=https://hooks.example.com/x", absl::StrCat("--shared-secret-file=", first)});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "shared secret"), "set");

  const absl::Time now = server_->clock().Now();  // The server's manual clock.
  r = Ctl({"destinations", "rotate-secret", "orders", absl::StrCat("--shared-secret-file=", second),
           "--overlap=2h"});
  ASSERT_EQ(r.exit_code, 0) << r;
  const std::string shown = KeyValue(r.out, "shared secret");
  ASSERT_THAT(shown, HasSubstr("set; the previous one also signs until ")) << r;
  absl::Time until;
  std::string error;
  ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, shown.substr(shown.rfind(' ') + 1), &until,
                              &error))
      << shown;
  EXPECT_EQ(until, now + absl::Hours(2));
  EXPECT_THAT(r.out, Not(HasSubstr("second-secret-value")));
  r = Ctl({"-o", "json", "destinations", "get", "orders"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_THAT(r.out, HasSubstr(R"("rotation":{"endsAt":)"));

  r = Ctl({"destinations", "rotate-secret", "orders", absl::StrCat("--shared-secret-file=", second)});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("sharedSecret: the same as the secret in use")) << r;
  for (const auto& [args, message] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"destinations", "rotate-secret", "orders"}, "needs --shared-secret-file=FILE"},
           {{"destinations", "rotate-secret", "orders", "--shared-secret-file=/nonexistent/s"},
            "--shared-secret-file: "},
           {{"destinations", "rotate-secret", "orders", absl::StrCat("--shared-secret-file=", first),
             "--overlap=soon"},
            "--overlap: \"soon\" is not a duration such as 24h"},
           {{"destinations", "rotate-secret", "orders", absl::StrCat("--shared-secret-file=", first),
             "--url=https://x.example"},
            "--url"}}) {
    r = Ctl(args);
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_THAT(r.err, HasSubstr(message)) << r;
  }
  r = Ctl({"destinations", "rotate-secret", "orders", absl::StrCat("--shared-secret-file=", first),
           "--overlap=721h"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("overlap: 721h is outside 0s..720h (30 days)")) << r;
}

// --batch-* flags turn batched webhooks on (the others at their defaults); shown in `get`.
TEST_F(HookrelayctlTest, DestinationBatchFlags) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Ctl({"destinations", "create", "--id=orders", "--source=web",
           "--url=https://hooks.example.com/x", "--batch-max-events=50"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "batches"), "up to 50 events, 500000 bytes, 1000 ms");
  r = Ctl({"destinations", "update", "orders", "--batch-max-wait-ms=250", "--timeout-ms=3000"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "batches"), "up to 100 events, 500000 bytes, 250 ms");
  r = Ctl({"destinations", "update", "orders", "--timeout-ms=3000"});  // options replaced whole
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "batches"), "no (one event per request)");
  r = Ctl({"destinations", "update", "orders", "--batch-max-events=5000"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("options.batch.maxEvents: 5000, must be between 1 and 1000")) << r;
  r = Ctl({"destinations", "update", "orders", "--batch-max-bytes=lots"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_THAT(r.err, HasSubstr("--batch-max-bytes: \"lots\" is not a number")) << r;
}

// --ordering=per_user keeps each user's events in order; "none" clears it; the server names a
// wrong value. Shown in `get`.
TEST_F(HookrelayctlTest, DestinationOrderingFlag) {
  StartServer();
  Result r = Ctl({"sources", "create", "--id=web", "--kind=web"});
  ASSERT_EQ(r.exit_code, 0) << r;
  r = Ctl({"destinations", "create", "--id=orders", "--source=web",
           "--url=https://hooks.example.com/x", "--ordering=per_user"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "order"),
            "per user (one request per user in flight, in acceptance order)");
  r = Ctl({"destinations", "update", "orders", "--ordering=none"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(KeyValue(r.out, "order"), "none");
  r = Ctl({"destinations", "update", "orders", "--ordering=per_session"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_THAT(r.err, HasSubstr("options.ordering: \"per_session\", must be \"per_user\"")) << r;
}

}  // namespace
}  // namespace hookrelay::hookrelayctl
