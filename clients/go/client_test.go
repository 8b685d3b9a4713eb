package analytics

import (
	"bytes"
	"log"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var isoMillis = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// A batch is a POST to /v1/batch with Basic auth (write key, empty
// password) and the body shape of the spec; every item carries its type.
func TestWireFormat(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL+"/", nil) // a trailing slash is tolerated
	msgs := []func() error{
		func() error {
			return c.Track(&Track{Event: "Bought", UserId: "u1", Properties: map[string]interface{}{"revenue": 9.99}})
		},
		func() error {
			return c.Identify(&Identify{UserId: "u1", Traits: map[string]interface{}{"email": "a@example.com"}})
		},
		func() error {
			return c.Page(&Page{AnonymousId: "a1", Name: "Home", Traits: map[string]interface{}{"url": "https://example.com/"}})
		},
		func() error { return c.Screen(&Screen{UserId: "u1", Name: "Settings"}) },
		func() error {
			return c.Group(&Group{UserId: "u1", GroupId: "g1", Traits: map[string]interface{}{"name": "ACME"}})
		},
		func() error {
			return c.Alias(&Alias{UserId: "u1", PreviousId: "a1", Message: Message{MessageId: "my-id", Timestamp: "2012-12-02T00:30:08.276Z"}})
		},
	}
	for _, m := range msgs {
		if err := m(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	reqs := coll.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/batch" {
		t.Errorf("path %q", r.Path)
	}
	if !r.HasAuth || r.User != "wk_test" || r.Password != "" {
		t.Errorf("auth %v %q:%q, want Basic wk_test with empty password", r.HasAuth, r.User, r.Password)
	}
	if r.ContentType != "application/json" {
		t.Errorf("Content-Type %q", r.ContentType)
	}
	if r.ContentEncoding != "" {
		t.Errorf("Content-Encoding %q without Compress", r.ContentEncoding)
	}
	if !strings.HasPrefix(r.UserAgent, "analytics-go") {
		t.Errorf("User-Agent %q", r.UserAgent)
	}
	lib, _ := r.Body.Context["library"].(map[string]interface{})
	if lib["name"] != "analytics-go" || lib["version"] != Version {
		t.Errorf("context %v", r.Body.Context)
	}
	if !uuidV4.MatchString(r.Body.MessageID) {
		t.Errorf("batch messageId %q", r.Body.MessageID)
	}
	if !isoMillis.MatchString(r.Body.SentAt) {
		t.Errorf("sentAt %q", r.Body.SentAt)
	}
	wantTypes := []string{"track", "identify", "page", "screen", "group", "alias"}
	if len(r.Body.Batch) != len(wantTypes) {
		t.Fatalf("%d items, want %d", len(r.Body.Batch), len(wantTypes))
	}
	for i, item := range r.Body.Batch {
		if item["type"] != wantTypes[i] {
			t.Errorf("item %d type %v, want %s", i, item["type"], wantTypes[i])
		}
		ts, _ := item["timestamp"].(string)
		if !isoMillis.MatchString(ts) {
			t.Errorf("item %d timestamp %q", i, ts)
		}
		id, _ := item["messageId"].(string)
		if i < 5 && !uuidV4.MatchString(id) {
			t.Errorf("item %d messageId %q is not a UUID v4", i, id)
		}
	}
	b := r.Body.Batch
	if b[0]["event"] != "Bought" || b[0]["userId"] != "u1" || b[0]["properties"].(map[string]interface{})["revenue"] != 9.99 {
		t.Errorf("track %v", b[0])
	}
	if b[1]["traits"].(map[string]interface{})["email"] != "a@example.com" {
		t.Errorf("identify %v", b[1])
	}
	if b[2]["anonymousId"] != "a1" || b[2]["name"] != "Home" || b[2]["properties"].(map[string]interface{})["url"] != "https://example.com/" {
		t.Errorf("page %v (traits must go out as properties)", b[2])
	}
	if _, ok := b[2]["traits"]; ok {
		t.Errorf("page carries traits: %v", b[2])
	}
	if b[3]["name"] != "Settings" {
		t.Errorf("screen %v", b[3])
	}
	if b[4]["groupId"] != "g1" || b[4]["traits"].(map[string]interface{})["name"] != "ACME" {
		t.Errorf("group %v", b[4])
	}
	if b[5]["previousId"] != "a1" || b[5]["messageId"] != "my-id" || b[5]["timestamp"] != "2012-12-02T00:30:08.276Z" {
		t.Errorf("alias %v", b[5])
	}
}

// With Compress the body is gzip-encoded and says so.
func TestCompress(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, func(c *Client) { c.Compress = true })
	for i := 0; i < 50; i++ {
		if err := c.Track(track(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, r := range coll.requests() {
		if r.ContentEncoding != "gzip" || r.WireBytes >= len(r.Raw) {
			t.Errorf("encoding %q, %d bytes on the wire for %d", r.ContentEncoding, r.WireBytes, len(r.Raw))
		}
	}
	expectUsers(t, coll.items(), 50)
}

// Size waiting messages trigger a send without waiting for the interval or
// a Flush; fewer wait. Each batch keeps call order.
func TestFlushByCount(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, func(c *Client) { c.Size = 3 })
	for i := 0; i < 7; i++ {
		if err := c.Track(track(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Six of the seven leave on their own, in batches of exactly Size = 3:
	// Size both triggers a send and caps it.
	for sent := 0; sent < 6; {
		r := coll.next(t)
		if len(r.Body.Batch) != 3 {
			t.Fatalf("batch of %d messages, want exactly Size (3)", len(r.Body.Batch))
		}
		start := r.Body.Batch[0]["properties"].(map[string]interface{})["i"].(float64)
		for j, it := range r.Body.Batch {
			if i := it["properties"].(map[string]interface{})["i"].(float64); i != start+float64(j) {
				t.Errorf("message %d of the batch is number %v, want %v", j, i, start+float64(j))
			}
		}
		sent += len(r.Body.Batch)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	expectUsers(t, coll.items(), 7)
}

// Size is a cap even when uploads cannot keep up: the messages that wait
// meanwhile go out in batches of at most Size, none is lost, and the calls
// are held back (BlockOnFull) rather than requests piling up.
func TestSizeCapsBatchesUnderLoad(t *testing.T) {
	for _, size := range []int{1, 2, 7} {
		gate := make(chan struct{})
		coll := newGatedCollector(t, gate)
		c := newClient(t, coll.srv.URL, func(c *Client) {
			c.Size = size
			c.MaxConcurrentUploads = 1
			c.BlockOnFull = true
		})
		const n = 100
		for i := 0; i < n; i++ {
			if err := c.Track(track(i)); err != nil {
				t.Fatal(err)
			}
		}
		close(gate)
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		expectUsers(t, coll.items(), n)
		sizes := batchSizes(coll)
		total := 0
		for _, got := range sizes {
			if got > size {
				t.Errorf("Size %d: batch sizes %v: a batch is over Size", size, sizes)
				break
			}
			total += got
		}
		if total != n {
			t.Errorf("Size %d: %d messages in requests, want %d", size, total, n)
		}
		if want := (n + size - 1) / size; len(sizes) < want {
			t.Errorf("Size %d: %d requests, want at least %d", size, len(sizes), want)
		}
	}
}

// Size 1: calls made back to back, faster than any upload, still go out one
// per request.
func TestSizeOneSendsEachMessageAlone(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, func(c *Client) { c.Size = 1 })
	const n = 50
	for i := 0; i < n; i++ {
		if err := c.Track(track(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	expectUsers(t, coll.items(), n)
	sizes := batchSizes(coll)
	if len(sizes) != n {
		t.Errorf("%d requests for %d messages (sizes %v), want one each", len(sizes), n, sizes)
	}
	for _, got := range sizes {
		if got != 1 {
			t.Fatalf("batch sizes %v: want 1 message per request", sizes)
		}
	}
}

// FlushAt, the other name of Size, takes precedence; 1 sends every message
// on its own at once.
func TestFlushAtOne(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, func(c *Client) { c.FlushAt = 1 })
	for i := 0; i < 3; i++ {
		if err := c.Track(track(i)); err != nil {
			t.Fatal(err)
		}
		if r := coll.next(t); len(r.Body.Batch) != 1 || r.Body.Batch[0]["userId"] != "user-"+itoa(i) {
			t.Fatalf("got %v, want message %d alone", r.Body.Batch, i)
		}
	}
}

// A partial batch goes out once the interval (here via FlushAfter, the
// other name of Interval) has passed.
func TestFlushByInterval(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, func(c *Client) { c.FlushAfter = 20 * time.Millisecond })
	start := time.Now()
	if err := c.Track(track(1)); err != nil {
		t.Fatal(err)
	}
	r := coll.next(t)
	if len(r.Body.Batch) != 1 {
		t.Fatalf("%d messages, want 1", len(r.Body.Batch))
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("sent after %v, before the interval", waited)
	}
}

// Close sends what is queued and returns only once it is delivered.
func TestFlushOnClose(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, nil)
	for i := 0; i < 45; i++ {
		if err := c.Track(track(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	expectUsers(t, coll.items(), 45)
}

// Batches never exceed 500,000 bytes: a large flush is split, and every
// message arrives once.
func TestSplitAt500KB(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, func(c *Client) { c.Size = 1000 })
	pad := strings.Repeat("x", 30000)
	const n = 40 // about 1.2 MB in all
	for i := 0; i < n; i++ {
		if err := c.Track(&Track{Event: "big", UserId: "user-" + itoa(i), Properties: map[string]interface{}{"pad": pad}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	// Each message is about 30.1 KB: 16 fit in 500,000 bytes, 17 do not.
	if got := batchSizes(coll); !equalInts(got, []int{8, 16, 16}) {
		t.Errorf("batch sizes %v, want 16+16+8", got)
	}
	for _, r := range coll.requests() {
		if len(r.Raw) > MaxBatchBytes {
			t.Errorf("request of %d bytes", len(r.Raw))
		}
	}
	expectUsers(t, coll.items(), n)
}

// Fields set after New and before first use are honoured, and DEBUG=analytics
// turns on logging like Verbose.
func TestDebugEnvironment(t *testing.T) {
	t.Setenv("DEBUG", "other,analytics")
	coll := newCollector(t, nil)
	var buf syncBuffer
	c := newClient(t, coll.srv.URL, func(c *Client) { c.Logger = log.New(&buf, "", 0) })
	if err := c.Track(track(1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "sending a batch of 1 messages") {
		t.Errorf("no verbose log with DEBUG=analytics; log: %q", buf.String())
	}
	for v, want := range map[string]bool{"analytics": true, "a analytics": true, "analyticsx": false, "": false, "*": false} {
		if debugEnv(v) != want {
			t.Errorf("debugEnv(%q) = %v", v, !want)
		}
	}
}

// Without DEBUG or Verbose, a successful run logs nothing.
func TestQuietByDefault(t *testing.T) {
	t.Setenv("DEBUG", "")
	coll := newCollector(t, nil)
	var buf syncBuffer
	c := newClient(t, coll.srv.URL, func(c *Client) { c.Logger = log.New(&buf, "", 0) })
	if err := c.Track(track(1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Errorf("logged %q", buf.String())
	}
}

// Defaults apply on first use: 10 s request timeout when Client.Timeout is
// zero, Size 20, Interval 5 s, queue 10,000, 4 uploaders; the caller's
// timeout is kept.
func TestDefaults(t *testing.T) {
	c := New("k")
	if c.Endpoint != "http://127.0.0.1:8080" || c.Size != 20 || c.Interval != 5*time.Second || c.Logger == nil {
		t.Errorf("New: %+v", c)
	}
	c.Endpoint = "http://127.0.0.1:1" // nothing is sent: Close with nothing queued
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	s := c.cfg
	if s.http.Timeout != 10*time.Second || s.size != 20 || s.interval != 5*time.Second || s.maxQueue != 10000 || s.uploads != 4 || s.block {
		t.Errorf("settings %+v", s)
	}
	if s.url != "http://127.0.0.1:1/v1/batch" {
		t.Errorf("url %q", s.url)
	}
	c.Close()

	c = New("k")
	c.Client.Timeout = time.Second
	c.Size = 5000
	c.MaxQueueSize = 10
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
	if c.cfg.http.Timeout != time.Second || c.cfg.size != 2500 || c.cfg.maxQueue != 2500 {
		t.Errorf("timeout %v size %d queue %d", c.cfg.http.Timeout, c.cfg.size, c.cfg.maxQueue)
	}
	c.Close()
}

// A request that exceeds the timeout counts as a network error: retried,
// then reported.
func TestRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	coll := newGatedCollector(t, release)
	defer close(release)
	rec := &recorder{}
	c := newClient(t, coll.srv.URL, func(c *Client) {
		c.Client.Timeout = 20 * time.Millisecond
		c.maxAttempts = 2
		c.Callback = rec
	})
	if err := c.Track(track(1)); err != nil {
		t.Fatal(err)
	}
	err := c.Flush()
	if err == nil || !strings.Contains(err.Error(), "Timeout") {
		t.Fatalf("Flush = %v, want a timeout", err)
	}
	if ok, failed := rec.counts(); ok != 0 || failed != 1 {
		t.Errorf("callback: %d successes, %d failures", ok, failed)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
