// Package starter is fanout's starting stage, the Kafka front door. Its
// Bridge consumes the events topic in a consumer group, validates each record
// (envelope.go), starts one Fanout workflow per event with the start options
// of StartOptions (the workflow id derives from the event's type and id, so
// redeliveries start nothing new; the Redis EventRecord covers the time after
// Temporal's retention), sends bad records to the events DLQ topic with their
// reason, and commits an offset only after the record's start was
// acknowledged, known to be a duplicate, or its dead letter was written.
//
// It also holds the other ways work is started: Publisher (events onto the
// events topic), RedriveDeliveries (DeliveryBatch workflows for dead letters)
// and RedriveEvents (the events DLQ back onto the events topic). The command
// is in cmd/starter.
package starter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/backoff"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// Kafka topics and consumer group used by default (FANOUT_EVENTS_TOPIC,
// FANOUT_EVENTS_DLQ_TOPIC, FANOUT_CONSUMER_GROUP).
const (
	DefaultEventsTopic    = "fanout-events"
	DefaultEventsDLQTopic = "fanout-events-dlq"
	DefaultConsumerGroup  = "fanout-bridge"
)

// DLQ record headers.
const (
	HeaderReason          = "fanout-dlq-reason"
	HeaderError           = "fanout-dlq-error"
	HeaderSourceTopic     = "fanout-source-topic"
	HeaderSourcePartition = "fanout-source-partition"
	HeaderSourceOffset    = "fanout-source-offset"
	HeaderDeadLetteredAt  = "fanout-dlq-time"
	// HeaderTruncated, when present, is the size of the original value,
	// of which the DLQ record keeps the first 512 KiB.
	HeaderTruncated = "fanout-dlq-truncated"
)

// Config configures a Bridge.
type Config struct {
	// Kafka is the brokers and how to connect to them (TLS, SASL): the
	// reader of the events topic and the events DLQ writer both use it.
	Kafka          KafkaConn
	Topic          string
	GroupID        string
	DLQTopic       string
	Validator      Validator
	CommitInterval time.Duration // 0: commit each record synchronously
	// Events is the Redis record of started events, so a replay after
	// Temporal's retention starts nothing; nil relies on Temporal's id
	// policies only.
	Events *EventRecord
	Logger *slog.Logger
	// TracerProvider and MeterProvider default to the global ones. Each
	// record gets a span, a child of the trace context in its headers; the
	// workflow is started within it, so Temporal's tracing interceptor (on
	// the client) carries the trace into the workflow.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Eager asks Temporal to hand each new workflow's first workflow task
	// straight back to this process (eager workflow start), skipping the
	// trip through matching. Set it when the client also runs an events
	// worker (the worker binary with FANOUT_BRIDGE=true); without a free
	// local worker the start is an ordinary one.
	Eager bool
	// Namespace is the Temporal namespace tc starts the workflows in
	// ("": "default"). The bridge reads its search attributes before it
	// consumes, and waits until it has fanout's (`starter setup`).
	Namespace string
	// Yields signals each event the bridge starts to every worker, so the
	// big events' batches behind its priority yield to it from its start
	// rather than from its Open (activities.Yields). Only an event that
	// names its priority and is not scheduled for later signals here (the
	// bridge does not know the types' default priorities); every event
	// signals at its Open. nil: no signals from the bridge.
	Yields *activities.Yields
}

// Stats are the bridge's counters.
type Stats struct {
	Started      atomic.Int64 // workflow starts acknowledged (new or already running)
	Duplicates   atomic.Int64 // events already fanned out (closed workflow, or the Redis event record)
	DeadLettered atomic.Int64
}

// Bridge consumes events and starts Fanout workflows.
type Bridge struct {
	cfg   Config
	tc    client.Client
	dlq   *kafka.Writer
	log   *slog.Logger
	inst  instruments
	Stats Stats

	namespace string
	setupTurn chan struct{} // awaitSetup's turn: one lane reads at a time
}

