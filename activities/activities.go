// Package activities holds fanout's activities: the calls into the user's
// handlers (generate the message, page recipients) and the delivery of one
// batch through the Redis attempt-id gate. Workflows refer to them through a
// nil *Activities; workers register one &Activities{...} holding the
// dependencies.
package activities

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/gate"
	"github.com/fanout/fanout/activities/staging"
	"github.com/fanout/fanout/workflows/vocab"
)

// Activities holds the dependencies of the activities.
type Activities struct {
	Registry *fanout.Registry
	// Gate is the per-recipient attempt-id gate; nil delivers without
	// suppressing duplicates (only for measuring what the gate costs).
	Gate *gate.Gate
	// Staging keeps big events' batches in Redis between the page and the
	// delivery; nil passes every page's recipients through the history.
	Staging *staging.Store
	// DeadLetters receives recipients given up after MaxAttempts or a
	// permanent failure; nil only reports them in the batch result.
	DeadLetters DeadLetterPublisher
	// Backoff computes delivery retry delays (DefaultBackoff when zero).
	Backoff Backoff
	// DeliverConcurrency, when set, replaces the batches' own concurrency.
	DeliverConcurrency int
	// Calls is the worker's budget of calls in flight, shared by its
	// batches (calls.go); nil: each batch only has its own concurrency.
	Calls *Calls
	// Destinations limits and breaks deliveries per destination (see
	// destinations.go); nil: neither.
	Destinations *Destinations
	// Brake slows low-priority deliveries while other priorities deliver
	// (brake.go); nil: none.
	Brake *Brake
	// Yields carries between workers the events others' batches yield to
	// (yield.go): events signal as they open and deliver small batches,
	// and Calls reads them (Calls.YieldTo); nil: this worker's alone.
	Yields *Yields
	Logger *slog.Logger
}

// Error types of non-retryable application errors.
const (
	ErrUnknownEventType = "UnknownEventType"
	ErrDeliveryRetry    = "DeliveryRetry"
	ErrMessageTooLarge  = "MessageTooLarge"
	ErrInvalidMessage   = "InvalidMessage"
	ErrPageChanged      = "PageChanged"
	ErrPageTooLarge     = "PageTooLarge"
	ErrCursorLoop       = "CursorLoop"
	ErrInvalidCursor    = "InvalidCursor"
	ErrBatchGone        = "BatchGone"
	// ErrPermanent: the handler's fanout.Permanent error.
	ErrPermanent = "Permanent"
)

// invalidMessage is the error of a message fanout.Message.Validate refuses
// (nil when it passes): non-retryable, so the event (Prepare) or the batch
// (a redrive of a forged dead letter) fails before any delivery.
func invalidMessage(m fanout.Message) error {
	if err := m.Validate(); err != nil {
		return temporal.NewNonRetryableApplicationError("invalid_message: "+err.Error(), ErrInvalidMessage, nil)
	}
	return nil
}

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
	defer keepAlive(ctx)()
	h, opts, err := a.handler(in.Event.Type)
	if err != nil {
		return PrepareResult{}, err
	}
	msg, err := h.GenerateMessage(ctx, in.Event)
	if err != nil {
		return PrepareResult{}, nonRetryableIfPermanent(err)
	}
	if n := len(msg.Body) + len(msg.ContentType); n > fanout.MaxMessageBytes {
		return PrepareResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("message_too_large: the generated message is %d bytes, over %d", n, fanout.MaxMessageBytes), ErrMessageTooLarge, nil)
	}
	if err := invalidMessage(msg); err != nil {
		return PrepareResult{}, err
	}
	if opts.LocalDeliveryMax == 0 {
		// Resolved here so that the workflow's choice comes from this
		// recorded result (see TypeOptions.LocalDeliveryMax).
		opts.LocalDeliveryMax = fanout.DefaultLocalDeliveryMax
	}
	opts = opts.ResolveLargeBatchSize() // likewise
	return PrepareResult{Message: msg, Options: opts}, nil
}

// RecipientsPageInput asks for the page at Cursor.
type RecipientsPageInput struct {
	Event  fanout.Event
	Cursor string
	Limit  int
	// BatchSize and FirstBatch number the page's batches when they are
	// staged (BatchSize 0: never stage, return the recipients).
	BatchSize  int `json:",omitempty"`
	FirstBatch int `json:",omitempty"`
}

// BatchRef names a staged batch: its Redis key, and where to fetch it
// again (page cursor, offset, count) should the staged copy be gone.
type BatchRef struct {
	N          int
	Key        string
	Count      int
	PageCursor string
	PageLimit  int
	Offset     int
	// Digest names the batch's recipient ids (batchDigest), so that a batch
	// fetched again from a page that has changed since is known as such.
	// Empty in refs from before it.
	Digest string `json:",omitempty"`
}

