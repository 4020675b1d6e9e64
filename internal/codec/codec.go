// Package codec encrypts what fanout stores outside its own processes:
// Temporal payloads (PayloadCodec, for the clients' and workers' data
// converter), big events' staged batches in Redis and the sealed part of
// the deliveries dead letters in Kafka (Seal, Open). It is AES-256-GCM with
// key ids, so keys rotate: a Keyring has one active key, which encrypts, and
// any number of older keys, which only decrypt.
//
// A sealed value is a small versioned header, the key id and a random
// nonce, then the ciphertext and its tag:
//
//	0xFE  version (1)  len(key id)  key id  nonce (12 bytes)  ciphertext+tag (16 bytes)
//
// The header is authenticated (additional data of the GCM seal), so neither
// the version nor the key id can be changed without Open failing.
package codec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

// Metadata of an encrypted Temporal payload (as in temporalio/samples-go's
// encryption sample).
const (
	// MetadataEncodingEncrypted is the payload's "encoding".
	MetadataEncodingEncrypted = "binary/encrypted"
	// MetadataEncryptionKeyID names the key that encrypted the payload.
	MetadataEncryptionKeyID = "encryption-key-id"
)

// Header of a sealed value.
const (
	magic     = 0xFE // never the first byte of UTF-8 text or JSON
	version1  = 1
	nonceSize = 12
	tagSize   = 16
	// MaxKeyIDLen bounds a key id.
	MaxKeyIDLen = 64
	// Overhead is the most Seal adds to a plaintext.
	Overhead = 3 + MaxKeyIDLen + nonceSize + tagSize
)

// keyIDGrammar: a letter or digit, then up to 63 letters, digits, '.', '_'
// or '-'. It never holds ':' (the separator of FANOUT_CODEC_KEYS) nor ','.
var keyIDGrammar = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidateKeyID checks a key id against the grammar. Its error does not
// quote the id (a misplaced secret must not reach a log).
func ValidateKeyID(id string) error {
	if !keyIDGrammar.MatchString(id) {
		return fmt.Errorf("key id of %d bytes is not 1-%d letters, digits, '.', '_' or '-' starting with a letter or digit", len(id), MaxKeyIDLen)
	}
	return nil
}

// Key is one AES-256 key and its id. Printing a Key never shows Secret.
type Key struct {
	ID     string
	Secret []byte
}

// String shows the key id only.
func (k Key) String() string { return "codec.Key{ID: " + k.ID + ", Secret: [redacted]}" }

// GoString shows the key id only (%#v).
func (k Key) GoString() string { return k.String() }

// Errors of Open and Decode.
var (
	// ErrNotSealed: the value does not start with a sealed value's header.
	ErrNotSealed = errors.New("codec: not a sealed value")
	// ErrUnknownKey: the value was sealed with a key id the keyring lacks.
	ErrUnknownKey = errors.New("codec: unknown key id")
	// ErrDecrypt: the ciphertext, its tag or its header was changed, or the
	// key under that id is not the one that sealed it.
	ErrDecrypt = errors.New("codec: decryption failed (tampered value or wrong key)")
)

// Keyring seals with its active key and opens with any of its keys. It is
// safe for concurrent use.
type Keyring struct {
	active string
	ids    []string // in the order given, active first
	aeads  map[string]cipher.AEAD
}

