#include "tools/bench/batch_template.h"

#include <cstdio>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "hookrelay/v1/collector.pb.h"
#include "simdjson.h"

namespace hookrelay::bench {
namespace {

// A stamped JSON batch stays valid JSON, with unique, request-derived messageIds of the asked size.
TEST(BatchTemplateTest, JsonStampsUniqueIds) {
  BatchTemplate t(BatchTemplate::Format::kJson, 100, 300, "rtest1");
  EXPECT_EQ(t.events(), 100);
  EXPECT_NEAR(static_cast<double>(t.json_event_bytes()), 300.0, 2.0);
  std::string body = t.bytes();
  t.Stamp(7, body.data());
  EXPECT_EQ(body.size(), t.bytes().size());

  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(body).get(doc), simdjson::SUCCESS);
  std::set<std::string> ids;
  uint64_t expected = 700;
  for (simdjson::dom::element event : doc["batch"].get_array()) {
    std::string_view id;
    ASSERT_EQ(event["messageId"].get(id), simdjson::SUCCESS);
    EXPECT_EQ(std::string(id), t.MessageId(expected++));
    EXPECT_EQ(std::string_view(event["type"]), "track");
    ids.insert(std::string(id));
  }
  EXPECT_EQ(ids.size(), 100u);
}

// With users, event n gets the userId of user n % users, in every request.
TEST(BatchTemplateTest, JsonStampsUsersInTurn) {
  BatchTemplate t(BatchTemplate::Format::kJson, 100, 300, "rtest3",
                  BatchTemplate::Timestamp::kInclude, 250);
  std::string body = t.bytes();
  t.Stamp(3, body.data());  // Events 300..399: users 50..149.
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(body).get(doc), simdjson::SUCCESS);
  int n = 300;
  for (simdjson::dom::element event : doc["batch"].get_array()) {
    std::string_view user;
    ASSERT_EQ(event["userId"].get(user), simdjson::SUCCESS);
    char want[16];
    std::snprintf(want, sizeof(want), "user-%06d", n++ % 250);
    EXPECT_EQ(std::string(user), want);
  }
  EXPECT_EQ(n, 400);
}

// A stamped protobuf request still parses, and carries the stamped ids in order.
TEST(BatchTemplateTest, ProtoStampsUniqueIds) {
  BatchTemplate t(BatchTemplate::Format::kProto, 10, 300, "rtest2");
  std::string body = t.bytes();
  t.Stamp(123456789, body.data());
  hookrelay::v1::IngestRequest request;
  ASSERT_TRUE(request.ParseFromString(body));
  ASSERT_EQ(request.events_size(), 10);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(request.events(i).message_id(), t.MessageId(1234567890ull + i));
    EXPECT_EQ(request.events(i).type(), hookrelay::v1::TRACK);
    EXPECT_FALSE(request.events(i).user_id().empty());
  }
}

// Small events are never padded below their fixed fields.
TEST(BatchTemplateTest, EventSmallerThanFixedFields) {
  BatchTemplate t(BatchTemplate::Format::kJson, 3, 10, "rtest3");
  EXPECT_GT(t.json_event_bytes(), 10u);
  EXPECT_EQ(t.events(), 3);
}

}  // namespace
}  // namespace hookrelay::bench
