package workers

import (
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout/activities"
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
func WithEncryption(k *Keyring) func(*client.Options) { return codec.WithEncryption(k) }

// Sealer is k as the activities' and dead letters' Sealer (Options.Sealer,
// activities.DeadLetterWriter.WithSealer): nil, all in clear, when k is
// nil, never a typed nil.
func Sealer(k *Keyring) activities.Sealer {
	if k == nil {
		return nil
	}
	return k
}
