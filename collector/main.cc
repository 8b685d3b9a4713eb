// hookrelay collector: flags → Server::Options; SIGHUP reloads the config, SIGTERM/SIGINT drain
// and exit 0.
#include <signal.h>

#include <cstdlib>
#include <string>

#include <openssl/crypto.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collector/server.h"
#include "collector/store/jetstream/nats_connect.h"
#include "common/log.h"
#include "common/process_setup.h"
#include "common/secret_file.h"

ABSL_FLAG(std::string, config, "",
          "YAML file with sources and destinations, reloaded on SIGHUP: a declarative bootstrap, "
          "read-only through the admin API; without it the collector is set up through the "
          "admin API alone");
ABSL_FLAG(std::string, data_dir, "./data", "embedded job store directory");
ABSL_FLAG(std::string, store, "embedded",
          "job store engine: embedded (RocksDB under --data_dir) or jetstream (a NATS JetStream "
          "cluster at --nats_url, shared by any number of collectors; see docs/DESIGN.md)");
ABSL_FLAG(std::string, nats_url, "", "--store=jetstream: comma-separated nats:// URLs");
ABSL_FLAG(int, nats_replicas, 3, "--store=jetstream: copies of every stream (1, 3 or 5)");
ABSL_FLAG(int, nats_dedup_replicas, 1,
          "--store=jetstream: copies of the de-duplication markers (HR_DEDUP): 1, 3, 5, or 0 = as "
          "--nats_replicas. At 1 an event costs one replicated write instead of two; a lost node "
          "forgets its markers (a retried event may then be delivered twice; none is lost)");
ABSL_FLAG(absl::Duration, dedup_window, absl::Hours(24),
          "an event repeating the (source, messageId) of one accepted this long ago or less is "
          "acknowledged and dropped (1m..30d). On --store=jetstream the markers cost server "
          "memory in proportion (docs/BENCHMARKS.md, \"JetStream sizing\"); changing it on an "
          "existing cluster needs HR_DEDUP's max_age changed too (the collector says so)");
ABSL_FLAG(absl::Duration, nats_deletion_resume_after, absl::Seconds(30),
          "--store=jetstream: a user deletion left unfinished this long (its collector died "
          "mid-way) is finished by any collector; every collector looks at start and then "
          "periodically (1s..1h)");
// NATS credentials and TLS (collector/store/jetstream/nats_connect.h): every secret from a file.
ABSL_FLAG(std::string, nats_creds_file, "",
          "--store=jetstream: a NATS credentials file (user JWT + NKey seed, as `nsc generate "
          "creds` writes); re-read at every reconnect");
ABSL_FLAG(std::string, nats_nkey_seed_file, "",
          "--store=jetstream: a file holding a NATS user NKey seed (SU...)");
ABSL_FLAG(std::string, nats_user, "",
          "--store=jetstream: NATS user name; the password comes from --nats_password_file");
ABSL_FLAG(std::string, nats_password_file, "",
          "--store=jetstream: a file holding the password of --nats_user");
ABSL_FLAG(std::string, nats_token_file, "",
          "--store=jetstream: a file holding a NATS authentication token");
ABSL_FLAG(std::string, nats_tls_ca_file, "",
          "--store=jetstream: PEM CA certificates that sign the NATS servers' certificates "
          "(turns TLS on; without it, tls:// URLs use the system's CAs); a server's certificate "
          "must name the host of its --nats_url");
ABSL_FLAG(std::string, nats_tls_cert_file, "",
          "--store=jetstream: PEM client certificate for NATS (with --nats_tls_key_file)");
ABSL_FLAG(std::string, nats_tls_key_file, "",
          "--store=jetstream: PEM private key of --nats_tls_cert_file");
ABSL_FLAG(std::string, grpc_address, "0.0.0.0:50051",
          "gRPC address (Ingest, Subscribe, Admin, health, reflection); port 0 picks a free port");
