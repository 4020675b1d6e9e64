package webhook_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/config/configtest"
	"github.com/fanout/fanout/workers/webhook"
)

func loadConfig() error {
	var c webhook.Config
	return config.Load(&c)
}

func TestConfigDefaults(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	var c webhook.Config
	if err := config.Load(&c); err != nil {
		t.Fatal(err)
	}
	// The env default and the type's (for a handler of one's own) agree.
	if c.HTTPTimeout != fanout.DefaultCallTimeout {
		t.Errorf("HTTPTimeout = %v, want fanout.DefaultCallTimeout %v", c.HTTPTimeout, fanout.DefaultCallTimeout)
	}
	// The heartbeat and the yields are derived from the HTTP timeout.
	if got := c.TypeOptions().CallTimeout; got != c.HTTPTimeout {
		t.Errorf("TypeOptions().CallTimeout = %v, want %v", got, c.HTTPTimeout)
	}
	// One default per knob: the stock type's options are fanout's
	// defaults, so a handler registered with zero options gets the same.
	if got, want := c.TypeOptions(), c.TypeOptions().WithDefaults(); got.MaxAttempts != want.MaxAttempts ||
		got.BatchSize != want.BatchSize || got.Window != want.Window || got.DeliverConcurrency != want.DeliverConcurrency ||
		got.CallTimeout != want.CallTimeout || got.LocalDeliveryMax != fanout.DefaultLocalDeliveryMax ||
		got.BreakerFailures != fanout.DefaultBreakerFailures || got.BreakerCooldown != fanout.DefaultBreakerCooldown ||
		got.Semantics != fanout.AtLeastOnce || got.FairnessWeight != fanout.DefaultFairnessWeight {
		t.Errorf("TypeOptions() = %+v; want fanout's defaults %+v", got, want)
	}
	if c.RecipientsURL != "" || c.Handler(64).Signer != nil {
		t.Errorf("RecipientsURL %q, a signer without secrets", c.RecipientsURL)
	}
}

func TestConfigSemantics(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_SEMANTICS", "at-most-once")
	var c webhook.Config
	if err := config.Load(&c); err != nil {
		t.Fatal(err)
	}
	if got := c.TypeOptions().Semantics; got != fanout.AtMostOnce {
		t.Errorf("TypeOptions().Semantics = %q, want %q", got, fanout.AtMostOnce)
	}
}

