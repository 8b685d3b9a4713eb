package analytics

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Limits of the collector's HTTP API.
const (
	// MaxMessageBytes is the largest JSON encoding of one message the
	// collector accepts; larger messages are refused with ErrMessageTooLarge.
	MaxMessageBytes = 32000

	// MaxBatchBytes is the largest request body the client sends; batches
	// are split to stay within it.
	MaxBatchBytes = 500000

	// maxBatchItems is the collector's limit of events per batch.
	maxBatchItems = 2500

	// maxMessageIDLen is the collector's limit on messageId.
	maxMessageIDLen = 100

	// maxDepth bounds the nesting of encoded values, as encoding/json does,
	// so that a map that contains itself is an error, not a stack overflow.
	maxDepth = 1000
)

// encoder turns one message into its JSON form. Encoders are pooled: each is
// used by one goroutine at a time, and it carries its own supply of random
// bytes so that a messageId costs no system call.
type encoder struct {
	buf []byte

	// idOff and tsOff are the offsets in buf of the messageId and timestamp
	// values (after the opening quote) of the message just encoded.
	idOff, idLen, tsOff, tsLen int

	rnd randSource

	// A clock cheaper than time.Now: wall time is base's wall time plus
	// the monotonic time since base (one clock read instead of two), and
	// base is renewed every second so that clock adjustments are followed.
	base     time.Time
	baseWall int64 // base as Unix nanoseconds

	// The formatted "2006-01-02T15:04:05." of second prefixSec.
	prefix    [20]byte
	prefixSec int64
	prefixOK  bool
}

var encoderPool = sync.Pool{New: func() any { return new(encoder) }}

func getEncoder() *encoder { return encoderPool.Get().(*encoder) }

func putEncoder(e *encoder) {
	if cap(e.buf) > 4*MaxMessageBytes {
		e.buf = nil
	}
	encoderPool.Put(e)
}

var errTooDeep = errors.New("analytics: value nested more than 1000 levels deep (a cycle?)")

// encode writes the JSON of m into e.buf. now is the time used when the
// message has no timestamp; when zero, the current time.
func (e *encoder) encode(m Call, now time.Time) error {
	e.buf = e.buf[:0]
	var err error
	switch m := m.(type) {
	case *Track:
		if err = e.begin("track", &m.Message, now); err != nil {
			return err
		}
		e.ids(m.UserId, m.AnonymousId)
		e.field(`,"event":`, m.Event)
		if err = e.object(`,"properties":`, m.Properties); err != nil {
			return err
		}
		err = e.finish(m.Context, m.Integrations)
	case *Identify:
		if err = e.begin("identify", &m.Message, now); err != nil {
			return err
		}
		e.ids(m.UserId, m.AnonymousId)
		if err = e.object(`,"traits":`, m.Traits); err != nil {
			return err
		}
		err = e.finish(m.Context, m.Integrations)
	case *Page:
		if err = e.begin("page", &m.Message, now); err != nil {
			return err
		}
		e.ids(m.UserId, m.AnonymousId)
		e.field(`,"name":`, m.Name)
		e.field(`,"category":`, m.Category)
		if err = e.object(`,"properties":`, m.Traits); err != nil {
			return err
		}
		err = e.finish(m.Context, m.Integrations)
	case *Screen:
		if err = e.begin("screen", &m.Message, now); err != nil {
			return err
		}
		e.ids(m.UserId, m.AnonymousId)
		e.field(`,"name":`, m.Name)
		e.field(`,"category":`, m.Category)
		if err = e.object(`,"properties":`, m.Properties); err != nil {
			return err
		}
		err = e.finish(m.Context, m.Integrations)
	case *Group:
		if err = e.begin("group", &m.Message, now); err != nil {
			return err
		}
		e.ids(m.UserId, m.AnonymousId)
		e.field(`,"groupId":`, m.GroupId)
		if err = e.object(`,"traits":`, m.Traits); err != nil {
			return err
		}
		err = e.finish(m.Context, m.Integrations)
	case *Alias:
		if err = e.begin("alias", &m.Message, now); err != nil {
			return err
		}
		e.field(`,"userId":`, m.UserId)
		e.field(`,"previousId":`, m.PreviousId)
		err = e.finish(m.Context, m.Integrations)
	default:
		return fmt.Errorf("analytics: unsupported message type %T", m)
	}
	if err == nil && len(e.buf) > MaxMessageBytes {
		err = ErrMessageTooLarge
	}
	return err
}

