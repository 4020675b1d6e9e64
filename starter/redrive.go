// Redrives re-deliver dead letters. RedriveDeliveries: records of the
// deliveries DLQ that match a filter are grouped by (event, batch attempt id)
// and delivered again by DeliveryBatch workflows that present the original
// attempt id, so they pass the same gate: a recipient delivered meanwhile is
// skipped, a dead-lettered one is delivered. RedriveEvents: records of the events
// DLQ are re-published to the events topic, after a fix (a type deployed, a
// producer corrected).

package starter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"golang.org/x/time/rate"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// RedriveFilter selects dead letters; empty fields match everything.
type RedriveFilter struct {
	EventID       string
	EventType     string
	ErrorContains string
}

// Match reports whether d passes the filter.
func (f RedriveFilter) Match(d activities.DeadLetter) bool {
	return f.matchEvent(d) && (f.ErrorContains == "" || strings.Contains(d.LastError, f.ErrorContains))
}

// matchEvent reports whether d is of an event the filter selects.
func (f RedriveFilter) matchEvent(d activities.DeadLetter) bool {
	return (f.EventID == "" || d.EventID == f.EventID) && (f.EventType == "" || d.EventType == f.EventType)
}

// RedriveOptions of a deliveries redrive.
type RedriveOptions struct {
	Kafka  KafkaConn
	Topic  string
	Filter RedriveFilter
	// Rate caps re-deliveries per second (0: 100).
	Rate float64
	// BatchSize caps recipients per redrive batch (0: fanout.DefaultBatchSize).
	BatchSize int
	// Round names this redrive (0: a UTC timestamp); workflow ids and
	// attempt counts are per round.
	Round string
	// Wait for the redrive batches to finish and sum their results.
	Wait bool
	// Keys open sealed dead letters (internal/codec's Keyring, from
	// FANOUT_CODEC_KEYS); without them sealed letters count as Invalid and
	// stay in the DLQ, and with them letters in clear count as Unsealed and
	// stay in the DLQ.
	Keys activities.Opener
	// DryRun reads and groups the dead letters and starts nothing: the
	// result's Plan and counts say what a redrive would do (Batches: the
	// redrive batches it would start). The Temporal client may be nil.
	DryRun bool
	// Progress, when set, is called with the counts so far every
	// ProgressEvery (0: 5s) while the redrive reads, starts and waits, and
	// once when it ends, from the redrive's goroutine.
	Progress      func(RedriveProgress)
	ProgressEvery time.Duration
}

// RedriveProgress is a redrive's progress.
type RedriveProgress struct {
	// Phase: "read" (the DLQ), "start" (the redrive batches), "wait" (for
	// them), "done".
	Phase string
	// Read records of the DLQ so far.
	Read int
	// Planned redrive batches (known once the DLQ is read); Batches of the
	// counts are those started, Finished those that ended.
	Planned, Finished int
	RedriveResult
}

// RedriveEventPlan is what a redrive does for one event's dead letters.
type RedriveEventPlan struct {
	EventType, EventID string
	Priority           fanout.Priority
	// DeadLetters matched, distinct (attempt, recipient); Batches the
	// redrive batches they make; Unredrivable those left in the DLQ (no
	// message).
	DeadLetters, Batches, Unredrivable int
	// Errors counts the dead letters by their last error (its first
	// MaxReasonLen bytes).
	Errors map[string]int
}

// MaxReasonLen bounds a last error as a key of RedriveEventPlan.Errors.
const MaxReasonLen = 120

// RedriveResult of a redrive.
type RedriveResult struct {
	Matched   int // distinct (event, attempt, recipient) dead letters matched
	Batches   int
	Delivered int
	// Skipped were delivered meanwhile (by an earlier redrive).
	Skipped int
	Failed  int
	// Unredrivable dead letters were written without their message (the
	// DLQ topic refused them whole) and no other dead letter of their batch
	// holds it: they stay in the DLQ, and the log names their event.
	Unredrivable int
	// Invalid records of the topic are not dead letters fanout wrote
	// (activities.DecodeDeadLetter refused them): left in the DLQ.
	Invalid int
	// Unsealed are dead letters in clear read with Keys: with keys fanout
	// writes only sealed ones, so these are refused (never delivered, nor
	// the message of a sealed one) and left in the DLQ.
	Unsealed int
	// Plan: the matched dead letters per event, in the order the DLQ
	// first names each event.
	Plan []RedriveEventPlan
}

