package activities

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workflows/vocab"
)

// LocalDeliverTimeout bounds the time a delivery on the fast path (in the
// events worker, within the event's first workflow task) starts calls; what
// it has not started by then is handed to the delivery queue. The calls it
// started have the type's CallTimeout (and fanout.CallSlack) more to end:
// see LocalDeliverBudget.
const LocalDeliverTimeout = 10 * time.Second

// LocalDeliverBudget is how long a delivery on the fast path may take with
// calls of callTimeout (0: fanout.DefaultCallTimeout), at most: it starts
// calls for LocalDeliverTimeout (or deliverTimeout, when shorter), and the
// last ones end a call's time later. The local activity's timeout leaves
// room for it; the delivery yields a call's time before its deadline.
func LocalDeliverBudget(deliverTimeout, callTimeout time.Duration) time.Duration {
	return min(LocalDeliverTimeout, cmp.Or(deliverTimeout, fanout.DefaultDeliverTimeout)) + cmp.Or(callTimeout, fanout.DefaultCallTimeout) + fanout.CallSlack
}

// OpenInput is the input of Open.
type OpenInput struct {
	Event fanout.Event
	// Rate and PaceFrom pace the delivery of a small audience (the event's
	// rate cap, set while it waited for its time), as DeliverBatchInput's.
	Rate     float64   `json:",omitzero"`
	PaceFrom time.Time `json:",omitzero"`
}

// OpenResult is what Open did: the message and options (Prepare's result),
// the first page (RecipientsPage's) and, when the whole audience is one
// batch of at most LocalDeliveryMax recipients, that batch's delivery.
type OpenResult struct {
	Prepared PrepareResult
	// Paged is false when the first page was not asked for (an unknown
	// priority) or failed: the workflow then asks again with
	// RecipientsPage, which reports the error.
	Paged bool       `json:",omitempty"`
	Page  PageResult `json:",omitzero"`
	// Delivered is true when the one batch was delivered here, with
	// Delivery its outcome.
	Delivered bool               `json:",omitempty"`
	Delivery  DeliverBatchResult `json:",omitzero"`
	// DeliverError is why the delivery tried here did not finish. The
	// workflow hands the batch to a DeliverBatch activity on the delivery
	// queue after DeliverRetryDelay, with the same attempt id, so what was
	// delivered here is skipped; unless the error is non-retryable
	// (DeliverErrorType names it), which fails the batch as it would fail
	// that activity.
	DeliverError        string        `json:",omitempty"`
	DeliverErrorType    string        `json:",omitempty"`
	DeliverNonRetryable bool          `json:",omitempty"`
	DeliverRetryDelay   time.Duration `json:",omitempty"`
}

// Open runs an event's first steps in one local activity: Prepare, the
// first page, and the delivery of an audience that is one small batch, so
// that such an event records one marker in its only workflow task instead
// of three. Prepare's errors and a page's non-retryable one fail it (the
// workflow then fails the event with a non-retryable one); a page that
// failed otherwise is asked again by the workflow, and a failed delivery
// handed to the delivery queue.
func (a *Activities) Open(ctx context.Context, in OpenInput) (OpenResult, error) {
	a.signalOpen(in.Event)
	return OpenSteps{Prepare: a.Prepare, Page: a.RecipientsPage, Deliver: a.observedDeliverBatch, Logger: a.Logger}.Open(ctx, in)
}

// signalOpen tells every worker that ev is opening: the batches behind
// its priority yield to it (Yields) from its first page on.
func (a *Activities) signalOpen(ev fanout.Event) {
	if a.Yields == nil {
		return
	}
	p := ev.Priority
	if p == "" {
		if _, opts, err := a.handler(ev.Type); err == nil {
			p = opts.WithDefaults().DefaultPriority
		}
	}
	a.Yields.Signal(p, vocab.FairnessKey(ev))
}

// observedDeliverBatch is DeliverBatch with the batch metrics the worker's
// interceptor records around a DeliverBatch activity (observeBatch), for
// the delivery Open makes inside its own activity.
func (a *Activities) observedDeliverBatch(ctx context.Context, in DeliverBatchInput) (DeliverBatchResult, error) {
	start := time.Now()
	res, err := a.DeliverBatch(ctx, in)
	observeBatch(ctx, in, res, err, time.Since(start))
	return res, err
}