ABSL_FLAG(std::string, http_address, "0.0.0.0:8080", "HTTP tracking API address (/v1/*)");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0:9464", "Prometheus /metrics address");
ABSL_FLAG(std::string, admin_http_address, "127.0.0.1:8081",
          "admin API as JSON over HTTP (/admin/v1/...) and the web console (/); empty = off");
ABSL_FLAG(int, http_threads, 2, "HTTP I/O threads");
ABSL_FLAG(absl::Duration, lease_duration, absl::Seconds(90),
          "how long a deliverer holds a job before it is handed out again; every destination's "
          "timeout must leave a quarter of it (at least 1s) to spare");
ABSL_FLAG(absl::Duration, commit_linger, absl::Milliseconds(1),
          "embedded store: how long a small group commit waits for more writes to share its "
          "fsync while the disk is idle (0s: off; at most 100ms)");
ABSL_FLAG(absl::Duration, lame_duck, absl::ZeroDuration(),
          "on SIGTERM, report not ready (readiness probes, gRPC health) for this long while still "
          "serving, then drain and stop; lets load balancers stop sending first (Kubernetes: a few "
          "seconds, less than terminationGracePeriodSeconds minus the drain)");
ABSL_FLAG(std::string, admin_token, "",
          "when set, the admin API, the console and Subscribe need 'authorization: Bearer "
          "<token>' (also read from $HOOKRELAY_ADMIN_TOKEN); without a token they answer only on "
          "loopback; prefer --admin_token_file");
ABSL_FLAG(std::string, admin_token_file, "",
          "a file holding the admin token (e.g. a mounted Kubernetes Secret); trailing "
          "whitespace is ignored");

