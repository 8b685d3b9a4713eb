package analytics

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// After Close every call returns ErrClosed (no panic), a second Close
// returns nil at once, and Flush reports ErrClosed.
func TestCloseSemantics(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, nil)
	if err := c.Track(track(1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if len(coll.items()) != 1 {
		t.Fatalf("Close did not deliver the queued message")
	}
	calls := map[string]func() error{
		"Track":    func() error { return c.Track(track(2)) },
		"Identify": func() error { return c.Identify(&Identify{UserId: "u"}) },
		"Page":     func() error { return c.Page(&Page{UserId: "u"}) },
		"Screen":   func() error { return c.Screen(&Screen{UserId: "u"}) },
		"Group":    func() error { return c.Group(&Group{UserId: "u", GroupId: "g"}) },
		"Alias":    func() error { return c.Alias(&Alias{UserId: "u", PreviousId: "p"}) },
		"Flush":    c.Flush,
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	done := make(chan error)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("second Close = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second Close blocked")
	}
	if len(coll.items()) != 1 {
		t.Errorf("calls after Close were delivered")
	}
}

// A client that was never used closes without starting anything, and
// refuses calls afterwards.
func TestCloseUnused(t *testing.T) {
	c := New("k")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c.started.Load() {
		t.Error("Close started the client")
	}
	if err := c.Track(track(1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Track after Close = %v", err)
	}
	if err := c.Flush(); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close = %v", err)
	}
}

// Close reports messages it could not deliver.
func TestCloseReportsFailure(t *testing.T) {
	coll := newCollector(t, func(int, *request) reply { return reply{status: 401, body: `{"error":"unknown write key"}`} })
	c := newClient(t, coll.srv.URL, nil)
	for i := 0; i < 25; i++ {
		if err := c.Track(track(i)); err != nil {
			t.Fatal(err)
		}
	}
	err := c.Close()
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != 401 || he.Message != "unknown write key" {
		t.Fatalf("Close = %v", err)
	}
}

// Close racing with callers on many goroutines never panics, and every
// call that returned nil is delivered exactly once.
func TestCloseWhileSending(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, func(c *Client) { c.Size = 5; c.BlockOnFull = true; c.MaxQueueSize = 50 })
	var accepted sync.Map
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("g%d-%d", g, i)
				err := c.Track(&Track{Event: "e", UserId: id})
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Track: %v", err)
					return
				}
				accepted.Store(id, true)
				if i == 20 {
					once.Do(func() { close(started) })
				}
			}
		}(g)
	}
	<-started
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	delivered := map[string]int{}
	for _, it := range coll.items() {
		delivered[it["userId"].(string)]++
	}
	n := 0
	accepted.Range(func(k, _ interface{}) bool {
		n++
		if delivered[k.(string)] != 1 {
			t.Errorf("%s accepted but delivered %d times", k, delivered[k.(string)])
		}
		return true
	})
	if len(delivered) != n {
		t.Errorf("%d delivered, %d accepted", len(delivered), n)
	}
}

// With the default policy a full queue drops the message: the call returns
// ErrQueueFull and the callback gets the same message and error. What was
// accepted is delivered once the collector answers again.
func TestQueueFullDrops(t *testing.T) {
	gate := make(chan struct{})
	coll := newGatedCollector(t, gate)
	rec := &recorder{}
	c := newClient(t, coll.srv.URL, func(c *Client) {
		c.Size = 1
		c.MaxQueueSize = 1
		c.MaxConcurrentUploads = 1
		c.Callback = rec
	})
	// At most three messages fit: one uploading (stuck at the gate), one
	// held by the loop waiting for the uploader, one in the queue.
	accepted, dropped := 0, -1
	for i := 0; i < 100 && dropped < 0; i++ {
		switch err := c.Track(track(i)); {
		case err == nil:
			accepted++
		case errors.Is(err, ErrQueueFull):
			dropped = i
		default:
			t.Fatal(err)
		}
	}
	if dropped < 0 || accepted > 3 {
		t.Fatalf("accepted %d messages, dropped #%d; want a drop after at most 3", accepted, dropped)
	}
	if ok, failed := rec.counts(); ok != 0 || failed != 1 || !errors.Is(rec.errs[0], ErrQueueFull) || rec.failures[0].(*Track).UserId != "user-"+itoa(dropped) {
		t.Fatalf("callback: %d successes, %d failures %v", ok, failed, rec.errs)
	}
	close(gate)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	expectUsers(t, coll.items(), accepted)
	if ok, _ := rec.counts(); ok != accepted {
		t.Errorf("%d successes reported for %d delivered", ok, accepted)
	}
}

