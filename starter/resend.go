// Resend delivers an event's message again, on purpose, to listed
// recipients (starter resend), even those delivered.

package starter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/netguard"
	"github.com/fanout/fanout/workflows"
	"github.com/fanout/fanout/workflows/vocab"
)

// DefaultResendRate is how many deliveries per second a resend makes at
// most (`starter resend -rate`).
const DefaultResendRate = 10.0

// MaxResendRecipients bounds the recipients of one resend: one batch.
const MaxResendRecipients = fanout.MaxBatchSize

// MaxResendReason bounds a resend's reason and who asked.
const MaxResendReason = 500

// Memo fields of a resend's DeliveryBatch workflow.
const (
	MemoResendBy         = "resend_by"
	MemoResendReason     = "resend_reason"
	MemoResendRecipients = "resend_recipients"
)

// ResendOptions are a resend's.
type ResendOptions struct {
	EventType, EventID string
	Recipients         []string
	// Address is an operator's address for the one recipient of
	// Recipients, delivered to even when Status calls it unknown; it must
	// pass Allow. Empty: addresses come from the event's source.
	Address string
	// Allow is the workers' outbound policy (FANOUT_OUTBOUND_ALLOW) that
	// Address must pass; the workers' guard applies it again at dial time.
	Allow netguard.Policy
	// Reason (required) and By (who asked, required) go to the memo.
	Reason, By string
	// Name names the resend in its workflow and attempt ids ("": the UTC
	// time to the second).
	Name string
	// Rate caps deliveries per second (0: DefaultResendRate).
	Rate float64
	// Status reads the recipients' state first (Redis, namespace, UI).
	Status StatusOptions
	// DataConverter decodes the event's history (nil: the default; with
	// FANOUT_CODEC_KEYS, the keyring's).
	DataConverter converter.DataConverter
}

// ResendResult is the resend's workflow (and, after Wait, its result).
type ResendResult struct {
	WorkflowID, RunID string
	// Before are the recipients' answers before the resend.
	Before []RecipientStatus
	Run    client.WorkflowRun
}

// ErrResendRefused is the error of a resend that names recipients Status
// calls unknown, without an operator's address.
var ErrResendRefused = errors.New("resend refused")

// Resend starts one DeliveryBatch workflow that delivers the event's
// message again to the recipients: its own attempt id
// (vocab.ResendAttemptID) and DeliverBatchInput.Resend, so the gate lets it
// deliver what the event delivered, with the same webhook-id (it derives
// from the event and the recipient, so a receiver that processed it can
// drop it). Its id is vocab.ResendWorkflowID and its memo says who asked
// and why. Addresses come from the event's own recipients source, looked up
// by the worker, never from Redis; a recipient Status calls unknown is
// refused unless Address is given for it. The message, priority and options
// are the event's, read from its workflow's history.
func Resend(ctx context.Context, tc client.Client, o ResendOptions) (ResendResult, error) {
	if err := o.check(); err != nil {
		return ResendResult{}, err
	}
	before, err := Status(ctx, o.Status, o.EventType, o.EventID, o.Recipients)
	if err != nil && !errors.Is(err, ErrSomeUnknown) {
		return ResendResult{}, err
	}
	res := ResendResult{Before: before}
	if o.Address == "" {
		var unknown []string
		for _, s := range before {
			if s.State == StateUnknown {
				unknown = append(unknown, s.Recipient)
			}
		}
		if len(unknown) > 0 {
			return res, fmt.Errorf("%w: %d recipients are unknown for this event (%s): check the ids, or give an -address for one",
				ErrResendRefused, len(unknown), strings.Join(unknown[:min(len(unknown), 10)], ", "))
		}
	} else if err := checkAddress(ctx, o.Address, o.Allow); err != nil {
		return res, fmt.Errorf("%w: -address: %w", ErrResendRefused, err)
	}
	wid := vocab.WorkflowID(o.EventType, o.EventID)
	ev, err := ReadEventStart(ctx, tc, o.DataConverter, wid)
	if err != nil {
		return res, err
	}
	name := o.Name
	if name == "" {
		name = time.Now().UTC().Format("20060102T150405Z")
	}
	rs := make([]fanout.Recipient, len(o.Recipients))
	for i, id := range o.Recipients {
		rs[i] = fanout.Recipient{ID: id, Address: o.Address}
	}
	rate := o.Rate
	if rate <= 0 {
		rate = DefaultResendRate
	}
	opts := ev.Options
	in := workflows.DeliveryBatchInput{
		DeliverBatchInput: activities.DeliverBatchInput{
			Event: ev.Event, Priority: ev.Priority, AttemptID: vocab.ResendAttemptID(o.EventType, o.EventID, name),
			Recipients: rs, Message: ev.Message, MaxAttempts: max(opts.MaxAttempts, 1),
			Concurrency: max(opts.DeliverConcurrency, 1), Resend: true, Rate: rate,
		},
		Timeout: opts.DeliverTimeout, CallTimeout: opts.CallTimeout,
	}
	res.WorkflowID = vocab.ResendWorkflowID(wid, name)
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       res.WorkflowID,
		TaskQueue:                vocab.DeliveryTaskQueue(ev.Priority),
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		Priority:                 vocab.TaskPriority(ev.Event, 0),
		Memo:                     map[string]any{MemoResendBy: o.By, MemoResendReason: o.Reason, MemoResendRecipients: len(rs)},
		StaticSummary:            fmt.Sprintf("resend of %s event %s to %d recipients, by %s", o.EventType, o.EventID, len(rs), o.By),
	}, vocab.DeliveryBatchWorkflow, in)
	if err != nil {
		return res, fmt.Errorf("start resend %s: %w", res.WorkflowID, err)
	}
	res.RunID, res.Run = run.GetRunID(), run
	return res, nil
}

