package activities

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/gate"
)

// Classes of a recipient's last error (gate.LastError, what `starter
// status` shows): a word and an HTTP status, never the error's text, which
// may hold the address or what the destination answered.
const (
	ClassHTTP        = "http_error"   // the destination answered with an error status
	ClassRateLimited = "rate_limited" // 429, or a Retry-After
	ClassPermanent   = "permanent"    // fanout.Permanent (a 4xx at the stock webhook)
	ClassTimeout     = "timeout"      // the call timed out
	ClassConnect     = "connect"      // no connection could be made (dial)
	ClassNetwork     = "network"      // the connection failed mid-way
	ClassNotSent     = "not_sent"     // fanout.NotSent (an open breaker, say)
	ClassOther       = "error"        // anything else the handler returned
)

// HTTPStatuser is an error that knows the HTTP status the destination
// answered with; a handler's error may implement it for `starter status`.
// Without it, an error whose text starts with "HTTP <status>" (the stock
// webhook's) gives the status.
type HTTPStatuser interface{ HTTPStatus() int }

// lastError is the record of a failed call with err at now.
func lastError(err error, now time.Time) gate.LastError {
	st := httpStatus(err)
	var op *net.OpError
	class := ClassOther
	switch {
	case st == 429:
		class = ClassRateLimited
	case fanout.IsPermanent(err):
		class = ClassPermanent
	case fanout.IsNotSent(err):
		class = ClassNotSent
	case errors.As(err, &op) && op.Op == "dial":
		class = ClassConnect
	case isTimeout(err):
		class = ClassTimeout
	case st != 0:
		class = ClassHTTP
	case errors.As(err, &op):
		class = ClassNetwork
	}
	if _, ok := fanout.RetryAfterOf(err); ok && class == ClassHTTP {
		class = ClassRateLimited
	}
	return gate.LastError{Class: class, HTTPStatus: st, At: now}
}

// isTimeout reports a deadline passed or a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// httpStatus is the HTTP status of err (0: none known): HTTPStatuser's, or
// "HTTP <3 digits>" in the text of an error of its chain.
func httpStatus(err error) int {
	var hs HTTPStatuser
	if errors.As(err, &hs) {
		if s := hs.HTTPStatus(); s >= 100 && s <= 599 {
			return s
		}
		return 0
	}
	msg := err.Error()
	i := strings.Index(msg, "HTTP ")
	if i < 0 || len(msg) < i+8 || (len(msg) > i+8 && msg[i+8] >= '0' && msg[i+8] <= '9') {
		return 0
	}
	if s, err := strconv.Atoi(msg[i+5 : i+8]); err == nil && s >= 100 && s <= 599 {
		return s
	}
	return 0
}
