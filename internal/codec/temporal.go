package codec

import (
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// WithEncryption has a Temporal client (and the workers built on it)
// encrypt every payload with k, and failures' messages and stack traces too;
// nil changes nothing. workers.WithEncryption is its public name; it lives
// here so that the connection code (internal/config.DialTemporal) applies
// it without importing a stage.
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
