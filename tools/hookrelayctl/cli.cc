#include "tools/hookrelayctl/cli.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/hookrelayctl/cli_internal.h"

namespace hookrelay::hookrelayctl {

const char kUsage[] =
    R"(hookrelayctl: set up and operate a hookrelay collector through its admin API.

Usage: hookrelayctl [global flags] COMMAND [flags]

Commands:
  catalog                                  destination types and their limits
  sources list | get ID | delete ID
  sources create --kind=web|mobile|server [--id=ID] [--name=NAME]
  sources update ID [--name=NAME] [--kind=KIND]
  sources write-keys create SOURCE         prints the new write key
  sources write-keys revoke SOURCE KEY     ingest refuses the key from the next request on
  destinations list | get ID | delete ID
  destinations create --source=ID... --url=URL [--header="Name: value"]... [--url=...]...
                      [--id=ID] [--shared-secret-file=FILE] [--enabled] [--timeout-ms=N]
                      [--rate-limit-per-second=N] [--circuit-breaker-failures=N]
                      [--filter-file=FILE] [--batch-max-events=N] [--batch-max-bytes=N]
                      [--batch-max-wait-ms=N] [--ordering=per_user]
  destinations update ID [--source=ID...] [--url=URL [--header=...]...]...
                      [--shared-secret-file=FILE | --no-shared-secret] [--enabled=true|false]
                      [--timeout-ms=N] [--rate-limit-per-second=N] [--circuit-breaker-failures=N]
                      [--batch-max-events=N] [--batch-max-bytes=N] [--batch-max-wait-ms=N]
                      [--ordering=per_user|none] [--filter-file=FILE | --no-filter]
                      (the --*-ms / rate / breaker / batch / ordering flags replace the whole
                      options object; any --batch-* flag sends several events per request;
                      --ordering=per_user delivers each user's events in order, one at a time)
  destinations enable ID | disable ID
  destinations rotate-secret ID --shared-secret-file=FILE [--overlap=24h]
                                           the new secret signs at once; until the overlap ends,
                                           X-Signature keeps the previous secret and Standard
                                           Webhooks requests carry both signatures (0s..720h)
  destinations test ID                     one sample event to this destination; each URL's answer,
                                           and whether the sample passes the filter
  dead-letters list [--destination=ID] [--from=TIME] [--to=TIME] [--limit=N]
  dead-letters replay (--all | --destination=ID [--from=TIME] [--to=TIME])
  deletions create --user=USER [--source=ID]... [--request-id=KEY]
                                           irreversible: sends a `delete` event to the sources'
                                           webhook destinations and purges the user's
                                           undelivered jobs and dead letters there
  deletions list [--limit=N]               newest first
  deletions get ID
  audiences list | get ID | delete ID
  audiences create --name=NAME --source=ID... (--rule=JSON | --rule-file=FILE)
                   [--id=ID] [--sync-interval=SECONDS]
                                           computes the membership at once and sends each
                                           member an identify (trait snake_case(NAME): true)
  audiences sync ID                        a sync now: identify calls for who entered or left
  health [--service=NAME]                  the collector's gRPC health (uses --collector)

  --url may be given up to 5 times; each --header belongs to the --url before it (up to 5 each).
  A destination's shared secret is read from a file (never from the command line).
  `update` sends only what is given: --url replaces every URL; --source replaces the sources.
  `deletions create` without --source affects every source the user was seen in. With a
  --request-id, repeating the call does nothing again and shows the first call's record.
  An audience rule is JSON, e.g. --rule='{"match":"all","conditions":[{"trait":"plan","op":"eq",
  "value":"pro"},{"event":"Order Completed","countGte":3,"within":"30d"}]}': match "all" or
  "any" (the shorthand {"all":[...]} or {"any":[...]} is the same rule); a trait condition has trait, op (eq neq gt gte lt lte exists contains) and value; an
  event condition has event, countGte and/or countLte, and within (15m, 1h, 30d). --rule-file=-
  reads it from standard input. --sync-interval defaults to 60 seconds.
  A destination filter is a JSON file, e.g. {"types":["track"],"events":["Order *"],"where":
  [{"path":"properties.plan","op":"in","value":["pro","team"]}]}: types (track identify page
  screen group alias), events (exact names or a prefix ending in *), where (path, op: eq neq in
  exists gt gte lt lte contains, value); all must hold. --no-filter removes it.

Global flags:
  --admin-url=URL        the admin HTTP API (default $HOOKRELAY_ADMIN_URL, else
                         http://127.0.0.1:8081)
  --admin-token-file=F   a file holding the admin token (default $HOOKRELAY_ADMIN_TOKEN_FILE;
                         $HOOKRELAY_ADMIN_TOKEN is used when neither is set)
  -o, --output=FORMAT    table (default) or json (the API's JSON, one object per line)
  --timeout=DURATION     limit of each call, e.g. 500ms, 30s (default 15s)
  --collector=HOST:PORT  gRPC address, for health only (default 127.0.0.1:50051)

TIME is RFC 3339, e.g. 2026-05-01T12:00:00Z.
Exit status: 0 done, 1 the collector refused or could not be reached (its error, with the field
and the limit, is printed), 2 usage error.
)";

using internal::Audiences;
using internal::Catalog;
using internal::CommandLine;
using internal::Connect;
using internal::Context;
using internal::DeadLetters;
using internal::Deletions;
using internal::Destinations;
using internal::Health;
using internal::Parse;
using internal::Sources;
using internal::UsageError;

int Run(const std::vector<std::string>& args, const Environment& env, std::ostream& out,
        std::ostream& err) {
  CommandLine cl;
  std::optional<UsageError> usage = Parse(args, &cl);
  int code = kExitUsage;
  Context ctx;
  ctx.out = &out;
  ctx.err = &err;
  if (!usage.has_value()) {
    const std::vector<std::string>& pos = cl.positional;
    if (cl.Bool("help") || (!pos.empty() && pos[0] == "help")) {
      out << kUsage;
      return kExitOk;
    }
    if (pos.empty()) {
      usage = UsageError{"no command given"};
    } else if (pos[0] == "health") {
      code = Health(cl, ctx, &usage);
    } else if (pos[0] != "catalog" && pos[0] != "sources" && pos[0] != "destinations" &&
               pos[0] != "dead-letters" && pos[0] != "deletions" && pos[0] != "audiences") {
      usage = UsageError{absl::StrCat("unknown command \"", pos[0], "\"")};
    } else if (!(usage = Connect(cl, env, &ctx))) {
      if (pos[0] == "catalog") {
        code = Catalog(cl, ctx, &usage);
      } else if (pos[0] == "sources") {
        code = Sources(cl, ctx, &usage);
      } else if (pos[0] == "destinations") {
        code = Destinations(cl, ctx, &usage);
      } else if (pos[0] == "deletions") {
        code = Deletions(cl, ctx, &usage);
      } else if (pos[0] == "audiences") {
        code = Audiences(cl, ctx, &usage);
      } else {
        code = DeadLetters(cl, ctx, &usage);
      }
    }
  }
  if (usage.has_value()) {
    err << "hookrelayctl: " << usage->message << "\n\n" << kUsage;
    return kExitUsage;
  }
  out.flush();
  return code;
}

}  // namespace hookrelay::hookrelayctl