// PageResult is a page of recipients: either the recipients themselves,
// or, for a page that needs more than one batch, refs to its staged batches.
type PageResult struct {
	Recipients []fanout.Recipient `json:"recipients,omitempty"`
	Batches    []BatchRef         `json:"batches,omitempty"`
	Count      int                `json:"count,omitempty"`
	NextCursor string             `json:"next_cursor,omitempty"`
}

// Len is the number of recipients of the page (Count when they are staged,
// or left out of Open's result once delivered).
func (p PageResult) Len() int {
	if len(p.Batches) > 0 || len(p.Recipients) == 0 {
		return p.Count
	}
	return len(p.Recipients)
}

// RecipientsPage runs get_recipients for one page. When staging is set and
// the page is more than one final batch, it stages the page's batches in
// Redis and returns refs, keeping recipients out of the workflow history.
func (a *Activities) RecipientsPage(ctx context.Context, in RecipientsPageInput) (PageResult, error) {
	defer keepAlive(ctx)()
	h, _, err := a.handler(in.Event.Type)
	if err != nil {
		return PageResult{}, err
	}
	p, err := h.GetRecipients(ctx, in.Event, in.Cursor, in.Limit)
	if err != nil {
		return PageResult{}, nonRetryableIfPermanent(err)
	}
	if len(p.Recipients) > in.Limit {
		return PageResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("get_recipients returned %d recipients, over the limit %d", len(p.Recipients), in.Limit), ErrPageTooLarge, nil)
	}
	if len(p.Recipients) == 0 && p.NextCursor != "" && p.NextCursor == in.Cursor {
		return PageResult{}, temporal.NewNonRetryableApplicationError("get_recipients returned the same cursor with an empty page", ErrCursorLoop, nil)
	}
	if len(p.NextCursor) > fanout.MaxCursorLen {
		return PageResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("invalid_cursor: get_recipients returned a cursor of %d bytes, over %d", len(p.NextCursor), fanout.MaxCursorLen), ErrInvalidCursor, nil)
	}
	size := pageBytes(p)
	if size > fanout.MaxPageBytes {
		return PageResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("page_too_large: get_recipients returned a page of %d bytes of ids and addresses, over %d", size, fanout.MaxPageBytes), ErrPageTooLarge, nil)
	}
	res := PageResult{Recipients: p.Recipients, NextCursor: p.NextCursor, Count: len(p.Recipients)}
	// A page goes back to the workflow whole only when it is one small
	// batch; a heavy one (long addresses) is staged like a big page, so
	// no activity result or batch input nears Temporal's payload limit.
	single := p.NextCursor == "" && len(p.Recipients) <= in.BatchSize && size <= maxInlinePageBytes
	if a.Staging == nil || in.BatchSize <= 0 || single || len(p.Recipients) == 0 {
		return res, nil
	}
	batches := slices.Collect(slices.Chunk(p.Recipients, in.BatchSize))
	if err := a.Staging.Stage(ctx, eventKey(in.Event), in.FirstBatch, batches); err != nil {
		return PageResult{}, err
	}
	off := 0
	for i, b := range batches {
		n := in.FirstBatch + i
		res.Batches = append(res.Batches, BatchRef{N: n, Key: a.Staging.Key(eventKey(in.Event), n), Count: len(b),
			PageCursor: in.Cursor, PageLimit: in.Limit, Offset: off, Digest: batchDigest(b)})
		off += len(b)
	}
	res.Recipients = nil
	return res, nil
}

// maxInlinePageBytes is the most of a page's ids and addresses that goes
// back to the workflow inline (Temporal warns at 512 KiB payloads).
const maxInlinePageBytes = 256 << 10

// pageBytes counts the ids, addresses and cursor of page p.
func pageBytes(p fanout.Page) int {
	n := len(p.NextCursor)
	for _, r := range p.Recipients {
		n += len(r.ID) + len(r.Address)
	}
	return n
}