// New builds a bridge; Run starts consuming.
func New(cfg Config, tc client.Client) *Bridge {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Bridge{
		cfg:  cfg,
		tc:   tc,
		dlq:  kafkatopic.NewWriter(cfg.Kafka, cfg.DLQTopic),
		log:  log,
		inst: newInstruments(cfg.TracerProvider, cfg.MeterProvider),

		namespace: cmp.Or(cfg.Namespace, client.DefaultNamespace),
		setupTurn: make(chan struct{}, 1),
	}
}

// Run consumes until ctx is canceled, then finishes the records in hand,
// commits them and returns. The bridge is a member of the consumer group;
// each partition assigned to it has its own lane: its own reader (with its
// own bounded fetch queue) and one goroutine that handles its records in
// order and commits them. A partition whose records cannot be handled yet
// (Temporal hanging on its starts, the DLQ refusing its dead letters) so
// holds only its own fetches; the other partitions go on. It logs when it
// starts and, with its counts, when it stops.
//
// Before it joins the group it waits until the namespace has fanout's
// search attributes (awaitSetup), so a bridge started before `starter
// setup` consumes nothing until then; a start refused later for an
// attribute (the attributes removed, or not yet seen by every server) waits
// the same way, holding its record uncommitted, instead of dead-lettering
// it.
func (b *Bridge) Run(ctx context.Context) error {
	b.log.Info("bridge consuming", "brokers", b.cfg.Kafka.Brokers, "kafka_security", b.cfg.Kafka.Security(), "topic", b.cfg.Topic, "group", b.cfg.GroupID,
		"types", b.cfg.Validator.Types, "eager", b.cfg.Eager)
	// kafka-go retries a refused connection quietly: say it once here (a
	// wrong CA or password), then consume, retrying as before.
	if err := b.cfg.Kafka.Check(ctx); err != nil && ctx.Err() == nil {
		b.log.Error("cannot connect to Kafka as configured (FANOUT_KAFKA_*); the bridge keeps retrying", "err", err)
	}
	defer func() {
		b.log.Info("bridge stopped", "started", b.Stats.Started.Load(), "duplicates", b.Stats.Duplicates.Load(), "dead_lettered", b.Stats.DeadLettered.Load())
	}()
	// Every dead letter was written synchronously (acknowledged) before its
	// record was committed: closing the writer has nothing left to flush.
	defer func() { _ = b.dlq.Close() }()
	if _, err := b.awaitSetup(ctx); err != nil && ctx.Err() != nil {
		return nil
	}
	group, err := kafkatopic.NewConsumerGroup(b.cfg.Kafka, kafka.ConsumerGroupConfig{
		ID: b.cfg.GroupID, Topics: []string{b.cfg.Topic}, StartOffset: kafka.FirstOffset,
	})
	if err != nil {
		return fmt.Errorf("consumer group: %w", err)
	}
	// Closing the group ends the generation, which waits for its lanes to
	// finish their records in hand and commit them.
	defer func() {
		if err := group.Close(); err != nil {
			b.log.Warn("closing the consumer group", "group", b.cfg.GroupID, "err", err)
		}
	}()
	// work outlives ctx so records in hand are finished, not half-done.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	for {
		gen, err := group.Next(ctx)
		switch {
		case ctx.Err() != nil, errors.Is(err, kafka.ErrGroupClosed):
			return nil
		case err != nil:
			// kafka-go backs off before it tries to join again.
			b.log.Warn("cannot join the consumer group yet; retrying", "group", b.cfg.GroupID, "err", err)
			continue
		}
		for _, a := range gen.Assignments[b.cfg.Topic] {
			gen.Start(func(gctx context.Context) { b.lane(ctx, gctx, work, gen, a) })
		}
	}
}

