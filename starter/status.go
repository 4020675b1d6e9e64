// Status answers for one recipient of one event (starter status): did it
// get the event, when, after how many tries, and if not, why; and which
// batch workflow handled it, linked in the Temporal UI.

package starter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/workflows/vocab"
)

// States of a recipient (RecipientStatus.State).
const (
	// StateDelivered: delivered (DeliveredAt, Attempts when recorded).
	StateDelivered = "delivered"
	// StateInFlight: marked sending (at most once), or held by a batch
	// attempt that is delivering it and has not failed it yet.
	StateInFlight = "in_flight"
	// StateRetrying: its calls failed (LastError) and its batch retries it.
	StateRetrying = "retrying"
	// StateDeadLettered: given up, in the deliveries DLQ (starter redrive).
	StateDeadLettered = "dead_lettered"
	// StateUnconfirmed: at most once, a crash interrupted its call, whose
	// outcome is unknown; dead-lettered, not called again.
	StateUnconfirmed = "unconfirmed"
	// StateNotReached: the event is running and has not paged it yet.
	StateNotReached = "not_reached"
	// StateUnknown: the event is closed and never listed it, or its record
	// expired (FANOUT_GATE_TTL), or the record is unreadable (LastError
	// says why).
	StateUnknown = "unknown"
)

// MaxStatusRecipients bounds the recipients of one Status call.
const MaxStatusRecipients = 10_000

// ErrSomeUnknown is Status's error when it answered for every recipient and
// some are StateUnknown (`starter status` exits 3).
var ErrSomeUnknown = errors.New("some recipients are unknown")

// RecipientStatus is the answer for one recipient; as JSON, the object
// `starter status -json` prints, with null for what is not known.
type RecipientStatus struct {
	Type        string     `json:"type"`
	EventID     string     `json:"event_id"`
	Recipient   string     `json:"recipient"`
	State       string     `json:"state"`
	DeliveredAt *time.Time `json:"delivered_at"`
	// Attempts: the tries of a delivered recipient (the successful one
	// included), or the failed tries of one retrying or dead-lettered.
	Attempts  *int         `json:"attempts"`
	LastError *StatusError `json:"last_error"`
	// Batch is the number of the event's batch that handled it (null: a
	// resend's, or none).
	Batch           *int    `json:"batch"`
	BatchWorkflowID *string `json:"batch_workflow_id"`
	// UIURL links the batch workflow in the Temporal UI (FANOUT_UI_URL).
	UIURL *string `json:"ui_url"`
}

// StatusError is a recipient's last failed call: its class
// (activities.Class*), the HTTP status the destination answered (0: none),
// and when; or why its record could not be read (Class
// "unreadable_record", Detail).
type StatusError struct {
	Class      string     `json:"class"`
	HTTPStatus int        `json:"http_status,omitempty"`
	At         *time.Time `json:"at,omitempty"`
	Detail     string     `json:"detail,omitempty"`
}

// Classes of StatusError that Status sets itself.
const (
	ClassUnreadable  = "unreadable_record"
	ClassBatchFailed = "batch_failed"
	ClassEventClosed = "event_closed"
)

// StatusOptions are what Status reads.
type StatusOptions struct {
	// Redis holds the gate (FANOUT_REDIS_URL, the workers').
	Redis redis.UniversalClient
	// Temporal tells whether the event is running; nil: treated as closed.
	Temporal client.Client
	// Namespace and UIURL make the ui_url links (UIURL "": none).
	Namespace, UIURL string
}