// loadBatch returns the recipients of the batch: Recipients, or the staged
// batch Ref, fetching its page again if the staged copy is gone or
// unreadable.
func (a *Activities) loadBatch(ctx context.Context, h fanout.Handler, in DeliverBatchInput) ([]fanout.Recipient, error) {
	ref := in.Ref
	if ref == nil {
		return in.Recipients, nil
	}
	if a.Staging != nil {
		rs, ok, err := a.Staging.Load(ctx, ref.Key)
		if errors.Is(err, staging.ErrUnreadable) {
			// Staged before encryption was turned on or off, or sealed
			// with a key this worker lacks, or changed: fetched again.
			if a.Logger != nil {
				a.Logger.WarnContext(ctx, "staged batch unreadable; fetching it again from get_recipients", "event", in.Event.ID, "batch", ref.N, "err", err)
			}
		} else if err != nil {
			return nil, err
		}
		if ok {
			return rs, nil
		}
	}
	if h == nil {
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("batch %d: the staged copy is gone and type %q has no handler here to page again", ref.N, in.Event.Type), ErrBatchGone, nil)
	}
	p, err := h.GetRecipients(ctx, in.Event, ref.PageCursor, ref.PageLimit)
	if err != nil {
		return nil, nonRetryableIfPermanent(err)
	}
	rs := p.Recipients[min(ref.Offset, len(p.Recipients)):min(ref.Offset+ref.Count, len(p.Recipients))]
	if len(rs) != ref.Count || (ref.Digest != "" && batchDigest(rs) != ref.Digest) {
		// The page is shorter, or holds other recipients where the batch
		// was: delivering what is there would deliver others and drop the
		// batch's own without a word. The batch fails, with the reason, and
		// counts as failed.
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s: batch %d (offset %d, %d recipients) was staged from a page that has changed since: it holds %d recipients there now, not the same ones",
				ReasonPageChanged, ref.N, ref.Offset, ref.Count, len(rs)), ErrPageChanged, nil)
	}
	return rs, nil
}

// ReasonPageChanged starts the error (ErrPageChanged) of a batch whose page
// changed before it could be fetched again.
const ReasonPageChanged = "page_changed"

// batchDigest names a batch's set of recipient ids, in any order: a page
// reordered within a batch still holds the batch.
func batchDigest(rs []fanout.Recipient) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	slices.Sort(ids)
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func nonRetryableIfPermanent(err error) error {
	if fanout.IsPermanent(err) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrPermanent, err)
	}
	return err
}

// eventKey names the event in Redis keys: type and id (vocab.EventKey), so
// events of two types that share an id never share a key.
func eventKey(ev fanout.Event) string { return vocab.EventKey(ev.Type, ev.ID) }

// DeliverBatchInput is one batch of recipients to deliver.
//
// What an attempt uses comes from one of two sources, never both for one
// setting. The input, recorded in the history by the workflow, holds what
// the event decided: the recipients, the message, the priority, MaxAttempts,
// Concurrency and the rate cap's share, so every attempt and a replay see
// the same. The worker's registry, read once per attempt (batch.open), holds
// how this worker calls: the handler, Semantics, CallTimeout, DestinationRate
// and the breaker settings, so a type's fix reaches running batches at their
// next attempt.
type DeliverBatchInput struct {
	Event     fanout.Event
	Priority  fanout.Priority
	AttemptID string
	// Recipients of the batch (at most fanout.MaxBatchSize), or Ref to the
	// batch staged in Redis by the page activity.
	Recipients []fanout.Recipient
	Ref        *BatchRef `json:",omitempty"`
	Message    fanout.Message
	// MaxAttempts: a recipient that failed this many times (counted per
	// recipient across activity retries) is dead-lettered.
	MaxAttempts int
	Concurrency int
	// Redrive re-delivers recipients this attempt id dead-lettered; Round
	// names the redrive so its attempts are counted afresh. Both are left
	// out of the JSON when zero, as they always were in the DeliveryBatch
	// workflow's input, which embeds this one.
	Redrive bool   `json:",omitempty"`
	Round   string `json:",omitempty"`
	// Resend delivers the recipients again even when the event delivered
	// them (starter resend; its own attempt id, vocab.ResendAttemptID):
	// recipients without an address are looked up in the event's source
	// (resend.go). Left out of the JSON when false.
	Resend bool `json:",omitempty"`
	// Rate, when positive, paces the batch's deliveries to at most Rate
	// per second: its share of the event's rate cap (set-rate). PaceFrom
	// is where its schedule starts: the end of the previous batch's
	// schedule in the same lane, so the gap between them is made up (at
	// most MaxPaceCatchUp's worth), or when the batch was started. Both are
	// left out of the JSON when zero, so an uncapped batch's input is what
	// it always was.
	Rate     float64   `json:",omitzero"`
	PaceFrom time.Time `json:",omitzero"`
	// ExpiresAt is the event's expiry (zero: none). An attempt that starts
	// after it calls no one, and one that ends after it is not retried:
	// the recipients it leaves undelivered are counted Expired, neither
	// failed nor dead-lettered. An attempt running when it passes finishes.
	ExpiresAt time.Time `json:",omitzero"`
	// semantics is the type's delivery guarantee for this attempt (set by
	// DeliverBatch from the registry; see semantics.go).
	semantics fanout.Semantics
	// obs are the batch's metric options per delivery (set by deliverAll).
	obs *deliverObs
	// callTimeout is the type's CallTimeout on this worker (set by
	// DeliverBatch from the registry): the attempt yields that long (and
	// fanout.CallSlack) before its deadline.
	callTimeout time.Duration
	// gate is the attempt's gate (set by DeliverBatch: batchgate.go).
	gate batchGate
	// live are the type's options in this worker's registry (set by
	// DeliverBatch), for the settings read live.
	live fanout.TypeOptions
}

