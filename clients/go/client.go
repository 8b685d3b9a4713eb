package analytics

import (
	"errors"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Version is the version of this library, sent in the context of every
// batch as {"library":{"name":"analytics-go","version":Version}}.
const Version = "2.2.0"

// Endpoint is the default base URL of the collector: a collector running
// on the same machine with its HTTP API on port 8080. Set Client.Endpoint to
// reach another one.
const Endpoint = "http://127.0.0.1:8080"

// Defaults of the Client fields, applied on first use to fields left at zero.
const (
	DefaultSize                 = 20               // Client.Size
	DefaultInterval             = 5 * time.Second  // Client.Interval
	DefaultMaxQueueSize         = 10000            // Client.MaxQueueSize
	DefaultMaxConcurrentUploads = 4                // Client.MaxConcurrentUploads
	DefaultTimeout              = 10 * time.Second // Client.Client.Timeout
)

// Retry policy defaults: attempts per batch, and the exponential backoff
// between them (full range doubling from retryBase, capped at retryCap, with
// jitter). A Retry-After answer is honoured up to maxRetryAfter.
const (
	defaultMaxAttempts = 10
	defaultRetryBase   = 100 * time.Millisecond
	defaultRetryCap    = 10 * time.Second
	maxRetryAfter      = time.Minute
)

// Client queues messages and sends them to the collector in batches from
// background goroutines. Create it with New, optionally set its fields, use
// it from any number of goroutines, and Close it before the program exits.
//
// The fields are read once, on the first call of any method; set them
// before that.
type Client struct {
	// Endpoint is the base URL of the collector; batches go to
	// Endpoint + "/v1/batch". New sets it to the package constant Endpoint.
	Endpoint string

	// Size is the number of queued messages that triggers a send, and the
	// most messages one request carries (default 20; 1 sends every message
	// at once, in a request of its own). A request also stays under 500,000
	// bytes, so it may carry fewer. Values above 2,500 (the collector's
	// limit per batch) are lowered to it.
	Size int

	// FlushAt is another name for Size, as some analytics-go versions called
	// it. When non-zero it takes precedence over Size.
	FlushAt int

	// Interval is the longest a queued message waits before it is sent
	// (default 5 s).
	Interval time.Duration

	// FlushAfter is another name for Interval. When non-zero it takes
	// precedence over Interval.
	FlushAfter time.Duration

	// Verbose turns on logging of the client's activity (each batch sent,
	// each retry). Setting DEBUG=analytics in the environment does the same.
	// Failures are logged whether or not Verbose is set.
	Verbose bool

	// Logger receives the log lines. New sets a logger that writes to
	// standard error with the prefix "analytics ".
	Logger *log.Logger

	// Client is the HTTP client used for uploads; set its Transport to
	// route or instrument them. When Timeout is zero each request times out
	// after 10 s. When Transport is nil, a copy of http.DefaultTransport that
	// keeps MaxConcurrentUploads idle connections is used.
	Client http.Client

	// MaxQueueSize is the most messages that wait in memory for a batch
	// (default 10,000; raised to Size if smaller). Batches being uploaded
	// are not counted; there are at most MaxConcurrentUploads of them, plus
	// one being built.
	MaxQueueSize int

	// BlockOnFull chooses what a call does when MaxQueueSize messages are
	// already waiting: when false (the default) the message is dropped, the
	// call returns ErrQueueFull and Callback.Failure is called with it, so a
	// slow or unreachable collector never holds up the caller; when true the
	// call waits until there is room (or the client is closed), so nothing
	// is dropped but callers slow down to the upload rate.
	BlockOnFull bool

	// MaxConcurrentUploads is the number of upload goroutines, hence the most
	// batch requests in flight at once (default 4). When all are busy the
	// queue fills up and BlockOnFull applies.
	MaxConcurrentUploads int

	// Compress sends request bodies gzip-compressed
	// (Content-Encoding: gzip). It saves bandwidth at the cost of CPU.
	Compress bool

	// Callback, when set, is told the outcome of every accepted message.
	// Keeping the messages for it costs two allocations per call.
	Callback Callback

	key string

	// Test hooks, read on first use like the exported fields.
	maxAttempts int
	retryBase   time.Duration
	retryCap    time.Duration
	sleep       func(time.Duration)
	now         func() time.Time

	// Set once by start, under mu, before started is set; read-only after.
	cfg     settings
	started atomic.Bool

	mu       sync.Mutex
	notFull  sync.Cond  // signalled when the loop empties q
	closed   bool       // guarded by mu
	q        *itemQueue // guarded by mu; set by start
	spare    *itemQueue // guarded by mu; an empty queue to swap with q
	wake     chan struct{}
	flushReq chan *waiter
	quit     chan struct{}
	done     chan struct{}
	closeErr error // written by the loop before done is closed

	jobs    chan *batch
	workers sync.WaitGroup

	bmu         sync.Mutex
	outstanding map[*batch]struct{} // guarded by bmu
}

// settings are the Client fields resolved on first use.
type settings struct {
	url         string
	size        int
	interval    time.Duration
	maxQueue    int
	block       bool
	uploads     int
	compress    bool
	verbose     bool
	logger      *log.Logger
	http        *http.Client
	callback    Callback
	maxAttempts int
	retryBase   time.Duration
	retryCap    time.Duration
	sleep       func(time.Duration)
	now         func() time.Time
}

// New returns a client that sends to the collector at Endpoint with the
// given write key (sent as the user name of HTTP Basic authentication). It
// starts no goroutine: that happens on first use, so the fields can be set
// first.
func New(writeKey string) *Client {
	c := &Client{
		Endpoint: Endpoint,
		Size:     DefaultSize,
		Interval: DefaultInterval,
		Logger:   log.New(os.Stderr, "analytics ", log.LstdFlags),
		key:      writeKey,
	}
	c.notFull.L = &c.mu
	return c
}

// Track queues a track message. It returns nil once the message is queued;
// otherwise a validation error, ErrMessageTooLarge or another encoding error
// (nothing was queued), ErrQueueFull (dropped, see BlockOnFull) or
// ErrClosed. It never does HTTP; with BlockOnFull it may wait for room in the
// queue.
func (c *Client) Track(msg *Track) error {
	if msg == nil {
		return errNilMessage
	}
	if err := msg.validate(); err != nil {
		return err
	}
	return c.enqueue(msg)
}

// Identify queues an identify message. It returns like Track.
func (c *Client) Identify(msg *Identify) error {
	if msg == nil {
		return errNilMessage
	}
	if err := msg.validate(); err != nil {
		return err
	}
	return c.enqueue(msg)
}

// Page queues a page message. It returns like Track.
func (c *Client) Page(msg *Page) error {
	if msg == nil {
		return errNilMessage
	}
	if err := msg.validate(); err != nil {
		return err
	}
	return c.enqueue(msg)
}

// Screen queues a screen message. It returns like Track.
func (c *Client) Screen(msg *Screen) error {
	if msg == nil {
		return errNilMessage
	}
	if err := msg.validate(); err != nil {
		return err
	}
	return c.enqueue(msg)
}

// Group queues a group message. It returns like Track.
func (c *Client) Group(msg *Group) error {
	if msg == nil {
		return errNilMessage
	}
	if err := msg.validate(); err != nil {
		return err
	}
	return c.enqueue(msg)
}

// Alias queues an alias message. It returns like Track.
func (c *Client) Alias(msg *Alias) error {
	if msg == nil {
		return errNilMessage
	}
	if err := msg.validate(); err != nil {
		return err
	}
	return c.enqueue(msg)
}

var errNilMessage = errors.New("analytics: nil message")

// Flush sends every message queued before the call and waits until each
// has been delivered or has failed. It returns nil when all were delivered;
// otherwise an error that counts the failures and wraps the first cause
// (an *HTTPError, ErrRejected, or a network error). After Close it returns
// ErrClosed.
func (c *Client) Flush() error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if !c.started.Load() {
		return nil // nothing was ever queued
	}
	w := newWaiter()
	select {
	case c.flushReq <- w:
	case <-c.done:
		return ErrClosed
	}
	<-w.done
	return w.result()
}

