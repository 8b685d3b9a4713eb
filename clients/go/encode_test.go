package analytics

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func nan() float64 { return math.NaN() }

// stdJSON is encoding/json's output without HTML escaping, which the client
// does not do.
func stdJSON(t testing.TB, v interface{}) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encoding/json: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

type point struct {
	X, Y int
}

type textKey string

func (k textKey) MarshalJSON() ([]byte, error) { return []byte(`"custom"`), nil }

// Values without map ordering in play encode byte for byte as encoding/json
// encodes them; maps decode to the same value.
func TestAppendValueMatchesEncodingJSON(t *testing.T) {
	when := time.Date(2012, 12, 2, 0, 30, 8, 276_000_000, time.FixedZone("x", 3600))
	scalars := []interface{}{
		nil, "", "plain", `quote " and \ backslash`, "tab\tnew\nline\rret\bback\fform", "\x00\x01\x1f\x7f",
		"<html> & friends", "héllo wörld ✓ 𝄞", "bad \xff utf8 \xc3", "line\u2028sep\u2029par",
		true, false, 0, -1, 42, int8(-8), int16(16), int32(-32), int64(math.MinInt64), uint(7), uint8(8),
		uint16(16), uint32(32), uint64(math.MaxUint64), 0.0, 1.5, -2.25, 1e20, 1e21, 1e-6, 1e-7, 123456789.125,
		math.MaxFloat64, math.SmallestNonzeroFloat64, float32(3.14), float32(1e21), float32(1e-7),
		[]interface{}{1, "two", 3.0, nil, []interface{}{}}, []string{"a", "b"}, []string{}, []string(nil),
		[]interface{}(nil), map[string]interface{}(nil), map[string]string(nil), when, time.Time{},
		point{1, 2}, &point{3, 4}, []int{1, 2}, textKey("k"), json.RawMessage(`{"raw": [1, 2]}`),
		json.Number("12.5"),
	}
	for _, v := range scalars {
		got, err := appendValue(nil, v, 1)
		if err != nil {
			t.Errorf("%#v: %v", v, err)
			continue
		}
		if want := stdJSON(t, v); !bytes.Equal(got, want) {
			t.Errorf("%#v:\n got %s\nwant %s", v, got, want)
		}
	}
	maps := []interface{}{
		map[string]interface{}{},
		map[string]interface{}{"a": 1, "b": "two", "c": []interface{}{map[string]interface{}{"d": nil}}, "é\"k": true},
		map[string]string{"x": "y", "z": "\n"},
		map[string]interface{}{"nested": map[string]string{"k": "v"}, "t": when, "p": point{5, 6}},
	}
	for _, v := range maps {
		got, err := appendValue(nil, v, 1)
		if err != nil {
			t.Fatalf("%#v: %v", v, err)
		}
		var a, b interface{}
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%#v: invalid JSON %s: %v", v, got, err)
		}
		if err := json.Unmarshal(stdJSON(t, v), &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%#v:\n got %s\nwant %s", v, got, stdJSON(t, v))
		}
	}
}

// Values JSON cannot represent are errors, never panics or invalid output.
func TestAppendValueErrors(t *testing.T) {
	cyclic := map[string]interface{}{}
	cyclic["self"] = cyclic
	list := []interface{}{nil}
	list[0] = list
	for name, v := range map[string]interface{}{
		"NaN":        math.NaN(),
		"+Inf":       math.Inf(1),
		"float32":    float32(math.Inf(-1)),
		"channel":    make(chan int),
		"cycle":      cyclic,
		"list loop":  list,
		"year 10000": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		if _, err := appendValue(nil, v, 1); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Strings of any bytes come out as valid JSON that decodes to what
// encoding/json would decode.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", "\"\\", "\xff\xfe", "\u2028", "日本", "\x00\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendString(nil, s)
		if want := stdJSON(t, s); !bytes.Equal(got, want) {
			t.Fatalf("%q:\n got %s\nwant %s", s, got, want)
		}
	})
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// Generated ids are version 4 UUIDs and do not repeat, across refills of
// the random buffer.
func TestUUID(t *testing.T) {
	var r randSource
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		u, err := r.uuid()
		if err != nil {
			t.Fatal(err)
		}
		s := string(appendUUIDBytes(nil, u))
		if !uuidV4.MatchString(s) {
			t.Fatalf("%q is not a UUID v4", s)
		}
		if seen[s] {
			t.Fatalf("%q generated twice", s)
		}
		seen[s] = true
	}
}

