package analytics

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchTrack is a typical server-side track call.
func benchTrack() *Track {
	return &Track{
		UserId: "019mr8mf4r",
		Event:  "Order Completed",
		Properties: map[string]interface{}{
			"order_id": "50314b8e9bcf000000000000",
			"revenue":  39.95,
			"currency": "USD",
			"items":    3,
		},
	}
}

// BenchmarkEncode measures only the encoding of benchTrack, the bulk of an
// enqueue: id, timestamp from the encoder's clock, properties.
func BenchmarkEncode(b *testing.B) {
	msg := benchTrack()
	e := getEncoder()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := e.encode(msg, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

// discardTransport answers every request with success without a network,
// so that the enqueue benchmark measures the library, not the loopback.
type discardTransport struct{ requests atomic.Int64 }

func (t *discardTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	t.requests.Add(1)
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(`{"success":true}`)),
		Request:    r,
	}, nil
}

// BenchmarkEnqueue measures one Track call from one goroutine, with the
// default settings (batches of 20) and uploads to a transport that discards
// them. BlockOnFull keeps every message: if the background fell behind,
// ns/op would show it. allocs/op counts the whole process, background
// included.
func BenchmarkEnqueue(b *testing.B) {
	for _, cb := range []struct {
		name string
		cb   Callback
	}{{"", nil}, {"callback", &countingCallback{}}} {
		b.Run("callback="+map[bool]string{true: "on", false: "off"}[cb.cb != nil], func(b *testing.B) {
			c := New("wk_bench")
			c.Client.Transport = &discardTransport{}
			c.BlockOnFull = true
			c.Callback = cb.cb
			c.Logger = log.New(io.Discard, "", 0)
			msg := benchTrack()
			if err := c.Track(msg); err != nil { // start the client outside the timing
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.Track(msg); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := c.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

type countingCallback struct{ ok, failed atomic.Int64 }

func (c *countingCallback) Success(Call)        { c.ok.Add(1) }
func (c *countingCallback) Failure(Call, error) { c.failed.Add(1) }

// BenchmarkThroughput sends b.N messages from 8 goroutines to an httptest
// server that discards them, including the final Close that waits for
// delivery; msgs/s is the delivered rate.
func BenchmarkThroughput(b *testing.B) {
	for _, size := range []int{20, 250} {
		b.Run("size="+itoa(size), func(b *testing.B) {
			var received atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				received.Add(n)
				io.WriteString(w, `{"success":true}`)
			}))
			defer srv.Close()
			c := New("wk_bench")
			c.Endpoint = srv.URL
			c.Size = size
			c.BlockOnFull = true
			c.Logger = log.New(io.Discard, "", 0)
			msg := benchTrack()
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
						if err := c.Track(msg); err != nil {
							b.Error(err)
							return
						}
					}
				}(n)
			}
			wg.Wait()
			if err := c.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			if received.Load() == 0 && b.N > 0 {
				b.Fatal("nothing received")
			}
		})
	}
}
