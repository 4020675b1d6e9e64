package config

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/fanout/fanout/internal/config/configtest"
)

// Bridge and Worker stand for the stages' settings in these tests: the
// connections as starter.Settings and workers.Config embed and check them
// (each stage tests its own fields).
type Bridge struct {
	Kafka
	RedisConn
}

func (b *Bridge) Validate() error {
	if err := b.Kafka.Check(); err != nil {
		return err
	}
	return b.RedisConn.Check()
}

type Worker struct {
	RedisConn
	Kafka
}

func (w *Worker) Validate() error {
	if err := w.RedisConn.Check(); err != nil {
		return err
	}
	return w.Kafka.Check()
}

func clearFanoutEnv(t *testing.T) { t.Helper(); configtest.ClearFanoutEnv(t) }

func TestParseLevel(t *testing.T) {
	cases := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"debug", slog.LevelDebug, false},
		{"info", slog.LevelInfo, false},
		{"WARN", slog.LevelWarn, false},
		{"Error", slog.LevelError, false},
		{"loud", 0, true},
		{"", 0, true},
	}
	for _, c := range cases {
		got, err := ParseLevel(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("ParseLevel(%q) error = %v, want error %v", c.in, err, c.wantErr)
			continue
		}
		if !c.wantErr && got != c.want {
			t.Errorf("ParseLevel(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestRedisURLErrorsHideThePassword: a malformed FANOUT_REDIS_URL fails at
// start-up naming the variable, without printing the password it holds.
func TestRedisURLErrorsHideThePassword(t *testing.T) {
	for _, raw := range []string{
		"redis://user:s3cret@redis.example:notaport/0",
		"rediss://:s3cret@redis.example:6380/abc",
		"http://user:s3cret@redis.example",
		"redis://user:s3cret@redis.example:6379/0?nosuch=1",
	} {
		for _, load := range []func() error{
			func() error { clearFanoutEnv(t); t.Setenv("FANOUT_REDIS_URL", raw); var w Worker; return Load(&w) },
			func() error { _, err := RedisClient(RedisConn{URL: raw}); return err },
		} {
			err := load()
			if err == nil || !strings.Contains(err.Error(), "FANOUT_REDIS_URL") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s: error %v; want one naming FANOUT_REDIS_URL without the password", raw, err)
			}
		}
	}
	if got := redactURL("redis://user:s3cret@host:6379/0"); got != "redis://user:xxxxx@host:6379/0" {
		t.Errorf("redactURL = %q", got)
	}
}