// New returns a keyring of keys; the first is the active one (the one that
// seals). Every key must have a valid, distinct id and KeySize bytes.
// Errors name the key by position and id, never by its bytes.
func New(keys ...Key) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("codec: no keys")
	}
	k := &Keyring{active: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for i, key := range keys {
		if err := ValidateKeyID(key.ID); err != nil {
			return nil, fmt.Errorf("codec: key %d: %w", i+1, err)
		}
		if _, dup := k.aeads[key.ID]; dup {
			return nil, fmt.Errorf("codec: key %d: id %q given twice", i+1, key.ID)
		}
		if len(key.Secret) != KeySize {
			return nil, fmt.Errorf("codec: key %d (id %q): %d bytes, want %d (AES-256)", i+1, key.ID, len(key.Secret), KeySize)
		}
		block, err := aes.NewCipher(key.Secret)
		if err != nil {
			return nil, fmt.Errorf("codec: key %d (id %q): %w", i+1, key.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("codec: key %d (id %q): %w", i+1, key.ID, err)
		}
		k.aeads[key.ID] = aead
		k.ids = append(k.ids, key.ID)
	}
	return k, nil
}

// NewKey returns a random key under id (for development and tests; in
// production generate one with `openssl rand -base64 32`).
func NewKey(id string) Key {
	secret := make([]byte, KeySize)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	return Key{ID: id, Secret: secret}
}

// ActiveKeyID is the id of the key that seals.
func (k *Keyring) ActiveKeyID() string { return k.active }

// KeyIDs are the ids of every key, the active one first.
func (k *Keyring) KeyIDs() []string { return slices.Clone(k.ids) }

// Seal encrypts plaintext with the active key under a fresh random nonce.
func (k *Keyring) Seal(plaintext []byte) []byte {
	hdr := header(k.active)
	out := make([]byte, len(hdr), len(hdr)+nonceSize+len(plaintext)+tagSize)
	copy(out, hdr)
	out = out[:len(hdr)+nonceSize]
	_, _ = rand.Read(out[len(hdr):]) // never fails (crypto/rand)
	return k.aeads[k.active].Seal(out, out[len(hdr):], plaintext, hdr)
}

func header(id string) []byte {
	return append([]byte{magic, version1, byte(len(id))}, id...)
}

// IsSealed reports whether b starts like a sealed value (it may still fail
// to open).
func IsSealed(b []byte) bool { return len(b) >= 2 && b[0] == magic && b[1] == version1 }

// KeyIDOf is the key id in the header of a sealed value.
func KeyIDOf(b []byte) (string, error) {
	id, _, err := parse(b)
	return id, err
}

// parse splits a sealed value into its key id and the header's length.
func parse(b []byte) (id string, hdrLen int, err error) {
	if len(b) < 3 || b[0] != magic {
		return "", 0, ErrNotSealed
	}
	if b[1] != version1 {
		return "", 0, fmt.Errorf("codec: sealed value of version %d, this build reads %d", b[1], version1)
	}
	n := int(b[2])
	hdrLen = 3 + n
	if n == 0 || n > MaxKeyIDLen || len(b) < hdrLen+nonceSize+tagSize {
		return "", 0, errors.New("codec: truncated or malformed sealed value")
	}
	id = string(b[3:hdrLen])
	if err := ValidateKeyID(id); err != nil {
		return "", 0, fmt.Errorf("codec: sealed value: %w", err)
	}
	return id, hdrLen, nil
}

// Open decrypts a value Seal returned, with the key its header names.
func (k *Keyring) Open(sealed []byte) ([]byte, error) {
	if k == nil {
		return nil, errors.New("codec: no keys (FANOUT_CODEC_KEYS) to open a sealed value")
	}
	id, hdrLen, err := parse(sealed)
	if err != nil {
		return nil, err
	}
	aead, ok := k.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w %q (this keyring has %s): add that key to FANOUT_CODEC_KEYS or FANOUT_CODEC_KEYS_FILE", ErrUnknownKey, id, strings.Join(k.ids, ", "))
	}
	nonce := sealed[hdrLen : hdrLen+nonceSize]
	pt, err := aead.Open(nil, nonce, sealed[hdrLen+nonceSize:], sealed[:hdrLen])
	if err != nil {
		return nil, fmt.Errorf("%w: key id %q", ErrDecrypt, id)
	}
	return pt, nil
}

// PayloadCodec is the Temporal payload codec of the keyring: each payload
// is marshalled and sealed into one with metadata encoding
// "binary/encrypted" and encryption-key-id. Decode leaves payloads of any
// other encoding alone, so histories written before encryption still read.
func (k *Keyring) PayloadCodec() converter.PayloadCodec { return payloadCodec{k} }

// DataConverter is Temporal's default data converter with the keyring's
// payload codec.
func (k *Keyring) DataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), k.PayloadCodec())
}

type payloadCodec struct{ k *Keyring }

// Encode seals each payload with the active key.
func (c payloadCodec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if p == nil {
			continue
		}
		b, err := proto.Marshal(p)
		if err != nil {
			return payloads, fmt.Errorf("codec: marshal payload: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(MetadataEncodingEncrypted),
				MetadataEncryptionKeyID:    []byte(c.k.active),
			},
			Data: c.k.Seal(b),
		}
	}
	return out, nil
}

// Decode opens each encrypted payload; others pass unchanged.
func (c payloadCodec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if p == nil || string(p.GetMetadata()[converter.MetadataEncoding]) != MetadataEncodingEncrypted {
			out[i] = p
			continue
		}
		id, err := KeyIDOf(p.GetData())
		if err != nil {
			return payloads, err
		}
		if meta := p.GetMetadata()[MetadataEncryptionKeyID]; !bytes.Equal(meta, []byte(id)) {
			return payloads, fmt.Errorf("codec: payload metadata names key id %.64q, its data key id %q", meta, id)
		}
		b, err := c.k.Open(p.GetData())
		if err != nil {
			return payloads, err
		}
		dp := &commonpb.Payload{}
		if err := proto.Unmarshal(b, dp); err != nil {
			return payloads, fmt.Errorf("codec: decrypted payload: %w", err)
		}
		out[i] = dp
	}
	return out, nil
}