// Close stops accepting messages, sends everything still queued, waits for
// all uploads to finish (retries included) and stops the client's
// goroutines. It returns nil when every remaining message was delivered, or
// an error like Flush's. Calls made after Close return ErrClosed; a second
// Close returns nil at once.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	started := c.started.Load()
	c.mu.Unlock()
	c.notFull.Broadcast() // blocked callers give up with ErrClosed
	if !started {
		return nil
	}
	close(c.quit)
	<-c.done
	return c.closeErr
}

// start resolves the settings and launches the loop and upload goroutines,
// once.
func (c *Client) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.started.Load() {
		return nil
	}
	s := settings{
		url:         strings.TrimRight(c.Endpoint, "/") + "/v1/batch",
		size:        firstPositive(c.FlushAt, c.Size, DefaultSize),
		interval:    time.Duration(firstPositive(int(c.FlushAfter), int(c.Interval), int(DefaultInterval))),
		maxQueue:    firstPositive(c.MaxQueueSize, DefaultMaxQueueSize),
		block:       c.BlockOnFull,
		uploads:     firstPositive(c.MaxConcurrentUploads, DefaultMaxConcurrentUploads),
		compress:    c.Compress,
		verbose:     c.Verbose || debugEnv(os.Getenv("DEBUG")),
		logger:      c.Logger,
		callback:    c.Callback,
		maxAttempts: firstPositive(c.maxAttempts, defaultMaxAttempts),
		retryBase:   time.Duration(firstPositive(int(c.retryBase), int(defaultRetryBase))),
		retryCap:    time.Duration(firstPositive(int(c.retryCap), int(defaultRetryCap))),
		sleep:       c.sleep,
		now:         c.now,
	}
	if c.Endpoint == "" {
		s.url = Endpoint + "/v1/batch"
	}
	if s.size > maxBatchItems {
		s.size = maxBatchItems
	}
	if s.maxQueue < s.size {
		s.maxQueue = s.size
	}
	if s.logger == nil {
		s.logger = log.New(os.Stderr, "analytics ", log.LstdFlags)
	}
	if s.sleep == nil {
		s.sleep = time.Sleep
	}
	hc := c.Client // a copy: later changes to c.Client do not race with uploads
	if hc.Timeout == 0 {
		hc.Timeout = DefaultTimeout
	}
	if hc.Transport == nil {
		if t, ok := http.DefaultTransport.(*http.Transport); ok {
			t = t.Clone()
			t.MaxIdleConnsPerHost = s.uploads
			hc.Transport = t
		}
	}
	s.http = &hc
	c.cfg = s

	c.q, c.spare = new(itemQueue), new(itemQueue)
	c.wake = make(chan struct{}, 1)
	c.flushReq = make(chan *waiter)
	c.quit = make(chan struct{})
	c.done = make(chan struct{})
	c.jobs = make(chan *batch)
	c.outstanding = make(map[*batch]struct{})
	for i := 0; i < s.uploads; i++ {
		c.workers.Add(1)
		go c.uploader()
	}
	go c.loop()
	c.started.Store(true)
	return nil
}

