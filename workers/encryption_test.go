package workers_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout/workers"
)

// TestWithEncryption: a main outside this module (which cannot import
// internal/codec) builds the keyring from FANOUT_CODEC_KEYS' format and gets
// payloads and failures encrypted on its client; a bad key is refused
// without showing it.
func TestWithEncryption(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	k, err := workers.ParseKeys("k1:" + key)
	if err != nil {
		t.Fatal(err)
	}
	var o client.Options
	workers.WithEncryption(k)(&o)
	if o.DataConverter == nil || o.FailureConverter == nil {
		t.Fatalf("options %+v: want a data and a failure converter", o)
	}
	p, err := o.DataConverter.ToPayload("https://hooks.example.com/secret-path")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(p.Data), "secret-path") || string(p.Metadata[converter.MetadataEncoding]) != "binary/encrypted" {
		t.Fatalf("payload %q (%s) is not encrypted", p.Data, p.Metadata[converter.MetadataEncoding])
	}
	var back string
	if err := o.DataConverter.FromPayload(p, &back); err != nil || back != "https://hooks.example.com/secret-path" {
		t.Fatalf("round trip: %q %v", back, err)
	}
	// Decoding a failure leaves it encrypted: the SDK decodes a local
	// activity's failure while it is still the failure of the marker it
	// then records in the history.
	f := o.FailureConverter.ErrorToFailure(errors.New("POST https://hooks.example.com/secret-path: 500"))
	if f.GetMessage() != "Encoded failure" || f.GetEncodedAttributes() == nil {
		t.Fatalf("failure %v: want its message encoded", f)
	}
	if err := o.FailureConverter.FailureToError(f); err == nil || !strings.Contains(err.Error(), "secret-path") {
		t.Fatalf("decoded failure: %v, want the message back", err)
	}
	if f.GetMessage() != "Encoded failure" {
		t.Fatalf("decoding the failure left its message in clear in it: %q", f.GetMessage())
	}
	if o.FailureConverter.FailureToError(nil) != nil {
		t.Fatal("a nil failure decoded to an error")
	}
	var none client.Options
	workers.WithEncryption(nil)(&none)
	if none.DataConverter != nil {
		t.Fatal("nil keyring changed the options")
	}
	short := base64.StdEncoding.EncodeToString([]byte("too-short-key-material"))
	if _, err := workers.ParseKeys("k1:" + short); err == nil || strings.Contains(err.Error(), short) {
		t.Fatalf("short key: %v, want an error that does not show it", err)
	}
}
