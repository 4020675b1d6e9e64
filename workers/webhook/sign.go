package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fanout/fanout"
)

// Standard Webhooks (https://www.standardwebhooks.com) request headers: a
// Handler with a Signer sends them with every delivery, so receivers can
// verify with any Standard Webhooks library that the request is fanout's
// and unaltered, and deduplicate by webhook-id.
const (
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// secretPrefix starts every Standard Webhooks secret; the rest is base64.
const secretPrefix = "whsec_"

// Signer signs deliveries with one or more secrets: during a rotation both
// the old and the new secret sign, and a receiver that knows either
// accepts the request.
type Signer struct {
	keys [][]byte
}

// NewSigner parses Standard Webhooks secrets ("whsec_" + base64 of at least
// 24 bytes). The error names the bad secret by position, never its value.
func NewSigner(secrets ...string) (*Signer, error) {
	if len(secrets) == 0 {
		return nil, errors.New("no signing secret")
	}
	s := &Signer{}
	for i, sec := range secrets {
		key, err := parseSecret(sec)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
		s.keys = append(s.keys, key)
	}
	return s, nil
}

func parseSecret(sec string) ([]byte, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(sec), secretPrefix)
	if !ok {
		return nil, fmt.Errorf("does not start with %q", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("is not base64 after the prefix")
	}
	if len(key) < 24 {
		return nil, fmt.Errorf("is %d bytes, want at least 24", len(key))
	}
	return key, nil
}

// Sign returns the webhook-signature value of a message: "v1,<signature>"
// per secret, space-separated; each signature is the base64 HMAC-SHA256 of
// "<id>.<timestamp>.<body>".
func (s *Signer) Sign(id string, timestamp int64, body []byte) string {
	var b strings.Builder
	for i, key := range s.keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac(key, id, timestamp, body)))
	}
	return b.String()
}

func mac(key []byte, id string, timestamp int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// WebhookID is a delivery's webhook-id: the same for every attempt and
// redrive of one event's delivery to one recipient, and different for
// another event type, event or recipient (ids and types cannot hold '/').
func WebhookID(ev fanout.Event, r fanout.Recipient) string {
	return ev.Type + "/" + ev.ID + "/" + r.ID
}

// Verify is what a receiver does with a delivery (for tests, and for Go
// receivers without a Standard Webhooks library): the signature header
// must hold a v1 signature of id, timestamp and body by one of secrets, and
// the timestamp must be within tolerance of now.
func Verify(secrets []string, id, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not a number")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook-timestamp is outside the tolerance")
	}
	for _, sec := range secrets {
		key, err := parseSecret(sec)
		if err != nil {
			return err
		}
		want := mac(key, id, ts, body)
		for _, sig := range strings.Fields(signature) {
			b64, ok := strings.CutPrefix(sig, "v1,")
			if !ok {
				continue
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return errors.New("no valid signature")
}
