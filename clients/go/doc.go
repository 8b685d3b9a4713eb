// Package analytics is the Go client of hookrelay's collector. It keeps the
// API of Segment's deprecated analytics-go v2 (package analytics, New,
// Track, Identify, Page, Group, Alias, Close and the Client fields of v2), so
// code written for v2 switches by changing only the import path, and it adds
// what v2 lacked: Screen, Flush, per-message callbacks, a bounded queue with an
// explicit overflow policy, request timeouts, retries with backoff, and a fixed
// number of upload goroutines.
//
// # How messages travel
//
// A call such as Track validates its message, stamps a messageId (UUID v4 from
// crypto/rand) and a timestamp when they are empty, encodes the message to
// JSON and appends it to an in-memory queue. It never does HTTP. A background
// goroutine, started on first use, cuts the queue into batches of Size
// messages and at most 500,000 bytes and hands them to MaxConcurrentUploads
// upload goroutines, which POST them to {Endpoint}/v1/batch.
//
// A batch is sent when Size messages are waiting, when Interval has passed,
// on Flush, and on Close. Close sends everything still queued and waits for
// it; a message whose call returned nil is therefore either delivered or
// reported as failed (through Callback and the error of Flush or Close), never
// silently lost.
//
// # Encoding
//
// Messages are encoded during the call, so the 32 KB limit is checked
// exactly and synchronously, and later changes to the caller's struct or maps
// cannot race with the upload. The common value types (strings, bools, all
// integer and float kinds, map[string]interface{}, map[string]string,
// []interface{}, []string and time.Time) are encoded without reflection;
// any other value goes through encoding/json. Keys of maps come out in
// unspecified order.
//
// # Concurrency
//
// All methods of Client may be called from any number of goroutines. The
// exported fields are configuration: set them after New and before the first
// call; they are read once, on first use, and later changes have no effect.
package analytics
