package analytics

import (
	"fmt"
	"sync"
	"time"
)

// itemQueue holds encoded messages back to back in one buffer, so that
// queuing a message allocates nothing once the buffers have grown.
type itemQueue struct {
	data  []byte
	ends  []int  // ends[i] is the end offset of message i in data
	calls []Call // parallel to ends when a Callback is set, else empty
}

func (q *itemQueue) len() int { return len(q.ends) }

// start returns the offset of message i in data.
func (q *itemQueue) start(i int) int {
	if i == 0 {
		return 0
	}
	return q.ends[i-1]
}

func (q *itemQueue) item(i int) []byte { return q.data[q.start(i):q.ends[i]] }

func (q *itemQueue) call(i int) Call {
	if i < len(q.calls) {
		return q.calls[i]
	}
	return nil
}

func (q *itemQueue) add(p []byte, c Call) {
	q.data = append(q.data, p...)
	q.ends = append(q.ends, len(q.data))
	if c != nil {
		q.calls = append(q.calls, c)
	}
}

// moveTail moves messages k.. to the end of dst and keeps the first k.
func (q *itemQueue) moveTail(k int, dst *itemQueue) {
	for i := k; i < q.len(); i++ {
		dst.add(q.item(i), q.call(i))
	}
	q.data = q.data[:q.start(k)]
	q.ends = q.ends[:k]
	if len(q.calls) > k {
		for i := k; i < len(q.calls); i++ {
			q.calls[i] = nil
		}
		q.calls = q.calls[:k]
	}
}

// reset empties the queue, keeping its buffers unless they grew large.
func (q *itemQueue) reset() {
	for i := range q.calls {
		q.calls[i] = nil
	}
	q.data, q.ends, q.calls = q.data[:0], q.ends[:0], q.calls[:0]
	if cap(q.data) > 8<<20 {
		*q = itemQueue{}
	}
}

// A batch is one request body and the bookkeeping of its messages.
type batch struct {
	body    []byte
	n       int
	calls   []Call
	waiters []*waiter // guarded by Client.bmu
}

const batchHeader = `{"batch":[`

const batchFooterStart = `],"context":{"library":{"name":"analytics-go","version":"` + Version + `"}},"messageId":"`

const sentAtKey = `","sentAt":"`

// batchFooterLen is the length of the footer: its start, a UUID, the
// sentAt key, a 24-byte timestamp and `"}`.
const batchFooterLen = len(batchFooterStart) + 36 + len(sentAtKey) + 24 + 2

// sentAtFromEnd locates the sentAt value from the end of a finished body, so
// each attempt can restamp it in place.
const sentAtFromEnd = 24 + 2

var batchPool = sync.Pool{New: func() any { return new(batch) }}

// newBatch returns an empty batch whose body has room for about hint bytes
// (at most MaxBatchBytes), so that building it does not reallocate.
func newBatch(hint int) *batch {
	b := batchPool.Get().(*batch)
	if hint > MaxBatchBytes {
		hint = MaxBatchBytes
	}
	if cap(b.body) < hint {
		b.body = make([]byte, 0, hint)
	}
	b.body = append(b.body[:0], batchHeader...)
	return b
}

func recycleBatch(b *batch) {
	for i := range b.calls {
		b.calls[i] = nil
	}
	b.calls, b.waiters, b.n = b.calls[:0], nil, 0
	if cap(b.body) > MaxBatchBytes {
		b.body = nil
	}
	batchPool.Put(b)
}

// fits reports whether item can join the batch without the body exceeding
// MaxBatchBytes. An empty batch always takes an item, since one message is at
// most MaxMessageBytes.
func (b *batch) fits(item []byte) bool {
	if b.n == 0 {
		return true
	}
	return len(b.body)+1+len(item)+batchFooterLen <= MaxBatchBytes
}

func (b *batch) add(item []byte, c Call) {
	if b.n > 0 {
		b.body = append(b.body, ',')
	}
	b.body = append(b.body, item...)
	if c != nil {
		b.calls = append(b.calls, c)
	}
	b.n++
}

func (b *batch) finish(id [16]byte, now time.Time) {
	b.body = append(b.body, batchFooterStart...)
	b.body = appendUUIDBytes(b.body, id)
	b.body = append(b.body, sentAtKey...)
	b.body = appendTime(b.body, fourDigitYear(now))
	b.body = append(b.body, '"', '}')
}

// stampSentAt rewrites the sentAt of a finished body.
func (b *batch) stampSentAt(now time.Time) {
	at := len(b.body) - sentAtFromEnd
	appendTime(b.body[at:at], fourDigitYear(now))
}

// fourDigitYear keeps t within the years whose timestamps are 24 bytes long,
// which the layout of the footer relies on.
func fourDigitYear(t time.Time) time.Time {
	switch y := t.UTC().Year(); {
	case y < 0:
		return time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	case y > 9999:
		return time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)
	}
	return t
}

