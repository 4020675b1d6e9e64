package replay_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/fanout/fanout/internal/codec"
	"github.com/fanout/fanout/workflows/replay"
)

// encrypted is a copy of h with every payload (but search attributes, which
// codecs never see) encrypted by k, as workers with FANOUT_CODEC_KEYS
// write them.
func encrypted(t *testing.T, h replay.History, k *codec.Keyring) replay.History {
	t.Helper()
	c := h
	c.History = proto.Clone(h.History).(*historypb.History)
	n := 0
	err := proxy.VisitPayloads(context.Background(), c.History, proxy.VisitPayloadsOptions{
		SkipSearchAttributes: true,
		Visitor: func(_ *proxy.VisitPayloadsContext, ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
			n += len(ps)
			return k.PayloadCodec().Encode(ps)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("%s has no payload to encrypt", h.Name)
	}
	return c
}

// TestReplayEncrypted: histories whose payloads the workers encrypted
// replay with the keys (WithDataConverter), also after a rotation (the
// old key among the new keyring's), and fail to replay without them; the
// Load functions find a batch's workflow id in its encrypted input.
func TestReplayEncrypted(t *testing.T) {
	oldKey := codec.NewKey("old")
	old, err := codec.New(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := codec.New(codec.NewKey("new"), oldKey)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := replay.LoadDir(saved)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, h := range hs {
		enc := encrypted(t, h, old)
		if _, err := replay.ReplayWith(context.Background(), replay.NewReplayer(replay.WithDataConverter(rotated.DataConverter())), nil, enc); err != nil {
			t.Errorf("%s encrypted, replayed with the keys: %v", h.Name, err)
		}
		if _, err := replay.Replay(context.Background(), nil, enc); err == nil {
			t.Errorf("%s encrypted, replayed without the keys: no error", h.Name)
		}
		// Written as `temporal workflow show --output json` writes it,
		// without an index: the id comes from the children or the input.
		b, err := protojson.Marshal(enc.History)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Base(h.Name))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := replay.LoadFile(p, "", "", replay.WithDataConverter(rotated.DataConverter()))
		if err != nil || got.WorkflowID != h.WorkflowID || got.RunID != h.RunID {
			t.Errorf("%s loaded encrypted: %s/%s, %v; want %s/%s", h.Name, got.WorkflowID, got.RunID, err, h.WorkflowID, h.RunID)
		}
		if h.WorkflowType == "DeliveryBatch" {
			// Without the workflow id in its start event (histories of
			// older servers), its id is only in its input: found with the
			// keys, not without them.
			older := proto.Clone(enc.History).(*historypb.History)
			older.Events[0].GetWorkflowExecutionStartedEventAttributes().WorkflowId = ""
			b, err := protojson.Marshal(older)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "older-"+filepath.Base(h.Name))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := replay.LoadFile(p, "", "", replay.WithDataConverter(rotated.DataConverter())); err != nil || got.WorkflowID != h.WorkflowID {
				t.Errorf("%s without the id in its start event, loaded with the keys: %s, %v; want %s", h.Name, got.WorkflowID, err, h.WorkflowID)
			}
			if blind, _ := replay.LoadFile(p, "", ""); blind.WorkflowID == h.WorkflowID {
				t.Errorf("%s: the id was read from an encrypted input without the keys", h.Name)
			}
		}
	}
}
