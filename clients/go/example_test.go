package analytics_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	analytics "github.com/hookrelay/hookrelay/clients/go"
)

// fakeCollector stands in for hookrelay's collector so that the examples
// run anywhere: it prints each message it receives and answers success.
func fakeCollector() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _, _ := r.BasicAuth()
		var body struct {
			Batch []map[string]interface{} `json:"batch"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, `{"error":"not JSON"}`, http.StatusBadRequest)
			return
		}
		for _, m := range body.Batch {
			fmt.Println(r.Method, r.URL.Path, user, m["type"], m["userId"], m["event"])
		}
		fmt.Fprint(w, `{"success":true}`)
	}))
}

// Send an identify and a track message, then Close, which delivers
// everything still queued before it returns.
func Example() {
	collector := fakeCollector()
	defer collector.Close()

	client := analytics.New("wk_live_123")
	client.Endpoint = collector.URL // by default http://127.0.0.1:8080

	err := client.Identify(&analytics.Identify{
		UserId: "019mr8mf4r",
		Traits: map[string]interface{}{"name": "Michael Bolton", "plan": "Enterprise"},
	})
	if err != nil {
		fmt.Println(err)
	}
	err = client.Track(&analytics.Track{
		UserId:     "019mr8mf4r",
		Event:      "Signed Up",
		Properties: map[string]interface{}{"plan": "Enterprise"},
	})
	if err != nil {
		fmt.Println(err)
	}
	if err := client.Close(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// POST /v1/batch wk_live_123 identify 019mr8mf4r <nil>
	// POST /v1/batch wk_live_123 track 019mr8mf4r Signed Up
}

// Invalid messages are refused by the call itself, with analytics-go v2's
// errors, and nothing is queued.
func ExampleClient_Track_validation() {
	client := analytics.New("wk_live_123")
	defer client.Close()

	err := client.Track(&analytics.Track{UserId: "019mr8mf4r"})
	fmt.Println(err)
	fmt.Println(errors.Is(err, analytics.ErrMissingEvent))

	err = client.Group(&analytics.Group{UserId: "019mr8mf4r"})
	fmt.Println(err)
	// Output:
	// You must pass 'event'.
	// true
	// You must pass a 'groupId'.
}

// Flush sends what is queued and waits for the outcome, without closing
// the client.
func ExampleClient_Flush() {
	collector := fakeCollector()
	defer collector.Close()

	client := analytics.New("wk_live_123")
	client.Endpoint = collector.URL
	defer client.Close()

	client.Page(&analytics.Page{UserId: "019mr8mf4r", Name: "Pricing", Traits: map[string]interface{}{"path": "/pricing"}})
	fmt.Println("flushed:", client.Flush())
	// Output:
	// POST /v1/batch wk_live_123 page 019mr8mf4r <nil>
	// flushed: <nil>
}

// outcomes counts what the client reports through its Callback.
type outcomes struct {
	mu        sync.Mutex
	delivered []string
	failed    []string
}

func (o *outcomes) Success(m analytics.Call) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t, ok := m.(*analytics.Track); ok {
		o.delivered = append(o.delivered, t.Event)
	}
}

func (o *outcomes) Failure(m analytics.Call, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed = append(o.failed, fmt.Sprintf("%T: %v", m, err))
}

// A Callback learns the fate of every message; here the collector refuses
// the write key, so the messages fail with an *HTTPError and are not retried.
func ExampleCallback() {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":"unknown write key"}`)
	}))
	defer collector.Close()

	var got outcomes
	client := analytics.New("wk_wrong")
	client.Endpoint = collector.URL
	client.Callback = &got
	client.Logger = log.New(io.Discard, "", 0) // failures are also logged

	client.Track(&analytics.Track{UserId: "019mr8mf4r", Event: "Signed Up"})
	err := client.Close()

	var httpErr *analytics.HTTPError
	fmt.Println(errors.As(err, &httpErr), httpErr.StatusCode)
	fmt.Println(got.failed)
	// Output:
	// true 401
	// [*analytics.Track: analytics: collector answered 401 Unauthorized: unknown write key]
}

// Historical data keeps its own timestamp; FormatTime gives the form the
// client sends.
func ExampleFormatTime() {
	when := time.Date(2012, 12, 2, 1, 30, 8, 276_000_000, time.FixedZone("CET", 3600))
	msg := &analytics.Track{
		UserId:  "019mr8mf4r",
		Event:   "Order Completed",
		Message: analytics.Message{Timestamp: analytics.FormatTime(when)},
	}
	fmt.Println(msg.Timestamp)
	// Output:
	// 2012-12-02T00:30:08.276Z
}