// Failure is a recipient that was not delivered.
type Failure struct {
	Recipient fanout.Recipient
	Attempts  int
	Permanent bool
	Error     string
}

// DeliverBatchResult counts the batch's outcomes; every recipient is in
// exactly one of Delivered, Duplicates and Failed. DeadLettered counts the
// Failed ones that are in the deliveries DLQ; Unconfirmed the Failed ones
// an at-most-once batch gave up because a crash interrupted their call.
type DeliverBatchResult struct {
	Delivered    int
	Duplicates   int
	Failed       int
	DeadLettered int
	Unconfirmed  int `json:",omitempty"`
	// Expired counts the recipients left undelivered because the event
	// expired (DeliverBatchInput.ExpiresAt): neither failed nor
	// dead-lettered.
	Expired int `json:",omitempty"`
	// Braked counts the deliveries of a low-priority batch the brake held
	// to its rate while other priorities delivered (brake.go).
	Braked int `json:",omitempty"`
	// Failures details the first fanout.MaxFailureDetails of the Failed
	// recipients (every one is in the deliveries DLQ when it is set; the
	// batch's log line names the attempt id).
	Failures []Failure
	// Destinations are the busiest destinations' throttling and breakers
	// (at most MaxDestinationStats; see destinations.go).
	Destinations []DestinationStat `json:",omitempty"`
	// Queued is how long the batch's attempt waited in its task queue for
	// a worker, and Ran how long it ran; both 0 when a retry finished the
	// batch. The event's workflow keeps fewer batches queued while they
	// wait longer than they run (workflows, the adaptive window).
	Queued time.Duration `json:",omitempty"`
	Ran    time.Duration `json:",omitempty"`
}

// deliverProgress is the heartbeat detail of DeliverBatch.
type deliverProgress struct {
	Done  int
	Total int
	// Destinations: the busiest throttled or broken destinations so far
	// (destinations.go; a retry goes on from them).
	Destinations []DestinationStat `json:",omitempty"`
	// PaceDue is when the next delivery of an attempt that yielded to its
	// rate cap (PaceAttempt) was due: the next attempt, which waited until
	// then, goes on with that schedule (resumeFrom).
	PaceDue     time.Time `json:",omitzero"`
	PaceAttempt int32     `json:",omitempty"`
	// DeadLettered: recipients given up and published to the deliveries
	// DLQ so far, once the deliveries are done.
	DeadLettered int `json:",omitempty"`
}

// lastProgress is the last heartbeat of the attempts before this one
// (none: zero).
func lastProgress(ctx context.Context) deliverProgress {
	var p deliverProgress
	if activity.HasHeartbeatDetails(ctx) && activity.GetHeartbeatDetails(ctx, &p) != nil {
		return deliverProgress{}
	}
	return p
}

// leftOver is what an attempt left to the next: n recipients, the first of
// them due at due when a rate (the cap, a destination's limit) held them
// past the attempt's deadline (zero: at once).
type leftOver struct {
	n   int
	due time.Time
}

// retryDelay is when the next attempt goes on with what was left: when it
// is due, so a rate slower than one call per attempt waits on Temporal's
// timer instead of coming back to yield again (at least minLeftRetry).
func (l leftOver) retryDelay(now time.Time) time.Duration {
	return max(minLeftRetry, l.due.Sub(now))
}

// minLeftRetry is how soon an attempt that left recipients is retried.
const minLeftRetry = 100 * time.Millisecond

type outcome struct {
	r          fanout.Recipient
	err        error
	retryAfter time.Duration
	// failures counts the recipient's failed tries (set by countFailures).
	failures int
}

// DeliverBatch delivers the message to a batch of recipients: the gate
// decides per recipient (one Redis pipeline for the batch), deliveries run
// concurrently up to Concurrency, each success is marked delivered at once.
// Transient failures make the activity retry after a jittered backoff (or
// the destination's Retry-After); a retry presents the same attempt id, so
// what was delivered is skipped and what was in flight is delivered again.
// Permanent failures, and recipients that failed MaxAttempts times, go to
// the deliveries DLQ and are not tried again (until a redrive).
func (a *Activities) DeliverBatch(ctx context.Context, in DeliverBatchInput) (DeliverBatchResult, error) {
	if sh := shareOf(ctx, in.Event); !sh.large {
		a.Yields.Signal(in.Priority, sh.key) // from its start: the others yield (yield.go)
	}
	b := &batch{a: a, ctx: ctx, in: in}
	for _, step := range []func() error{b.open, b.admit, b.deliver, b.settle, b.deadLetter} {
		if err := step(); err != nil {
			return DeliverBatchResult{}, err
		}
	}
	return b.finish()
}