// progress calls fn at most every d (and always when force).
type progress struct {
	fn   func()
	d    time.Duration
	last time.Time
}

func newProgress(fn func(), d time.Duration) *progress {
	return &progress{fn: fn, d: cmp.Or(d, 5*time.Second), last: time.Now()}
}

func (p *progress) tick(force bool) {
	if p.fn == nil || (!force && time.Since(p.last) < p.d) {
		return
	}
	p.last = time.Now()
	p.fn()
}

type redriveGroup struct {
	first activities.DeadLetter // one with the message, when any has it
	recs  []fanout.Recipient
}

// redriveRead is what a redrive read from the DLQ: the matched dead letters
// grouped by (event, attempt), in the order the DLQ first names each group.
type redriveRead struct {
	o      RedriveOptions
	res    RedriveResult
	groups map[string]*redriveGroup
	order  []string
	seen   map[string]bool
	plans  map[string]int // event key -> index in res.Plan
	// messages holds, per (event, attempt) of the events the filter
	// selects, a letter that carries the message: a batch's letters carry
	// it once per chunk (activities.DeadLetterChunk), and that letter's own
	// recipient may not match the filter.
	messages map[string]activities.DeadLetter
}

// add reads one record of the DLQ.
func (r *redriveRead) add(m kafka.Message) {
	d, err := activities.DecodeDeadLetter(m.Value, r.o.Keys)
	if errors.Is(err, activities.ErrNotSealed) {
		// With keys, a letter in clear is not one of ours: anyone who can
		// write to the topic could have written it, message and all.
		r.res.Unsealed++
		slog.Warn("a dead letter in clear, and keys are configured: left in the DLQ", "partition", m.Partition, "offset", m.Offset)
		return
	}
	if err != nil {
		// Not one fanout wrote: leave it, and say so.
		r.res.Invalid++
		slog.Warn("not a valid dead letter; left in the DLQ", "partition", m.Partition, "offset", m.Offset, "err", err)
		return
	}
	if !r.o.Filter.matchEvent(d) {
		return
	}
	k := d.EventID + "\x00" + d.AttemptID
	if _, ok := r.messages[k]; !ok && d.MessageOmitted == 0 {
		r.messages[k] = d
	}
	if !r.o.Filter.Match(d) {
		return
	}
	if rk := k + "\x00" + d.Recipient.ID; r.seen[rk] {
		return
	} else {
		r.seen[rk] = true
	}
	g := r.groups[k]
	if g == nil {
		g = &redriveGroup{first: d}
		r.groups[k] = g
		r.order = append(r.order, k)
	}
	g.recs = append(g.recs, d.Recipient)
	r.res.Matched++
	r.plan(d)
}

// plan counts d in its event's plan.
func (r *redriveRead) plan(d activities.DeadLetter) {
	ek := d.EventType + "\x00" + d.EventID
	i, ok := r.plans[ek]
	if !ok {
		i = len(r.res.Plan)
		r.plans[ek] = i
		r.res.Plan = append(r.res.Plan, RedriveEventPlan{EventType: d.EventType, EventID: d.EventID, Priority: d.Priority, Errors: map[string]int{}})
	}
	r.res.Plan[i].DeadLetters++
	reason := d.LastError
	if len(reason) > MaxReasonLen {
		reason = strings.ToValidUTF8(reason[:MaxReasonLen], "") + "..."
	}
	r.res.Plan[i].Errors[reason]++
}

// resolve gives each group whose first letter was written without the
// message the letter of its batch that holds it, if the DLQ has one.
func (r *redriveRead) resolve() {
	for k, g := range r.groups {
		if d, ok := r.messages[k]; ok && g.first.MessageOmitted != 0 {
			g.first = d
		}
	}
	r.messages = nil
}

