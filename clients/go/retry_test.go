package analytics

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// sleepRecorder replaces the backoff sleep: it records each wait and
// returns at once.
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleepRecorder) sleep(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, d)
}

func (s *sleepRecorder) get() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// Network errors, 5xx and 429 are retried until the batch gets through;
// other 4xx are not retried and are reported.
func TestRetries(t *testing.T) {
	cases := []struct {
		name     string
		answers  []reply // answers to attempts 1, 2, ...; later attempts get 200
		attempts int     // attempts expected
		wantErr  int     // HTTP status of the reported error, 0 for success
		message  string  // expected in the error
	}{
		{"500 then 503 then success", []reply{{status: 500}, {status: 503}}, 3, 0, ""},
		{"429 then success", []reply{{status: 429, body: `{"error":"slow down"}`}}, 2, 0, ""},
		{"400 not retried", []reply{{status: 400, body: `{"error":"batch exceeds 2500 events"}`}}, 1, 400, "batch exceeds 2500 events"},
		{"401 not retried", []reply{{status: 401, body: `{"error":"invalid write key"}`}}, 1, 401, "invalid write key"},
		{"413 not retried", []reply{{status: 413, body: `{"error":"request exceeds 500 KB"}`}}, 1, 413, "500 KB"},
		{"5xx until attempts run out", []reply{{status: 502}, {status: 502}, {status: 502}, {status: 502}}, 4, 502, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			coll := newCollector(t, func(n int, r *request) reply {
				if n <= len(tc.answers) {
					return tc.answers[n-1]
				}
				return reply{status: 200, body: `{"success":true}`}
			})
			rec := &recorder{}
			sleeps := &sleepRecorder{}
			c := newClient(t, coll.srv.URL, func(c *Client) {
				c.Callback = rec
				c.maxAttempts = 4
				c.sleep = sleeps.sleep
			})
			for i := 0; i < 3; i++ {
				if err := c.Track(track(i)); err != nil {
					t.Fatal(err)
				}
			}
			err := c.Flush()
			if got := len(coll.requests()); got != tc.attempts {
				t.Errorf("%d attempts, want %d", got, tc.attempts)
			}
			if got := len(sleeps.get()); got != tc.attempts-1 {
				t.Errorf("%d backoff waits for %d attempts", got, tc.attempts)
			}
			ok, failed := rec.counts()
			if tc.wantErr == 0 {
				if err != nil || ok != 3 || failed != 0 {
					t.Fatalf("Flush = %v; callback %d successes, %d failures", err, ok, failed)
				}
				return
			}
			var he *HTTPError
			if !errors.As(err, &he) || he.StatusCode != tc.wantErr || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("Flush = %v, want HTTP %d mentioning %q", err, tc.wantErr, tc.message)
			}
			if !strings.Contains(err.Error(), "3 of 3 messages") {
				t.Errorf("Flush error %q does not count the losses", err)
			}
			if ok != 0 || failed != 3 {
				t.Fatalf("callback: %d successes, %d failures, want 3 failures", ok, failed)
			}
			for _, e := range rec.errs {
				if !errors.As(e, &he) || he.StatusCode != tc.wantErr {
					t.Errorf("callback error %v", e)
				}
			}
		})
	}
}

// A connection that cannot be made is retried, then reported.
func TestRetryNetworkError(t *testing.T) {
	coll := newCollector(t, nil)
	url := coll.srv.URL
	coll.srv.Close() // nothing listens there any more
	sleeps := &sleepRecorder{}
	c := newClient(t, url, func(c *Client) {
		c.maxAttempts = 3
		c.sleep = sleeps.sleep
	})
	if err := c.Track(track(1)); err != nil {
		t.Fatal(err)
	}
	err := c.Flush()
	if err == nil || !strings.Contains(err.Error(), "sending batch") {
		t.Fatalf("Flush = %v, want a network error", err)
	}
	if got := len(sleeps.get()); got != 2 {
		t.Errorf("%d waits, want 2 (3 attempts)", got)
	}
}

// Retry-After is honoured: the wait before the next attempt is at least
// what the server asked for.
func TestRetryAfter(t *testing.T) {
	coll := newCollector(t, func(n int, r *request) reply {
		if n == 1 {
			return reply{status: 429, header: map[string]string{"Retry-After": "7"}, body: `{"error":"overloaded"}`}
		}
		return reply{status: 200, body: `{"success":true}`}
	})
	sleeps := &sleepRecorder{}
	c := newClient(t, coll.srv.URL, func(c *Client) { c.sleep = sleeps.sleep })
	if err := c.Track(track(1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if w := sleeps.get(); len(w) != 1 || w[0] < 7*time.Second || w[0] > maxRetryAfter {
		t.Fatalf("waits %v, want one of at least 7s", w)
	}
	// A retried batch is restamped: sentAt moves on, messageId stays.
	reqs := coll.requests()
	if reqs[0].Body.MessageID != reqs[1].Body.MessageID {
		t.Errorf("batch messageId changed between attempts")
	}
}

// The backoff grows exponentially from the base, stays within the cap, and
// is jittered.
func TestBackoff(t *testing.T) {
	base, limit := 100*time.Millisecond, 10*time.Second
	distinct := map[time.Duration]bool{}
	for attempt := 1; attempt <= 20; attempt++ {
		want := base << (attempt - 1)
		if want > limit || want <= 0 {
			want = limit
		}
		for i := 0; i < 20; i++ {
			d := backoff(attempt, base, limit)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, want/2, want)
			}
			if attempt == 3 {
				distinct[d] = true
			}
		}
	}
	if len(distinct) < 5 {
		t.Errorf("backoff barely varies: %v", distinct)
	}
	for in, want := range map[string]time.Duration{"": 0, "3": 3 * time.Second, "-1": 0, "junk": 0, "100000": maxRetryAfter} {
		if got := parseRetryAfter(in, time.Now()); got != want {
			t.Errorf("Retry-After %q = %v, want %v", in, got, want)
		}
	}
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := parseRetryAfter("Mon, 01 Jan 2024 00:00:30 GMT", now); got != 30*time.Second {
		t.Errorf("Retry-After date = %v", got)
	}
}

// Items the collector lists as rejected in a 200 answer are reported as
// failures; the others as successes.
func TestRejectedItems(t *testing.T) {
	coll := newCollector(t, func(n int, r *request) reply {
		return reply{status: 200, body: `{"success":true,"rejected":[{"index":1,"field":"messageId","reason":"too long"},{"index":7,"field":"x","reason":"out of range"}]}`}
	})
	rec := &recorder{}
	c := newClient(t, coll.srv.URL, func(c *Client) { c.Callback = rec })
	for i := 0; i < 3; i++ {
		if err := c.Track(track(i)); err != nil {
			t.Fatal(err)
		}
	}
	err := c.Flush()
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "1 of 3") || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("Flush = %v", err)
	}
	ok, failed := rec.counts()
	if ok != 2 || failed != 1 {
		t.Fatalf("callback: %d successes, %d failures; want 2 and 1", ok, failed)
	}
	m := rec.failures[0].(*Track)
	if m.UserId != "user-1" || !errors.Is(rec.errs[0], ErrRejected) || !strings.Contains(rec.errs[0].Error(), `"messageId"`) {
		t.Errorf("failure %v: %v", m.UserId, rec.errs[0])
	}
	// The callback's copy names the message as it was sent.
	sent := coll.items()[1]
	if m.MessageId != sent["messageId"] || m.Timestamp != sent["timestamp"] || m.Type != "track" {
		t.Errorf("callback copy %+v, sent %v", m.Message, sent)
	}
}
