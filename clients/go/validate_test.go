package analytics

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Each method refuses a message missing a required field with the exact
// analytics-go v2 error, synchronously, and queues nothing.
func TestValidation(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, nil)
	cases := []struct {
		name string
		call func() error
		want error
		text string
	}{
		{"track without event", func() error { return c.Track(&Track{UserId: "u"}) }, ErrMissingEvent, "You must pass 'event'."},
		{"track without ids", func() error { return c.Track(&Track{Event: "e"}) }, ErrMissingUserOrAnonymousID, "You must pass either an 'anonymousId' or 'userId'."},
		{"track without anything reports event first", func() error { return c.Track(&Track{}) }, ErrMissingEvent, "You must pass 'event'."},
		{"identify without ids", func() error { return c.Identify(&Identify{Traits: map[string]interface{}{"a": 1}}) }, ErrMissingUserOrAnonymousID, "You must pass either an 'anonymousId' or 'userId'."},
		{"page without ids", func() error { return c.Page(&Page{Name: "Home"}) }, ErrMissingUserOrAnonymousID, "You must pass either an 'anonymousId' or 'userId'."},
		{"screen without ids", func() error { return c.Screen(&Screen{Name: "Home"}) }, ErrMissingUserOrAnonymousID, "You must pass either an 'anonymousId' or 'userId'."},
		{"group without groupId", func() error { return c.Group(&Group{UserId: "u"}) }, ErrMissingGroupID, "You must pass a 'groupId'."},
		{"group without ids", func() error { return c.Group(&Group{GroupId: "g"}) }, ErrMissingUserOrAnonymousID, "You must pass either an 'anonymousId' or 'userId'."},
		{"alias without userId", func() error { return c.Alias(&Alias{PreviousId: "p"}) }, ErrMissingUserID, "You must pass a 'userId'."},
		{"alias without previousId", func() error { return c.Alias(&Alias{UserId: "u"}) }, ErrMissingPreviousID, "You must pass a 'previousId'."},
		{"messageId over 100 characters", func() error {
			return c.Track(&Track{Event: "e", UserId: "u", Message: Message{MessageId: strings.Repeat("x", 101)}})
		}, ErrMessageIDTooLong, ""},
		{"timestamp not ISO 8601", func() error {
			return c.Track(&Track{Event: "e", UserId: "u", Message: Message{Timestamp: "yesterday"}})
		}, ErrInvalidTimestamp, ""},
		{"NaN property", func() error {
			return c.Track(&Track{Event: "e", UserId: "u", Properties: map[string]interface{}{"x": nan()}})
		}, nil, "NaN"},
		{"unencodable property", func() error {
			return c.Identify(&Identify{UserId: "u", Traits: map[string]interface{}{"f": func() {}}})
		}, nil, "func()"},
		{"nil message", func() error { return c.Track(nil) }, nil, "nil message"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("accepted an invalid message")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %q, want %q", err, tc.want)
			}
			if tc.text != "" && !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %q does not contain %q", err, tc.text)
			}
		})
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(coll.requests()); n != 0 {
		t.Errorf("invalid messages produced %d requests", n)
	}
}

// The 32 KB limit is exact: a message of 32,000 bytes of JSON is accepted,
// one of 32,001 is refused with an error that names the limit.
func TestMessageSizeLimit(t *testing.T) {
	coll := newCollector(t, nil)
	c := newClient(t, coll.srv.URL, nil)

	fixed := Message{MessageId: "11111111-2222-4333-8444-555555555555", Timestamp: "2012-12-02T00:30:08.276Z"}
	sized := func(n int) *Track {
		m := &Track{Event: "e", UserId: "u", Message: fixed, Properties: map[string]interface{}{"pad": ""}}
		var e encoder
		if err := e.encode(m, time.Now()); err != nil {
			t.Fatal(err)
		}
		m.Properties["pad"] = strings.Repeat("a", n-len(e.buf))
		if err := e.encode(m, time.Now()); err != nil && n <= MaxMessageBytes {
			t.Fatal(err)
		}
		if n <= MaxMessageBytes && len(e.buf) != n {
			t.Fatalf("built %d bytes, want %d", len(e.buf), n)
		}
		return m
	}
	if err := c.Track(sized(MaxMessageBytes)); err != nil {
		t.Fatalf("message of exactly %d bytes refused: %v", MaxMessageBytes, err)
	}
	err := c.Track(sized(MaxMessageBytes + 1))
	if !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("message of %d bytes: got %v, want ErrMessageTooLarge", MaxMessageBytes+1, err)
	}
	if !strings.Contains(err.Error(), "32 KB") || !strings.Contains(err.Error(), "32000") {
		t.Errorf("error %q does not name the limit", err)
	}
	// Far over the limit in a nested value: refused without encoding it all.
	huge := make([]interface{}, 100000)
	for i := range huge {
		huge[i] = "xxxxxxxxxx"
	}
	if err := c.Track(&Track{Event: "e", UserId: "u", Properties: map[string]interface{}{"l": huge}}); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("huge message: got %v", err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := len(coll.items()); got != 1 {
		t.Errorf("collector got %d messages, want only the one at the limit", got)
	}
	if n := len(coll.requests()[0].Raw); n > MaxBatchBytes {
		t.Errorf("request of %d bytes", n)
	}
}
