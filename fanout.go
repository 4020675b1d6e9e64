// Package fanout is the public API of the fanout service: the event, the
// three functions a user defines per event type (get_recipients,
// generate_broadcast_message, deliver_to_recipient), the registry that maps
// event types to them and their options, and the errors that steer retries.
//
// A user's own worker binary registers its handlers in a Registry and runs
// the same workers as the stock binary (see package workers); the names the
// workflows are known by (task queues, workflow ids, search attributes) are
// in package workflows/vocab.
package fanout

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Event is one event taken from Kafka: the unit of fan-out.
type Event struct {
	// ID identifies the event; the Fanout workflow id derives from it, so a
	// second delivery of the same event never starts a second fan-out.
	ID string `json:"id"`
	// Type selects the handlers (see Registry).
	Type string `json:"type"`
	// Priority selects the delivery task queue: high, normal or low. Empty
	// means the event type's default.
	Priority Priority `json:"priority,omitempty"`
	// Payload is opaque to fanout; handlers interpret it.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Headers carries optional metadata, such as W3C trace context.
	Headers map[string]string `json:"headers,omitempty"`
	// DeliverAt schedules the event (RFC 3339 on the topic): its fan-out
	// waits on a durable timer until then. Zero or past: now.
	DeliverAt time.Time `json:"deliver_at,omitzero"`
	// Delay schedules the event this long after it was published (a Go
	// duration: "90s", "2h"; not with DeliverAt). The bridge resolves it
	// into DeliverAt from the Kafka record's timestamp; an event started
	// otherwise (a Temporal Schedule's input) waits from its start.
	Delay string `json:"delay,omitempty"`
	// Tenant optionally names who sent the event (ValidateTenant's
	// grammar). Events of one tenant share one fairness key on the task
	// queues, so one sender publishing many events gets the share of one;
	// without it every event has its own key (vocab.FairnessKey).
	Tenant string `json:"tenant,omitempty"`
	// Canary holds the event back after its first recipients: see Canary.
	// Set, it replaces the type's (TypeOptions.CanaryRecipients and
	// CanaryMaxFailureRatio); {"recipients": 0} turns the type's off for
	// this event.
	Canary *Canary `json:"canary,omitempty"`
	// ExpiresAt (RFC 3339 on the topic) is when the event stops being worth
	// delivering: batches that would start after it are not delivered, and
	// their recipients are counted expired (not failed, not dead-lettered).
	// Zero: the type's TTL from when the event is due, or never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Canary is an event's trial delivery: the first batches of the event,
// together at least Recipients, are delivered and awaited; the event goes
// on only if the share of those recipients that failed (given up:
// permanent failures at once, transient ones after MaxAttempts) is at most
// MaxFailureRatio of those settled (delivered or failed). Otherwise it
// pauses itself with the reason, and an operator's resume continues it.
type Canary struct {
	// Recipients is the canary's size (0: no canary). The canary is made
	// of whole batches: with BatchSize at most Recipients it is about
	// Recipients.
	Recipients int `json:"recipients"`
	// MaxFailureRatio is the highest failure ratio the event goes on with,
	// from 0 up to (not including) 1. 0: DefaultCanaryMaxFailureRatio.
	MaxFailureRatio float64 `json:"max_failure_ratio,omitempty"`
}

// Bounds of a canary and of an event's lifetime.
const (
	// MaxCanaryRecipients bounds Canary.Recipients: the event waits for
	// the canary's batches to finish before it goes on.
	MaxCanaryRecipients = 1_000_000
	// DefaultCanaryMaxFailureRatio is the ratio of a canary that names
	// none: more than one recipient in ten failed pauses the event.
	DefaultCanaryMaxFailureRatio = 0.1
	// MaxTTL bounds TypeOptions.TTL, and how far an event's expires_at may
	// be after the time it is due.
	MaxTTL = 30 * 24 * time.Hour
)

// Validate reports what is wrong with c, naming the field as the envelope
// does.
func (c Canary) Validate() error {
	switch {
	case c.Recipients < 0 || c.Recipients > MaxCanaryRecipients:
		return fmt.Errorf("recipients: %d outside 0..%d", c.Recipients, MaxCanaryRecipients)
	case !(c.MaxFailureRatio >= 0 && c.MaxFailureRatio < 1): // NaN too
		return fmt.Errorf("max_failure_ratio: %v outside 0 (the default, %v) up to 1 (not included)", c.MaxFailureRatio, DefaultCanaryMaxFailureRatio)
	}
	return nil
}

// CanaryOf is the canary of event ev of a type with options o: the
// event's own when it has one, else the type's; the ratio's default
// resolved.
func CanaryOf(ev Event, o TypeOptions) Canary {
	c := Canary{Recipients: o.CanaryRecipients, MaxFailureRatio: o.CanaryMaxFailureRatio}
	if ev.Canary != nil {
		c = *ev.Canary
	}
	if c.MaxFailureRatio <= 0 {
		c.MaxFailureRatio = DefaultCanaryMaxFailureRatio
	}
	return c
}

// Recipient is one destination of an event's message.
type Recipient struct {
	// ID is unique within an event's audience; the dedup gate keys on it.
	ID string `json:"id"`
	// Address is where to deliver (a URL, an e-mail address, a device token);
	// its meaning belongs to the event type's Deliver function.
	Address string `json:"address,omitempty"`
}

// Page is one page of an event's audience.
type Page struct {
	Recipients []Recipient `json:"recipients"`
	// NextCursor is the opaque cursor of the following page; empty means the
	// audience is exhausted.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Message is what is broadcast to every recipient of an event.
type Message struct {
	ContentType string `json:"content_type,omitempty"`
	Body        []byte `json:"body"`
}

// Validate reports what makes m unsendable: a content type with a control
// byte (0x00-0x1f, 0x7f; tab included). net/http refuses such a header
// value, and mime.ParseMediaType accepts one in a quoted parameter, so the
// message is refused when it is built (invalid_message) rather than have
// every delivery fail.
func (m Message) Validate() error {
	for i := 0; i < len(m.ContentType); i++ {
		if c := m.ContentType[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("content type %.64q has a control byte at %d", m.ContentType, i)
		}
	}
	return nil
}

// Handler holds the three user functions of one event type.
//
// GetRecipients returns the page at cursor ("" is the first page) with at
// most limit recipients. It is called from an activity and may be slow; it
// must be deterministic enough that the same cursor yields the same page.
//
// GenerateMessage builds the broadcast message once per event.
//
// Deliver delivers the message to one recipient. A nil error means delivered.
// The event it receives carries the id, type, priority and headers, and may
// lack the payload (batches do not always copy it): put what delivery needs
// in the message.
// Return Permanent(err) for a failure that retrying cannot fix, and
// RetryAfter(d, err) when the destination asked to be retried later; any
// other error is retried with backoff and jitter.
type Handler interface {
	GetRecipients(ctx context.Context, ev Event, cursor string, limit int) (Page, error)
	GenerateMessage(ctx context.Context, ev Event) (Message, error)
	Deliver(ctx context.Context, ev Event, r Recipient, m Message) error
}

// RecipientLookup is an optional interface of a Handler whose source can
// find recipients by id: a resend (starter resend) asks it for the
// addresses of the recipients it delivers again, instead of paging the
// whole audience. It returns the recipients of ids it finds (at most one
// per id; the others are left out), for the event ev.
type RecipientLookup interface {
	LookupRecipients(ctx context.Context, ev Event, ids []string) ([]Recipient, error)
}

// HandlerFuncs adapts three plain functions to a Handler.
type HandlerFuncs struct {
	GetRecipientsFunc   func(ctx context.Context, ev Event, cursor string, limit int) (Page, error)
	GenerateMessageFunc func(ctx context.Context, ev Event) (Message, error)
	DeliverFunc         func(ctx context.Context, ev Event, r Recipient, m Message) error
}

func (h HandlerFuncs) GetRecipients(ctx context.Context, ev Event, cursor string, limit int) (Page, error) {
	return h.GetRecipientsFunc(ctx, ev, cursor, limit)
}

func (h HandlerFuncs) GenerateMessage(ctx context.Context, ev Event) (Message, error) {
	return h.GenerateMessageFunc(ctx, ev)
}

func (h HandlerFuncs) Deliver(ctx context.Context, ev Event, r Recipient, m Message) error {
	return h.DeliverFunc(ctx, ev, r, m)
}

// Priority is an event's delivery priority.
type Priority string

const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Priorities lists the known priorities, highest first.
var Priorities = []Priority{PriorityHigh, PriorityNormal, PriorityLow}

// Valid reports whether p is a known priority.
func (p Priority) Valid() bool { return slices.Contains(Priorities, p) }

// ParsePriority parses a priority name.
func ParsePriority(s string) (Priority, error) {
	p := Priority(s)
	if !p.Valid() {
		return "", fmt.Errorf("unknown priority %q (want one of high, normal, low)", s)
	}
	return p, nil
}

// TypeOptions tune how events of one type are fanned out. Zero fields take
// the defaults below.
type TypeOptions struct {
	// DefaultPriority applies to events that carry none. Default normal.
	DefaultPriority Priority `json:"default_priority,omitempty"`
	// BatchSize is the number of recipients per DeliveryBatch child.
	BatchSize int `json:"batch_size,omitempty"`
	// PageSize is the number of recipients asked of GetRecipients per call.
	// Default: 10 batches, at most MaxPageSize (each page is an activity and
	// a workflow task: fewer, larger pages cost Temporal less per recipient).
	PageSize int `json:"page_size,omitempty"`
	// Window is the number of DeliveryBatch children open at once.
	Window int `json:"window,omitempty"`
	// DeliverConcurrency is the number of concurrent Deliver calls inside one
	// batch activity while other batches wait for the worker's calls; a
	// batch uses more of the worker's budget when no other batch waits
	// (the calls in flight stay within the budget; per-destination limits
	// and breakers still apply to each call).
	DeliverConcurrency int `json:"deliver_concurrency,omitempty"`
	// MaxAttempts is the number of delivery attempts per recipient before it
	// is reported failed.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// DeliverTimeout bounds one batch activity attempt.
	DeliverTimeout time.Duration `json:"deliver_timeout,omitempty"`
	// CallTimeout is the longest one Deliver call takes (the stock webhook
	// type's is its HTTP timeout, FANOUT_HTTP_TIMEOUT): a batch heartbeats
	// between calls, so its heartbeat timeout is CallTimeout + CallSlack,
	// and an attempt (the fast path's too) stops starting calls that long
	// before its deadline, so the calls it started end and are marked
	// before it. At most DeliverTimeout/2 - CallSlack (an attempt keeps
	// half its time to start calls). 0: DefaultCallTimeout. Deliver should
	// bound its calls by it.
	CallTimeout time.Duration `json:"call_timeout,omitempty"`
	// LocalDeliveryMax is the largest audience delivered on the fast path:
	// a local activity in the events worker, in the event's first workflow
	// task, tried once (a failure falls back to a DeliverBatch activity on
	// the priority's delivery queue). Such an event costs Temporal one
	// workflow task and no activity task. 0: DefaultLocalDeliveryMax;
	// negative: off (every batch runs on the delivery queues).
	//
	// Prepare resolves the default, not WithDefaults: the workflow decides
	// from Prepare's recorded result, so a later change of the default
	// does not change the path a recorded history replays down.
	LocalDeliveryMax int `json:"local_delivery_max,omitempty"`
	// LargeBatchSize is the batch size of an event's pages once it has
	// started Window batches: its audience fills the window, which caps
	// the batches in flight anyway, so bigger batches then cost Temporal
	// less per delivery (one child, one activity and a few workflow tasks
	// per batch) without costing parallelism; smaller events keep
	// BatchSize's. 0: PageSize (one batch per page); negative: BatchSize
	// (every batch the same size); at most MaxLargeBatchSize. Resolved by
	// Prepare, like LocalDeliveryMax, so histories replay with the size
	// they recorded.
	LargeBatchSize int `json:"large_batch_size,omitempty"`
	// MaxPages bounds the pages of one event, so a recipients endpoint that
	// hands out fresh cursors forever cannot keep an event running: the
	// event fails with too_many_pages after delivering what it found.
	// Default DefaultMaxPages.
	MaxPages int `json:"max_pages,omitempty"`
	// MaxRecipients, when set, fails an event whose audience grows past it
	// (too_many_recipients), after delivering what it found. 0: no cap.
	MaxRecipients int64 `json:"max_recipients,omitempty"`
	// Semantics is the delivery guarantee: AtLeastOnce (the default) or
	// AtMostOnce (see Semantics).
	Semantics Semantics `json:"semantics,omitempty"`
	// DestinationRate is the default limit, in calls per second, on each
	// destination of this type (see DestinationKeyer; the webhook type's
	// destination is the address's host), shared by every delivery worker.
	// 0: no limit. Operators change it per type and per destination at
	// run time without a restart (`starter limits`).
	DestinationRate float64 `json:"destination_rate,omitempty"`
	// BreakerFailures opens a destination's circuit breaker (per delivery
	// worker) after this many consecutive failed calls (5xx, 408, 429,
	// timeouts, connection errors; not a permanent answer): for
	// BreakerCooldown its deliveries are not called but fail at once as
	// transient (circuit_open, Retry-After the cooldown), so the rest of
	// the batch goes on, the batch retries them after the cooldown, and a
	// destination that stays down has them dead-lettered after
	// MaxAttempts. 0: DefaultBreakerFailures; negative: no breaker.
	BreakerFailures int `json:"breaker_failures,omitempty"`
	// BreakerCooldown is how long an open breaker waits before it lets one
	// trial call through. 0: DefaultBreakerCooldown.
	BreakerCooldown time.Duration `json:"breaker_cooldown,omitempty"`
	// FairnessWeight is this type's events' share of a task queue against
	// other events of the same priority, where the server dispatches fairly
	// (Temporal task-queue fairness): an event of weight 2 gets twice the
	// batches dispatched of an event of weight 1 while both wait. 0:
	// DefaultFairnessWeight; at most MaxFairnessWeight.
	FairnessWeight float64 `json:"fairness_weight,omitempty"`
	// CanaryRecipients gives every event of this type a canary of this
	// many recipients (see Canary; an event's own canary replaces it). 0:
	// none; at most MaxCanaryRecipients.
	CanaryRecipients int `json:"canary_recipients,omitempty"`
	// CanaryMaxFailureRatio is the failure ratio above which the canary
	// pauses the event, 0 up to 1. 0: DefaultCanaryMaxFailureRatio.
	CanaryMaxFailureRatio float64 `json:"canary_max_failure_ratio,omitempty"`
	// TTL expires the events of this type that carry no expires_at this
	// long after they are due (their deliver_at, or their start). 0: they
	// do not expire; at most MaxTTL.
	TTL time.Duration `json:"ttl,omitempty"`
}

// Bounds of TypeOptions.FairnessWeight.
const (
	DefaultFairnessWeight = 1.0
	MaxFairnessWeight     = 1000.0
)

// Semantics is an event type's delivery guarantee.
type Semantics string

const (
	// AtLeastOnce (the default): a recipient is marked delivered after its
	// call succeeds, so a crash mid-call repeats that call; nothing is lost.
	AtLeastOnce Semantics = "at-least-once"
	// AtMostOnce: the gate marks a recipient before its call, so a crash
	// mid-call loses that delivery but never repeats it, for destinations
	// where a duplicate is worse than a miss.
	AtMostOnce Semantics = "at-most-once"
)

// Valid reports whether s is a known delivery guarantee ("" is the default,
// AtLeastOnce).
func (s Semantics) Valid() bool { return s == "" || s == AtLeastOnce || s == AtMostOnce }

// DestinationKeyer is implemented by a Handler whose deliveries go to
// destinations that should be rate-limited and broken separately: the key
// names the destination (a host, a tenant, a provider account). Without
// it, every recipient of the type shares one key, the event type's.
type DestinationKeyer interface {
	DestinationKey(r Recipient) string
}

// MinRate is the slowest rate fanout accepts, in calls per second: one call
// an hour (a destination's limit, a type's DestinationRate, an event's
// set-rate; 0 is no limit). A rate slower than one call per batch attempt
// is kept by waiting: the batch's retry comes back when its next call is
// due, never sooner.
const MinRate = 1.0 / 3600

// Defaults for TypeOptions.
const (
	DefaultBatchSize          = 1000
	DefaultWindow             = 50
	DefaultDeliverConcurrency = 64
	// DefaultMaxAttempts is also the stock worker's (FANOUT_MAX_ATTEMPTS).
	DefaultMaxAttempts    = 8
	DefaultDeliverTimeout = 5 * time.Minute
	DefaultCallTimeout    = 10 * time.Second
	// CallSlack is what a batch needs beyond its longest call to mark it,
	// heartbeat and return (see CallTimeout).
	CallSlack               = 5 * time.Second
	DefaultLocalDeliveryMax = 100
	DefaultBreakerFailures  = 5
	DefaultBreakerCooldown  = 30 * time.Second
	// DefaultPageBatches is PageSize's default in batches.
	DefaultPageBatches = 10
	// DefaultMaxPages is 400,000,000 recipients at the default page size.
	DefaultMaxPages = 100_000
)

// MaxCallTimeout is the longest CallTimeout attempts of deliverTimeout
// (0: DefaultDeliverTimeout) allow: half the attempt less CallSlack.
func MaxCallTimeout(deliverTimeout time.Duration) time.Duration {
	return cmp.Or(deliverTimeout, DefaultDeliverTimeout)/2 - CallSlack
}

// LargeBatch is the batch size of an event's pages after the first (see
// LargeBatchSize): BatchSize when LargeBatchSize is not positive (options
// Prepare has not resolved).
func (o TypeOptions) LargeBatch() int {
	if o.LargeBatchSize <= 0 {
		return o.BatchSize
	}
	return o.LargeBatchSize
}

// ResolveLargeBatchSize is o with LargeBatchSize's default resolved (o has
// its defaults): Prepare records it for the workflow.
func (o TypeOptions) ResolveLargeBatchSize() TypeOptions {
	switch {
	case o.LargeBatchSize == 0:
		o.LargeBatchSize = max(min(o.PageSize, MaxLargeBatchSize), o.BatchSize)
	case o.LargeBatchSize < 0:
		o.LargeBatchSize = o.BatchSize
	}
	return o
}

// WithDefaults returns o with every zero field set to its default.
func (o TypeOptions) WithDefaults() TypeOptions {
	if o.DefaultPriority == "" {
		o.DefaultPriority = PriorityNormal
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.PageSize <= 0 {
		o.PageSize = min(DefaultPageBatches*o.BatchSize, MaxPageSize)
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.DeliverConcurrency <= 0 {
		o.DeliverConcurrency = DefaultDeliverConcurrency
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.DeliverTimeout <= 0 {
		o.DeliverTimeout = DefaultDeliverTimeout
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.MaxPages <= 0 {
		o.MaxPages = DefaultMaxPages
	}
	if o.FairnessWeight <= 0 {
		o.FairnessWeight = DefaultFairnessWeight
	}
	return o
}

// Validate reports the first invalid field of o, by name.
func (o TypeOptions) Validate() error {
	switch {
	case o.DefaultPriority != "" && !o.DefaultPriority.Valid():
		return fmt.Errorf("DefaultPriority: unknown priority %q", o.DefaultPriority)
	case o.BatchSize < 0 || o.BatchSize > MaxBatchSize:
		return fmt.Errorf("BatchSize: %d outside 1..%d", o.BatchSize, MaxBatchSize)
	case o.Window < 0 || o.Window > MaxWindow:
		return fmt.Errorf("Window: %d outside 1..%d", o.Window, MaxWindow) //nolint:staticcheck // ST1005: names the field TypeOptions.Window, as the other cases name theirs
	case o.PageSize < 0 || o.PageSize > MaxPageSize:
		return fmt.Errorf("PageSize: %d outside 1..%d", o.PageSize, MaxPageSize)
	case o.DeliverConcurrency < 0:
		return fmt.Errorf("DeliverConcurrency: %d is negative", o.DeliverConcurrency)
	case o.MaxAttempts < 0:
		return fmt.Errorf("MaxAttempts: %d is negative", o.MaxAttempts)
	case o.CallTimeout < 0:
		return fmt.Errorf("CallTimeout: %v is negative", o.CallTimeout)
	case cmp.Or(o.CallTimeout, DefaultCallTimeout) > MaxCallTimeout(o.DeliverTimeout):
		// The default too: an attempt shorter than twice a call and its
		// slack would yield before starting any.
		return fmt.Errorf("CallTimeout: %v is over %v: a batch heartbeats between calls and stops starting them a call's time before its attempt's deadline (DeliverTimeout %v), keeping half the attempt to start them",
			cmp.Or(o.CallTimeout, DefaultCallTimeout), MaxCallTimeout(o.DeliverTimeout), cmp.Or(o.DeliverTimeout, DefaultDeliverTimeout))
	case o.MaxPages < 0:
		return fmt.Errorf("MaxPages: %d is negative", o.MaxPages)
	case o.MaxRecipients < 0:
		return fmt.Errorf("MaxRecipients: %d is negative", o.MaxRecipients)
	case !o.Semantics.Valid():
		return fmt.Errorf("Semantics: unknown %q (want %s or %s)", o.Semantics, AtLeastOnce, AtMostOnce)
	case o.DestinationRate < 0 || o.DestinationRate > 0 && o.DestinationRate < MinRate:
		return fmt.Errorf("DestinationRate: %v is negative or under MinRate (one call an hour)", o.DestinationRate)
	case o.BreakerCooldown < 0:
		return fmt.Errorf("BreakerCooldown: %v is negative", o.BreakerCooldown)
	case !(o.FairnessWeight >= 0 && o.FairnessWeight <= MaxFairnessWeight): // NaN too
		return fmt.Errorf("FairnessWeight: %v outside 0..%v", o.FairnessWeight, MaxFairnessWeight)
	case o.CanaryRecipients < 0 || o.CanaryRecipients > MaxCanaryRecipients:
		return fmt.Errorf("CanaryRecipients: %d outside 0..%d", o.CanaryRecipients, MaxCanaryRecipients)
	case !(o.CanaryMaxFailureRatio >= 0 && o.CanaryMaxFailureRatio < 1): // NaN too
		return fmt.Errorf("CanaryMaxFailureRatio: %v outside 0 up to 1 (not included)", o.CanaryMaxFailureRatio)
	case o.TTL < 0 || o.TTL > MaxTTL:
		return fmt.Errorf("TTL: %v outside 0..%v", o.TTL, MaxTTL)
	case o.LocalDeliveryMax > MaxBatchSize:
		return fmt.Errorf("LocalDeliveryMax: %d is over %d", o.LocalDeliveryMax, MaxBatchSize)
	case o.LargeBatchSize > MaxLargeBatchSize:
		return fmt.Errorf("LargeBatchSize: %d is over %d", o.LargeBatchSize, MaxLargeBatchSize)
	case o.LargeBatchSize > 0 && o.LargeBatchSize < o.WithDefaults().BatchSize:
		return fmt.Errorf("LargeBatchSize: %d is under BatchSize %d", o.LargeBatchSize, o.WithDefaults().BatchSize)
	}
	// One page's batches land in one run's history before continue-as-new
	// is considered; keep that bounded.
	if d := o.WithDefaults(); d.PageSize > MaxBatchesPerPage*d.BatchSize {
		return fmt.Errorf("PageSize: %d is over %d batches of %d", d.PageSize, MaxBatchesPerPage, d.BatchSize)
	}
	return nil
}

// Limits that keep a run within Temporal's (2,000 pending children, 2 MB
// payloads).
const (
	MaxBatchSize = 5000
	MaxPageSize  = 20000
	// MaxLargeBatchSize bounds LargeBatchSize: a large batch is at most a
	// page. Its recipients ride in no payload: a page is staged in Redis
	// unless it is the event's last, one batch and under 256 KiB; a
	// batch's result lists at most MaxFailureDetails of its failures.
	MaxLargeBatchSize = MaxPageSize
	// MaxFailureDetails bounds the failures a batch's result lists (each
	// is in the deliveries DLQ; the result counts them all), so the
	// result of a batch whose every recipient failed stays far below
	// Temporal's 2 MB payloads.
	MaxFailureDetails = 100
	MaxWindow         = 500
	// MaxBatchesPerPage bounds PageSize/BatchSize.
	MaxBatchesPerPage = 100
	// MaxMessageBytes bounds a generated message (its content type and
	// body): it rides in every batch's input and every dead letter, well
	// under Temporal's 2 MB payloads and Kafka's 1 MiB records.
	MaxMessageBytes = 512 << 10
	// MaxAddressLen bounds a recipient's address.
	MaxAddressLen = 4096
	// MaxPageBytes bounds the ids and addresses of one recipients page,
	// whatever the handler (the webhook type also reads at most this many
	// bytes of a page). A larger page fails the event with page_too_large.
	MaxPageBytes = 8 << 20
	// MaxCursorLen bounds a page's next cursor: it is kept in the event's
	// workflow state and history.
	MaxCursorLen = 4096
)