// RedriveDeliveries redrives the deliveries DLQ.
func RedriveDeliveries(ctx context.Context, tc client.Client, o RedriveOptions) (RedriveResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return RedriveResult{}, err
	}
	rv := &deliveriesRedrive{o: o, tc: tc, prog: RedriveProgress{Phase: "read"}, pr: newProgress(nil, o.ProgressEvery)}
	rd, err := rv.read(ctx)
	if err != nil {
		return rv.res, err
	}
	rv.plan(rd)
	if o.DryRun {
		for _, pl := range rv.res.Plan {
			rv.res.Batches += pl.Batches
			rv.res.Unredrivable += pl.Unredrivable
		}
		return rv.done(), nil
	}
	if err := rv.start(ctx, rd); err != nil {
		return rv.res, err
	}
	if !o.Wait {
		return rv.done(), nil
	}
	if err := rv.wait(ctx); err != nil {
		return rv.res, err
	}
	return rv.done(), nil
}

// withDefaults fills in the rate, the batch size and the round a
// deliveries redrive leaves unset, and checks the round.
func (o RedriveOptions) withDefaults() (RedriveOptions, error) {
	if o.Rate <= 0 {
		o.Rate = 100
	}
	if o.BatchSize <= 0 {
		o.BatchSize = fanout.DefaultBatchSize
	}
	if o.Round == "" {
		o.Round = time.Now().UTC().Format("20060102T150405Z")
	}
	if err := fanout.ValidateID(o.Round); err != nil {
		return o, fmt.Errorf("redrive round: %w", err)
	}
	return o, nil
}

// deliveriesRedrive is a deliveries redrive under way: its counts, its
// progress and the redrive batches it started.
type deliveriesRedrive struct {
	o    RedriveOptions
	tc   client.Client
	res  RedriveResult
	prog RedriveProgress
	pr   *progress
	runs []client.WorkflowRun
}

// read reads the whole DLQ and groups the dead letters the filter matches,
// reporting the counts as it goes.
func (rv *deliveriesRedrive) read(ctx context.Context) (*redriveRead, error) {
	o := rv.o
	rd := &redriveRead{o: o, groups: map[string]*redriveGroup{}, seen: map[string]bool{}, plans: map[string]int{}, messages: map[string]activities.DeadLetter{}}
	if o.Progress != nil {
		rv.pr.fn = func() { rv.prog.RedriveResult = rd.res; o.Progress(rv.prog) }
	}
	err := kafkatopic.ReadAll(ctx, o.Kafka, o.Topic, func(m kafka.Message) error {
		rv.prog.Read++
		rv.pr.tick(false)
		rd.add(m)
		return nil
	})
	rv.res = rd.res
	if o.Progress != nil {
		rv.pr.fn = func() { rv.prog.RedriveResult = rv.res; o.Progress(rv.prog) }
	}
	if err != nil {
		return nil, err
	}
	rd.resolve()
	return rd, nil
}

// plan counts in each event's plan the redrive batches its groups make and
// the dead letters left in the DLQ without their message.
func (rv *deliveriesRedrive) plan(rd *redriveRead) {
	for _, k := range rd.order {
		g := rd.groups[k]
		pl := &rv.res.Plan[rd.plans[g.first.EventType+"\x00"+g.first.EventID]]
		if g.first.MessageOmitted != 0 {
			pl.Unredrivable += len(g.recs)
			continue
		}
		n := (len(g.recs) + rv.o.BatchSize - 1) / rv.o.BatchSize
		pl.Batches += n
		rv.prog.Planned += n
	}
}

// start starts the redrive batches of each group, BatchSize recipients
// each, at the rate cap; a group without its message stays in the DLQ.
func (rv *deliveriesRedrive) start(ctx context.Context, rd *redriveRead) error {
	rv.prog.Phase = "start"
	rv.pr.tick(true)
	lim := rate.NewLimiter(rate.Limit(rv.o.Rate), rv.o.BatchSize)
	for _, k := range rd.order {
		g := rd.groups[k]
		d := g.first
		if d.MessageOmitted != 0 {
			rv.res.Unredrivable += len(g.recs)
			slog.Warn("dead letters without their message, and none of their batch has it: left in the DLQ",
				"event", d.EventID, "type", d.EventType, "attempt", d.AttemptID, "recipients", len(g.recs))
			continue
		}
		for n, chunk := range slices.Collect(slices.Chunk(g.recs, rv.o.BatchSize)) {
			if err := lim.WaitN(ctx, len(chunk)); err != nil {
				return err
			}
			run, err := rv.startBatch(ctx, d, n, chunk)
			if err != nil {
				return err
			}
			rv.res.Batches++
			rv.runs = append(rv.runs, run)
			rv.pr.tick(false)
		}
	}
	return nil
}

