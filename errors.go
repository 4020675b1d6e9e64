package fanout

import (
	"errors"
	"time"
)

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure that retrying cannot fix (a 4xx answer, an
// unknown recipient): the recipient is reported failed without more attempts.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type retryAfterError struct {
	after time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	return "retry after " + e.after.String() + ": " + e.err.Error()
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as transient with a delay the destination asked for
// (an HTTP 429 or 503 with Retry-After).
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{after: d, err: err}
}

// RetryAfterOf returns the delay of a RetryAfter error.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}
