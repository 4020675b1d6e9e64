package workers

import (
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/fanout/fanout/internal/codec"
)

// Keyring encrypts what fanout stores with AES-256-GCM under key ids: the
// active key encrypts, every key decrypts, so keys rotate. The stock
// binaries build it from FANOUT_CODEC_KEYS / FANOUT_CODEC_KEYS_FILE; a main
// of your own builds it with ParseKeys and hands it to the Temporal client
// (WithEncryption), to Options.Sealer and to the dead-letter writer
// (activities.DeadLetterWriter.WithSealer).
type Keyring = codec.Keyring

// ParseKeys builds a Keyring from "id:base64,id:base64" (FANOUT_CODEC_KEYS'
// format; each key 32 random bytes, e.g. `openssl rand -base64 32`). The
// first key is the active one. Errors never show key material.
func ParseKeys(keys string) (*Keyring, error) {
	ks, err := codec.ParseKeys(keys)
	if err != nil {
		return nil, err
	}
	return codec.New(ks...)
}

// WithEncryption has a Temporal client (and the workers built on it)
// encrypt every payload with k, and failures' messages and stack traces too
// (a transport error may name an address); nil changes nothing. Apply it to
// the client.Options of every client and worker that reads fanout's
// workflows, the starters and redrives included.
func WithEncryption(k *Keyring) func(*client.Options) {
	return func(o *client.Options) {
		if k == nil {
			return
		}
		o.DataConverter = k.DataConverter()
		o.FailureConverter = encryptingFailureConverter(o.DataConverter)
	}
}

// encryptingFailureConverter converts errors to failures whose message and
// stack trace are encoded with dc (encrypted, with a keyring's converter),
// and back. It decodes a copy of each failure: the SDK's default converter
// decodes in place, and the Go SDK (v1.51) decodes a local activity's
// failure while it is still the failure of the marker it records, so
// without the copy every local activity's error message (Prepare, the first
// recipients page, a small event's delivery) went to the history in clear
// next to its encrypted copy.
func encryptingFailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return copyingFailureConverter{temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter: dc, EncodeCommonAttributes: true,
	})}
}

type copyingFailureConverter struct{ converter.FailureConverter }

func (c copyingFailureConverter) FailureToError(f *failurepb.Failure) error {
	if f == nil {
		return nil
	}
	return c.FailureConverter.FailureToError(proto.Clone(f).(*failurepb.Failure))
}