// startBatch starts redrive batch n of d's group, the recipients chunk: a
// DeliveryBatch on the delivery queue of d's priority (normal when it is
// not valid) that presents d's attempt id.
func (rv *deliveriesRedrive) startBatch(ctx context.Context, d activities.DeadLetter, n int, chunk []fanout.Recipient) (client.WorkflowRun, error) {
	prio := d.Priority
	if !prio.Valid() {
		prio = fanout.PriorityNormal
	}
	wid := vocab.RedriveWorkflowID(vocab.WorkflowID(d.EventType, d.EventID), d.AttemptID, rv.o.Round, n)
	run, err := rv.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       wid,
		TaskQueue:                vocab.DeliveryTaskQueue(prio),
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		Priority:                 vocab.TaskPriority(d.Event, 0),
		StaticSummary:            fmt.Sprintf("redrive of %d dead letters of %s event %s", len(chunk), d.EventType, d.EventID),
	}, workflows.DeliveryBatch, workflows.DeliveryBatchInput{DeliverBatchInput: activities.DeliverBatchInput{
		Event: d.Event, Priority: prio, AttemptID: d.AttemptID, Recipients: chunk, Message: d.Message,
		MaxAttempts: max(d.Attempts, fanout.DefaultMaxAttempts), Concurrency: fanout.DefaultDeliverConcurrency,
		Redrive: true, Round: rv.o.Round,
	}})
	if err != nil {
		return nil, fmt.Errorf("start redrive %s: %w", wid, err)
	}
	return run, nil
}

// wait waits for the redrive batches it started and sums their results.
func (rv *deliveriesRedrive) wait(ctx context.Context) error {
	rv.prog.Phase = "wait"
	rv.pr.tick(true)
	for _, run := range rv.runs {
		r, err := rv.waitRun(ctx, run)
		if err != nil {
			return err
		}
		rv.res.Delivered += r.Delivered
		rv.res.Skipped += r.Duplicates
		rv.res.Failed += r.Failed
		rv.prog.Finished++
		rv.pr.tick(false)
	}
	return nil
}

// waitRun waits for one redrive batch's result, in slices of the progress
// interval, so a long batch does not silence the progress.
func (rv *deliveriesRedrive) waitRun(ctx context.Context, run client.WorkflowRun) (workflows.DeliveryBatchResult, error) {
	var r workflows.DeliveryBatchResult
	for {
		gctx, cancel := context.WithTimeout(ctx, rv.pr.d)
		err := run.Get(gctx, &r)
		cancel()
		if err == nil {
			return r, nil
		}
		if ctx.Err() == nil && gctx.Err() != nil {
			rv.pr.tick(false)
			continue
		}
		return r, fmt.Errorf("redrive %s: %w", run.GetID(), err)
	}
}

// done reports the end of the redrive and returns its counts.
func (rv *deliveriesRedrive) done() RedriveResult {
	rv.prog.Phase = "done"
	rv.pr.tick(true)
	return rv.res
}

// RedriveEventsOptions of an events-DLQ redrive.
type RedriveEventsOptions struct {
	Kafka       KafkaConn
	DLQTopic    string
	EventsTopic string
	// SourceTopic is the only topic a cut dead letter's original is read
	// back from (default EventsTopic): a dead letter's source headers are
	// only as trustworthy as whoever can write to the DLQ, and must not
	// make the redrive copy records of another topic into the events topic.
	SourceTopic string
	// Reason selects records by their dead-letter reason ("" = all).
	Reason string
	Rate   float64
	// DryRun reads the DLQ and publishes nothing: ByReason and Cut say
	// what a redrive would re-publish.
	DryRun bool
	// Progress, when set, is called with the counts so far every
	// ProgressEvery (0: 5s) and once at the end.
	Progress      func(RedriveEventsProgress)
	ProgressEvery time.Duration
}

// RedriveEventsProgress is an events-DLQ redrive's progress: records of the
// DLQ read so far, and the counts.
type RedriveEventsProgress struct {
	Read int
	Done bool
	RedriveEventsResult
}

// RedriveEventsResult of an events-DLQ redrive.
type RedriveEventsResult struct {
	// Republished records, FromSource of them read back whole from their
	// source topic because their dead letter was cut.
	Republished, FromSource int
	// Lost are cut dead letters whose original is gone from the source
	// topic (retention): left in the DLQ.
	Lost int
	// ByReason counts the records that matched, by their dead-letter
	// reason; Cut of them were cut (their original is read back from the
	// source topic). With DryRun nothing else is counted.
	ByReason map[string]int
	Cut      int
}

