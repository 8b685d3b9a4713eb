package analytics

// Message holds the fields every message type shares. It is embedded in
// Track, Identify, Page, Screen, Group and Alias exactly as in analytics-go
// v2, so the fields read as msg.MessageId and msg.Timestamp, and a composite
// literal sets them with Message: analytics.Message{Timestamp: ...}.
type Message struct {
	// Type is set by the client from the method that was called; any value
	// given here is ignored.
	Type string `json:"type,omitempty"`

	// MessageId identifies the message for de-duplication by the collector.
	// When empty, the client generates a UUID v4 (from crypto/rand). At most
	// 100 characters.
	MessageId string `json:"messageId,omitempty"`

	// Timestamp is when the event happened, in ISO 8601. When empty, the
	// client uses the time of the call. A timestamp in RFC 3339 form, in
	// analytics-go v2's form (2006-01-02T15:04:05-0700), without a zone (taken
	// as UTC), or a bare date is sent as UTC with milliseconds, for example
	// 2012-12-02T00:30:08.276Z; anything else is refused with
	// ErrInvalidTimestamp. Set it to import historical data.
	Timestamp string `json:"timestamp,omitempty"`

	// SentAt is kept so that analytics-go v2 code compiles; it is ignored.
	// The client stamps sentAt on every batch when it sends it.
	SentAt string `json:"sentAt,omitempty"`
}

// Track records an action the user performed. Event and one of UserId or
// AnonymousId are required.
type Track struct {
	Context      map[string]interface{} `json:"context,omitempty"`      // device, IP and the like; not traits of the user
	Integrations map[string]interface{} `json:"integrations,omitempty"` // destinations on or off, e.g. {"All": false, "Webhooks": true}
	Properties   map[string]interface{} `json:"properties,omitempty"`   // free-form details of the event
	AnonymousId  string                 `json:"anonymousId,omitempty"`  // id of a user not yet identified
	UserId       string                 `json:"userId,omitempty"`       // id of the user in your database
	Event        string                 `json:"event"`                  // name of the action, e.g. "Order Completed"
	Message
}

// Identify ties a user to their traits. One of UserId or AnonymousId is
// required.
type Identify struct {
	Context      map[string]interface{} `json:"context,omitempty"`      // device, IP and the like; not traits of the user
	Integrations map[string]interface{} `json:"integrations,omitempty"` // destinations on or off, e.g. {"All": false, "Webhooks": true}
	Traits       map[string]interface{} `json:"traits,omitempty"`       // what is known of the user: email, name, plan…
	AnonymousId  string                 `json:"anonymousId,omitempty"`  // id of a user not yet identified
	UserId       string                 `json:"userId,omitempty"`       // id of the user in your database
	Message
}

// Page records a page view. One of UserId or AnonymousId is required.
// Traits are sent under the JSON name "properties" (recognised keys: url,
// title, referrer, path; custom keys are allowed), as analytics-go v2 did.
type Page struct {
	Context      map[string]interface{} `json:"context,omitempty"`      // device, IP and the like; not traits of the user
	Integrations map[string]interface{} `json:"integrations,omitempty"` // destinations on or off, e.g. {"All": false, "Webhooks": true}
	Traits       map[string]interface{} `json:"properties,omitempty"`   // sent as "properties": url, title, referrer, path, custom keys
	AnonymousId  string                 `json:"anonymousId,omitempty"`  // id of a user not yet identified
	UserId       string                 `json:"userId,omitempty"`       // id of the user in your database
	Category     string                 `json:"category,omitempty"`     // category of the page
	Name         string                 `json:"name,omitempty"`         // name of the page
	Message
}

// Screen records a screen view in a mobile app. One of UserId or
// AnonymousId is required.
type Screen struct {
	Context      map[string]interface{} `json:"context,omitempty"`      // device, IP and the like; not traits of the user
	Integrations map[string]interface{} `json:"integrations,omitempty"` // destinations on or off, e.g. {"All": false, "Webhooks": true}
	Properties   map[string]interface{} `json:"properties,omitempty"`   // free-form details of the screen
	AnonymousId  string                 `json:"anonymousId,omitempty"`  // id of a user not yet identified
	UserId       string                 `json:"userId,omitempty"`       // id of the user in your database
	Category     string                 `json:"category,omitempty"`     // category of the screen
	Name         string                 `json:"name,omitempty"`         // name of the screen
	Message
}