// A waiter collects the outcome of a set of batches for Flush or Close.
// Its counters are guarded by Client.bmu; done is closed when pending drops
// to zero.
type waiter struct {
	pending int // batches not yet finished, plus one while still attaching
	total   int
	failed  int
	err     error
	done    chan struct{}
}

func newWaiter() *waiter { return &waiter{pending: 1, done: make(chan struct{})} }

// result is valid once done is closed.
func (w *waiter) result() error {
	if w.failed == 0 {
		return nil
	}
	return fmt.Errorf("analytics: %d of %d messages not delivered: %w", w.failed, w.total, w.err)
}

// loop is the one goroutine that turns the queue into batches. It wakes
// when Size messages are waiting, on the interval, on Flush and on Close,
// and each time sends everything that is waiting.
func (c *Client) loop() {
	ticker := time.NewTicker(c.cfg.interval)
	defer ticker.Stop()
	var ids randSource
	for {
		select {
		case <-c.wake:
			// A wake can be stale: an earlier drain may already have taken the
			// messages that raised it. Only Size waiting messages make a send.
			c.mu.Lock()
			ready := c.q.len() >= c.cfg.size
			c.mu.Unlock()
			if ready {
				c.drain(nil, &ids, false)
			}
		case <-ticker.C:
			c.drain(nil, &ids, true)
		case w := <-c.flushReq:
			c.drain(w, &ids, true)
		case <-c.quit:
			w := newWaiter()
			c.drain(w, &ids, true)
			close(c.jobs)
			c.workers.Wait()
			<-w.done
			c.closeErr = w.result()
			c.debugf("closed")
			close(c.done)
			return
		}
	}
}

// drain sends the queue as batches of at most Size messages and
// MaxBatchBytes bytes: Size is a cap, so Size 1 sends every message in a
// request of its own. With all false (Size messages are waiting) it sends
// only whole batches of Size and leaves the rest queued; the interval, Flush
// and Close send everything. When messages arrive faster than the uploads
// can carry them, dispatch waits for a free upload goroutine, which holds
// the loop back instead of letting requests pile up. A non-nil w is attached
// to every batch in flight and every batch sent now.
func (c *Client) drain(w *waiter, ids *randSource, all bool) {
	c.mu.Lock()
	taken := c.q
	c.q, c.spare = c.spare, nil
	if !all {
		// The remainder stays queued, ahead of anything queued from now on.
		taken.moveTail(taken.len()-taken.len()%c.cfg.size, c.q)
	}
	c.mu.Unlock()
	c.notFull.Broadcast()

	if w != nil {
		c.bmu.Lock()
		for b := range c.outstanding {
			b.waiters = append(b.waiters, w)
			w.pending++
		}
		c.bmu.Unlock()
	}

	for i, n := 0, taken.len(); i < n; {
		// Room for the rest of the messages, their commas, header and footer.
		rest := len(taken.data) - taken.start(i) + (n - i) + len(batchHeader) + batchFooterLen
		b := newBatch(rest)
		for j := i; j < n && b.n < c.cfg.size; j++ {
			item := taken.item(j)
			if !b.fits(item) {
				break
			}
			b.add(item, taken.call(j))
		}
		i += b.n
		id, err := ids.uuid()
		if err != nil {
			c.cfg.logger.Printf("%v", err)
		}
		b.finish(id, c.clock())
		c.debugf("sending a batch of %d messages (%d bytes)", b.n, len(b.body))
		c.dispatch(b, w)
	}
	taken.reset()

	c.mu.Lock()
	c.spare = taken
	ready := c.q.len() >= c.cfg.size
	c.mu.Unlock()
	if ready {
		c.signal()
	}
	if w != nil {
		c.bmu.Lock()
		c.release(w)
		c.bmu.Unlock()
	}
}

// dispatch registers b (and w on it) and hands it to an upload goroutine,
// waiting while all of them are busy.
func (c *Client) dispatch(b *batch, w *waiter) {
	c.bmu.Lock()
	c.outstanding[b] = struct{}{}
	if w != nil {
		b.waiters = append(b.waiters, w)
		w.pending++
	}
	c.bmu.Unlock()
	c.jobs <- b
}

// complete records the outcome of a batch on its waiters.
func (c *Client) complete(b *batch, failed int, err error) {
	c.bmu.Lock()
	delete(c.outstanding, b)
	for _, w := range b.waiters {
		w.total += b.n
		w.failed += failed
		if err != nil && w.err == nil {
			w.err = err
		}
		c.release(w)
	}
	c.bmu.Unlock()
}

// release drops one pending count of w. REQUIRES: c.bmu held.
func (c *Client) release(w *waiter) {
	w.pending--
	if w.pending == 0 {
		close(w.done)
	}
}