// check checks the options, naming the flag.
func (o ResendOptions) check() error {
	if strings.TrimSpace(o.Reason) == "" {
		return errors.New("-reason: required (why the recipients are sent the event again)")
	}
	for what, s := range map[string]string{"-reason": o.Reason, "-by": o.By} {
		if len(s) > MaxResendReason {
			return fmt.Errorf("%s: %d bytes, over %d", what, len(s), MaxResendReason)
		}
		for _, c := range s {
			if c < 0x20 || c == 0x7f {
				return fmt.Errorf("%s: holds a control character", what)
			}
		}
	}
	if strings.TrimSpace(o.By) == "" {
		return errors.New("-by: required (who asks; the default is the user of the environment)")
	}
	if len(o.Recipients) == 0 || len(o.Recipients) > MaxResendRecipients {
		return fmt.Errorf("%d recipients: want 1 to %d", len(o.Recipients), MaxResendRecipients)
	}
	if o.Address != "" && len(o.Recipients) != 1 {
		return fmt.Errorf("-address: for one recipient, not %d", len(o.Recipients))
	}
	if o.Name != "" {
		if err := fanout.ValidateID(o.Name); err != nil {
			return fmt.Errorf("-name: %w", err)
		}
	}
	seen := map[string]bool{}
	for _, id := range o.Recipients {
		if seen[id] {
			return fmt.Errorf("recipient %q listed twice", id)
		}
		seen[id] = true
	}
	return nil
}

// checkAddress checks an operator's address: an http(s) URL within
// fanout.MaxAddressLen whose host resolves only to addresses the policy
// allows.
func checkAddress(ctx context.Context, addr string, p netguard.Policy) error {
	if len(addr) > fanout.MaxAddressLen {
		return fmt.Errorf("%d bytes, over %d", len(addr), fanout.MaxAddressLen)
	}
	u, err := url.Parse(addr)
	if err != nil {
		return err
	}
	hp, err := netguard.DialAddr(u)
	if err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(hp)
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return fmt.Errorf("resolve %s: %w", host, err)
	}
	for _, ip := range ips {
		if err := p.Check(ip); err != nil {
			return err
		}
	}
	return nil
}