// Timestamps go out as ISO 8601 UTC with milliseconds; the forms callers
// commonly supply are converted, others refused.
func TestTimestamps(t *testing.T) {
	if got := FormatTime(time.Date(2012, 12, 2, 1, 30, 8, 276_999_999, time.FixedZone("CET", 3600))); got != "2012-12-02T00:30:08.276Z" {
		t.Errorf("FormatTime = %q", got)
	}
	if got := FormatTime(time.Date(7, 1, 2, 3, 4, 5, 0, time.UTC)); got != "0007-01-02T03:04:05.000Z" {
		t.Errorf("FormatTime of year 7 = %q", got)
	}
	cases := []struct{ in, want string }{
		{"2012-12-02T00:30:08.276Z", "2012-12-02T00:30:08.276Z"},
		{"2012-12-02T00:30:08Z", "2012-12-02T00:30:08.000Z"},
		{"2012-12-02T01:30:08.276543+01:00", "2012-12-02T00:30:08.276Z"},
		{"2012-12-01T19:30:08-0500", "2012-12-02T00:30:08.000Z"}, // analytics-go v2's format
		{"2012-12-02T00:30:08", "2012-12-02T00:30:08.000Z"},
		{"2012-12-02", "2012-12-02T00:00:00.000Z"},
	}
	for _, tc := range cases {
		got, err := appendUserTime(nil, tc.in)
		if err != nil || string(got) != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"now", "12/02/2012", "2012-13-02T00:00:00Z", "2012-12-02T00:30:08.276Zjunk"} {
		if _, err := appendUserTime(nil, bad); !errors.Is(err, ErrInvalidTimestamp) {
			t.Errorf("%q: got %v, want ErrInvalidTimestamp", bad, err)
		}
	}
}

// Each message type encodes with the JSON names of the spec; empty fields
// are left out.
func TestEncodeMessages(t *testing.T) {
	at := time.Date(2012, 12, 2, 0, 30, 8, 276_000_000, time.UTC)
	ctx := map[string]interface{}{"ip": "1.2.3.4"}
	integ := map[string]interface{}{"Webhooks": true}
	id := Message{MessageId: "m1"}
	cases := []struct {
		msg  Call
		want string
	}{
		{&Track{Event: "Bought", UserId: "u", AnonymousId: "a", Properties: map[string]interface{}{"p": 1}, Context: ctx, Integrations: integ, Message: id},
			`{"type":"track","messageId":"m1","timestamp":"2012-12-02T00:30:08.276Z","userId":"u","anonymousId":"a","event":"Bought","properties":{"p":1},"context":{"ip":"1.2.3.4"},"integrations":{"Webhooks":true}}`},
		{&Identify{UserId: "u", Traits: map[string]interface{}{"email": "a@b"}, Message: id},
			`{"type":"identify","messageId":"m1","timestamp":"2012-12-02T00:30:08.276Z","userId":"u","traits":{"email":"a@b"}}`},
		{&Page{AnonymousId: "a", Name: "Home", Category: "Docs", Traits: map[string]interface{}{"url": "https://x"}, Message: id},
			`{"type":"page","messageId":"m1","timestamp":"2012-12-02T00:30:08.276Z","anonymousId":"a","name":"Home","category":"Docs","properties":{"url":"https://x"}}`},
		{&Screen{UserId: "u", Name: "Settings", Category: "App", Properties: map[string]interface{}{"k": "v"}, Message: id},
			`{"type":"screen","messageId":"m1","timestamp":"2012-12-02T00:30:08.276Z","userId":"u","name":"Settings","category":"App","properties":{"k":"v"}}`},
		{&Group{UserId: "u", GroupId: "g", Traits: map[string]interface{}{"name": "ACME"}, Message: id},
			`{"type":"group","messageId":"m1","timestamp":"2012-12-02T00:30:08.276Z","userId":"u","groupId":"g","traits":{"name":"ACME"}}`},
		{&Alias{UserId: "new", PreviousId: "old", Message: Message{Type: "ignored", MessageId: "m1", SentAt: "ignored"}},
			`{"type":"alias","messageId":"m1","timestamp":"2012-12-02T00:30:08.276Z","userId":"new","previousId":"old"}`},
	}
	for _, tc := range cases {
		var e encoder
		if err := e.encode(tc.msg, at); err != nil {
			t.Fatal(err)
		}
		if string(e.buf) != tc.want {
			t.Errorf("%T:\n got %s\nwant %s", tc.msg, e.buf, tc.want)
		}
	}
}

