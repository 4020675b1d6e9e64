package activities_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
)

// audience is a handler whose audience size comes from the payload
// ({"n": N}); Deliver fails as told by fail.
type audience struct {
	mu        sync.Mutex
	delivered map[string]int
	pages     int
	fail      func(r fanout.Recipient) error
}

func (h *audience) GetRecipients(_ context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	var p struct{ N int }
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return fanout.Page{}, fanout.Permanent(err)
	}
	off, _ := strconv.Atoi(cursor)
	h.mu.Lock()
	h.pages++
	h.mu.Unlock()
	var page fanout.Page
	for i := off; i < min(off+limit, p.N); i++ {
		page.Recipients = append(page.Recipients, fanout.Recipient{ID: "r" + strconv.Itoa(i)})
	}
	if off+limit < p.N {
		page.NextCursor = strconv.Itoa(off + limit)
	}
	return page, nil
}

func (h *audience) GenerateMessage(context.Context, fanout.Event) (fanout.Message, error) {
	return fanout.Message{Body: []byte("hi")}, nil
}

func (h *audience) Deliver(_ context.Context, _ fanout.Event, r fanout.Recipient, _ fanout.Message) error {
	if h.fail != nil {
		if err := h.fail(r); err != nil {
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.delivered[r.ID]++
	return nil
}

type dlqRecorder struct {
	mu  sync.Mutex
	dls []activities.DeadLetter
}

func (d *dlqRecorder) Publish(_ context.Context, dls []activities.DeadLetter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dls = append(d.dls, dls...)
	return nil
}

func event(id string, n int) fanout.Event {
	return fanout.Event{ID: id + "-" + strconv.FormatInt(time.Now().UnixNano(), 36), Type: "t", Payload: json.RawMessage(fmt.Sprintf(`{"N":%d}`, n))}
}

// TestPrepareResolvesLocalDeliveryMax: Prepare records the fast-path limit
// the workflow decides by (the type's, or the default when unset).
func TestPrepareResolvesLocalDeliveryMax(t *testing.T) {
	for _, tc := range []struct{ set, want int }{{0, fanout.DefaultLocalDeliveryMax}, {7, 7}, {-1, -1}} {
		reg := fanout.NewRegistry()
		reg.MustRegister("t", &audience{}, fanout.TypeOptions{LocalDeliveryMax: tc.set})
		var s testsuite.WorkflowTestSuite
		env := s.NewTestActivityEnvironment()
		acts := &activities.Activities{Registry: reg}
		env.RegisterActivity(acts)
		v, err := env.ExecuteActivity(acts.Prepare, activities.PrepareInput{Event: event("prep", 1)})
		if err != nil {
			t.Fatal(err)
		}
		var res activities.PrepareResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		if res.Options.LocalDeliveryMax != tc.want {
			t.Errorf("type's LocalDeliveryMax %d: Prepare reported %d, want %d", tc.set, res.Options.LocalDeliveryMax, tc.want)
		}
	}
}
