package analytics

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const userAgent = "analytics-go (version: " + Version + ")"

// maxResponseBytes bounds how much of a response body is read.
const maxResponseBytes = 1 << 20

// uploader is the state of one upload goroutine.
type uploader struct {
	c    *Client
	auth string
	gz   *gzip.Writer
	zbuf bytes.Buffer
	resp bytes.Buffer
}

// uploader sends batches until the loop closes jobs.
func (c *Client) uploader() {
	defer c.workers.Done()
	u := &uploader{c: c, auth: "Basic " + base64.StdEncoding.EncodeToString([]byte(c.key+":"))}
	for b := range c.jobs {
		u.process(b)
	}
}

// rejection is one entry of the "rejected" array of a 200 answer.
type rejection struct {
	Index  int    `json:"index"`
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// process sends b, reports each message to the callback and the outcome to
// the waiters, then recycles b.
func (u *uploader) process(b *batch) {
	c := u.c
	cb := c.cfg.callback
	rejected, err := u.send(b)
	failed := 0
	if err != nil {
		failed = b.n
		c.cfg.logger.Printf("batch of %d messages not delivered: %v", b.n, err)
		if cb != nil {
			for _, m := range b.calls {
				cb.Failure(m, err)
			}
		}
	} else {
		var byIndex map[int]error
		for _, r := range rejected {
			if r.Index < 0 || r.Index >= b.n {
				continue
			}
			if byIndex == nil {
				byIndex = make(map[int]error, len(rejected))
			}
			if _, dup := byIndex[r.Index]; !dup {
				byIndex[r.Index] = fmt.Errorf("%w: item %d, field %q: %s", ErrRejected, r.Index, r.Field, r.Reason)
			}
		}
		failed = len(byIndex)
		for i := 0; i < b.n && (failed > 0 && err == nil); i++ {
			if e, ok := byIndex[i]; ok {
				err = e // the first rejection, for Flush and Close
			}
		}
		if failed > 0 {
			c.cfg.logger.Printf("collector rejected %d of %d messages; first: %v", failed, b.n, err)
		}
		if cb != nil {
			for i, m := range b.calls {
				if e, ok := byIndex[i]; ok {
					cb.Failure(m, e)
				} else {
					cb.Success(m)
				}
			}
		}
	}
	c.complete(b, failed, err)
	recycleBatch(b)
}

// send posts b, retrying network errors, 5xx and 429 with capped
// exponential backoff and jitter, up to maxAttempts attempts.
func (u *uploader) send(b *batch) ([]rejection, error) {
	c := u.c
	for attempt := 1; ; attempt++ {
		b.stampSentAt(c.clock())
		rejected, retry, after, err := u.post(b.body)
		if err == nil {
			c.debugf("batch of %d messages delivered (attempt %d)", b.n, attempt)
			return rejected, nil
		}
		if !retry || attempt >= c.cfg.maxAttempts {
			return nil, err
		}
		d := backoff(attempt, c.cfg.retryBase, c.cfg.retryCap)
		if after > d {
			d = after
			if d > maxRetryAfter {
				d = maxRetryAfter
			}
		}
		c.debugf("batch of %d messages: attempt %d failed (%v); retrying in %v", b.n, attempt, err, d)
		c.cfg.sleep(d)
	}
}

// backoff returns the wait before retry number attempt (1-based): base
// doubled per attempt, capped, with the upper half of it randomised.
func backoff(attempt int, base, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	if d > limit {
		d = limit
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// post makes one attempt. It returns the rejected items of a 2xx answer,
// or an error and whether it is worth retrying (with the server's
// Retry-After, if any).
func (u *uploader) post(body []byte) (rejected []rejection, retry bool, after time.Duration, err error) {
	c := u.c
	payload := body
	if c.cfg.compress {
		u.zbuf.Reset()
		if u.gz == nil {
			u.gz = gzip.NewWriter(&u.zbuf)
		} else {
			u.gz.Reset(&u.zbuf)
		}
		if _, err := u.gz.Write(body); err != nil {
			return nil, false, 0, fmt.Errorf("analytics: compressing batch: %w", err)
		}
		if err := u.gz.Close(); err != nil {
			return nil, false, 0, fmt.Errorf("analytics: compressing batch: %w", err)
		}
		payload = u.zbuf.Bytes()
	}
	req, err := http.NewRequest(http.MethodPost, c.cfg.url, bytes.NewReader(payload))
	if err != nil {
		return nil, false, 0, fmt.Errorf("analytics: building request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Authorization", u.auth)
	if c.cfg.compress {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.cfg.http.Do(req)
	if err != nil {
		return nil, true, 0, fmt.Errorf("analytics: sending batch: %w", err)
	}
	u.resp.Reset()
	_, readErr := u.resp.ReadFrom(io.LimitReader(resp.Body, maxResponseBytes))
	resp.Body.Close()
	status := resp.StatusCode
	switch {
	case status >= 200 && status < 300:
		// The batch is stored; a body we cannot read or parse does not
		// change that.
		if readErr == nil {
			rejected = parseRejected(u.resp.Bytes())
		}
		return rejected, false, 0, nil
	case status == http.StatusTooManyRequests || status >= 500:
		return nil, true, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
			&HTTPError{StatusCode: status, Message: errorMessage(u.resp.Bytes())}
	default:
		return nil, false, 0, &HTTPError{StatusCode: status, Message: errorMessage(u.resp.Bytes())}
	}
}

// parseRejected returns the "rejected" array of a success body, if any.
func parseRejected(body []byte) []rejection {
	if !bytes.Contains(body, []byte(`"rejected"`)) {
		return nil
	}
	var r struct {
		Rejected []rejection `json:"rejected"`
	}
	if json.Unmarshal(body, &r) != nil {
		return nil
	}
	return r.Rejected
}

// errorMessage extracts {"error": "..."} from an error body, or returns the
// start of the body.
func errorMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s <= 0 {
			return 0
		}
		if s > int(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
