package workflows

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/workflow"

	"github.com/fanout/fanout"
)

// TestContinueAsNewLogsNoCursor: a recipients cursor is the source's
// opaque state (it may hold a token or a customer's position); the
// workflow's log never shows it, also when the run continues as new. (At
// debug level the SDK itself logs local activity results, payloads and
// all; that is the SDK's, encrypted with keys, and off at the workers'
// default level.)
func TestContinueAsNewLogsNoCursor(t *testing.T) {
	var buf bytes.Buffer
	fx := fixture{Event: fanout.Event{ID: "ev-cursor-log", Type: "news"}, Audience: 1000,
		Options:          fanout.TypeOptions{BatchSize: 40, PageSize: 100, Window: 2},
		MaxHistoryLength: 30, HistoryPerPage: 10, PageDelay: time.Second, DeliverDelay: time.Minute,
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))}
	env := newEnv(t, fx, newRecorder())
	env.ExecuteWorkflow(Fanout, FanoutInput{Event: fx.Event, MaxHistoryLength: fx.MaxHistoryLength})
	var can *workflow.ContinueAsNewError
	if !errors.As(env.GetWorkflowError(), &can) {
		t.Fatalf("the run did not continue as new: %v", env.GetWorkflowError())
	}
	for line := range strings.Lines(buf.String()) {
		if strings.Contains(strings.ToLower(line), "cursor") {
			t.Errorf("the workflow logged a cursor: %s", line)
		}
	}
}