// A callback's copy carries the id and timestamp that were sent and is
// independent of the caller's struct.
func TestSnapshot(t *testing.T) {
	at := time.Date(2012, 12, 2, 0, 30, 8, 276_000_000, time.UTC)
	in := &Track{Event: "e", UserId: "u"}
	var e encoder
	if err := e.encode(in, at); err != nil {
		t.Fatal(err)
	}
	snap, ok := e.snapshot(in).(*Track)
	if !ok || snap == in {
		t.Fatalf("snapshot is %T %p, want a copy of %p", snap, snap, in)
	}
	if !uuidV4.MatchString(snap.MessageId) || snap.Timestamp != "2012-12-02T00:30:08.276Z" || snap.Type != "track" {
		t.Errorf("snapshot message = %+v", snap.Message)
	}
	if !strings.Contains(string(e.buf), `"messageId":"`+snap.MessageId+`"`) {
		t.Errorf("snapshot id %q is not the one sent: %s", snap.MessageId, e.buf)
	}
	if in.MessageId != "" || in.Timestamp != "" || in.Type != "" {
		t.Errorf("caller's struct was modified: %+v", in.Message)
	}
	in2 := &Alias{UserId: "u", PreviousId: "p", Message: Message{MessageId: "mine", Timestamp: "2012-12-02T01:30:08+01:00"}}
	if err := e.encode(in2, at); err != nil {
		t.Fatal(err)
	}
	snap2 := e.snapshot(in2).(*Alias)
	if snap2.MessageId != "mine" || snap2.Timestamp != "2012-12-02T00:30:08.000Z" {
		t.Errorf("snapshot message = %+v", snap2.Message)
	}
}

// The encoder's clock agrees with time.Now to the millisecond, within and
// across seconds.
func TestEncoderClock(t *testing.T) {
	var e encoder
	for i := 0; i < 2000; i++ {
		before := time.Now().UTC().Truncate(time.Millisecond)
		got := string(e.appendNow(nil))
		after := time.Now().UTC()
		at, err := time.Parse("2006-01-02T15:04:05.000Z", got)
		if err != nil || len(got) != 24 {
			t.Fatalf("%q: %v", got, err)
		}
		if at.Before(before) || at.After(after) {
			t.Fatalf("clock says %s, between %s and %s", got, before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
		}
		if i%100 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

// Floats format exactly as encoding/json formats them, integral ones
// included, across magnitudes.
func TestAppendFloat(t *testing.T) {
	values := []float64{0, math.Copysign(0, -1), 1, -1, 3, 39.95, 1 << 52, 1<<53 - 1, 1 << 53, 1<<53 + 2, -(1 << 60), 1e15, 1e20, 1e21, 1e22, 0.1, 1e-6, 1e-7, 123.456e-10, math.MaxInt64, -math.MaxInt64}
	for e := -30; e <= 30; e++ {
		values = append(values, math.Pow(10, float64(e)), 7*math.Pow(10, float64(e)), -1.5*math.Pow(10, float64(e)))
	}
	for _, f := range values {
		got, err := appendFloat(nil, f, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := stdJSON(t, f); !bytes.Equal(got, want) {
			t.Errorf("%v: got %s, want %s", f, got, want)
		}
		got32, _ := appendFloat(nil, float64(float32(f)), 32)
		if want := stdJSON(t, float32(f)); !bytes.Equal(got32, want) && !math.IsInf(float64(float32(f)), 0) {
			t.Errorf("float32 %v: got %s, want %s", float32(f), got32, want)
		}
	}
}

// The short-decimal fast path agrees with encoding/json on random short
// decimals and on random bit patterns.
func TestShortDecimalMatchesStrconv(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(f float64) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return
		}
		got, err := appendFloat(nil, f, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := stdJSON(t, f); !bytes.Equal(got, want) {
			t.Fatalf("%v (%#x): got %s, want %s", f, math.Float64bits(f), got, want)
		}
	}
	for i := 0; i < 200000; i++ {
		digits := rng.IntN(9)
		scale := math.Pow(10, float64(digits))
		mag := math.Pow(10, float64(rng.IntN(16)))
		check(math.Round(rng.Float64()*mag*scale) / scale)
		check(-math.Round(rng.Float64()*mag*scale) / scale)
		check(math.Float64frombits(rng.Uint64()))
		check(rng.Float64() * mag)
	}
	for _, f := range []float64{39.95, 0.1, 0.2, 0.3, 1.005, 2.675, 1e-6, 0.000001, 123456.789, 4398046511103.5, 0.12345678} {
		check(f)
	}
}
