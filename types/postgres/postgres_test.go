package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fanout/fanout"
)

func dsnFile(t *testing.T, dsn string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(p, []byte(dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewRefuses(t *testing.T) {
	good := dsnFile(t, "postgres://fanout:s3cret-pw@127.0.0.1:5432/app")
	for _, tc := range []struct {
		name, field string
		cfg         Config
		want        string
	}{
		{"missing DSN file", FieldDSNFile, Config{DSNFile: filepath.Join(t.TempDir(), "nope"), Query: keyset}, "no such file"},
		{"no DSN file", FieldDSNFile, Config{Query: keyset}, "empty (the DSN is read from a file"},
		{"empty DSN file", FieldDSNFile, Config{DSNFile: dsnFile(t, "  "), Query: keyset}, "is empty"},
		{"simple protocol", FieldDSNFile, Config{DSNFile: dsnFile(t, "postgres://127.0.0.1/app?default_query_exec_mode=simple_protocol"), Query: keyset}, "default_query_exec_mode=simple_protocol"},
		{"OFFSET", FieldQuery, Config{DSNFile: good, Query: keyset + " OFFSET 5"}, "OFFSET is refused"},
		{"no cursor", FieldQuery, Config{DSNFile: good, Query: "SELECT id, a AS address FROM t ORDER BY id LIMIT :limit"}, "the query does not use :cursor"},
		{"negative timeout", FieldStatementTimeout, Config{DSNFile: good, Query: keyset, StatementTimeout: -time.Second}, "-1s is negative"},
		{"long timeout", FieldStatementTimeout, Config{DSNFile: good, Query: keyset, StatementTimeout: time.Hour}, "1h0m0s is over 4m0s"},
		{"sub-millisecond timeout", FieldStatementTimeout, Config{DSNFile: good, Query: keyset, StatementTimeout: time.Microsecond}, "1µs is under 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("New accepted %+v", tc.cfg)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.HasPrefix(err.Error(), tc.field+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want a FieldError of %s with %q", err, tc.field, tc.want)
			}
		})
	}
	s, err := New(Config{DSNFile: good, Query: keyset})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.timeout != DefaultStatementTimeout {
		t.Fatalf("statement timeout %v, want the default %v", s.timeout, DefaultStatementTimeout)
	}
}

// A DSN pgx cannot parse is refused naming its file, and nothing of it
// (pgx's message quotes it) is in the error.
func TestNewBadDSNDoesNotLeak(t *testing.T) {
	for _, dsn := range []string{
		"postgres://fanout:s3cret-pw@127.0.0.1:notaport/app",
		"host=127.0.0.1 password=s3cret-pw port=x",
	} {
		f := dsnFile(t, dsn)
		_, err := New(Config{DSNFile: f, Query: keyset})
		if err == nil {
			t.Fatalf("New accepted the DSN %q", dsn)
		}
		if !strings.Contains(err.Error(), "dsn_file: "+f) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "127.0.0.1") {
			t.Fatalf("New: %v: want the file named and nothing of the DSN", err)
		}
	}
}

func TestColumns(t *testing.T) {
	for _, names := range [][]string{{"id", "address"}, {"address", "id"}} {
		i, a, err := columns(names)
		if err != nil || names[i] != "id" || names[a] != "address" {
			t.Fatalf("columns(%q) = %d, %d, %v", names, i, a, err)
		}
	}
	for _, names := range [][]string{nil, {"id"}, {"id", "url"}, {"id", "address", "name"}, {"id", "id"}, {"address", "address"}, {"ID", "address"}} {
		if _, _, err := columns(names); err == nil || !strings.Contains(err.Error(), "invalid_shape") || !strings.Contains(err.Error(), "want exactly id and address") {
			t.Fatalf("columns(%q): %v, want invalid_shape", names, err)
		}
	}
}

// With no server listening, a page fails transient (the activity retries
// it), naming the DSN's file, without the DSN or its password.
func TestPageConnectionRefusedIsTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dsn := "postgres://fanout:s3cret-pw@127.0.0.1:" + strconv.Itoa(port) + "/app?sslmode=disable"
	f := dsnFile(t, dsn)
	s, err := New(Config{DSNFile: f, Query: keyset})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.Page(ctx, fanout.Event{ID: "e", Type: "t", Payload: json.RawMessage(`{"author_id": 1}`)}, "", 10)
	if err == nil {
		t.Fatal("a page without a server succeeded")
	}
	if fanout.IsPermanent(err) {
		t.Fatalf("connection refused is permanent: %v", err)
	}
	if !strings.Contains(err.Error(), "DSN from "+f) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("error %q: want the DSN file and the cause", err)
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), dsn) || strings.Contains(err.Error(), "user=") {
		t.Fatalf("error %q shows the DSN", err)
	}
	// A payload without the field the query uses fails before connecting,
	// permanently.
	_, err = s.Page(ctx, fanout.Event{ID: "e", Type: "t", Payload: json.RawMessage(`{}`)}, "", 10)
	if !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "no field author_id") {
		t.Fatalf("a payload without author_id: %v, want permanent", err)
	}
	s.Close()
	if _, err := s.Page(ctx, fanout.Event{ID: "e", Type: "t", Payload: json.RawMessage(`{"author_id": 1}`)}, "", 10); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("a page after Close: %v", err)
	}
}

// The DSN file is read like any secret file: a regular file of at most
// 64 KiB. A FIFO would block the worker's start (and a device such as
// /dev/zero fill its memory: not tried here, for that reason); a large
// file is a wrong path, not a DSN.
func TestNewDSNFileBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte("postgres://127.0.0.1/app?application_name="+strings.Repeat("a", 70<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, "is not a regular file"},
		{big, "over 65536"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := New(Config{DSNFile: c.path, Query: keyset})
			done <- err
		}()
		select {
		case err := <-done:
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != FieldDSNFile || !strings.Contains(err.Error(), c.want) {
				t.Errorf("DSN file %s: %v, want a dsn_file error %q", c.path, err, c.want)
			}
		case <-time.After(3 * time.Second):
			t.Errorf("DSN file %s: New did not return within 3s", c.path)
		}
	}
}