// lane reads partition a from the offset its generation assigned and
// handles its records in order, committing as it goes. It returns when ctx
// (the bridge's) or gctx (the generation's: a rebalance) ends, after the
// record in hand, which is committed if it was handled; a record not
// handled yet is left uncommitted, to be redelivered.
func (b *Bridge) lane(ctx, gctx, work context.Context, gen *kafka.Generation, a kafka.PartitionAssignment) {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(gctx, cancel)()
	r := kafkatopic.NewReader(b.cfg.Kafka, kafka.ReaderConfig{
		Topic: b.cfg.Topic, Partition: a.ID, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 250 * time.Millisecond,
	})
	defer func() { _ = r.Close() }()
	if err := r.SetOffset(a.Offset); err != nil {
		b.log.Error("cannot read the partition; rejoining the group", "partition", a.ID, "err", err)
		return
	}
	c := laneCommits{b: b, gen: gen, partition: a.ID, next: -1}
	defer c.flush()
	for {
		fctx, stop := lctx, context.CancelFunc(func() {})
		if c.next >= 0 {
			// A commit is pending: wait for the next record no longer
			// than the commit interval.
			fctx, stop = context.WithTimeout(lctx, b.cfg.CommitInterval)
		}
		m, err := r.FetchMessage(fctx)
		stop()
		switch {
		case lctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			c.flush()
			continue
		case err != nil:
			b.log.Error("fetch failed; rejoining the group", "partition", a.ID, "err", err)
			return
		}
		if !b.handle(lctx, work, m) {
			return
		}
		c.handled(m)
	}
}

// laneCommits commits a lane's handled records: each at once with no
// CommitInterval, else at most once per interval and when the lane ends.
type laneCommits struct {
	b         *Bridge
	gen       *kafka.Generation
	partition int
	next      int64 // the offset after the last handled record; -1: nothing to commit
	last      time.Time
}

func (c *laneCommits) handled(m kafka.Message) {
	c.next = m.Offset + 1
	if c.b.cfg.CommitInterval <= 0 || time.Since(c.last) >= c.b.cfg.CommitInterval {
		c.flush()
	}
}

func (c *laneCommits) flush() {
	if c.next < 0 {
		return
	}
	if err := c.gen.CommitOffsets(map[string]map[int]int64{c.b.cfg.Topic: {c.partition: c.next}}); err != nil {
		// The records were handled; if the commit is lost (a rebalance
		// moved the partition), their redelivery is recognised as a
		// duplicate.
		c.b.log.Warn("commit failed", "partition", c.partition, "offset", c.next-1, "err", err)
	}
	c.next, c.last = -1, time.Now()
}

// handle processes one record. It retries the Temporal start and the DLQ
// write until they succeed or ctx (the lane's) is canceled; it reports
// whether the record was handled (on cancel it was not, and is left
// uncommitted, to be redelivered).
func (b *Bridge) handle(ctx, work context.Context, m kafka.Message) bool {
	work, span := b.startSpan(work, m)
	defer span.End()
	ev, perr := b.cfg.Validator.Parse(m)
	if perr == nil {
		span.SetAttributes(attribute.String("fanout.event.id", ev.ID), attribute.String("fanout.event.type", ev.Type))
	}
	for attempt := 1; ; attempt++ {
		var err error
		if perr != nil {
			err = b.deadLetter(work, m, perr)
		} else {
			err = b.start(work, ev)
			if startRejected(err) && namesSearchAttribute(err) {
				// Not the event's fault: wait for setup, then start it.
				b.log.Warn("Temporal refused the event's workflow start for a search attribute; waiting for `starter setup`", "event", ev.ID, "type", ev.Type, "err", err)
				waited, _ := b.awaitSetup(ctx)
				if ctx.Err() != nil {
					span.SetStatus(codes.Error, "stopped before the record was handled")
					return false
				}
				if waited {
					attempt = 0 // started afresh: the next retry waits from the start
					continue
				}
				// Registered, yet refused: the server has not seen the
				// registration yet (it caches search attributes).
			} else if startRejected(err) {
				// No retry starts it: dead-letter it and go on.
				b.log.Error("Temporal refused the event's workflow start", "event", ev.ID, "type", ev.Type, "err", err)
				perr = invalid(ReasonStartRejected, "%v", err)
				err = b.deadLetter(work, m, perr)
			}
		}
		if err == nil {
			return true
		}
		span.RecordError(err)
		d := backoff.Default.Delay(attempt, 0, nil)
		b.log.Warn("record not processed yet; retrying", "partition", m.Partition, "offset", m.Offset, "err", err, "retry_in", d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			span.SetStatus(codes.Error, "stopped before the record was handled")
			return false
		}
	}
}

