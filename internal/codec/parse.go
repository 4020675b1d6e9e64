package codec

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// ParseKeys parses keys written "id:base64,id:base64" (FANOUT_CODEC_KEYS).
// Spaces around entries are ignored; empty entries are not allowed. Errors
// name the entry by position and, once it is valid, by id; they never
// quote the secret.
func ParseKeys(s string) ([]Key, error) {
	var keys []Key
	for i, e := range strings.Split(s, ",") {
		k, err := parseEntry(strings.TrimSpace(e))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// ParseKeyFile parses a key file (FANOUT_CODEC_KEYS_FILE, e.g. a Secret
// mounted as a file): one "id:base64" a line; blank lines and lines
// starting with '#' are skipped.
func ParseKeyFile(text string) ([]Key, error) {
	var keys []Key
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := parseEntry(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// parseEntry parses "id:base64".
func parseEntry(e string) (Key, error) {
	id, b64, ok := strings.Cut(e, ":")
	if !ok {
		return Key{}, fmt.Errorf("not id:base64-key")
	}
	id = strings.TrimSpace(id)
	if err := ValidateKeyID(id); err != nil {
		return Key{}, err
	}
	secret, err := decodeBase64(strings.TrimSpace(b64))
	if err != nil || len(secret) != KeySize {
		return Key{}, fmt.Errorf("key id %q: the key is not the base64 of %d bytes (generate one with `openssl rand -base64 32`)", id, KeySize)
	}
	return Key{ID: id, Secret: secret}, nil
}

// decodeBase64 accepts standard and URL-safe base64, padded or not.
func decodeBase64(s string) ([]byte, error) {
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		var b []byte
		if b, err = enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, err
}

// FormatKey is k as an entry of FANOUT_CODEC_KEYS or of a key file.
func FormatKey(k Key) string { return k.ID + ":" + base64.StdEncoding.EncodeToString(k.Secret) }