// begin writes the type, messageId and timestamp.
func (e *encoder) begin(typ string, m *Message, now time.Time) error {
	e.buf = append(e.buf, `{"type":"`...)
	e.buf = append(e.buf, typ...)
	e.buf = append(e.buf, `","messageId":"`...)
	e.idOff = len(e.buf)
	if m.MessageId == "" {
		if err := e.appendUUID(); err != nil {
			return err
		}
	} else {
		if len(m.MessageId) > maxMessageIDLen {
			return ErrMessageIDTooLong
		}
		e.buf = appendEscaped(e.buf, m.MessageId)
	}
	e.idLen = len(e.buf) - e.idOff
	e.buf = append(e.buf, `","timestamp":"`...)
	e.tsOff = len(e.buf)
	if m.Timestamp == "" {
		if now.IsZero() {
			e.buf = e.appendNow(e.buf)
		} else {
			e.buf = appendTime(e.buf, now)
		}
	} else {
		var err error
		if e.buf, err = appendUserTime(e.buf, m.Timestamp); err != nil {
			return err
		}
	}
	e.tsLen = len(e.buf) - e.tsOff
	e.buf = append(e.buf, '"')
	return nil
}

func (e *encoder) ids(userID, anonymousID string) {
	e.field(`,"userId":`, userID)
	e.field(`,"anonymousId":`, anonymousID)
}

// field writes key and the quoted value, unless the value is empty.
func (e *encoder) field(key, value string) {
	if value == "" {
		return
	}
	e.buf = append(e.buf, key...)
	e.buf = appendString(e.buf, value)
}

// object writes key and the object, unless it is empty (as omitempty does).
func (e *encoder) object(key string, m map[string]interface{}) error {
	if len(m) == 0 {
		return nil
	}
	e.buf = append(e.buf, key...)
	var err error
	e.buf, err = appendMap(e.buf, m, 1)
	return err
}

func (e *encoder) finish(context, integrations map[string]interface{}) error {
	if err := e.object(`,"context":`, context); err != nil {
		return err
	}
	if err := e.object(`,"integrations":`, integrations); err != nil {
		return err
	}
	e.buf = append(e.buf, '}')
	return nil
}

// snapshot returns a copy of m as it was just encoded: Type set, and
// MessageId and Timestamp as sent. Generated values share one allocation.
func (e *encoder) snapshot(m Call) Call {
	id, ts := m.common().MessageId, m.common().Timestamp
	switch {
	case id == "":
		s := string(e.buf[e.idOff : e.tsOff+e.tsLen])
		id, ts = s[:e.idLen], s[e.tsOff-e.idOff:]
	case !isCanonicalTime(ts):
		ts = string(e.buf[e.tsOff : e.tsOff+e.tsLen])
	}
	fill := func(msg *Message, typ string) {
		msg.Type, msg.MessageId, msg.Timestamp, msg.SentAt = typ, id, ts, ""
	}
	switch m := m.(type) {
	case *Track:
		c := *m
		fill(&c.Message, "track")
		return &c
	case *Identify:
		c := *m
		fill(&c.Message, "identify")
		return &c
	case *Page:
		c := *m
		fill(&c.Message, "page")
		return &c
	case *Screen:
		c := *m
		fill(&c.Message, "screen")
		return &c
	case *Group:
		c := *m
		fill(&c.Message, "group")
		return &c
	case *Alias:
		c := *m
		fill(&c.Message, "alias")
		return &c
	}
	return m
}

// appendUUID writes a random (version 4) UUID.
func (e *encoder) appendUUID() error {
	u, err := e.rnd.uuid()
	if err != nil {
		return err
	}
	e.buf = appendUUIDBytes(e.buf, u)
	return nil
}

// randSource hands out random bytes from crypto/rand, read 256 bytes at a
// time to spare a system call per UUID. It is not safe for concurrent use.
type randSource struct {
	buf  [256]byte
	used int // bytes of buf handed out; 0 means buf must be refilled
}

// uuid returns 16 fresh random bytes.
func (r *randSource) uuid() ([16]byte, error) {
	var u [16]byte
	if r.used == 0 {
		if _, err := rand.Read(r.buf[:]); err != nil {
			return u, fmt.Errorf("analytics: reading random bytes for a messageId: %w", err)
		}
		r.used = 0
	}
	copy(u[:], r.buf[r.used:r.used+16])
	r.used += 16
	if r.used == len(r.buf) {
		r.used = 0
	}
	return u, nil
}

const hexDigits = "0123456789abcdef"