// RedriveEvents re-publishes records of the events DLQ to the events topic,
// with their original key and headers (the fanout-dlq-* headers removed). A
// dead letter that was cut (HeaderTruncated) is not re-published as it is:
// the original is read again from its source topic, partition and offset.
func RedriveEvents(ctx context.Context, o RedriveEventsOptions) (RedriveEventsResult, error) {
	if o.Rate <= 0 {
		o.Rate = 100
	}
	lim := rate.NewLimiter(rate.Limit(o.Rate), 1)
	pub := NewPublisher(o.Kafka, o.EventsTopic)
	// Publish returns once the broker acknowledged every event: closing the
	// writer has nothing left to flush.
	defer func() { _ = pub.Close() }()
	res := RedriveEventsResult{ByReason: map[string]int{}}
	read := 0
	pr := newProgress(nil, o.ProgressEvery)
	if o.Progress != nil {
		pr.fn = func() { o.Progress(RedriveEventsProgress{Read: read, RedriveEventsResult: res}) }
	}
	defer func() {
		if o.Progress != nil {
			o.Progress(RedriveEventsProgress{Read: read, Done: true, RedriveEventsResult: res})
		}
	}()
	err := kafkatopic.ReadAll(ctx, o.Kafka, o.DLQTopic, func(m kafka.Message) error {
		read++
		pr.tick(false)
		var reason string
		var cut bool
		var src source
		var hs []kafka.Header
		for _, h := range m.Headers {
			switch h.Key {
			case HeaderReason:
				reason = string(h.Value)
			case HeaderTruncated:
				cut = true
			case HeaderSourceTopic:
				src.topic = string(h.Value)
			case HeaderSourcePartition:
				src.partition, _ = strconv.Atoi(string(h.Value))
			case HeaderSourceOffset:
				src.offset, _ = strconv.ParseInt(string(h.Value), 10, 64)
			case HeaderError, HeaderDeadLetteredAt:
			default:
				hs = append(hs, h)
			}
		}
		if o.Reason != "" && reason != o.Reason {
			return nil
		}
		res.ByReason[reason]++
		if cut {
			res.Cut++
		}
		if o.DryRun {
			return nil
		}
		out := kafka.Message{Key: m.Key, Value: m.Value, Headers: hs}
		if cut {
			if src.topic != cmp.Or(o.SourceTopic, o.EventsTopic) {
				res.Lost++
				slog.Warn("a cut dead letter names a source topic other than the events topic; left in the DLQ", "topic", src.topic)
				return nil
			}
			orig, err := readOne(ctx, o.Kafka, src)
			if err != nil {
				res.Lost++
				slog.Warn("a cut dead letter's original is not in its source topic; left in the DLQ",
					"topic", src.topic, "partition", src.partition, "offset", src.offset, "err", err)
				return nil
			}
			out = kafka.Message{Key: orig.Key, Value: orig.Value, Headers: orig.Headers}
			res.FromSource++
		}
		if err := lim.Wait(ctx); err != nil {
			return err
		}
		if err := pub.PublishRecords(ctx, out); err != nil {
			return err
		}
		res.Republished++
		return nil
	})
	return res, err
}

// source is where a dead-lettered record was read.
type source struct {
	topic     string
	partition int
	offset    int64
}

// readOne reads the record at src, if the topic still holds it.
func readOne(ctx context.Context, kc KafkaConn, src source) (kafka.Message, error) {
	if src.topic == "" {
		return kafka.Message{}, errors.New("no source topic")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r := kafkatopic.NewReader(kc, kafka.ReaderConfig{Topic: src.topic, Partition: src.partition, MaxBytes: 10 << 20})
	defer func() { _ = r.Close() }()
	if err := r.SetOffset(src.offset); err != nil {
		return kafka.Message{}, err
	}
	m, err := r.ReadMessage(ctx)
	if err != nil {
		return kafka.Message{}, err
	}
	if m.Offset != src.offset {
		return kafka.Message{}, fmt.Errorf("offset %d is gone (the first readable is %d)", src.offset, m.Offset)
	}
	return m, nil
}
