package config

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// authRecorder is a Temporal frontend that answers GetSystemInfo (the call
// every client makes when it connects) and records the authorization
// header of each call.
type authRecorder struct {
	workflowservice.UnimplementedWorkflowServiceServer
	mu   sync.Mutex
	auth []string
}

func (s *authRecorder) GetSystemInfo(ctx context.Context, _ *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.auth = append(s.auth, strings.Join(md.Get("authorization"), ","))
	s.mu.Unlock()
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func (s *authRecorder) last() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.auth) == 0 {
		return ""
	}
	return s.auth[len(s.auth)-1]
}

// TestTemporalAPIKeyFile: FANOUT_TEMPORAL_API_KEY_FILE sends the file's key
// as the API key, and a rewritten file (a rotated Secret) is sent on the
// next call without a new client.
func TestTemporalAPIKeyFile(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &authRecorder{}
	srv := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(srv, rec)
	go func() { _ = srv.Serve(lis) }() // ends with Stop
	t.Cleanup(srv.Stop)

	keyFile := filepath.Join(t.TempDir(), "temporal-api-key")
	if err := os.WriteFile(keyFile, []byte("key-one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEMPORAL_ADDRESS", lis.Addr().String())
	t.Setenv("TEMPORAL_TLS", "false") // the recorder speaks plain gRPC
	t.Setenv("TEMPORAL_API_KEY", "")
	t.Setenv(TemporalAPIKeyFileVar, keyFile)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialTemporal(ctx, Logger("error"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := rec.last(); got != "Bearer key-one" {
		t.Fatalf("authorization on connect = %q, want the file's key", got)
	}

	// Rotate: a new file behind the same path, as a Secret update does.
	next := keyFile + ".new"
	if err := os.WriteFile(next, []byte("key-two-longer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, keyFile); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rec.last() != "Bearer key-two-longer" && time.Now().Before(deadline) {
		if _, err := c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := rec.last(); got != "Bearer key-two-longer" {
		t.Fatalf("authorization after the file changed = %q, want the new key", got)
	}
}

// TestTemporalAPIKeyFileErrors: a missing file, or the file with
// TEMPORAL_API_KEY, fails before connecting, naming the variable.
func TestTemporalAPIKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, file, envKey string }{
		{"missing file", filepath.Join(dir, "absent"), ""},
		{"both the file and TEMPORAL_API_KEY", keyFile, "inline-key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
			t.Setenv("TEMPORAL_API_KEY", c.envKey)
			t.Setenv(TemporalAPIKeyFileVar, c.file)
			_, err := DialTemporal(context.Background(), Logger("error"))
			if err == nil || !strings.Contains(err.Error(), TemporalAPIKeyFileVar) {
				t.Fatalf("err = %v, want one naming %s", err, TemporalAPIKeyFileVar)
			}
			if c.envKey != "" && strings.Contains(err.Error(), c.envKey) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
}