// batch is one attempt of DeliverBatch; its steps fill it in, in order.
type batch struct {
	a   *Activities
	ctx context.Context
	h   fanout.Handler
	// in carries the attempt's gate, semantics and call timeout (open).
	in  DeliverBatchInput
	res DeliverBatchResult

	todo     []fanout.Recipient // admitted: to call
	rejected []Failure          // ids outside the grammar: given up, never called
	outcomes []outcome          // of the calls made
	left     leftOver           // not tried: the next attempt's
	giveUp   []Failure          // to the deliveries DLQ
	retry    []outcome          // failed transiently: the next attempt's
	notFound []Failure          // a resend's recipients its source no longer lists
}

// open resolves the batch's type on this worker (its handler, semantics,
// call timeout and gate), refuses a message the transport would refuse,
// and loads the recipients (staged in Redis, or paged again).
func (b *batch) open() error {
	a := b.a
	h, opts, err := a.handler(b.in.Event.Type)
	if err != nil {
		return err
	}
	if err := invalidMessage(b.in.Message); err != nil {
		return err
	}
	if b.ctx, err = a.useSemantics(b.ctx, &b.in, opts); err != nil {
		return err
	}
	b.h, b.in.live, b.in.callTimeout, b.in.gate = h, opts, opts.CallTimeout, a.attemptGate(b.in)
	b.in.Recipients, err = a.loadBatch(b.ctx, h, b.in)
	if err == nil && b.in.Resend {
		b.in.Recipients, b.notFound, err = a.resendRecipients(b.ctx, h, opts, b.in)
	}
	return err
}

// admit asks the gate which recipients to call.
func (b *batch) admit() (err error) {
	b.todo, b.rejected, b.res, err = b.a.admit(b.ctx, b.in)
	b.res.addGivenUp(b.notFound, false) // failed, not dead-lettered: nothing to deliver them to
	return err
}

// deliver calls them (deliverAll); an attempt that starts after the
// event's expiry calls no one and leaves them all (finish counts them
// expired).
func (b *batch) deliver() error {
	if b.in.expired(time.Now()) {
		b.left = leftOver{n: len(b.todo)}
		return nil
	}
	var err error
	b.outcomes, b.left, b.res.Destinations, b.res.Braked, err = b.a.deliverAll(b.ctx, b.h, b.in, b.todo, len(b.in.Recipients)-len(b.todo))
	return err
}

// settle counts the outcomes and splits the failures into those given up
// (permanent, at MaxAttempts, at most once not provably unsent) and those
// to retry.
func (b *batch) settle() error {
	failed := b.res.addDelivered(b.outcomes)
	if err := b.a.countFailures(b.ctx, b.in, failed); err != nil {
		return err
	}
	failed, spent, err := b.a.atMostOnceFailures(b.ctx, b.in, failed)
	if err != nil {
		return err
	}
	giveUp, retry := settle(failed, max(b.in.MaxAttempts, 1))
	b.giveUp, b.retry = append(append(b.rejected, giveUp...), spent...), retry
	return nil
}

// deadLetter publishes the given-up recipients to the deliveries DLQ.
func (b *batch) deadLetter() error {
	if err := b.a.deadLetter(b.ctx, b.in, b.giveUp, b.res.Destinations); err != nil {
		return err
	}
	b.res.addGivenUp(b.giveUp, b.a.DeadLetters != nil)
	return nil
}

// finish ends the attempt: a retry of the transient failures, or of what
// was left to the next attempt, else the result.
func (b *batch) finish() (DeliverBatchResult, error) {
	a, ctx, in, res := b.a, b.ctx, b.in, b.res
	if n := len(b.retry) + b.left.n; n > 0 && in.expired(time.Now()) {
		// No retry after the event's expiry: what is left is expired.
		res.Expired = n
		a.dropStaged(ctx, in.Ref)
		return res, nil
	}
	if len(b.retry) > 0 {
		observeRetried(ctx, in, len(b.retry))
		return DeliverBatchResult{}, a.retryError(in, b.retry)
	}
	if b.left.n > 0 {
		// Paced, throttled or slow past the attempt's deadline: the next
		// attempt presents the same attempt id, skips what this one
		// delivered and goes on, when its next delivery is due.
		return DeliverBatchResult{}, temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("%s: %d of %d recipients left to the next attempt", leftWhy(in, res.Destinations), b.left.n, len(in.Recipients)),
			// Benign: expected under normal operation, so the SDK logs it
			// at debug, not as an activity error, and counts no failure.
			ErrDeliveryRetry, temporal.ApplicationErrorOptions{NextRetryDelay: b.left.retryDelay(time.Now()), Category: temporal.ApplicationErrorCategoryBenign})
	}
	if len(b.giveUp) > 0 && a.Logger != nil {
		a.Logger.WarnContext(ctx, "batch finished with dead letters", "event", in.Event.ID, "attempt_id", in.AttemptID, "failed", res.Failed)
	}
	a.dropStaged(ctx, in.Ref)
	if info := activity.GetInfo(ctx); info.Attempt == 1 && !info.IsLocalActivity {
		res.Queued, res.Ran = info.StartedTime.Sub(info.ScheduledTime), time.Since(info.StartedTime)
	}
	return res, nil
}