// Status answers for the recipients of the event (eventType, eventID): one
// RecipientStatus per id, in order. The gate's records are read in
// pipelines; the event's state (running or closed) comes from Temporal.
// Ids outside the id grammar, or more than MaxStatusRecipients, are an
// error. With every answer given, the error is ErrSomeUnknown when some
// recipient is StateUnknown.
func Status(ctx context.Context, o StatusOptions, eventType, eventID string, recipientIDs []string) ([]RecipientStatus, error) {
	if err := fanout.ValidateType(eventType); err != nil {
		return nil, fmt.Errorf("event type: %w", err)
	}
	if err := fanout.ValidateID(eventID); err != nil {
		return nil, fmt.Errorf("event id: %w", err)
	}
	if len(recipientIDs) == 0 || len(recipientIDs) > MaxStatusRecipients {
		return nil, fmt.Errorf("%d recipients: want 1 to %d", len(recipientIDs), MaxStatusRecipients)
	}
	for _, id := range recipientIDs {
		if err := fanout.ValidateID(id); err != nil {
			return nil, fmt.Errorf("recipient %.64q: %w", id, err)
		}
	}
	recs, err := gate.New(o.Redis, 0).Read(ctx, eventType, eventID, recipientIDs)
	if err != nil {
		return nil, err
	}
	wid := vocab.WorkflowID(eventType, eventID)
	ev, err := describeEvent(ctx, o.Temporal, wid)
	if err != nil {
		return nil, err
	}
	inline := false // batch 0 ran inside the event's workflow (no child)
	for _, r := range recs {
		if r.Found && r.Unreadable == "" && r.Batch == 0 {
			if inline, err = noChild(ctx, o.Temporal, vocab.BatchWorkflowID(wid, 0)); err != nil {
				return nil, err
			}
			break
		}
	}
	out := make([]RecipientStatus, len(recs))
	unknown := false
	for i, r := range recs {
		s := answer(r, ev)
		s.Type, s.EventID, s.Recipient = eventType, eventID, recipientIDs[i]
		if r.Found && r.Unreadable == "" {
			var bw string
			switch {
			case r.Resend != "":
				bw = vocab.ResendWorkflowID(wid, r.Resend)
			case r.Batch == 0 && inline:
				bw = wid
			default:
				bw = vocab.BatchWorkflowID(wid, r.Batch)
			}
			if r.Resend == "" {
				n := r.Batch
				s.Batch = &n
			}
			s.BatchWorkflowID = &bw
			if o.UIURL != "" {
				u := UILink(o.UIURL, o.Namespace, bw)
				s.UIURL = &u
			}
		}
		unknown = unknown || s.State == StateUnknown
		out[i] = s
	}
	if unknown {
		return out, ErrSomeUnknown
	}
	return out, nil
}

// UILink is the Temporal UI's page of workflow id in namespace (default
// "default"), under the UI at base.
func UILink(base, namespace, workflowID string) string {
	if namespace == "" {
		namespace = "default"
	}
	return strings.TrimRight(base, "/") + "/namespaces/" + url.PathEscape(namespace) + "/workflows/" + url.PathEscape(workflowID)
}

// eventState is the event workflow's state as Status reads it.
type eventState struct {
	running bool
	status  enums.WorkflowExecutionStatus // of a closed event (unspecified: not found)
}

// describeEvent reads whether the event's workflow runs (a scheduled or
// paused event runs too).
func describeEvent(ctx context.Context, tc client.Client, wid string) (eventState, error) {
	if tc == nil {
		return eventState{}, nil
	}
	d, err := tc.DescribeWorkflow(ctx, wid, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return eventState{}, nil // never started, or gone after the namespace's retention
	case err != nil:
		return eventState{}, fmt.Errorf("describe event %s: %w", wid, err)
	}
	st := d.Status
	return eventState{running: st == enums.WORKFLOW_EXECUTION_STATUS_RUNNING, status: st}, nil
}

// noChild reports whether the batch workflow wid does not exist (batch 0
// then ran inside the event's own workflow).
func noChild(ctx context.Context, tc client.Client, wid string) (bool, error) {
	if tc == nil {
		return false, nil
	}
	_, err := tc.DescribeWorkflow(ctx, wid, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("describe batch %s: %w", wid, err)
	}
	return false, nil
}