// EventStart is what the event's workflow started with and decided first:
// the event (with its payload), its message, options and priority.
type EventStart struct {
	Event    fanout.Event
	Message  fanout.Message
	Options  fanout.TypeOptions
	Priority fanout.Priority
}

// ReadEventStart reads the event's latest run's history: its input (the
// event; after a continue-as-new, the state with the message), else the
// Prepare result (in Open's local-activity marker, or Prepare's own).
func ReadEventStart(ctx context.Context, tc client.Client, dc converter.DataConverter, wid string) (EventStart, error) {
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	it := tc.GetWorkflowHistory(ctx, wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var start EventStart
	var in workflows.FanoutInput
	scheduled := map[int64]string{} // activity task scheduled event id -> type
	for n := 0; it.HasNext(); n++ {
		e, err := it.Next()
		if err != nil {
			return start, fmt.Errorf("read the history of %s: %w", wid, err)
		}
		var prep *activities.PrepareResult
		switch e.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			if err := decodeFirst(dc, e.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
				return start, fmt.Errorf("%s's input: %w", wid, err)
			}
			start.Event = in.Event
			if in.State != nil {
				start.Message, start.Options, start.Priority = in.State.Message, in.State.Options, in.State.Priority
				return start, start.check(wid)
			}
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled[e.GetEventId()] = e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
		case enums.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := e.GetActivityTaskCompletedEventAttributes()
			if scheduled[a.GetScheduledEventId()] == vocab.PrepareActivity {
				prep = new(activities.PrepareResult)
				if err := decodeFirst(dc, a.GetResult(), prep); err != nil {
					return start, fmt.Errorf("%s's Prepare result: %w", wid, err)
				}
			}
		case enums.EVENT_TYPE_MARKER_RECORDED:
			if p, err := preparedInMarker(dc, e); err != nil {
				return start, fmt.Errorf("%s's marker %d: %w", wid, e.GetEventId(), err)
			} else if p != nil {
				prep = p
			}
		}
		if prep != nil {
			start.Message, start.Options, start.Priority = prep.Message, prep.Options.WithDefaults(), start.Event.Priority
			if start.Priority == "" {
				start.Priority = start.Options.DefaultPriority
			}
			return start, start.check(wid)
		}
	}
	return start, fmt.Errorf("%s has no message yet (scheduled, or not prepared): nothing to resend", wid)
}

func (s EventStart) check(wid string) error {
	if !s.Priority.Valid() {
		return fmt.Errorf("%s: priority %q", wid, s.Priority)
	}
	if err := s.Message.Validate(); err != nil {
		return fmt.Errorf("%s's message: %w", wid, err)
	}
	return nil
}

// preparedInMarker is the Prepare result in a local-activity marker of
// Open or Prepare (nil: another marker).
func preparedInMarker(dc converter.DataConverter, e *historypb.HistoryEvent) (*activities.PrepareResult, error) {
	m := e.GetMarkerRecordedEventAttributes()
	if m.GetMarkerName() != "LocalActivity" || m.GetFailure() != nil {
		return nil, nil
	}
	var data struct{ ActivityType string }
	if err := decodeFirst(dc, m.GetDetails()["data"], &data); err != nil {
		return nil, err
	}
	res := m.GetDetails()["result"]
	switch data.ActivityType {
	case vocab.OpenActivity:
		var o activities.OpenResult
		if err := decodeFirst(dc, res, &o); err != nil {
			return nil, err
		}
		return &o.Prepared, nil
	case vocab.PrepareActivity:
		var p activities.PrepareResult
		if err := decodeFirst(dc, res, &p); err != nil {
			return nil, err
		}
		return &p, nil
	}
	return nil, nil
}

// decodeFirst decodes the first payload of ps into v.
func decodeFirst(dc converter.DataConverter, ps *commonpb.Payloads, v any) error {
	if len(ps.GetPayloads()) == 0 {
		return errors.New("no payload")
	}
	if err := dc.FromPayload(ps.GetPayloads()[0], v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("%w (encrypted? set FANOUT_CODEC_KEYS)", err)
		}
		return err
	}
	return nil
}