// StartOptions are the options of an event's Fanout workflow start. An
// event scheduled ahead (DeliverAt after now) starts with status scheduled
// and FanoutScheduledFor set.
func StartOptions(ev fanout.Event) client.StartWorkflowOptions {
	status, summary := vocab.StatusRunning, ""
	if ev.DeliverAt.After(time.Now()) {
		status, summary = vocab.StatusScheduled, ", scheduled for "+ev.DeliverAt.UTC().Format(time.RFC3339)
	}
	sa := []temporal.SearchAttributeUpdate{
		vocab.EventTypeKey.ValueSet(ev.Type),
		vocab.StatusKey.ValueSet(status),
	}
	if status == vocab.StatusScheduled {
		sa = append(sa, vocab.ScheduledForKey.ValueSet(ev.DeliverAt.UTC()))
	}
	if ev.Priority != "" {
		sa = append(sa, vocab.PriorityKey.ValueSet(string(ev.Priority)))
	}
	return client.StartWorkflowOptions{
		ID:                       vocab.WorkflowID(ev.Type, ev.ID),
		TaskQueue:                vocab.EventsTaskQueue,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		// A closed workflow with this id must come back as an error, not as
		// a handle to the old run, so the bridge can count the duplicate.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(sa...),
		// The event's workflow tasks dispatch fairly against other events'
		// on the events queue; its activities inherit the key.
		Priority:      vocab.TaskPriority(ev, 0),
		StaticSummary: fmt.Sprintf("%s event %s (priority %s%s)", ev.Type, ev.ID, orDefault(string(ev.Priority), "type default"), summary),
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// StartFanout starts the Fanout workflow of in.Event with the options of
// StartOptions, eagerly if asked (see Config.Eager), or returns the run that
// is already going. Every start of an event's workflow goes through it.
func StartFanout(ctx context.Context, tc client.Client, in workflows.FanoutInput, eager bool) (client.WorkflowRun, error) {
	opts := StartOptions(in.Event)
	opts.EnableEagerStart = eager
	return tc.ExecuteWorkflow(ctx, opts, workflows.Fanout, in)
}

// StartEvent starts the Fanout workflow of ev, or finds it already started.
// duplicate is true when the workflow had already closed. horizon bounds a
// reschedule of a scheduled event (0: the default).
func StartEvent(ctx context.Context, tc client.Client, ev fanout.Event, eager bool, horizon time.Duration) (duplicate bool, err error) {
	_, err = StartFanout(ctx, tc, workflows.FanoutInput{Event: ev, ScheduleHorizon: horizon}, eager)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return true, nil
	}
	return false, err
}

func (b *Bridge) start(ctx context.Context, ev fanout.Event) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	wid := vocab.WorkflowID(ev.Type, ev.ID)
	if b.cfg.Events != nil {
		seen, err := b.cfg.Events.Seen(sctx, wid)
		if err != nil {
			return err
		}
		if seen {
			b.Stats.Duplicates.Add(1)
			b.count(ctx, OutcomeDuplicate, "")
			return nil
		}
	}
	if ev.Priority != "" && !ev.DeliverAt.After(time.Now()) {
		b.cfg.Yields.Signal(ev.Priority, vocab.FairnessKey(ev))
	}
	dup, err := StartEvent(sctx, b.tc, ev, b.cfg.Eager, b.cfg.Validator.Horizon)
	if err != nil {
		return fmt.Errorf("start workflow for event %s: %w", ev.ID, err)
	}
	if b.cfg.Events != nil {
		// Recorded after the start: a crash in between only means the
		// redelivery finds the workflow through Temporal's id policies.
		if _, err := b.cfg.Events.Record(sctx, wid, time.Now().UTC().Format(time.RFC3339)); err != nil {
			return err
		}
	}
	if dup {
		b.Stats.Duplicates.Add(1)
		b.count(ctx, OutcomeDuplicate, "")
		b.log.Debug("event already fanned out", "event", ev.ID)
	} else {
		b.Stats.Started.Add(1)
		b.count(ctx, OutcomeStarted, "")
	}
	return nil
}

