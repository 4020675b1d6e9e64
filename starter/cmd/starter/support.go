package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"

	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/netguard"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers/webhook"
)

// exitUnknown is `starter status`'s exit status when some recipients are
// unknown.
const exitUnknown = 3

// supportFlags are what status and resend share: the event and its
// recipients (-recipient, repeatable, or ids on stdin).
type supportFlags struct {
	eventType, eventID string
	recipients         multiFlag
}

func (f *supportFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.eventType, "type", "", "the event's type (required)")
	fs.StringVar(&f.eventID, "event-id", "", "the event's id (required)")
	fs.Var(&f.recipients, "recipient", "a recipient id (repeatable); without it, ids are read from stdin, one a line")
}

// ids checks the flags and returns the recipients: the flags', else stdin's.
func (f *supportFlags) ids(stdin io.Reader, max int) ([]string, error) {
	if f.eventType == "" || f.eventID == "" {
		return nil, cli.Usagef("-type and -event-id are required")
	}
	ids := []string(f.recipients)
	if len(ids) == 0 {
		var err error
		if ids, err = starter.ReadIDs(stdin, max); err != nil {
			return nil, cli.Usagef("stdin: %v", err)
		}
	}
	if len(ids) == 0 {
		return nil, cli.Usagef("no recipients: give -recipient, or ids on stdin")
	}
	if len(ids) > max {
		return nil, cli.Usagef("%d recipients: at most %d per call", len(ids), max)
	}
	return ids, nil
}

// supportEnv is what status and resend read.
func supportEnv() []cli.EnvGroup {
	return []cli.EnvGroup{{Vars: config.EnvVars(starter.Support{})}, cli.TemporalGroup()}
}

// statusOptions loads the settings and connects to Redis and Temporal.
func statusOptions(ctx context.Context) (starter.StatusOptions, func(), error) {
	var s starter.Support
	if err := config.Load(&s); err != nil {
		return starter.StatusOptions{}, nil, err
	}
	rdb, err := config.RedisClient(s.RedisConn)
	if err != nil {
		return starter.StatusOptions{}, nil, fmt.Errorf("config: %w", err)
	}
	ns, err := starter.TemporalNamespace()
	if err != nil {
		_ = rdb.Close()
		return starter.StatusOptions{}, nil, err
	}
	tc, err := config.DialTemporal(ctx, config.Logger(config.DefaultLogLevel))
	if err != nil {
		_ = rdb.Close()
		return starter.StatusOptions{}, nil, err
	}
	return starter.StatusOptions{Redis: rdb, Temporal: tc, Namespace: ns, UIURL: s.UIURL},
		func() { tc.Close(); _ = rdb.Close() }, nil
}

// runStatus is `starter status`: one answer per recipient, exit 3 when
// some are unknown.
func runStatus(ctx context.Context, args []string) error {
	return statusCmd(ctx, args, os.Stdin, os.Stdout)
}

func statusCmd(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var f supportFlags
	f.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per recipient, one a line")
	h := cli.Help{Name: "starter status", Args: "-type T -event-id E [-recipient R ...] [-json]", Summary: fmt.Sprintf(`starter status answers for recipients of one event: delivered (when, after how many
attempts), in_flight, retrying, dead_lettered, unconfirmed (at most once), not_reached (the event
runs and has not paged it yet) or unknown (the event is closed and never listed it, or the
record expired: FANOUT_GATE_TTL), with the last error's class and HTTP status, and the batch
workflow that handled it (linked in the Temporal UI with FANOUT_UI_URL). Recipients come from
-recipient or stdin, one a line, at most %d. Exit status 0 when every recipient was found, 3 when
some are unknown.`, starter.MaxStatusRecipients), Env: supportEnv()}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return err
	}
	ids, err := f.ids(stdin, starter.MaxStatusRecipients)
	if err != nil {
		return err
	}
	o, done, err := statusOptions(ctx)
	if err != nil {
		return err
	}
	defer done()
	answers, err := starter.Status(ctx, o, f.eventType, f.eventID, ids)
	if err != nil && !errors.Is(err, starter.ErrSomeUnknown) {
		return err
	}
	if werr := printStatus(stdout, answers, *asJSON); werr != nil {
		return werr
	}
	return err
}