int main(int argc, char** argv) {
  // OpenSSL frees its global state from an atexit handler. The NATS client's threads end
  // asynchronously after their connection is destroyed, and one still finishing a TLS connection
  // then crashed a collector at exit (SIGSEGV in OPENSSL_cleanup, seen once in CI). The process is
  // ending: its memory goes back to the system anyway. First, before anything initialises
  // OpenSSL (only the first initialisation decides).
#ifdef OPENSSL_INIT_NO_ATEXIT
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
#endif
  absl::SetProgramUsageMessage("hookrelay collector: durable event ingest and delivery jobs");
  absl::ParseCommandLine(argc, argv);
  hookrelay::common::DisableMutexDeadlockDetection();

  // Signals are taken synchronously by this thread; every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  hookrelay::collector::Server::Options options;
  options.config_path = absl::GetFlag(FLAGS_config);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.store = absl::GetFlag(FLAGS_store);
  options.nats_url = absl::GetFlag(FLAGS_nats_url);
  options.nats_replicas = absl::GetFlag(FLAGS_nats_replicas);
  options.nats_dedup_replicas = absl::GetFlag(FLAGS_nats_dedup_replicas);
  options.nats_deletion_resume_after = absl::GetFlag(FLAGS_nats_deletion_resume_after);
  options.dedup_window = absl::GetFlag(FLAGS_dedup_window);
  if (options.dedup_window < absl::Minutes(1) || options.dedup_window > absl::Hours(30 * 24)) {
    hookrelay::common::LogError(absl::StrCat("--dedup_window=",
                                             absl::FormatDuration(options.dedup_window),
                                             ": allowed 1m to 30d (720h)"));
    return 2;
  }
  if (options.nats_deletion_resume_after < absl::Seconds(1) ||
      options.nats_deletion_resume_after > absl::Hours(1)) {
    hookrelay::common::LogError(
        absl::StrCat("--nats_deletion_resume_after=",
                     absl::FormatDuration(options.nats_deletion_resume_after),
                     ": allowed 1s to 1h"));
    return 2;
  }
  if (options.store == "jetstream" && options.nats_url.empty()) {
    hookrelay::common::LogError("--store=jetstream needs --nats_url (nats://host:port,...)");
    return 2;
  }
  hookrelay::collector::NatsConnectOptions& nats = options.nats_connect;
  nats.creds_file = absl::GetFlag(FLAGS_nats_creds_file);
  nats.nkey_seed_file = absl::GetFlag(FLAGS_nats_nkey_seed_file);
  nats.user = absl::GetFlag(FLAGS_nats_user);
  nats.password_file = absl::GetFlag(FLAGS_nats_password_file);
  nats.token_file = absl::GetFlag(FLAGS_nats_token_file);
  nats.tls_ca_file = absl::GetFlag(FLAGS_nats_tls_ca_file);
  nats.tls_cert_file = absl::GetFlag(FLAGS_nats_tls_cert_file);
  nats.tls_key_file = absl::GetFlag(FLAGS_nats_tls_key_file);
  if (!nats.empty() && options.store != "jetstream") {
    hookrelay::common::LogError("the --nats_* credential and TLS flags need --store=jetstream");
    return 2;
  }
  // Wrong combinations and unreadable files stop the collector here, before it binds anything.
  if (absl::Status s = hookrelay::collector::ValidateNatsConnectOptions(nats); !s.ok()) {
    hookrelay::common::LogError(std::string(s.message()));
    return 2;
  }
  options.grpc_address = absl::GetFlag(FLAGS_grpc_address);
  options.http_address = absl::GetFlag(FLAGS_http_address);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.admin_http_address = absl::GetFlag(FLAGS_admin_http_address);
  options.http_threads = absl::GetFlag(FLAGS_http_threads);
  options.lease_duration = absl::GetFlag(FLAGS_lease_duration);
  options.commit_linger = absl::GetFlag(FLAGS_commit_linger);
  options.admin_token = absl::GetFlag(FLAGS_admin_token);
  if (const std::string file = absl::GetFlag(FLAGS_admin_token_file); !file.empty()) {
    if (!options.admin_token.empty()) {
      hookrelay::common::LogError("give --admin_token or --admin_token_file, not both");
      return 2;
    }
    absl::StatusOr<std::string> token = hookrelay::common::ReadSecretFile(file);
    if (!token.ok()) {
      hookrelay::common::LogError("cannot read --admin_token_file", {{"error", token.status().message()}});
      return 2;
    }
    options.admin_token = *std::move(token);
  }
  if (options.admin_token.empty()) {
    if (const char* token = std::getenv("HOOKRELAY_ADMIN_TOKEN"); token != nullptr) {
      options.admin_token = token;
    }
  }
  if (absl::GetFlag(FLAGS_lame_duck) < absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_lame_duck) > absl::Minutes(5)) {
    hookrelay::common::LogError("--lame_duck must be between 0s and 5m",
                                {{"lame_duck", absl::FormatDuration(absl::GetFlag(FLAGS_lame_duck))}});
    return 2;
  }
  if (options.commit_linger < absl::ZeroDuration() ||
      options.commit_linger > absl::Milliseconds(100)) {
    hookrelay::common::LogError("--commit_linger must be between 0s and 100ms",
                                {{"commit_linger", absl::FormatDuration(options.commit_linger)}});
    return 2;
  }
  if (options.lease_duration < absl::Seconds(1)) {
    hookrelay::common::LogError("--lease_duration must be at least 1s",
                                {{"lease_duration", absl::FormatDuration(options.lease_duration)}});
    return 2;
  }

  hookrelay::collector::Server server(options);
  if (absl::Status s = server.Start(); !s.ok()) {
    hookrelay::common::LogError("collector failed to start", {{"error", s.message()}});
    server.Shutdown();
    return 1;
  }
  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      (void)server.Reload();  // logged either way
      continue;
    }
    hookrelay::common::LogInfo("signal received", {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}});
    break;
  }
  if (const absl::Duration lame_duck = absl::GetFlag(FLAGS_lame_duck);
      lame_duck > absl::ZeroDuration()) {
    server.EnterLameDuck();
    // A second SIGTERM/SIGINT ends the wait early.
    timespec timeout = absl::ToTimespec(lame_duck);
    siginfo_t info;
    while (sigtimedwait(&signals, &info, &timeout) == SIGHUP) {
    }
  }
  server.Shutdown();
  return 0;
}
