// Package activities holds fanout's activities: the calls into the user's
// handlers (generate the message, page recipients) and the delivery of one
// batch through the Redis attempt-id gate. Workflows refer to them through a
// nil *Activities; workers register one &Activities{...} holding the
// dependencies.
package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/backoff"
	"github.com/fanout/fanout/internal/gate"
)

// Activities holds the dependencies of the activities.
type Activities struct {
	Registry *fanout.Registry
	// Gate is the per-recipient attempt-id gate; nil turns deduplication off
	// (for benchmarks only).
	Gate *gate.Gate
	// Backoff computes delivery retry delays (backoff.Default when zero).
	Backoff backoff.Policy
	Logger  *slog.Logger
}

// Error types of non-retryable application errors.
const (
	ErrUnknownEventType = "UnknownEventType"
	ErrDeliveryRetry    = "DeliveryRetry"
)

func (a *Activities) handler(eventType string) (fanout.Handler, fanout.TypeOptions, error) {
	h, opts, ok := a.Registry.Lookup(eventType)
	if !ok {
		return nil, opts, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("event type %q is not registered on this worker", eventType), ErrUnknownEventType, nil)
	}
	return h, opts, nil
}

// PrepareInput is the input of Prepare.
type PrepareInput struct {
	Event fanout.Event
}

// PrepareResult is the message of an event and its type's options.
type PrepareResult struct {
	Message fanout.Message
	Options fanout.TypeOptions
}

// Prepare runs generate_broadcast_message once per event and resolves the
// event type's options, so the workflow carries both from then on.
func (a *Activities) Prepare(ctx context.Context, in PrepareInput) (PrepareResult, error) {
	h, opts, err := a.handler(in.Event.Type)
	if err != nil {
		return PrepareResult{}, err
	}
	msg, err := h.GenerateMessage(ctx, in.Event)
	if err != nil {
		return PrepareResult{}, nonRetryableIfPermanent(err)
	}
	return PrepareResult{Message: msg, Options: opts}, nil
}

// RecipientsPageInput asks for the page at Cursor.
type RecipientsPageInput struct {
	Event  fanout.Event
	Cursor string
	Limit  int
}

// RecipientsPage runs get_recipients for one page.
func (a *Activities) RecipientsPage(ctx context.Context, in RecipientsPageInput) (fanout.Page, error) {
	h, _, err := a.handler(in.Event.Type)
	if err != nil {
		return fanout.Page{}, err
	}
	p, err := h.GetRecipients(ctx, in.Event, in.Cursor, in.Limit)
	if err != nil {
		return fanout.Page{}, nonRetryableIfPermanent(err)
	}
	if len(p.Recipients) > in.Limit {
		return fanout.Page{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("get_recipients returned %d recipients, over the limit %d", len(p.Recipients), in.Limit), "PageTooLarge", nil)
	}
	if len(p.Recipients) == 0 && p.NextCursor != "" && p.NextCursor == in.Cursor {
		return fanout.Page{}, temporal.NewNonRetryableApplicationError("get_recipients returned the same cursor with an empty page", "CursorLoop", nil)
	}
	return p, nil
}

func nonRetryableIfPermanent(err error) error {
	if fanout.IsPermanent(err) {
		return temporal.NewNonRetryableApplicationError(err.Error(), "Permanent", err)
	}
	return err
}

// DeliverBatchInput is one batch of recipients to deliver.
type DeliverBatchInput struct {
	Event      fanout.Event
	AttemptID  string
	Recipients []fanout.Recipient
	Message    fanout.Message
	// MaxAttempts: after this many activity attempts, recipients that still
	// fail are reported failed instead of retried.
	MaxAttempts int
	Concurrency int
}

// Failure is a recipient that was not delivered.
type Failure struct {
	Recipient fanout.Recipient
	Attempts  int
	Permanent bool
	Error     string
}

// DeliverBatchResult counts the batch's outcomes; every recipient is in
// exactly one of Delivered, Duplicates and Failed.
type DeliverBatchResult struct {
	Delivered  int
	Duplicates int
	Failed     int
	Failures   []Failure
}

// deliverProgress is the heartbeat detail of DeliverBatch.
type deliverProgress struct {
	Done  int
	Total int
}