// printStatus writes the answers as JSON lines or for people.
func printStatus(w io.Writer, answers []starter.RecipientStatus, asJSON bool) error {
	if !asJSON {
		return starter.WriteStatus(w, answers)
	}
	enc := json.NewEncoder(w)
	for _, a := range answers {
		if err := enc.Encode(a); err != nil {
			return err
		}
	}
	return nil
}

// runResend is `starter resend`.
func runResend(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("resend", flag.ContinueOnError)
	var f supportFlags
	f.register(fs)
	var o starter.ResendOptions
	fs.StringVar(&o.Reason, "reason", "", "why the recipients are sent the event again (required; in the workflow's memo)")
	fs.StringVar(&o.By, "by", currentUser(), "who asks (in the workflow's memo; default: the user of the environment)")
	fs.StringVar(&o.Address, "address", "", "with one -recipient: deliver to this address (an operator's), even when status calls the recipient unknown; FANOUT_OUTBOUND_ALLOW applies")
	fs.StringVar(&o.Name, "name", "", "name of the resend in its workflow id (default: the UTC time); one name resends once")
	fs.Float64Var(&o.Rate, "rate", starter.DefaultResendRate, "deliveries per second, at most")
	wait := fs.Bool("wait", true, "wait for the resend and print its outcome")
	h := cli.Help{Name: "starter resend", Args: "-type T -event-id E -recipient R ... -reason TEXT [flags]", Summary: fmt.Sprintf(`starter resend delivers an event's message again to the listed recipients (at most %d), even
those delivered, as one DeliveryBatch workflow (id fanout/<type>/<id>/resend/<name>, memo: who
asked and why) with the same webhook-id as the original delivery, so a receiver that processed
it can drop it. Addresses come from the event's own recipients source, looked up by the worker.
Recipients 'starter status' calls unknown are refused, unless -address is given for one.`, starter.MaxResendRecipients),
		Env: append(supportEnv(), cli.EnvGroup{Title: "The workers' outbound policy", Vars: config.EnvVars(webhook.Outbound{})})}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return err
	}
	ids, err := f.ids(os.Stdin, starter.MaxResendRecipients)
	if err != nil {
		return err
	}
	if strings.TrimSpace(o.Reason) == "" {
		return cli.Usagef("-reason is required")
	}
	if o.Rate <= 0 {
		return cli.Usagef("-rate %v: want more than 0", o.Rate)
	}
	var ob webhook.Outbound // checked by Load
	if err := config.Load(&ob); err != nil {
		return err
	}
	allow, err := webhook.ParseAllow(ob.OutboundAllow) // the webhook type's grammar
	if err != nil {
		return fmt.Errorf("FANOUT_OUTBOUND_ALLOW: %w", err)
	}
	o.Allow = netguard.Policy{Allow: allow}
	keys, err := config.LoadKeyring()
	if err != nil {
		return err
	}
	if keys != nil {
		o.DataConverter = keys.DataConverter()
	}
	so, done, err := statusOptions(ctx)
	if err != nil {
		return err
	}
	defer done()
	o.EventType, o.EventID, o.Recipients, o.Status = f.eventType, f.eventID, ids, so
	res, err := starter.Resend(ctx, so.Temporal, o)
	if err != nil {
		if errors.Is(err, starter.ErrResendRefused) {
			_ = printStatus(os.Stderr, res.Before, false)
		}
		return err
	}
	fmt.Printf("resend: started %s (run %s) for %d recipients\n", res.WorkflowID, res.RunID, len(ids))
	if so.UIURL != "" {
		fmt.Printf("resend: %s\n", starter.UILink(so.UIURL, so.Namespace, res.WorkflowID))
	}
	if !*wait {
		return nil
	}
	var out struct{ Delivered, Duplicates, Failed, DeadLettered int }
	if err := res.Run.Get(ctx, &out); err != nil {
		return fmt.Errorf("resend %s: %w", res.WorkflowID, err)
	}
	fmt.Printf("resend: delivered %d, skipped %d, failed %d (dead-lettered %d)\n", out.Delivered, out.Duplicates, out.Failed, out.DeadLettered)
	return nil
}

// currentUser is the user of the environment ($USER, else the OS's).
func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}
