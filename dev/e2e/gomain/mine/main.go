// Command mine is a worker of one's own as a Go user writes it: one event
// type in Go ("greetings": its three functions) and workers.Main, which
// gives it the stock wiring and the types of FANOUT_TYPES_FILE. The
// integration test of dev/e2e/gomain builds and runs it on the stack.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workers"
)

// greeting is the payload: how many people to greet and where they live.
type greeting struct {
	Count int    `json:"count"`
	URL   string `json:"url"`
	Text  string `json:"text"`
}

// greetings greets Count numbered recipients, each by a POST to URL.
type greetings struct{ client *http.Client }

func parse(ev fanout.Event) (greeting, error) {
	var g greeting
	if err := json.Unmarshal(ev.Payload, &g); err != nil {
		return g, fanout.Permanent(err)
	}
	if g.Count < 0 || g.Count > 100_000 || g.URL == "" {
		return g, fanout.Permanent(fmt.Errorf("count %d, url %q", g.Count, g.URL))
	}
	return g, nil
}

// GetRecipients pages person-0, person-1, ...: the cursor is the next index.
func (h greetings) GetRecipients(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	g, err := parse(ev)
	if err != nil {
		return fanout.Page{}, err
	}
	from := 0
	if cursor != "" {
		if from, err = strconv.Atoi(cursor); err != nil || from < 0 {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("cursor %q", cursor))
		}
	}
	var page fanout.Page
	for i := from; i < g.Count && i < from+limit; i++ {
		page.Recipients = append(page.Recipients, fanout.Recipient{ID: "person-" + strconv.Itoa(i), Address: g.URL})
	}
	if next := from + limit; next < g.Count {
		page.NextCursor = strconv.Itoa(next)
	}
	return page, nil
}

func (h greetings) GenerateMessage(ctx context.Context, ev fanout.Event) (fanout.Message, error) {
	g, err := parse(ev)
	if err != nil {
		return fanout.Message{}, err
	}
	body, err := json.Marshal(map[string]string{"greeting": g.Text})
	return fanout.Message{ContentType: "application/json", Body: body}, err
}

// Deliver posts the message, named as the webhook type names its
// deliveries (webhook-id: type/event/recipient).
func (h greetings) Deliver(ctx context.Context, ev fanout.Event, r fanout.Recipient, m fanout.Message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.Address, bytes.NewReader(m.Body))
	if err != nil {
		return fanout.Permanent(err)
	}
	req.Header.Set("Content-Type", m.ContentType)
	req.Header.Set("webhook-id", ev.Type+"/"+ev.ID+"/"+r.ID)
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode < 500:
		return fanout.Permanent(errors.New(resp.Status))
	default:
		return errors.New(resp.Status)
	}
}

func main() {
	reg := fanout.NewRegistry()
	reg.MustRegister("greetings", greetings{client: &http.Client{Timeout: 10 * time.Second}},
		fanout.TypeOptions{PageSize: 100, BatchSize: 40, MaxAttempts: 3})
	workers.Main(reg, workers.WithName("mine"))
}
