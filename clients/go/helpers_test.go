package analytics

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"
)

// request is what the fake collector saw of one POST.
type request struct {
	Path            string
	User, Password  string
	HasAuth         bool
	ContentType     string
	ContentEncoding string
	UserAgent       string
	WireBytes       int    // body length as sent (compressed or not)
	Raw             []byte // body after decompression
	Body            batchBody
}

type batchBody struct {
	Batch     []map[string]interface{} `json:"batch"`
	Context   map[string]interface{}   `json:"context"`
	MessageID string                   `json:"messageId"`
	SentAt    string                   `json:"sentAt"`
}

// reply is the fake collector's answer to one request.
type reply struct {
	status int
	header map[string]string
	body   string
}

// collector is a fake of the collector's batch endpoint. By default it
// answers 200 {"success":true}; respond, when set, decides instead (n counts
// requests from 1).
type collector struct {
	t       *testing.T
	srv     *httptest.Server
	respond func(n int, r *request) reply
	gate    chan struct{} // when non-nil, each request waits to receive from it

	mu   sync.Mutex
	reqs []*request

	got chan *request // every request, in arrival order
}

func newCollector(t *testing.T, respond func(n int, r *request) reply) *collector {
	t.Helper()
	return startCollector(t, &collector{respond: respond})
}

// newGatedCollector returns a collector whose handlers each wait for a
// value from gate (or its closing) before answering.
func newGatedCollector(t *testing.T, gate chan struct{}) *collector {
	t.Helper()
	return startCollector(t, &collector{gate: gate})
}

func startCollector(t *testing.T, c *collector) *collector {
	c.t = t
	c.got = make(chan *request, 100000)
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) serve(w http.ResponseWriter, hr *http.Request) {
	wire, err := io.ReadAll(hr.Body)
	if err != nil {
		c.t.Errorf("collector: reading body: %v", err)
		return
	}
	if c.gate != nil {
		<-c.gate
	}
	r := &request{
		Path:            hr.URL.Path,
		ContentType:     hr.Header.Get("Content-Type"),
		ContentEncoding: hr.Header.Get("Content-Encoding"),
		UserAgent:       hr.Header.Get("User-Agent"),
		WireBytes:       len(wire),
		Raw:             wire,
	}
	r.User, r.Password, r.HasAuth = hr.BasicAuth()
	if r.ContentEncoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(wire))
		if err != nil {
			c.t.Errorf("collector: gzip: %v", err)
			return
		}
		if r.Raw, err = io.ReadAll(zr); err != nil {
			c.t.Errorf("collector: gunzip: %v", err)
			return
		}
	}
	if err := json.Unmarshal(r.Raw, &r.Body); err != nil {
		c.t.Errorf("collector: body is not JSON: %v\n%s", err, r.Raw)
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	n := len(c.reqs)
	c.mu.Unlock()
	rep := reply{status: 200, body: `{"success":true}`}
	if c.respond != nil {
		rep = c.respond(n, r)
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
	c.got <- r
}

func (c *collector) requests() []*request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*request(nil), c.reqs...)
}

// items returns every message received, in order.
func (c *collector) items() []map[string]interface{} {
	var all []map[string]interface{}
	for _, r := range c.requests() {
		all = append(all, r.Body.Batch...)
	}
	return all
}

// next waits for the next request.
func (c *collector) next(t *testing.T) *request {
	t.Helper()
	select {
	case r := <-c.got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a request")
		return nil
	}
}

// newClient returns a client for the fake collector with fast retries, no
// interval flushes unless asked for, and logs sent to the test log.
func newClient(t *testing.T, endpoint string, configure func(*Client)) *Client {
	t.Helper()
	c := New("wk_test")
	c.Endpoint = endpoint
	c.Interval = time.Hour
	c.Logger = log.New(testWriter{t}, "", 0)
	c.retryBase = time.Millisecond
	c.retryCap = 4 * time.Millisecond
	if configure != nil {
		configure(c)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// recorder is a Callback that remembers every outcome.
type recorder struct {
	mu        sync.Mutex
	successes []Call
	failures  []Call
	errs      []error
}

func (r *recorder) Success(m Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.successes = append(r.successes, m)
}

func (r *recorder) Failure(m Call, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, m)
	r.errs = append(r.errs, err)
}

func (r *recorder) counts() (ok, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.successes), len(r.failures)
}

// expectUsers checks that items are the messages of track(0) to
// track(n-1), each exactly once, in any order.
func expectUsers(t *testing.T, items []map[string]interface{}, n int) {
	t.Helper()
	seen := make(map[string]int, n)
	for _, it := range items {
		u, _ := it["userId"].(string)
		seen[u]++
	}
	for i := 0; i < n; i++ {
		if got := seen["user-"+itoa(i)]; got != 1 {
			t.Errorf("user-%d delivered %d times", i, got)
		}
	}
	if len(items) != n {
		t.Errorf("%d messages delivered, want %d", len(items), n)
	}
}

// batchSizes returns the number of messages of each request, sorted.
func batchSizes(c *collector) []int {
	var sizes []int
	for _, r := range c.requests() {
		sizes = append(sizes, len(r.Body.Batch))
	}
	sort.Ints(sizes)
	return sizes
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func track(i int) *Track {
	return &Track{Event: "Signed Up", UserId: "user-" + itoa(i), Properties: map[string]interface{}{"plan": "pro", "i": i}}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