// expired reports whether the event of the batch has expired at now.
func (in DeliverBatchInput) expired(now time.Time) bool {
	return !in.ExpiresAt.IsZero() && !now.Before(in.ExpiresAt)
}

// admit screens the batch and asks the gate for each recipient's verdict
// (one pipeline for the batch). It returns the recipients to deliver, the
// ones rejected for an id outside fanout's grammar (to be dead-lettered, never
// delivered), and the others counted in the result: a recipient whose id
// appears again in the batch is a duplicate. Without a gate every valid
// recipient is delivered.
func (a *Activities) admit(ctx context.Context, in DeliverBatchInput) (todo []fanout.Recipient, rejected []Failure, res DeliverBatchResult, err error) {
	cands, invalid, dups := screen(in.Recipients)
	res.Duplicates = dups
	ids := make([]string, len(cands))
	for i, r := range cands {
		ids[i] = r.ID
	}
	verdicts, err := in.gate.acquire(ctx, ids, in.Redrive)
	if err != nil {
		// Redis is unreachable: never deliver without the gate; retry.
		return nil, nil, res, err
	}
	todo = make([]fanout.Recipient, 0, len(cands))
	var unconfirmed []fanout.Recipient
	for i, v := range verdicts {
		if v == gate.Unconfirmed && !in.atMostOnce() {
			v = gate.Redeliver // at least once, an interrupted call is made again
		}
		switch v {
		case gate.Deliver, gate.Redeliver:
			if why, bad := invalid[cands[i].ID]; bad {
				rejected = append(rejected, Failure{Recipient: cands[i], Permanent: true, Error: why})
				continue
			}
			todo = append(todo, cands[i])
		case gate.DeliveredByUs:
			res.Delivered++
		case gate.Duplicate:
			res.Duplicates++
		case gate.DeadLetteredByUs:
			res.Failed++
			res.DeadLettered++
		case gate.Unconfirmed:
			unconfirmed = append(unconfirmed, cands[i])
		case gate.UnconfirmedByUs:
			res.Failed++
			res.DeadLettered++
			res.Unconfirmed++
		}
	}
	if err := a.giveUpUnconfirmed(ctx, in, unconfirmed, &res); err != nil {
		return nil, nil, res, err
	}
	return todo, rejected, res, nil
}

// Reasons a recipient is rejected without a delivery attempt; they start
// its error in the batch result and the deliveries DLQ.
const (
	ReasonInvalidRecipientID      = "invalid_recipient_id"
	ReasonInvalidRecipientAddress = "invalid_recipient_address"
)

// screen drops the repeats of a recipient id within the batch (counted as
// duplicates: they would present the same attempt id to the gate and be
// delivered twice) and gives each recipient whose id is outside fanout's
// grammar a stand-in id ("invalid-" and a hash of the id) under which the
// gate and the deliveries DLQ know it; invalid maps those stand-ins to the
// reason. The stand-in keeps the recipient out of every key built from ids.
func screen(rs []fanout.Recipient) (cands []fanout.Recipient, invalid map[string]string, dups int) {
	seen := make(map[string]struct{}, len(rs))
	cands = make([]fanout.Recipient, 0, len(rs))
	for _, r := range rs {
		why := ""
		if err := fanout.ValidateID(r.ID); err != nil {
			why = fmt.Sprintf("%s: %v (id %.64q)", ReasonInvalidRecipientID, err, r.ID)
		} else if len(r.Address) > fanout.MaxAddressLen {
			why = fmt.Sprintf("%s: address of %d bytes is over %d", ReasonInvalidRecipientAddress, len(r.Address), fanout.MaxAddressLen)
		}
		if why != "" {
			// A stand-in id, the same for every listing of this id: the id
			// may be unusable in keys, or the address would make a dead
			// letter too large.
			sum := sha256.Sum256([]byte(r.ID))
			standIn := "invalid-" + hex.EncodeToString(sum[:16])
			if invalid == nil {
				invalid = map[string]string{}
			}
			invalid[standIn] = why
			r = fanout.Recipient{ID: standIn, Address: clip(r.Address, 256)}
		}
		if _, again := seen[r.ID]; again {
			dups++
			continue
		}
		seen[r.ID] = struct{}{}
		cands = append(cands, r)
	}
	return cands, invalid, dups
}

// clip cuts s to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// addDelivered counts the delivered outcomes and returns the failed ones.
func (r *DeliverBatchResult) addDelivered(outcomes []outcome) []outcome {
	var failed []outcome
	for _, o := range outcomes {
		if o.err == nil {
			r.Delivered++
		} else if errors.Is(o.err, errNotCalled) {
			r.Duplicates++
		} else {
			failed = append(failed, o)
		}
	}
	return failed
}