// enqueue encodes a valid message and queues it.
func (c *Client) enqueue(m Call) error {
	if !c.started.Load() {
		if err := c.start(); err != nil {
			return err
		}
	}
	var now time.Time // zero: the encoder reads its clock
	if c.cfg.now != nil {
		now = c.cfg.now()
	}
	e := getEncoder()
	if err := e.encode(m, now); err != nil {
		putEncoder(e)
		return err
	}
	var snap Call
	if c.cfg.callback != nil {
		snap = e.snapshot(m)
	}
	err := c.push(e.buf, snap)
	putEncoder(e)
	if err == ErrQueueFull && snap != nil {
		c.cfg.callback.Failure(snap, err)
	}
	return err
}

// push appends one encoded message to the queue, applying the overflow
// policy, and wakes the loop when a batch is ready.
func (c *Client) push(item []byte, snap Call) error {
	c.mu.Lock()
	for {
		if c.closed {
			c.mu.Unlock()
			return ErrClosed
		}
		if c.q.len() < c.cfg.maxQueue {
			break
		}
		if !c.cfg.block {
			c.mu.Unlock()
			if c.cfg.verbose {
				c.cfg.logger.Printf("queue full (%d messages): message dropped", c.cfg.maxQueue)
			}
			return ErrQueueFull
		}
		c.notFull.Wait()
	}
	c.q.add(item, snap)
	ready := c.q.len() >= c.cfg.size
	c.mu.Unlock()
	if ready {
		c.signal()
	}
	return nil
}

// signal wakes the loop without blocking.
func (c *Client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// clock is the time used for sentAt.
func (c *Client) clock() time.Time {
	if c.cfg.now != nil {
		return c.cfg.now()
	}
	return time.Now()
}

func (c *Client) debugf(format string, args ...interface{}) {
	if c.cfg.verbose {
		c.cfg.logger.Printf(format, args...)
	}
}

// firstPositive returns the first of vs that is greater than zero.
func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// debugEnv reports whether the value of DEBUG asks for this library's
// logs: "analytics", or a list separated by commas or spaces that contains it.
func debugEnv(v string) bool {
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		if f == "analytics" {
			return true
		}
	}
	return false
}