// Group ties a user to a group (a company, organisation, account, project
// or team). GroupId and one of UserId or AnonymousId are required.
type Group struct {
	Context      map[string]interface{} `json:"context,omitempty"`      // device, IP and the like; not traits of the user
	Integrations map[string]interface{} `json:"integrations,omitempty"` // destinations on or off, e.g. {"All": false, "Webhooks": true}
	Traits       map[string]interface{} `json:"traits,omitempty"`       // what is known of the group: name, industry, employees…
	AnonymousId  string                 `json:"anonymousId,omitempty"`  // id of a user not yet identified
	UserId       string                 `json:"userId,omitempty"`       // id of the user in your database
	GroupId      string                 `json:"groupId"`                // id of the group
	Message
}

// Alias merges two identities: PreviousId, the old one, becomes known as
// UserId. Both are required.
type Alias struct {
	Context      map[string]interface{} `json:"context,omitempty"`      // device, IP and the like; not traits of the user
	Integrations map[string]interface{} `json:"integrations,omitempty"` // destinations on or off, e.g. {"All": false, "Webhooks": true}
	PreviousId   string                 `json:"previousId"`             // the old id, e.g. an anonymous id
	UserId       string                 `json:"userId"`                 // the new id
	Message
}

// Call is one message as the client reports it to a Callback: a *Track,
// *Identify, *Page, *Screen, *Group or *Alias. It is a copy of what was passed
// in, with Type, MessageId and Timestamp filled in as they were sent; use a
// type switch to reach the fields. The interface is sealed: no other type
// implements it.
type Call interface {
	common() *Message
}

func (m *Track) common() *Message    { return &m.Message }
func (m *Identify) common() *Message { return &m.Message }
func (m *Page) common() *Message     { return &m.Message }
func (m *Screen) common() *Message   { return &m.Message }
func (m *Group) common() *Message    { return &m.Message }
func (m *Alias) common() *Message    { return &m.Message }

// Callback receives the outcome of every message the client accepted.
// Success is called once the collector has stored the message. Failure is
// called when it will not be: the collector refused it (the error wraps
// ErrRejected or is an *HTTPError), the retries ran out, or the queue was
// full (ErrQueueFull; then the call also returned that error).
//
// The methods are called from the client's upload goroutines (for
// ErrQueueFull, from the goroutine that made the call); they must be safe for
// concurrent use and should return quickly, since a slow callback holds up
// uploads. Each message gets exactly one of the two calls.
type Callback interface {
	// Success reports a message the collector accepted.
	Success(Call)
	// Failure reports a message that will not be delivered, and why.
	Failure(Call, error)
}

// The validate methods return the first missing required field, in the
// order analytics-go v2 checked them, or nil.

func validateIdentity(userID, anonymousID string) error {
	if userID == "" && anonymousID == "" {
		return ErrMissingUserOrAnonymousID
	}
	return nil
}

func (m *Track) validate() error {
	if m.Event == "" {
		return ErrMissingEvent
	}
	return validateIdentity(m.UserId, m.AnonymousId)
}

func (m *Identify) validate() error { return validateIdentity(m.UserId, m.AnonymousId) }

func (m *Page) validate() error { return validateIdentity(m.UserId, m.AnonymousId) }

func (m *Screen) validate() error { return validateIdentity(m.UserId, m.AnonymousId) }

func (m *Group) validate() error {
	if m.GroupId == "" {
		return ErrMissingGroupID
	}
	return validateIdentity(m.UserId, m.AnonymousId)
}

func (m *Alias) validate() error {
	if m.UserId == "" {
		return ErrMissingUserID
	}
	if m.PreviousId == "" {
		return ErrMissingPreviousID
	}
	return nil
}
