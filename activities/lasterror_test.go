package activities

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

type statusErr struct{ code int }

func (e statusErr) Error() string   { return "custom" }
func (e statusErr) HTTPStatus() int { return e.code }

// The last error keeps a class and a status, never the text.
func TestLastErrorClass(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		err    error
		class  string
		status int
	}{
		{errors.New("HTTP 503"), ClassHTTP, 503},
		{fanout.RetryAfter(time.Second, errors.New("HTTP 503")), ClassRateLimited, 503},
		{errors.New("HTTP 429"), ClassRateLimited, 429},
		{fanout.Permanent(errors.New("HTTP 410")), ClassPermanent, 410},
		{fanout.Permanent(fmt.Errorf("redirected: %w", errors.New("HTTP 301"))), ClassPermanent, 301},
		{fanout.NotSent(errors.New("breaker open")), ClassNotSent, 0},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, ClassConnect, 0},
		{&net.OpError{Op: "read", Err: errors.New("reset")}, ClassNetwork, 0},
		{context.DeadlineExceeded, ClassTimeout, 0},
		{statusErr{502}, ClassHTTP, 502},
		{statusErr{7}, ClassOther, 0},
		{errors.New("HTTP 5000 things"), ClassOther, 0},
		{errors.New(`Post "https://secret.example/x?token=abc": EOF`), ClassOther, 0},
	} {
		le := lastError(c.err, now)
		if le.Class != c.class || le.HTTPStatus != c.status || !le.At.Equal(now) {
			t.Errorf("lastError(%v) = %+v; want %s %d", c.err, le, c.class, c.status)
		}
	}
}

type pagedOnly struct{ pages int }

func (p *pagedOnly) GetRecipients(_ context.Context, _ fanout.Event, cursor string, limit int) (fanout.Page, error) {
	p.pages++
	from := 0
	_, _ = fmt.Sscan(cursor, &from)
	var pg fanout.Page
	for i := from; i < min(from+limit, 25); i++ {
		pg.Recipients = append(pg.Recipients, fanout.Recipient{ID: fmt.Sprint("r", i), Address: fmt.Sprint("http://h/", i)})
	}
	if from+limit < 25 {
		pg.NextCursor = fmt.Sprint(from + limit)
	}
	return pg, nil
}
func (p *pagedOnly) GenerateMessage(context.Context, fanout.Event) (fanout.Message, error) {
	return fanout.Message{}, nil
}
func (p *pagedOnly) Deliver(context.Context, fanout.Event, fanout.Recipient, fanout.Message) error {
	return nil
}

type lookedUp struct {
	pagedOnly
	asked []string
}

func (l *lookedUp) LookupRecipients(_ context.Context, _ fanout.Event, ids []string) ([]fanout.Recipient, error) {
	l.asked = ids
	return []fanout.Recipient{{ID: "r3", Address: "http://h/3"}, {ID: "stranger", Address: "http://evil/"}}, nil
}

// A resend's addresses come from the source: by lookup when the handler
// can, else by paging until found; what the source does not list fails;
// an operator's address is kept.
func TestResendRecipients(t *testing.T) {
	a := &Activities{}
	in := DeliverBatchInput{Resend: true, Recipients: []fanout.Recipient{{ID: "r3"}, {ID: "r12"}, {ID: "gone"}, {ID: "op", Address: "http://op/"}}}
	p := &pagedOnly{}
	rs, missing, err := a.resendRecipients(t.Context(), p, fanout.TypeOptions{PageSize: 10}, in)
	if err != nil || len(rs) != 3 || rs[0].Address != "http://h/3" || rs[1].Address != "http://h/12" || rs[2].Address != "http://op/" ||
		len(missing) != 1 || missing[0].Recipient.ID != "gone" || !missing[0].Permanent || p.pages != 3 {
		t.Errorf("paged: %+v, missing %+v, %v, %d pages", rs, missing, err, p.pages)
	}
	l := &lookedUp{}
	rs, missing, err = a.resendRecipients(t.Context(), l, fanout.TypeOptions{PageSize: 10}, in)
	if err != nil || len(rs) != 2 || rs[0].Address != "http://h/3" || len(missing) != 2 || l.pages != 0 || len(l.asked) != 3 {
		t.Errorf("looked up: %+v, missing %+v, %v, asked %v", rs, missing, err, l.asked)
	}
	for _, r := range rs {
		if r.ID == "stranger" {
			t.Error("a recipient the resend did not ask for was taken")
		}
	}
}
