package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/caarlos0/env/v11"
	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout/internal/codec"
)

// Codec configures encryption (internal/codec) of Temporal payloads, staged
// batches in Redis and dead letters in Kafka. With neither variable of keys
// set, nothing is encrypted.
type Codec struct {
	// Keys: "id:base64,id:base64" (each key 32 random bytes: `openssl rand
	// -base64 32`).
	Keys string `env:"FANOUT_CODEC_KEYS"`
	// KeysFile: a file of one "id:base64" a line (a mounted Secret); its
	// keys come after those of FANOUT_CODEC_KEYS.
	KeysFile string `env:"FANOUT_CODEC_KEYS_FILE"`
	// KeyID names the active key, the one that encrypts (default: the
	// first key); every key decrypts.
	KeyID string `env:"FANOUT_CODEC_KEY_ID"`
}

// Validate checks the keys (Load calls it).
func (c *Codec) Validate() error {
	_, err := c.Keyring()
	return err
}

// Keyring is the configured keyring, nil when no keys are configured. Its
// errors name the variable and the entry, never key material.
func (c Codec) Keyring() (*codec.Keyring, error) {
	var keys []codec.Key
	if strings.TrimSpace(c.Keys) != "" {
		ks, err := codec.ParseKeys(c.Keys)
		if err != nil {
			return nil, fmt.Errorf("FANOUT_CODEC_KEYS: %w", err)
		}
		keys = ks
	}
	if c.KeysFile != "" {
		// A file of only comments holds no key either: ReadSecretFile
		// refuses an empty one, ParseKeyFile returns none for comments.
		text, err := ReadSecretFile("FANOUT_CODEC_KEYS_FILE", c.KeysFile)
		if err != nil {
			return nil, err
		}
		ks, err := codec.ParseKeyFile(text)
		if err != nil {
			return nil, fmt.Errorf("FANOUT_CODEC_KEYS_FILE: %s: %w", c.KeysFile, err)
		}
		if len(ks) == 0 {
			return nil, fmt.Errorf("FANOUT_CODEC_KEYS_FILE: %s holds no key", c.KeysFile)
		}
		keys = append(keys, ks...)
	}
	if len(keys) == 0 {
		if c.KeyID != "" {
			return nil, fmt.Errorf("FANOUT_CODEC_KEY_ID: set, but no keys (FANOUT_CODEC_KEYS, FANOUT_CODEC_KEYS_FILE)")
		}
		return nil, nil
	}
	if c.KeyID != "" {
		if err := codec.ValidateKeyID(c.KeyID); err != nil {
			return nil, fmt.Errorf("FANOUT_CODEC_KEY_ID: %w", err)
		}
		i := slices.IndexFunc(keys, func(k codec.Key) bool { return k.ID == c.KeyID })
		if i < 0 {
			ids := make([]string, len(keys))
			for j, k := range keys {
				ids[j] = k.ID
			}
			return nil, fmt.Errorf("FANOUT_CODEC_KEY_ID: %q is none of the keys' ids (%s)", c.KeyID, strings.Join(ids, ", "))
		}
		keys[0], keys[i] = keys[i], keys[0]
	}
	k, err := codec.New(keys...)
	if err != nil {
		return nil, fmt.Errorf("FANOUT_CODEC_KEYS / FANOUT_CODEC_KEYS_FILE: %w", err)
	}
	return k, nil
}

// LoadKeyring reads the FANOUT_CODEC_* variables: the keyring, or nil when
// no keys are configured (nothing is then encrypted).
func LoadKeyring() (*codec.Keyring, error) {
	var c Codec
	if err := env.Parse(&c); err != nil {
		return nil, fmt.Errorf("config: %w", nameVars(reflect.TypeFor[Codec](), err))
	}
	k, err := c.Keyring()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return k, nil
}

// WithKeyring has a Temporal client (and its workers) encrypt every payload
// with k, and failures' messages and stack traces too (workers.WithEncryption);
// nil changes nothing. DialTemporal applies it with the keyring of the
// environment.
func WithKeyring(k *codec.Keyring) func(*client.Options) { return codec.WithEncryption(k) }