// With BlockOnFull a full queue makes callers wait instead; nothing is
// dropped, and they proceed once uploads move again.
func TestQueueFullBlocks(t *testing.T) {
	gate := make(chan struct{})
	coll := newGatedCollector(t, gate)
	c := newClient(t, coll.srv.URL, func(c *Client) {
		c.Size = 1
		c.MaxQueueSize = 1
		c.MaxConcurrentUploads = 1
		c.BlockOnFull = true
	})
	const n = 10
	var returned atomic.Int32
	done := make(chan error)
	go func() {
		for i := 0; i < n; i++ {
			if err := c.Track(track(i)); err != nil {
				done <- err
				return
			}
			returned.Add(1)
		}
		done <- nil
	}()
	select {
	case err := <-done:
		t.Fatalf("all calls returned (%v) while the collector was stuck", err)
	case <-time.After(100 * time.Millisecond):
	}
	if r := returned.Load(); r > 3 {
		t.Fatalf("%d calls returned while uploads were stuck", r)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	expectUsers(t, coll.items(), n)
}

// A caller blocked on a full queue is released by Close with ErrClosed.
func TestCloseReleasesBlockedCaller(t *testing.T) {
	gate := make(chan struct{})
	coll := newGatedCollector(t, gate)
	c := newClient(t, coll.srv.URL, func(c *Client) {
		c.Size = 1
		c.MaxQueueSize = 1
		c.MaxConcurrentUploads = 1
		c.BlockOnFull = true
	})
	errs := make(chan error, 100)
	go func() {
		for i := 0; i < 100; i++ {
			err := c.Track(track(i))
			errs <- err
			if err != nil {
				return
			}
		}
	}()
	// Wait until at least one call went through, so the caller is blocked
	// at some point after.
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	closed := make(chan error)
	go func() { closed <- c.Close() }()
	var last error
	for err := range errs {
		if err != nil {
			last = err
			break
		}
	}
	if !errors.Is(last, ErrClosed) {
		t.Fatalf("blocked caller got %v, want ErrClosed", last)
	}
	close(gate) // let Close finish delivering what was accepted
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// Many goroutines sending at once: every message is delivered exactly once,
// and the callback sees each success once.
func TestConcurrentSenders(t *testing.T) {
	coll := newCollector(t, nil)
	rec := &recorder{}
	c := newClient(t, coll.srv.URL, func(c *Client) {
		c.Size = 7
		c.BlockOnFull = true
		c.MaxQueueSize = 100
		c.Callback = rec
	})
	const goroutines, each = 16, 250
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				n := g*each + i
				var err error
				switch n % 3 {
				case 0:
					err = c.Track(track(n))
				case 1:
					err = c.Identify(&Identify{UserId: "user-" + itoa(n), Traits: map[string]interface{}{"n": n}})
				default:
					err = c.Page(&Page{UserId: "user-" + itoa(n), Name: "p"})
				}
				if err != nil {
					t.Error(err)
				}
				if i == each/2 && g%4 == 0 {
					if err := c.Flush(); err != nil {
						t.Error(err)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	items := coll.items()
	expectUsers(t, items, goroutines*each)
	ids := map[string]bool{}
	for _, it := range items {
		id := it["messageId"].(string)
		if ids[id] {
			t.Fatalf("messageId %s sent twice", id)
		}
		ids[id] = true
	}
	seen := map[string]bool{}
	for _, m := range rec.successes {
		id := m.common().MessageId
		if !ids[id] || seen[id] {
			t.Fatalf("callback success for %s: sent %v, reported before %v", id, ids[id], seen[id])
		}
		seen[id] = true
	}
	if len(seen) != goroutines*each || len(rec.failures) != 0 {
		t.Errorf("callback: %d successes, %d failures", len(seen), len(rec.failures))
	}
	for _, r := range coll.requests() {
		if len(r.Body.Batch) > maxBatchItems || len(r.Raw) > MaxBatchBytes {
			t.Errorf("batch of %d messages, %d bytes", len(r.Body.Batch), len(r.Raw))
		}
	}
}
