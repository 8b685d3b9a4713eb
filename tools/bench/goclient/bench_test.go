// Package goclient benchmarks hookrelay's Go client against Segment's
// analytics-go v3 in one run, on the same message, machine and servers.
//
//	cd tools/bench/goclient && go test -run '^$' -bench . -benchtime 2s -count 3
//
// Two benchmarks, each with one sub-benchmark per library:
//
//   - Enqueue: one goroutine calls Track in a loop; uploads go to an
//     http.RoundTripper that discards them (no network), so ns/op and
//     allocs/op are the library's cost per call (allocs/op counts the whole
//     process, background goroutines included). Each library runs with its
//     defaults (batches of 20 for hookrelay, 250 for v3).
//   - Throughput: 8 goroutines send b.N messages between them to an
//     httptest server that counts and discards them; the time includes
//     Close, which waits until everything is delivered, and the run fails
//     unless the server received exactly b.N messages. msgs/s is the
//     delivered rate. "batch=20" and "batch=250" run both at the same batch size (v3's
//     default) over the same kind of http.Transport (8 idle connections per
//     host); "defaults" runs each library as it comes out of the box.
//
// Both libraries block the caller rather than drop when they fall behind
// (v3 always does; hookrelay with BlockOnFull), so every message is
// delivered and the rates are comparable.
package goclient

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	hookrelay "github.com/hookrelay/hookrelay/clients/go"
	segment "github.com/segmentio/analytics-go/v3"
)

// The same track call for both libraries.
const (
	userID  = "019mr8mf4r"
	event   = "Order Completed"
	orderID = "50314b8e9bcf000000000000"
)

func properties() map[string]interface{} {
	return map[string]interface{}{"order_id": orderID, "revenue": 39.95, "currency": "USD", "items": 3}
}

// sender is one library under test.
type sender struct {
	name  string
	start func(endpoint string, transport http.RoundTripper, batch int) (track func() error, close func() error)
}

var senders = []sender{
	{"hookrelay", func(endpoint string, transport http.RoundTripper, batch int) (func() error, func() error) {
		c := hookrelay.New("wk_bench")
		c.Endpoint = endpoint
		if batch > 0 {
			c.Size = batch
		}
		c.BlockOnFull = true
		c.Client.Transport = transport
		c.Logger = log.New(io.Discard, "", 0)
		msg := &hookrelay.Track{UserId: userID, Event: event, Properties: properties()}
		return func() error { return c.Track(msg) }, c.Close
	}},
	{"segment-v3", func(endpoint string, transport http.RoundTripper, batch int) (func() error, func() error) {
		c, err := segment.NewWithConfig("wk_bench", segment.Config{
			Endpoint:  endpoint,
			BatchSize: batch, // 0: v3's default, 250
			Transport: transport,
			Logger:    segment.StdLogger(log.New(io.Discard, "", 0)),
		})
		if err != nil {
			panic(err)
		}
		msg := segment.Track{UserId: userID, Event: event, Properties: properties()}
		return func() error { return c.Enqueue(msg) }, c.Close
	}},
}

// discardTransport answers every request with success, without a network.
type discardTransport struct{}

func (discardTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(`{"success":true}`)),
		Request:    r,
	}, nil
}

func BenchmarkEnqueue(b *testing.B) {
	for _, s := range senders {
		b.Run(s.name, func(b *testing.B) {
			track, closeFn := s.start("http://127.0.0.1:1", discardTransport{}, 0)
			if err := track(); err != nil { // start the client outside the timing
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := track(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := closeFn(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkThroughput(b *testing.B) {
	for _, batch := range []struct {
		name string
		size int
		same bool // same batch size and transport settings for both
	}{{"batch=20", 20, true}, {"batch=250", 250, true}, {"defaults", 0, false}} {
		for _, s := range senders {
			b.Run(batch.name+"/"+s.name, func(b *testing.B) {
				// The server counts the messages it receives, so that a
				// library cannot win by losing them.
				var received atomic.Int64
				bufs := sync.Pool{New: func() any { return new(bytes.Buffer) }}
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					buf := bufs.Get().(*bytes.Buffer)
					buf.Reset()
					buf.ReadFrom(r.Body)
					received.Add(int64(bytes.Count(buf.Bytes(), []byte(`"type":"track"`))))
					bufs.Put(buf)
					io.WriteString(w, `{"success":true}`)
				}))
				defer srv.Close()
				var transport http.RoundTripper
				if batch.same {
					t := http.DefaultTransport.(*http.Transport).Clone()
					t.MaxIdleConnsPerHost = 8
					transport = t
				}
				track, closeFn := s.start(srv.URL, transport, batch.size)
				b.ReportAllocs()
				b.ResetTimer()
				const goroutines = 8
				var wg sync.WaitGroup
				for g := 0; g < goroutines; g++ {
					n := b.N / goroutines
					if g < b.N%goroutines {
						n++
					}
					wg.Add(1)
					go func(n int) {
						defer wg.Done()
						for i := 0; i < n; i++ {
							if err := track(); err != nil {
								b.Error(err)
								return
							}
						}
					}(n)
				}
				wg.Wait()
				if err := closeFn(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				if got := received.Load(); got != int64(b.N) {
					b.Fatalf("delivered %d of %d messages", got, b.N)
				}
			})
		}
	}
}