// OpenSteps are the steps Open runs (the Activities' own; the workflow
// tests give theirs).
type OpenSteps struct {
	Prepare func(context.Context, PrepareInput) (PrepareResult, error)
	Page    func(context.Context, RecipientsPageInput) (PageResult, error)
	Deliver func(context.Context, DeliverBatchInput) (DeliverBatchResult, error)
	Logger  *slog.Logger
}

// Open is Activities.Open with s's steps.
func (s OpenSteps) Open(ctx context.Context, in OpenInput) (OpenResult, error) {
	prep, err := s.Prepare(ctx, PrepareInput{Event: in.Event})
	if err != nil {
		return OpenResult{}, err
	}
	res := OpenResult{Prepared: prep}
	opts := prep.Options.WithDefaults()
	prio := cmp.Or(in.Event.Priority, opts.DefaultPriority)
	if !prio.Valid() {
		return res, nil // the workflow fails the event
	}
	page, err := s.Page(ctx, RecipientsPageInput{Event: in.Event, Limit: opts.PageSize, BatchSize: opts.BatchSize})
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.NonRetryable() {
		// page_too_large, a recipients URL refused...: the event fails
		// with it, and the endpoint is not asked again.
		return OpenResult{}, err
	}
	if err != nil {
		if s.Logger != nil {
			s.Logger.WarnContext(ctx, "first page failed; the workflow asks again", "event", in.Event.ID, "error", err)
		}
		return res, nil
	}
	res.Paged, res.Page = true, page
	if !page.OneBatch(opts.BatchSize) || len(page.Recipients) == 0 || len(page.Recipients) > opts.LocalDeliveryMax {
		return res, nil
	}
	// Within the local activity's deadline (DeliverBatch yields a call's
	// time before it: the calls it starts end before the deadline).
	dctx, cancel := context.WithTimeout(ctx, LocalDeliverBudget(opts.DeliverTimeout, opts.CallTimeout))
	defer cancel()
	bin := NewBatchInput(in.Event, prio, 0, prep.Message, opts, page.Recipients, nil)
	bin.Rate, bin.PaceFrom = in.Rate, in.PaceFrom
	d, err := s.Deliver(dctx, bin)
	if err != nil {
		res.DeliverError = err.Error()
		if errors.As(err, &ae) {
			res.DeliverErrorType, res.DeliverNonRetryable, res.DeliverRetryDelay = ae.Type(), ae.NonRetryable(), ae.NextRetryDelay()
		}
		return res, nil
	}
	// Delivered: the workflow needs only the count, so the recipients stay
	// out of the marker (and of the server's history and gRPC traffic).
	res.Delivered, res.Delivery, res.Page.Recipients = true, d, nil
	return res, nil
}

// OneBatch reports whether the page is the whole audience in one batch of
// at most batchSize recipients, carried inline.
func (p PageResult) OneBatch(batchSize int) bool {
	return p.NextCursor == "" && len(p.Batches) == 0 && len(p.Recipients) <= batchSize
}

// NewBatchInput is the DeliverBatchInput of batch n of an event: recips
// inline, or the staged batch ref. A batch that carries its recipients gets
// the event without the payload (consumed by get_recipients and
// generate_broadcast_message), so a large payload is not copied into every
// batch's input and the parent's history; a staged batch keeps it, to fetch
// its page again should the staged copy be lost.
func NewBatchInput(ev fanout.Event, prio fanout.Priority, n int, msg fanout.Message, opts fanout.TypeOptions, recips []fanout.Recipient, ref *BatchRef) DeliverBatchInput {
	if ref == nil {
		ev.Payload = nil
	}
	return DeliverBatchInput{
		Event:       ev,
		Priority:    prio,
		AttemptID:   vocab.AttemptID(ev.Type, ev.ID, n),
		Recipients:  recips,
		Ref:         ref,
		Message:     msg,
		MaxAttempts: opts.MaxAttempts,
		Concurrency: opts.DeliverConcurrency,
	}
}
