package analytics

import (
	"errors"
	"fmt"
	"net/http"
)

// Validation errors. A call that returns one of them queued nothing. The
// texts are those of analytics-go v2; compare with errors.Is or ==.
var (
	// ErrMissingEvent is returned by Track without an Event.
	ErrMissingEvent = errors.New("You must pass 'event'.")

	// ErrMissingUserOrAnonymousID is returned by Track, Identify, Page,
	// Screen and Group when both UserId and AnonymousId are empty.
	ErrMissingUserOrAnonymousID = errors.New("You must pass either an 'anonymousId' or 'userId'.")

	// ErrMissingGroupID is returned by Group without a GroupId.
	ErrMissingGroupID = errors.New("You must pass a 'groupId'.")

	// ErrMissingUserID is returned by Alias without a UserId.
	ErrMissingUserID = errors.New("You must pass a 'userId'.")

	// ErrMissingPreviousID is returned by Alias without a PreviousId.
	ErrMissingPreviousID = errors.New("You must pass a 'previousId'.")

	// ErrMessageIDTooLong is returned when MessageId is longer than 100
	// characters, which the collector would refuse.
	ErrMessageIDTooLong = errors.New("analytics: 'messageId' is longer than the 100-character limit")

	// ErrInvalidTimestamp is returned (wrapped, with the value) when
	// Timestamp is set but is not an ISO 8601 date or date-time.
	ErrInvalidTimestamp = errors.New("analytics: 'timestamp' is not an ISO 8601 date-time")

	// ErrMessageTooLarge is returned when the JSON encoding of a message is
	// longer than the collector's limit for one event.
	ErrMessageTooLarge = fmt.Errorf("analytics: message exceeds the 32 KB limit (%d bytes of JSON)", MaxMessageBytes)
)

// Delivery errors.
var (
	// ErrClosed is returned by every call made after Close.
	ErrClosed = errors.New("analytics: client is closed")

	// ErrQueueFull is returned, and reported to Callback.Failure, when
	// MaxQueueSize messages are already waiting and BlockOnFull is false.
	// The message was dropped.
	ErrQueueFull = errors.New("analytics: queue is full, message dropped")

	// ErrRejected is wrapped by the error that Callback.Failure receives for
	// a message the collector refused inside an otherwise accepted batch
	// (its "rejected" array); the error text names the field and reason.
	ErrRejected = errors.New("analytics: message rejected by the collector")
)

// HTTPError is a final, unsuccessful answer of the collector to a batch:
// a 4xx other than 429 (never retried), or a 5xx or 429 once the retries ran
// out. Use errors.As to get it from the error given to Callback.Failure or
// returned by Flush and Close.
type HTTPError struct {
	// StatusCode is the HTTP status, e.g. 400, 401, 413 or 503.
	StatusCode int
	// Message is the "error" member of the JSON body the collector sent, or
	// the start of the body when it was not such JSON.
	Message string
}

// Error describes the status and the collector's message.
func (e *HTTPError) Error() string {
	text := http.StatusText(e.StatusCode)
	if e.Message == "" {
		return fmt.Sprintf("analytics: collector answered %d %s", e.StatusCode, text)
	}
	return fmt.Sprintf("analytics: collector answered %d %s: %s", e.StatusCode, text, e.Message)
}