// appendUUIDBytes formats 16 random bytes as a version 4, variant 1 UUID.
func appendUUIDBytes(b []byte, u [16]byte) []byte {
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var out [36]byte
	out[8], out[13], out[18], out[23] = '-', '-', '-', '-'
	for i, x := range u {
		p := uuidPos[i]
		out[p], out[p+1] = hexDigits[x>>4], hexDigits[x&0x0f]
	}
	return append(b, out[:]...)
}

// uuidPos is where the hex digits of each byte of a UUID go.
var uuidPos = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// appendTime writes t as ISO 8601 UTC with milliseconds, e.g.
// 2012-12-02T00:30:08.276Z (always 24 bytes for years 0 to 9999).
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, "2006-01-02T15:04:05.000Z")
	}
	hour, min, sec := t.Clock()
	ms := t.Nanosecond() / 1e6
	return append(b,
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+int(month)/10), byte('0'+int(month)%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':',
		byte('0'+min/10), byte('0'+min%10), ':',
		byte('0'+sec/10), byte('0'+sec%10), '.',
		byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

// appendNow writes the current time like appendTime.
func (e *encoder) appendNow(b []byte) []byte {
	d := time.Since(e.base)
	if d < 0 || d > time.Second { // also true for the zero base
		e.base = time.Now()
		e.baseWall = e.base.UnixNano()
		d = 0
	}
	nanos := e.baseWall + int64(d)
	sec := nanos / 1e9
	if nanos < 0 || sec != e.prefixSec || !e.prefixOK {
		start := len(b)
		b = appendTime(b, time.Unix(0, nanos))
		e.prefixSec, e.prefixOK = sec, nanos >= 0 && len(b)-start == 24
		copy(e.prefix[:], b[start:])
		return b
	}
	ms := nanos % 1e9 / 1e6
	return append(append(b, e.prefix[:]...),
		byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
}

// FormatTime formats t the way the client sends timestamps: ISO 8601 in UTC
// with milliseconds, e.g. 2012-12-02T00:30:08.276Z. Use it to fill
// Message.Timestamp when importing historical data.
func FormatTime(t time.Time) string {
	return string(appendTime(make([]byte, 0, 24), t))
}

// isCanonicalTime reports whether s is already of the form
// 2012-12-02T00:30:08.276Z.
func isCanonicalTime(s string) bool {
	if len(s) != 24 {
		return false
	}
	for i := 0; i < 24; i++ {
		c := s[i]
		switch i {
		case 4, 7:
			if c != '-' {
				return false
			}
		case 10:
			if c != 'T' {
				return false
			}
		case 13, 16:
			if c != ':' {
				return false
			}
		case 19:
			if c != '.' {
				return false
			}
		case 23:
			if c != 'Z' {
				return false
			}
		default:
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// userTimeLayouts are the forms of Message.Timestamp the client converts.
// When parsing, Go accepts fractional seconds after the seconds field even
// when the layout has none.
var userTimeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05Z0700", // analytics-go v2's own format
	"2006-01-02T15:04:05",
	"2006-01-02",
}

// appendUserTime writes a caller-supplied timestamp in canonical form.
func appendUserTime(b []byte, s string) ([]byte, error) {
	if isCanonicalTime(s) {
		return append(b, s...), nil
	}
	for _, layout := range userTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return appendTime(b, t), nil
		}
	}
	return b, fmt.Errorf("%w: %q", ErrInvalidTimestamp, s)
}

// appendString writes s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendEscaped(b, s)
	return append(b, '"')
}

// appendEscaped writes the body of a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, and U+2028
// and U+2029 escaped as encoding/json does. Other characters, including
// <, > and &, are written as they are.
func appendEscaped(b []byte, s string) []byte {
	start, i := 0, 0
	for i < len(s) {
		// Skip eight plain ASCII bytes at a time.
		for i+8 <= len(s) && !needsEscape8(load64(s, i)) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if plainASCII[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}

// plainASCII marks the bytes below 0x80 that a JSON string holds as they are.
var plainASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// load64 reads 8 bytes of s from i, little-endian (the compiler turns this
// into a single load).
func load64(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// needsEscape8 reports whether any of the 8 bytes in w is a control
// character, a quote, a backslash or not ASCII (the classic "has a byte
// less than n" and "has a zero byte" word tricks).
func needsEscape8(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	control := (w - ones*0x20) & ^w
	q := w ^ (ones * '"')
	quote := (q - ones) & ^q
	bs := w ^ (ones * '\\')
	backslash := (bs - ones) & ^bs
	return (control|quote|backslash|w)&highs != 0
}

// appendMap writes m as a JSON object; keys come out in map order.
func appendMap(b []byte, m map[string]interface{}, depth int) ([]byte, error) {
	if depth > maxDepth {
		return b, errTooDeep
	}
	b = append(b, '{')
	first := true
	for k, v := range m {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, v, depth+1); err != nil {
			return b, err
		}
		if len(b) > MaxMessageBytes {
			// No point finishing a message that will be refused.
			return b, ErrMessageTooLarge
		}
	}
	return append(b, '}'), nil
}

// appendValue writes v as JSON: without reflection for common types, through
// encoding/json for the rest.
func appendValue(b []byte, v interface{}, depth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendString(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int16:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int8:
		return strconv.AppendInt(b, int64(x), 10), nil
	case uint:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint16:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case uint8:
		return strconv.AppendUint(b, uint64(x), 10), nil
	case float64:
		return appendFloat(b, x, 64)
	case float32:
		return appendFloat(b, float64(x), 32)
	case map[string]interface{}:
		if x == nil {
			return append(b, "null"...), nil
		}
		return appendMap(b, x, depth)
	case map[string]string:
		if x == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '{')
		first := true
		for k, s := range x {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, s)
		}
		return append(b, '}'), nil
	case []interface{}:
		if x == nil {
			return append(b, "null"...), nil
		}
		if depth > maxDepth {
			return b, errTooDeep
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e, depth+1); err != nil {
				return b, err
			}
			if len(b) > MaxMessageBytes {
				return b, ErrMessageTooLarge
			}
		}
		return append(b, ']'), nil
	case []string:
		if x == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, s := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		return append(b, ']'), nil
	case time.Time:
		if y := x.Year(); y < 0 || y > 9999 {
			break // let encoding/json produce its error
		}
		b = append(b, '"')
		b = x.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), nil
	}
	// Anything else, including json.Marshaler implementations, named types
	// and structs: encoding/json knows best.
	j, err := json.Marshal(v)
	if err != nil {
		return b, fmt.Errorf("analytics: encoding %T: %w", v, err)
	}
	return append(b, j...), nil
}