// DeliverBatch delivers the message to a batch of recipients: the gate
// decides per recipient (one Redis pipeline for the batch), deliveries run
// concurrently up to Concurrency, each success is marked delivered at once,
// and transient failures make the activity retry after a jittered backoff
// (or the destination's Retry-After). A retry presents the same attempt id,
// so what was delivered is skipped and what was in flight is delivered again.
func (a *Activities) DeliverBatch(ctx context.Context, in DeliverBatchInput) (DeliverBatchResult, error) {
	h, _, err := a.handler(in.Event.Type)
	if err != nil {
		return DeliverBatchResult{}, err
	}
	info := activity.GetInfo(ctx)
	attempt := int(info.Attempt)
	var res DeliverBatchResult

	todo := in.Recipients
	if a.Gate != nil {
		ids := make([]string, len(in.Recipients))
		for i, r := range in.Recipients {
			ids[i] = r.ID
		}
		verdicts, err := a.Gate.Acquire(ctx, in.Event.ID, in.AttemptID, ids)
		if err != nil {
			// Redis is unreachable: never deliver without the gate; retry.
			return res, err
		}
		todo = make([]fanout.Recipient, 0, len(in.Recipients))
		for i, v := range verdicts {
			switch v {
			case gate.Deliver, gate.Redeliver:
				todo = append(todo, in.Recipients[i])
			case gate.DeliveredByUs:
				res.Delivered++
			case gate.Duplicate:
				res.Duplicates++
			}
		}
	}

	conc := max(in.Concurrency, 1)
	var (
		mu         sync.Mutex
		retryAfter time.Duration
		transient  []Failure
		done       = len(in.Recipients) - len(todo)
		lastBeat   time.Time
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for _, r := range todo {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			derr := h.Deliver(gctx, in.Event, r, in.Message)
			if derr == nil && a.Gate != nil {
				if merr := a.Gate.MarkDelivered(gctx, in.Event.ID, in.AttemptID, r.ID); merr != nil {
					// Delivered but not marked: a retry will deliver again
					// (the key still holds our attempt id). Fail the attempt
					// so nothing is counted twice.
					return merr
				}
			}
			mu.Lock()
			defer mu.Unlock()
			done++
			switch {
			case derr == nil:
				res.Delivered++
			case fanout.IsPermanent(derr):
				res.Failed++
				res.Failures = append(res.Failures, Failure{Recipient: r, Attempts: attempt, Permanent: true, Error: derr.Error()})
			default:
				if d, ok := fanout.RetryAfterOf(derr); ok && d > retryAfter {
					retryAfter = d
				}
				transient = append(transient, Failure{Recipient: r, Attempts: attempt, Error: derr.Error()})
			}
			if time.Since(lastBeat) > time.Second {
				lastBeat = time.Now()
				activity.RecordHeartbeat(ctx, deliverProgress{Done: done, Total: len(in.Recipients)})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return DeliverBatchResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return DeliverBatchResult{}, err
	}
	if len(transient) > 0 {
		maxAttempts := max(in.MaxAttempts, 1)
		if attempt < maxAttempts {
			pol := a.Backoff
			if pol.Initial == 0 {
				pol = backoff.Default
			}
			delay := pol.Delay(attempt, retryAfter, nil)
			return DeliverBatchResult{}, temporal.NewApplicationErrorWithOptions(
				fmt.Sprintf("%d of %d recipients failed transiently (first: %s); retrying in %v",
					len(transient), len(in.Recipients), transient[0].Error, delay.Round(time.Millisecond)),
				ErrDeliveryRetry, temporal.ApplicationErrorOptions{NextRetryDelay: delay})
		}
		res.Failed += len(transient)
		res.Failures = append(res.Failures, transient...)
	}
	if a.Logger != nil && res.Failed > 0 {
		a.Logger.Warn("batch finished with failures", "event", in.Event.ID, "attempt_id", in.AttemptID, "failed", res.Failed)
	}
	return res, nil
}

// IsDeliveryRetry reports whether err is DeliverBatch asking to be retried.
func IsDeliveryRetry(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == ErrDeliveryRetry
}
