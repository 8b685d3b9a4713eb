#include "collector/store/new_job.h"

#include <string>

#include "gtest/gtest.h"
#include "hookrelay/v1/job.pb.h"

namespace hookrelay::collector {
namespace {

using hookrelay::v1::Job;

// Every field ingest sets, each non-empty.
NewJob::Fields FullFields() {
  NewJob::Fields f;
  f.source_id = "src_web";
  f.destination_id = "dst_orders";
  f.type = hookrelay::v1::IDENTIFY;
  f.message_id = "ajs-next-1700000000-4f6a";
  f.user_id = "user-5512";
  f.event_json = R"({"type":"identify","traits":{"plan":"pro"}})";
  f.received_at_unix_ms = 1700000000123;
  f.received_at_unix_us = 1700000000123456;
  f.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  f.tracestate = "rojo=00f067aa0ba902b7";
  f.ordering_key = "user-5512";
  return f;
}

Job FullJob() {
  Job job;
  job.set_source_id("src_web");
  job.set_destination_id("dst_orders");
  job.set_type(hookrelay::v1::IDENTIFY);
  job.set_message_id("ajs-next-1700000000-4f6a");
  job.set_user_id("user-5512");
  job.set_event_json(R"({"type":"identify","traits":{"plan":"pro"}})");
  job.set_received_at_unix_ms(1700000000123);
  job.set_received_at_unix_us(1700000000123456);
  job.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  job.set_tracestate("rojo=00f067aa0ba902b7");
  job.set_ordering_key("user-5512");
  return job;
}

// The bytes written from the fields are the bytes protobuf writes for the same job, with the id
// and due time gathered in at their places (so stored records read and compare as before).
TEST(NewJobTest, FieldsSerializeExactlyAsTheJobDoes) {
  const NewJob job(FullFields());
  Job expected = FullJob();
  expected.set_id(4242);
  expected.set_due_unix_ms(1700000000999);
  EXPECT_EQ(job.Serialized(4242, 1700000000999), expected.SerializeAsString());

  // The three fields the store queues by, read without parsing.
  EXPECT_EQ(job.destination_id(), "dst_orders");
  EXPECT_EQ(job.user_id(), "user-5512");
  EXPECT_EQ(job.ordering_key(), "user-5512");

  // Gathered from the parts, as the embedded engine writes its record.
  char id_field[NewJob::kFieldBytes];
  char due_field[NewJob::kFieldBytes];
  std::string gathered(id_field, NewJob::IdField(4242, id_field));
  gathered.append(job.head());
  gathered.append(due_field, NewJob::DueField(1700000000999, due_field));
  gathered.append(job.tail());
  EXPECT_EQ(gathered, expected.SerializeAsString());

  const Job parsed = job.ToJob(4242, 1700000000999);
  EXPECT_EQ(parsed.SerializeAsString(), expected.SerializeAsString());
}

// Empty strings and zero numbers are left out, as proto3 does; a zero id or due time too.
TEST(NewJobTest, EmptyFieldsAreLeftOut) {
  NewJob::Fields f;
  f.source_id = "s";
  f.destination_id = "d";
  f.type = hookrelay::v1::TRACK;
  f.event_json = "{}";
  const NewJob job(f);
  Job expected;
  expected.set_source_id("s");
  expected.set_destination_id("d");
  expected.set_type(hookrelay::v1::TRACK);
  expected.set_event_json("{}");
  EXPECT_EQ(job.Serialized(0, 0), expected.SerializeAsString());
  EXPECT_EQ(job.user_id(), "");
  EXPECT_EQ(job.ordering_key(), "");
  EXPECT_EQ(job.tail(), "");  // Nothing numbered above the due time.
  expected.set_due_unix_ms(5);
  EXPECT_EQ(job.Serialized(0, 5), expected.SerializeAsString());
}

// Any job converts (test events, delete notifications): its own id and due time are dropped for
// the store's, every other field kept, large values included.
TEST(NewJobTest, FromAJobKeepsEveryFieldButIdAndDue) {
  Job job = FullJob();
  job.set_id(7);
  job.set_due_unix_ms(8);
  job.set_test(true);
  job.set_attempts(3);
  job.set_event_json(std::string(300000, 'x'));  // Multi-byte length varint.
  job.add_history()->set_at_unix_ms(1700000000500);
  const NewJob new_job(job);
  EXPECT_EQ(new_job.destination_id(), "dst_orders");
  EXPECT_EQ(new_job.user_id(), "user-5512");
  EXPECT_EQ(new_job.ordering_key(), "user-5512");
  job.set_id(uint64_t{1} << 40);
  job.set_due_unix_ms(1700000000999);
  EXPECT_EQ(new_job.Serialized(uint64_t{1} << 40, 1700000000999), job.SerializeAsString());
  job.clear_id();
  job.clear_due_unix_ms();
  EXPECT_EQ(new_job.Serialized(0, 0), job.SerializeAsString());
}

// What names and routes a job, without a copy of its event.
TEST(NewJobTest, WithoutEventKeepsEveryOtherField) {
  Job expected = FullJob();
  expected.clear_event_json();
  EXPECT_EQ(NewJob(FullFields()).ToJobWithoutEvent().SerializeAsString(),
            expected.SerializeAsString());
  Job job = FullJob();
  job.set_test(true);  // A field ingest never sets, after the event's.
  expected.set_test(true);
  EXPECT_EQ(NewJob(job).ToJobWithoutEvent().SerializeAsString(), expected.SerializeAsString());
}

}  // namespace
}  // namespace hookrelay::collector
