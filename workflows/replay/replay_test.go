package replay_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	historypb "go.temporal.io/api/history/v1"

	"github.com/fanout/fanout/workflows/replay"
)

const saved = "../../workflows/testdata/histories"

func TestLoadDirFindsEveryIndexedHistory(t *testing.T) {
	idx, err := replay.ReadIndex(saved)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := replay.LoadDir(saved)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != len(idx) || len(hs) == 0 {
		t.Fatalf("%d histories loaded, %d in the index", len(hs), len(idx))
	}
	results, err := replay.Replay(context.Background(), nil, hs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil || r.WorkflowID == "" || r.RunID == "" || r.WorkflowType == "" {
			t.Errorf("%s: %+v", r.Name, r.Err)
		}
	}
}

// tamper returns a copy of h whose first scheduled activity has another type.
func tamper(t *testing.T, h replay.History) replay.History {
	t.Helper()
	c := h
	c.Name = h.Name + " (tampered)"
	c.History = proto.Clone(h.History).(*historypb.History)
	for _, e := range c.History.Events {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			a.ActivityType.Name = "SomethingElse"
			return c
		}
	}
	t.Fatalf("%s schedules no activity", h.Name)
	return c
}

func TestReplayReportsEachHistory(t *testing.T) {
	good, err := replay.LoadFile(filepath.Join(saved, "deliverybatch.json"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	bad := tamper(t, good)
	results, err := replay.Replay(context.Background(), nil, good, bad, replay.History{Name: "empty"})
	if err == nil {
		t.Fatal("no error for a tampered and an empty history")
	}
	if !strings.Contains(err.Error(), "2 of 3") || !strings.Contains(err.Error(), "(tampered)") || !strings.Contains(err.Error(), "empty") {
		t.Errorf("error does not name the failures: %v", err)
	}
	if len(results) != 3 || results[0].Err != nil || results[1].Err == nil || results[2].Err == nil {
		t.Fatalf("results: %+v", results)
	}
	if !strings.Contains(results[1].Err.Error(), "TMPRL1100") {
		t.Errorf("tampered history: %v, want a non-determinism (TMPRL1100)", results[1].Err)
	}
}

func TestReplayStopsWhenCanceled(t *testing.T) {
	h, err := replay.LoadFile(filepath.Join(saved, "deliverybatch.json"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	results, err := replay.Replay(ctx, nil, h, h)
	if !errors.Is(err, context.Canceled) || len(results) != 0 {
		t.Fatalf("canceled replay: %d results, err %v", len(results), err)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"not-json.json": "events: []",
		"empty.json":    `{"events": []}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := replay.LoadFile(p, "", ""); err == nil {
			t.Errorf("%s: loaded without error", name)
		}
	}
	if _, err := replay.LoadFile(filepath.Join(dir, "missing.json"), "", ""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := replay.LoadDir(t.TempDir()); err == nil {
		t.Error("empty directory: no error")
	}
}

// Explicit ids win over the index.
func TestLoadFileExplicitExecution(t *testing.T) {
	h, err := replay.LoadFile(filepath.Join(saved, "fanout-inline.json"), "fanout/webhook/other", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if h.WorkflowID != "fanout/webhook/other" || h.RunID != "run-1" || h.WorkflowType != "Fanout" {
		t.Fatalf("loaded as %s %s/%s", h.WorkflowType, h.WorkflowID, h.RunID)
	}
}