// TestConfigBadValues: every value that validation rejects makes Load fail
// with an error that names the environment variable to fix.
func TestConfigBadValues(t *testing.T) {
	configtest.RunBadValues(t, loadConfig, []configtest.BadValue{
		configtest.Bad("HTTP timeout zero", map[string]string{"FANOUT_HTTP_TIMEOUT": "0s"}, "FANOUT_HTTP_TIMEOUT"),
		configtest.Bad("local delivery limit over the batch limit", map[string]string{"FANOUT_LOCAL_DELIVERY_MAX": "6000"}, "FANOUT_LOCAL_DELIVERY_MAX"),
		configtest.Bad("large batches under the batch size", map[string]string{"FANOUT_BATCH_SIZE": "800", "FANOUT_LARGE_BATCH_SIZE": "500"}, "FANOUT_LARGE_BATCH_SIZE"),
		configtest.Bad("large batches over the page limit", map[string]string{"FANOUT_LARGE_BATCH_SIZE": "20001"}, "FANOUT_LARGE_BATCH_SIZE"),
		configtest.Bad("a signing secret without whsec_", map[string]string{"FANOUT_WEBHOOK_SECRETS": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "FANOUT_WEBHOOK_SECRETS"),
		configtest.Bad("window over its limit", map[string]string{"FANOUT_WINDOW": "501"}, "FANOUT_WINDOW"),
		configtest.Bad("HTTP timeout negative", map[string]string{"FANOUT_HTTP_TIMEOUT": "-1s"}, "FANOUT_HTTP_TIMEOUT"),
		// A batch heartbeats between calls and yields a call's time before
		// its attempt's deadline (DeliverTimeout, 5m): a call of 3m leaves
		// neither.
		configtest.Bad("HTTP timeout a batch cannot heartbeat and yield within", map[string]string{"FANOUT_HTTP_TIMEOUT": "3m"}, "FANOUT_HTTP_TIMEOUT"),
		configtest.Bad("outbound allow-list with a bad prefix", map[string]string{"FANOUT_OUTBOUND_ALLOW": "10.0.0.0/33"}, "FANOUT_OUTBOUND_ALLOW"),
		configtest.Bad("outbound allow-list with a host name", map[string]string{"FANOUT_OUTBOUND_ALLOW": "metadata.internal"}, "FANOUT_OUTBOUND_ALLOW"),
		configtest.Bad("recipients URL allow-list with a file URL", map[string]string{"FANOUT_RECIPIENTS_URL_ALLOW": "file:///etc/"}, "FANOUT_RECIPIENTS_URL_ALLOW"),
		// The recipients endpoint is trusted for its host and port: a URL
		// without them has none to trust.
		configtest.Bad("recipients URL with a file URL", map[string]string{"FANOUT_RECIPIENTS_URL": "file:///etc/passwd"}, "FANOUT_RECIPIENTS_URL"),
		configtest.Bad("recipients URL without a host", map[string]string{"FANOUT_RECIPIENTS_URL": "http:///recipients"}, "FANOUT_RECIPIENTS_URL"),
		configtest.Bad("recipients URL without a scheme", map[string]string{"FANOUT_RECIPIENTS_URL": "recipients.svc:8080/recipients"}, "FANOUT_RECIPIENTS_URL"),
		configtest.Bad("unknown delivery semantics", map[string]string{"FANOUT_SEMANTICS": "exactly-once"}, "FANOUT_SEMANTICS"),
		configtest.Bad("max attempts zero", map[string]string{"FANOUT_MAX_ATTEMPTS": "0"}, "FANOUT_MAX_ATTEMPTS"),
		configtest.Bad("destination rate over the limit", map[string]string{"FANOUT_DESTINATION_RATE": "2e6"}, "FANOUT_DESTINATION_RATE"),
		configtest.Bad("breaker cooldown negative", map[string]string{"FANOUT_BREAKER_COOLDOWN": "-1s"}, "FANOUT_BREAKER_COOLDOWN"),
		configtest.Bad("fairness weight over its limit", map[string]string{"FANOUT_FAIRNESS_WEIGHT": "1001"}, "FANOUT_FAIRNESS_WEIGHT"),
	})
}

// TestWebhookSecretsSign: FANOUT_WEBHOOK_SECRETS gives the stock webhook
// type a signer.
func TestWebhookSecretsSign(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_WEBHOOK_SECRETS", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	var c webhook.Config
	if err := config.Load(&c); err != nil {
		t.Fatal(err)
	}
	if c.Handler(64).Signer == nil {
		t.Fatal("no signer with FANOUT_WEBHOOK_SECRETS set")
	}
}

// TestWebhookSecretsFile: FANOUT_WEBHOOK_SECRETS_FILE (a mounted Secret, one
// secret per line) signs with every secret in it, and its errors name the
// variable without showing the file's content.
func TestWebhookSecretsFile(t *testing.T) {
	const a, b = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_WEBHOOK_SECRETS_FILE", file("two", a+"\n"+b+"\n"))
	var c webhook.Config
	if err := config.Load(&c); err != nil {
		t.Fatal(err)
	}
	sig := c.Handler(64).Signer.Sign("msg_1", 1700000000, []byte(`{}`))
	for _, sec := range []string{a, b} {
		if err := webhook.Verify([]string{sec}, "msg_1", "1700000000", sig, []byte(`{}`), time.Unix(1700000000, 0), time.Minute); err != nil {
			t.Errorf("signature %q does not verify with one of the file's secrets: %v", sig, err)
		}
	}

	const leaked = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw-not-whsec"
	configtest.RunBadValues(t, loadConfig, []configtest.BadValue{
		configtest.Bad("secrets file missing", map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": filepath.Join(dir, "absent")}, "FANOUT_WEBHOOK_SECRETS_FILE"),
		configtest.Bad("secrets file empty", map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": file("empty", "\n")}, "FANOUT_WEBHOOK_SECRETS_FILE"),
		configtest.Bad("secrets file is a directory", map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": dir}, "FANOUT_WEBHOOK_SECRETS_FILE"),
		configtest.Bad("secrets file and variable both set", map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": file("one", a), "FANOUT_WEBHOOK_SECRETS": a}, "FANOUT_WEBHOOK_SECRETS_FILE"),
		configtest.Bad("bad secret in the file", map[string]string{"FANOUT_WEBHOOK_SECRETS_FILE": file("bad", leaked)}, "FANOUT_WEBHOOK_SECRETS_FILE"),
	})
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_WEBHOOK_SECRETS_FILE", filepath.Join(dir, "bad"))
	var bad webhook.Config
	if err := config.Load(&bad); err == nil || strings.Contains(err.Error(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") {
		t.Fatalf("a bad secret file: error %v, want one that does not show the secret", err)
	}
}

// TestRecipientsURLAllowEndsAtTheHostOrASlash: an allow entry is an origin
// (scheme, host, optional port) with an optional path ending in "/"; a
// string prefix that ends anywhere else (after the colon of a port, inside a
// path segment) or that carries user information, a query or a fragment is
// refused, naming the variable.
func TestRecipientsURLAllowEndsAtTheHostOrASlash(t *testing.T) {
	for _, bad := range []string{
		"http://127.0.0.1:",             // a prefix of every port
		"https://a.example.com/api",     // a prefix of /api-admin
		"http://u:p@127.0.0.1:9999",     // user information
		"https://a.example.com/?x=1",    // a query
		"https://a.example.com/#f",      // a fragment
		"https://a.example.com/a/../b/", // a dot segment
		"http://127.0.0.1:99999",        // not a port
		"ftp://a.example.com/",
		"http:///path/",
	} {
		t.Run(bad, func(t *testing.T) {
			configtest.ClearFanoutEnv(t)
			t.Setenv("FANOUT_RECIPIENTS_URL_ALLOW", bad)
			err := loadConfig()
			if err == nil || !strings.Contains(err.Error(), "FANOUT_RECIPIENTS_URL_ALLOW") {
				t.Fatalf("FANOUT_RECIPIENTS_URL_ALLOW=%s: %v, want it refused", bad, err)
			}
		})
	}
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_RECIPIENTS_URL_ALLOW", "http://127.0.0.1:9999,https://a.example.com/api/,https://B.example.com")
	if err := loadConfig(); err != nil {
		t.Fatalf("good allow-list refused: %v", err)
	}
}

// FANOUT_FAIRNESS_WEIGHT sets the stock type's FairnessWeight, which its
// batches carry to the delivery queue.
func TestConfigFairnessWeight(t *testing.T) {
	configtest.ClearFanoutEnv(t)
	t.Setenv("FANOUT_FAIRNESS_WEIGHT", "2.5")
	var c webhook.Config
	if err := config.Load(&c); err != nil {
		t.Fatal(err)
	}
	if got := c.TypeOptions().FairnessWeight; got != 2.5 {
		t.Errorf("FairnessWeight = %v, want 2.5", got)
	}
}