// answer is the state of one gate record, the event being ev.
func answer(r gate.Record, ev eventState) RecipientStatus {
	var s RecipientStatus
	if r.LastError != nil {
		at := r.LastError.At
		s.LastError = &StatusError{Class: r.LastError.Class, HTTPStatus: r.LastError.HTTPStatus, At: &at}
	}
	tries := func() {
		if r.Tries > 0 {
			n := r.Tries
			s.Attempts = &n
		}
	}
	switch {
	case !r.Found && ev.running:
		s.State = StateNotReached
	case !r.Found:
		s.State = StateUnknown
	case r.Unreadable != "":
		s.State, s.LastError = StateUnknown, &StatusError{Class: ClassUnreadable, Detail: r.Unreadable}
	case r.State == gate.StateDelivered:
		s.State = StateDelivered
		if !r.DeliveredAt.IsZero() {
			at := r.DeliveredAt
			s.DeliveredAt = &at
		}
		tries()
	case r.State == gate.StateDeadLettered:
		s.State = StateDeadLettered
		tries()
	case r.State == gate.StateUnconfirmed:
		s.State = StateUnconfirmed
		tries()
	case !ev.running && r.Resend == "":
		// Held by a batch of an event that has closed: a completed event's
		// batch that ended in error dead-lettered all its recipients
		// (activities.DeadLetterBatch); a canceled, terminated or failed
		// event's never finished with it.
		tries()
		if ev.status == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			s.State = StateDeadLettered
			if s.LastError == nil {
				s.LastError = &StatusError{Class: ClassBatchFailed, Detail: "its batch ended in error; every recipient of it was dead-lettered"}
			}
		} else {
			s.State = StateUnknown
			s.LastError = &StatusError{Class: ClassEventClosed, Detail: "the event closed (" + strings.ToLower(ev.status.String()) + ") before its delivery finished"}
		}
	case r.LastError != nil || r.Tries > 0:
		s.State = StateRetrying
		tries()
	default:
		s.State = StateInFlight
	}
	return s
}

// ReadIDs reads recipient ids from r, one a line (blank lines and
// surrounding spaces ignored), at most max of them, each a line of at most
// fanout.MaxIDLen bytes in the id grammar; more, or a bad line, is an error
// naming the line.
func ReadIDs(r io.Reader, max int) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), fanout.MaxIDLen+64)
	var ids []string
	for n := 1; sc.Scan(); n++ {
		id := strings.TrimSpace(sc.Text())
		if id == "" {
			continue
		}
		if len(ids) == max {
			return nil, fmt.Errorf("line %d: more than %d recipients", n, max)
		}
		if err := fanout.ValidateID(id); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		ids = append(ids, id)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("a line of more than %d bytes: not a recipient id", fanout.MaxIDLen+64)
		}
		return nil, err
	}
	return ids, nil
}

// WriteStatus writes answers for people: one line per recipient.
func WriteStatus(w io.Writer, answers []RecipientStatus) error {
	bw := bufio.NewWriter(w)
	for _, s := range answers {
		fmt.Fprintf(bw, "%s  %s", s.Recipient, s.State)
		if s.DeliveredAt != nil {
			fmt.Fprintf(bw, "  at %s", s.DeliveredAt.UTC().Format(time.RFC3339))
		}
		if s.Attempts != nil {
			fmt.Fprintf(bw, "  attempts %d", *s.Attempts)
		}
		if e := s.LastError; e != nil {
			fmt.Fprintf(bw, "  last error %s", e.Class)
			if e.HTTPStatus != 0 {
				fmt.Fprintf(bw, " (HTTP %d)", e.HTTPStatus)
			}
			if e.At != nil {
				fmt.Fprintf(bw, " at %s", e.At.UTC().Format(time.RFC3339))
			}
			if e.Detail != "" {
				fmt.Fprintf(bw, ": %s", e.Detail)
			}
		}
		if s.Batch != nil {
			fmt.Fprintf(bw, "  batch %d", *s.Batch)
		}
		switch {
		case s.UIURL != nil:
			fmt.Fprintf(bw, "  %s", *s.UIURL)
		case s.BatchWorkflowID != nil:
			fmt.Fprintf(bw, "  %s", *s.BatchWorkflowID)
		}
		fmt.Fprintln(bw)
	}
	return bw.Flush()
}