// countFailures sets each failed outcome's failure count: counted per
// recipient in Redis, so that retries and crashes do not reset them, or,
// without a gate, the activity's attempt.
func (a *Activities) countFailures(ctx context.Context, in DeliverBatchInput, failed []outcome) error {
	if len(failed) == 0 {
		return nil
	}
	ids := make([]string, len(failed))
	errs := make([]error, len(failed))
	for i, o := range failed {
		ids[i], errs[i] = o.r.ID, o.err
	}
	counts, err := in.gate.countFailures(ctx, in.Round, ids, errs)
	if err != nil {
		return err
	}
	for i := range failed {
		failed[i].failures = counts[i]
	}
	return nil
}

// settle splits the failed outcomes into the recipients given up (a
// permanent failure, or maxAttempts failures) and those to retry.
func settle(failed []outcome, maxAttempts int) (giveUp []Failure, retry []outcome) {
	for _, o := range failed {
		perm := fanout.IsPermanent(o.err)
		if perm || o.failures >= maxAttempts {
			giveUp = append(giveUp, Failure{Recipient: o.r, Attempts: o.failures, Permanent: perm, Error: o.err.Error()})
			continue
		}
		retry = append(retry, o)
	}
	return giveUp, retry
}

// addGivenUp counts the given-up recipients as failed, and as dead-lettered
// when they went to the deliveries DLQ (published); Failures keeps the
// first fanout.MaxFailureDetails of them.
func (r *DeliverBatchResult) addGivenUp(fs []Failure, published bool) {
	r.Failed += len(fs)
	r.Failures = append(r.Failures, fs[:min(len(fs), max(fanout.MaxFailureDetails-len(r.Failures), 0))]...)
	if published {
		r.DeadLettered += len(fs)
	}
}

// retryError is the error that makes the activity retry the recipients of
// retry: after the backoff of the highest failure count among them (the
// backoff grows with the recipients' own counts), or the longest
// Retry-After they were given.
func (a *Activities) retryError(in DeliverBatchInput, retry []outcome) error {
	pol := a.Backoff
	if pol.Initial == 0 {
		pol = DefaultBackoff
	}
	n, retryAfter := 0, time.Duration(0)
	for _, o := range retry {
		n, retryAfter = max(n, o.failures), max(retryAfter, o.retryAfter)
	}
	delay := pol.Delay(n, retryAfter, nil)
	return temporal.NewApplicationErrorWithOptions(
		fmt.Sprintf("%d of %d recipients failed transiently (first: %s); retrying in %v",
			len(retry), len(in.Recipients), retry[0].err, delay.Round(time.Millisecond)),
		ErrDeliveryRetry, temporal.ApplicationErrorOptions{NextRetryDelay: delay})
}

// dropStaged drops the staged copy of a finished batch (every recipient is
// delivered, a duplicate or dead-lettered); its TTL is the backstop.
func (a *Activities) dropStaged(ctx context.Context, ref *BatchRef) {
	if ref != nil && a.Staging != nil {
		_ = a.Staging.Drop(ctx, ref.Key)
	}
}

// yieldAt is when an attempt that started at start stops starting
// deliveries and leaves the rest of its batch to the next attempt, which
// begins at once and skips what this one delivered: a tenth of the
// attempt's time before its deadline, at least paceYieldMargin (at most
// half the attempt, so that every attempt delivers), and always at least
// a call's time (call, the type's CallTimeout, and fanout.CallSlack), so
// that the calls in flight end and are marked before it times out.
// Without it a batch slower than its timeout (DeliverTimeout: a large
// batch, a slow destination) would be cut off mid-call, and what it
// delivered but had not yet marked would be delivered again. (Type
// options keep a call under half DeliverTimeout; the fast path sizes its
// deadline for one.) false: ctx has no deadline.
func yieldAt(ctx context.Context, start time.Time, call time.Duration) (time.Time, bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Time{}, false
	}
	total := dl.Sub(start)
	spare := cmp.Or(call, fanout.DefaultCallTimeout) + fanout.CallSlack
	return dl.Add(-max(min(max(paceYieldMargin, total/10), total/2), spare)), true
}

// feedContext is the context of a batch's feed (its waits for the pace,
// the brake and its destinations' limits): they keep paceYieldMargin
// before its deadline, so it ends that long after the yield, and a wait
// never lets a call start after it.
func feedContext(ctx context.Context, yield time.Time, hasDeadline bool) (context.Context, context.CancelFunc) {
	if !hasDeadline {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, yield.Add(paceYieldMargin))
}

