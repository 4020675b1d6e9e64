package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/activity"

	"github.com/fanout/fanout"
)

// A resend (starter resend) delivers an event's message again to listed
// recipients, even those delivered, as one DeliveryBatch with its own
// attempt id (vocab.ResendAttemptID) and DeliverBatchInput.Resend: the
// gate lets it deliver what another attempt delivered (gate.AcquireResend),
// and the webhook-id of each delivery is the original's (it derives from
// the event and the recipient). The input names the recipients by id; their
// addresses come from the event's own source, never from Redis: by id when
// the handler implements fanout.RecipientLookup, else by paging
// get_recipients until every id is found. A recipient given with an address
// (an operator's -address) keeps it; the worker's outbound guard applies to
// it as to any delivery.

// ReasonNotInSource starts the error of a resend's recipient that the
// event's source no longer lists: it is counted failed, not dead-lettered.
const ReasonNotInSource = "not_in_source"

// resendRecipients resolves the addresses of a resend's recipients. It
// returns those found, in the input's order, and the others as failures.
func (a *Activities) resendRecipients(ctx context.Context, h fanout.Handler, opts fanout.TypeOptions, in DeliverBatchInput) ([]fanout.Recipient, []Failure, error) {
	want := make(map[string]int, len(in.Recipients)) // id -> index
	out := make([]fanout.Recipient, len(in.Recipients))
	for i, r := range in.Recipients {
		out[i] = r
		if r.Address == "" {
			want[r.ID] = i
		}
	}
	found := func(r fanout.Recipient) {
		if i, ok := want[r.ID]; ok && r.Address != "" {
			out[i].Address = r.Address
			delete(want, r.ID)
		}
	}
	if len(want) > 0 {
		if lk, ok := h.(fanout.RecipientLookup); ok {
			ids := make([]string, 0, len(want))
			for id := range want {
				ids = append(ids, id)
			}
			rs, err := lk.LookupRecipients(ctx, in.Event, ids)
			if err != nil {
				return nil, nil, nonRetryableIfPermanent(err)
			}
			for _, r := range rs {
				found(r)
			}
		} else if err := pageFor(ctx, h, opts, in.Event, want, found); err != nil {
			return nil, nil, err
		}
	}
	var rs []fanout.Recipient
	var missing []Failure
	for _, r := range out {
		if _, gone := want[r.ID]; gone && r.Address == "" {
			missing = append(missing, Failure{Recipient: r, Permanent: true,
				Error: ReasonNotInSource + ": the event's recipients source does not list this id (any more)"})
			continue
		}
		rs = append(rs, r)
	}
	return rs, missing, nil
}

// pageFor pages the event's source until every id of want is found (or
// the audience ends, or MaxPages pages), calling found for each recipient.
func pageFor(ctx context.Context, h fanout.Handler, opts fanout.TypeOptions, ev fanout.Event, want map[string]int, found func(fanout.Recipient)) error {
	limit, maxPages := opts.PageSize, opts.MaxPages
	if limit <= 0 {
		limit = fanout.DefaultBatchSize
	}
	if maxPages <= 0 {
		maxPages = fanout.DefaultMaxPages
	}
	cursor := ""
	for page := 0; len(want) > 0 && page < maxPages; page++ {
		p, err := h.GetRecipients(ctx, ev, cursor, limit)
		if err != nil {
			return nonRetryableIfPermanent(err)
		}
		if len(p.Recipients) > limit {
			return fmt.Errorf("get_recipients returned %d recipients, over the limit %d", len(p.Recipients), limit)
		}
		for _, r := range p.Recipients {
			found(r)
		}
		if activity.IsActivity(ctx) {
			activity.RecordHeartbeat(ctx, deliverProgress{})
		}
		if p.NextCursor == "" || p.NextCursor == cursor || len(p.NextCursor) > fanout.MaxCursorLen {
			return nil
		}
		cursor = p.NextCursor
	}
	return nil
}