func (b *Bridge) deadLetter(ctx context.Context, m kafka.Message, perr error) error {
	reason := "invalid"
	var ie *InvalidError
	if errors.As(perr, &ie) {
		reason = ie.Reason
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := b.dlq.WriteMessages(wctx, DeadLetterRecord(m, reason, perr.Error(), time.Now()))
	if _, refused := kafkatopic.Refused(err, 1); len(refused) > 0 {
		// The DLQ topic refused even the bounded record (its
		// max.message.bytes is lower than fanout's bounds): write the
		// reason and the source position alone, or the partition would
		// stop here.
		b.log.Error("the events DLQ topic refused a dead letter; writing it without the record's value and headers", "err", err)
		err = b.dlq.WriteMessages(wctx, headersOnlyRecord(m, reason, perr.Error(), time.Now()))
	}
	if err != nil {
		return fmt.Errorf("write dead letter: %w", err)
	}
	b.Stats.DeadLettered.Add(1)
	b.count(ctx, OutcomeDeadLettered, reason)
	b.log.Warn("bad event dead-lettered", "reason", reason, "err", clip(perr.Error(), maxDLQErrorBytes), "partition", m.Partition, "offset", m.Offset)
	return nil
}

// Bounds of an events-DLQ record, well under Kafka's default 1 MiB message
// limit whatever the bad record held: a dead letter must always be
// writable, or its partition would stop committing.
const (
	maxDLQValueBytes  = 512 << 10
	maxDLQHeaders     = 32
	maxDLQHeaderBytes = 64 << 10 // the original headers kept, keys and values
	maxDLQErrorBytes  = 1 << 10
)

// headersOnlyRecord is the smallest dead letter of m (well under 2 KiB): the
// reason, the error's start, the source position and m's size, without m's
// value and headers.
func headersOnlyRecord(m kafka.Message, reason, errText string, now time.Time) kafka.Message {
	d := DeadLetterRecord(kafka.Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key[:min(len(m.Key), 256)]},
		clip(reason, 64), clip(errText, 256), now)
	d.Headers = append(d.Headers, kafka.Header{Key: HeaderTruncated, Value: []byte(strconv.Itoa(len(m.Value)))})
	return d
}

// startRejected reports whether Temporal refused a start for good: an
// InvalidArgument is about the request itself, so asking again gets the
// same answer. Other errors (unavailable, permission, namespace) are about
// the cluster or the configuration and are retried until fixed.
func startRejected(err error) bool {
	var ia *serviceerror.InvalidArgument
	return errors.As(err, &ia)
}

// DeadLetterRecord is the events-DLQ record of a bad record m: its key,
// value and headers with the reason, the error and the source position
// added. What would make it too large to write is cut: the value above
// 512 KiB (HeaderTruncated then gives the original size; the source
// topic/partition/offset point at the whole record), original headers beyond
// 32 or 64 KiB, and the error beyond 1 KiB.
func DeadLetterRecord(m kafka.Message, reason, errText string, now time.Time) kafka.Message {
	headers := make([]kafka.Header, 0, min(len(m.Headers), maxDLQHeaders)+7)
	size := 0
	for _, h := range m.Headers {
		size += len(h.Key) + len(h.Value)
		if len(headers) == maxDLQHeaders || size > maxDLQHeaderBytes {
			break
		}
		headers = append(headers, h)
	}
	value := m.Value
	if len(value) > maxDLQValueBytes {
		value = value[:maxDLQValueBytes]
		headers = append(headers, kafka.Header{Key: HeaderTruncated, Value: []byte(strconv.Itoa(len(m.Value)))})
	}
	headers = append(headers,
		kafka.Header{Key: HeaderReason, Value: []byte(reason)},
		kafka.Header{Key: HeaderError, Value: []byte(clip(errText, maxDLQErrorBytes))},
		kafka.Header{Key: HeaderSourceTopic, Value: []byte(m.Topic)},
		kafka.Header{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(m.Partition))},
		kafka.Header{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
		kafka.Header{Key: HeaderDeadLetteredAt, Value: []byte(now.UTC().Format(time.RFC3339Nano))},
	)
	key := m.Key
	if len(key) > maxDLQErrorBytes {
		key = key[:maxDLQErrorBytes]
	}
	return kafka.Message{Key: key, Value: value, Headers: headers}
}