// deadLetter publishes the given-up recipients to the deliveries DLQ chunk
// by chunk, marking each chunk in the gate once it is published (so retries
// of this batch skip it) and heartbeating (dests: the batch's destination
// stats, which the heartbeat keeps for a retry).
func (a *Activities) deadLetter(ctx context.Context, in DeliverBatchInput, fs []Failure, dests []DestinationStat) error {
	published := 0
	return a.publishDeadLetters(ctx, in, fs, func(chunk []Failure) error {
		ids := make([]string, len(chunk))
		for i, f := range chunk {
			ids[i] = f.Recipient.ID
		}
		if err := in.gate.markDeadLettered(ctx, ids...); err != nil {
			return err
		}
		published += len(chunk)
		activity.RecordHeartbeat(ctx, deliverProgress{Done: len(in.Recipients), Total: len(in.Recipients), DeadLettered: published, Destinations: dests})
		return nil
	})
}

// DeadLetterBatchInput names a batch that ended in error, and why.
type DeadLetterBatchInput struct {
	Batch  DeliverBatchInput
	Reason string
}

// DeadLetterBatch writes every recipient of a batch that ended in error
// (its child failed to start, was terminated or timed out, or its activity
// failed for good) to the deliveries DLQ with the reason, so that no
// recipient is only counted: a redrive presents the batch's attempt id to
// the gate, so what the batch delivered before it failed is skipped. It
// publishes in chunks, heartbeating how many it published, and a retry goes
// on from there. It does not touch the gate's marks. It returns how many it
// dead-lettered (0 without a DLQ).
func (a *Activities) DeadLetterBatch(ctx context.Context, in DeadLetterBatchInput) (int, error) {
	if a.DeadLetters == nil {
		return 0, nil
	}
	b := in.Batch
	if b.Ref != nil {
		// The batch's type may be what failed it: fetch the page again only
		// if its handler is there.
		h, _, _ := a.Registry.Lookup(b.Event.Type)
		var err error
		if b.Recipients, err = a.loadBatch(ctx, h, b); err != nil {
			return 0, err
		}
	}
	recips, invalid, _ := screen(b.Recipients)
	fs := make([]Failure, len(recips))
	for i, r := range recips {
		fs[i] = Failure{Recipient: r, Error: clip("batch_failed: "+in.Reason, maxLastError)}
		if why, bad := invalid[r.ID]; bad {
			fs[i].Permanent, fs[i].Error = true, why
		}
	}
	// The chunks are the same in every attempt: skip those an earlier
	// attempt published (its last heartbeat).
	published := 0
	if activity.HasHeartbeatDetails(ctx) && activity.GetHeartbeatDetails(ctx, &published) == nil {
		published = min(max(published, 0), len(fs))
	}
	err := a.publishDeadLetters(ctx, b, fs[published:], func(chunk []Failure) error {
		published += len(chunk)
		activity.RecordHeartbeat(ctx, published)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(fs), nil
}

// maxLastError bounds a dead letter's last error.
const maxLastError = 1024

// publishDeadLetters writes the failures of batch in to the deliveries DLQ
// (nothing without one), DeadLetterChunk letters at a time: the first
// letter of each chunk carries the message and the event's headers, the
// others are written without them (MessageOmitted; a redrive takes the
// message from the chunk's first). So the memory it takes grows neither
// with the batch nor with the message times the recipients. After each
// chunk the broker acknowledged (each chunk, without a DLQ), it calls
// published with the chunk.
func (a *Activities) publishDeadLetters(ctx context.Context, in DeliverBatchInput, fs []Failure, published func([]Failure) error) error {
	now := time.Now().UTC()
	ev := deadLetterEvent(in.Event)
	var dls []DeadLetter
	for chunk := range slices.Chunk(fs, DeadLetterChunk) {
		if a.DeadLetters != nil {
			dls = dls[:0]
			for i, f := range chunk {
				d := DeadLetter{
					EventID: in.Event.ID, EventType: in.Event.Type, Priority: in.Priority, AttemptID: in.AttemptID,
					Recipient: f.Recipient, Attempts: f.Attempts, Permanent: f.Permanent, LastError: clip(f.Error, maxLastError),
					Time: now, Event: ev, Message: in.Message,
				}
				if i > 0 {
					d = d.withoutMessage()
				}
				dls = append(dls, d)
			}
			if err := a.DeadLetters.Publish(ctx, dls); err != nil {
				return err
			}
		}
		if err := published(chunk); err != nil {
			return err
		}
	}
	return nil
}

// deadLetterEvent is the event as a dead letter keeps it: without the
// payload (get_recipients and generate_broadcast_message are done with it;
// a redrive delivers the kept message), so a dead letter stays within
// Kafka's record size (the message is bounded by fanout.MaxMessageBytes).
func deadLetterEvent(ev fanout.Event) fanout.Event {
	ev.Payload = nil
	return ev
}

// IsDeliveryRetry reports whether err is DeliverBatch asking to be retried.
func IsDeliveryRetry(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == ErrDeliveryRetry
}