// pow10 holds the exactly representable powers of ten used below.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}

// appendShortDecimal formats a float64 with few decimals (prices, ratios)
// faster than strconv, with the same result. It looks for the smallest k
// such that m/10^k == f for the integer m nearest f*10^k. Division of exact
// operands is correctly rounded, so then the decimal m·10^-k reads back as
// f; and with |m| < 2^50 one unit in the last place of f is under a quarter
// of 10^-k, so no other decimal of k or fewer digits does: this is the
// shortest representation, which is what strconv produces.
func appendShortDecimal(b []byte, f float64, bits int) ([]byte, bool) {
	if bits != 64 {
		return b, false
	}
	abs := math.Abs(f)
	if abs < 1e-6 || abs >= 1<<42 {
		return b, false
	}
	for k := 1; k < len(pow10); k++ {
		m := math.Round(f * pow10[k])
		if math.Abs(m) >= 1<<50 {
			return b, false
		}
		if m/pow10[k] != f {
			continue
		}
		n := int64(m)
		if n < 0 {
			b = append(b, '-')
			n = -n
		}
		unit := int64(pow10[k])
		b = strconv.AppendInt(b, n/unit, 10)
		b = append(b, '.')
		frac := n % unit
		for d := unit / 10; d > 0; d /= 10 {
			b = append(b, byte('0'+frac/d%10))
		}
		return b, true
	}
	return b, false
}

// appendFloat formats f as encoding/json does: the shortest representation,
// in exponent form only for very large or very small magnitudes. NaN and the
// infinities have no JSON form and are refused.
func appendFloat(b []byte, f float64, bits int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, fmt.Errorf("analytics: unsupported float value %v (JSON has no NaN or infinity)", f)
	}
	// Integral values that the type holds exactly (below 2^53 for float64,
	// 2^24 for float32) print as integers, as strconv would print them,
	// without its general algorithm.
	exact := float64(1 << 53)
	if bits == 32 {
		exact = 1 << 24
	}
	if f == math.Trunc(f) && math.Abs(f) < exact && !(f == 0 && math.Signbit(f)) {
		return strconv.AppendInt(b, int64(f), 10), nil
	}
	if b, ok := appendShortDecimal(b, f, bits); ok {
		return b, nil
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// Shorten e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}
