package codec_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout/internal/codec"
)

func keyring(t testing.TB, keys ...codec.Key) *codec.Keyring {
	t.Helper()
	k, err := codec.New(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fixedKey is a key of repeated byte b under id.
func fixedKey(id string, b byte) codec.Key {
	return codec.Key{ID: id, Secret: bytes.Repeat([]byte{b}, codec.KeySize)}
}

// TestSealOpen: a sealed value opens to the plaintext, carries the active
// key id in clear and not the plaintext, and two seals of the same
// plaintext differ (random nonces).
func TestSealOpen(t *testing.T) {
	k := keyring(t, fixedKey("k1", 1))
	for _, pt := range [][]byte{nil, []byte("x"), []byte(`[{"id":"r1","address":"https://secret.example/hook"}]`), bytes.Repeat([]byte("a"), 1<<20)} {
		s := k.Seal(pt)
		if !codec.IsSealed(s) {
			t.Fatalf("Seal(%d bytes) does not look sealed", len(pt))
		}
		if id, err := codec.KeyIDOf(s); err != nil || id != "k1" {
			t.Fatalf("KeyIDOf = %q, %v; want k1", id, err)
		}
		if len(pt) > 4 && bytes.Contains(s, pt) {
			t.Fatalf("sealed value contains its plaintext")
		}
		if len(s) > len(pt)+codec.Overhead {
			t.Fatalf("sealed %d bytes into %d, over the overhead %d", len(pt), len(s), codec.Overhead)
		}
		got, err := k.Open(s)
		if err != nil || !bytes.Equal(got, pt) {
			t.Fatalf("Open = %d bytes, %v; want the %d bytes sealed", len(got), err, len(pt))
		}
		if bytes.Equal(k.Seal(pt), s) {
			t.Fatal("two seals of the same plaintext are equal: the nonce is not fresh")
		}
	}
}

// TestRotation: after rotating to a new active key, values sealed with the
// old key still open, new values carry the new key id, and a keyring
// without the old key refuses the old values naming the missing key id.
func TestRotation(t *testing.T) {
	a, b := fixedKey("a", 1), fixedKey("b", 2)
	old := keyring(t, a)
	sealedA := old.Seal([]byte("before rotation"))
	rotated := keyring(t, b, a)
	if rotated.ActiveKeyID() != "b" || strings.Join(rotated.KeyIDs(), ",") != "b,a" {
		t.Fatalf("active %q, ids %v", rotated.ActiveKeyID(), rotated.KeyIDs())
	}
	if got, err := rotated.Open(sealedA); err != nil || string(got) != "before rotation" {
		t.Fatalf("rotated keyring opens the old value: %q, %v", got, err)
	}
	sealedB := rotated.Seal([]byte("after"))
	if id, _ := codec.KeyIDOf(sealedB); id != "b" {
		t.Fatalf("new value sealed with %q, want b", id)
	}
	onlyB := keyring(t, b)
	_, err := onlyB.Open(sealedA)
	if !errors.Is(err, codec.ErrUnknownKey) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("keyring without a opens a's value: %v; want ErrUnknownKey naming \"a\"", err)
	}
	// The old keyring cannot read what the new key sealed.
	if _, err := old.Open(sealedB); !errors.Is(err, codec.ErrUnknownKey) {
		t.Fatalf("old keyring opened b's value: %v", err)
	}
}

// TestTampered: changing any byte of a sealed value (header, nonce,
// ciphertext or tag), truncating it, or opening it with another key under
// the same id fails; nothing is returned.
func TestTampered(t *testing.T) {
	k := keyring(t, fixedKey("k1", 1))
	s := k.Seal([]byte("the message text"))
	for i := range s {
		bad := bytes.Clone(s)
		bad[i] ^= 0x01
		if pt, err := k.Open(bad); err == nil || pt != nil {
			t.Fatalf("byte %d flipped: opened %q", i, pt)
		}
	}
	for n := range len(s) {
		if _, err := k.Open(s[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: opened", n)
		}
	}
	other := keyring(t, fixedKey("k1", 9))
	if _, err := other.Open(s); !errors.Is(err, codec.ErrDecrypt) {
		t.Fatalf("another key under the same id: %v, want ErrDecrypt", err)
	}
	if _, err := k.Open([]byte(`[{"id":"r1"}]`)); !errors.Is(err, codec.ErrNotSealed) {
		t.Fatalf("clear JSON: %v, want ErrNotSealed", err)
	}
}

// TestNewRefuses: bad keys are refused naming the key by position and id,
// never printing its bytes; a Key never prints its secret.
func TestNewRefuses(t *testing.T) {
	secret := bytes.Repeat([]byte{0x41}, 31) // "AAAA..."
	cases := map[string][]codec.Key{
		"no keys":     nil,
		"short":       {{ID: "k1", Secret: secret}},
		"bad id":      {{ID: "k:1", Secret: bytes.Repeat([]byte{1}, 32)}},
		"empty id":    {{ID: "", Secret: bytes.Repeat([]byte{1}, 32)}},
		"long id":     {{ID: strings.Repeat("a", 65), Secret: bytes.Repeat([]byte{1}, 32)}},
		"duplicate":   {fixedKey("k1", 1), fixedKey("k1", 2)},
		"second long": {fixedKey("k1", 1), {ID: "k2", Secret: append(secret, 1, 2)}},
	}
	for name, keys := range cases {
		_, err := codec.New(keys...)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), "AAAA") {
			t.Errorf("%s: error shows key bytes: %v", name, err)
		}
	}
	k := codec.Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k)} {
		if strings.Contains(s, "0123456789") {
			t.Fatalf("a Key prints its secret: %s", s)
		}
	}
}

// TestPayloadCodec: through Temporal's codec data converter, a value is
// stored encrypted (encoding binary/encrypted, the key id in metadata, no
// clear text in the data) and reads back; a payload written without
// encryption still reads (old histories); a key rotation still reads the
// old payloads.
func TestPayloadCodec(t *testing.T) {
	a := keyring(t, fixedKey("a", 1))
	dc := a.DataConverter()
	type msg struct{ Address, Text string }
	in := msg{Address: "https://secret.example/hook", Text: "hello secret"}
	p, err := dc.ToPayload(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p.Metadata[converter.MetadataEncoding]); got != codec.MetadataEncodingEncrypted {
		t.Fatalf("encoding %q", got)
	}
	if got := string(p.Metadata[codec.MetadataEncryptionKeyID]); got != "a" {
		t.Fatalf("key id %q", got)
	}
	if bytes.Contains(p.Data, []byte("secret")) {
		t.Fatal("payload data holds clear text")
	}
	var out msg
	if err := dc.FromPayload(p, &out); err != nil || out != in {
		t.Fatalf("FromPayload = %+v, %v", out, err)
	}
	clear, _ := converter.GetDefaultDataConverter().ToPayload(in)
	out = msg{}
	if err := dc.FromPayload(clear, &out); err != nil || out != in {
		t.Fatalf("clear payload through the codec: %+v, %v", out, err)
	}
	rotated := keyring(t, fixedKey("b", 2), fixedKey("a", 1)).DataConverter()
	out = msg{}
	if err := rotated.FromPayload(p, &out); err != nil || out != in {
		t.Fatalf("rotated keyring reads a's payload: %+v, %v", out, err)
	}
	if err := keyring(t, fixedKey("b", 2)).DataConverter().FromPayload(p, &out); err == nil || !strings.Contains(err.Error(), "unknown key id") {
		t.Fatalf("keyring without a: %v", err)
	}
	// Nil payloads pass both ways.
	pc := a.PayloadCodec()
	if enc, err := pc.Encode([]*commonpb.Payload{nil}); err != nil || enc[0] != nil {
		t.Fatalf("Encode(nil) = %v, %v", enc, err)
	}
	if dec, err := pc.Decode([]*commonpb.Payload{nil}); err != nil || dec[0] != nil {
		t.Fatalf("Decode(nil) = %v, %v", dec, err)
	}
}

// TestPayloadCodecMetadataMismatch: a payload whose metadata key id differs
// from the one its data was sealed with is refused (the metadata is not
// authenticated, the header is).
func TestPayloadCodecMetadataMismatch(t *testing.T) {
	k := keyring(t, fixedKey("a", 1), fixedKey("b", 2))
	enc, err := k.PayloadCodec().Encode([]*commonpb.Payload{{Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	enc[0].Metadata[codec.MetadataEncryptionKeyID] = []byte("b")
	if _, err := k.PayloadCodec().Decode(enc); err == nil {
		t.Fatal("decoded a payload whose metadata names another key")
	}
}

// TestParseKeys: the two formats of keys (variable and file), standard and
// URL-safe base64, and errors that never show a secret.
func TestParseKeys(t *testing.T) {
	k1, k2 := codec.NewKey("k1"), codec.NewKey("k-2.x_y")
	keys, err := codec.ParseKeys(" " + codec.FormatKey(k1) + " , " + codec.FormatKey(k2))
	if err != nil || len(keys) != 2 || keys[0].ID != "k1" || !bytes.Equal(keys[1].Secret, k2.Secret) {
		t.Fatalf("ParseKeys = %v, %v", keys, err)
	}
	file := "# fanout keys\n\n" + codec.FormatKey(k1) + "\r\n  " + codec.FormatKey(k2) + "\n"
	keys, err = codec.ParseKeyFile(file)
	if err != nil || len(keys) != 2 || keys[1].ID != "k-2.x_y" {
		t.Fatalf("ParseKeyFile = %v, %v", keys, err)
	}
	raw := "k1:" + strings.TrimRight(strings.NewReplacer("+", "-", "/", "_").Replace(codec.FormatKey(k1)[3:]), "=")
	if keys, err := codec.ParseKeys(raw); err != nil || !bytes.Equal(keys[0].Secret, k1.Secret) {
		t.Fatalf("raw URL base64: %v, %v", keys, err)
	}
	secret := codec.FormatKey(k1)[3:]
	for _, bad := range []string{"", secret, "k1:" + secret[:20], "k 1:" + secret, ":" + secret, "k1:" + secret + ",", "k1:" + secret + "!!"} {
		_, err := codec.ParseKeys(bad)
		if err == nil {
			t.Errorf("ParseKeys accepted %q", bad)
			continue
		}
		if strings.Contains(err.Error(), secret[:12]) {
			t.Errorf("error shows the secret: %v", err)
		}
	}
}

// FuzzOpen: whatever bytes Open is given, it never panics, and it returns
// a plaintext only for a value the keyring sealed (a forged or changed one
// fails); a sealed value of the fuzzed plaintext always opens to it.
func FuzzOpen(f *testing.F) {
	k := keyring(f, fixedKey("k1", 1), fixedKey("k2", 2))
	// Seeds shaped like genuine seals (valid header, nonce and tag sizes)
	// under the same key ids, by other keys: the fuzzer starts from the
	// format without holding a value the keyring would open.
	forger := keyring(f, fixedKey("k1", 7))
	f.Add(forger.Seal([]byte("hello")))
	f.Add(forger.Seal(nil))
	f.Add([]byte{})
	f.Add([]byte{0xFE, 1, 2, 'k', '1'})
	f.Add([]byte(`[{"id":"r1"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if pt, err := k.Open(b); err == nil {
			// Only a genuine seal opens; the fuzzer cannot forge the tag.
			t.Fatalf("opened %d fuzzed bytes to %q", len(b), pt)
		}
		_, _ = codec.KeyIDOf(b)
		if pt, err := k.Open(k.Seal(b)); err != nil || !bytes.Equal(pt, b) {
			t.Fatalf("round trip of %d bytes: %v", len(b), err)
		}
	})
}

// FuzzDecode: a payload with the encrypted encoding and any data and key
// id never panics Decode and never decodes (only Encode's output does, and
// the fuzzer holds none made with the keyring's key).
func FuzzDecode(f *testing.F) {
	pc := keyring(f, fixedKey("k1", 1)).PayloadCodec()
	// A seed shaped like a genuine payload, sealed by another key under k1.
	enc, _ := keyring(f, fixedKey("k1", 7)).PayloadCodec().Encode([]*commonpb.Payload{{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`"x"`)}})
	f.Add(enc[0].Data, []byte("k1"))
	f.Add([]byte{0xFE, 1}, []byte(""))
	f.Fuzz(func(t *testing.T, data, keyID []byte) {
		p := &commonpb.Payload{Metadata: map[string][]byte{
			converter.MetadataEncoding: []byte(codec.MetadataEncodingEncrypted), codec.MetadataEncryptionKeyID: keyID,
		}, Data: data}
		if out, err := pc.Decode([]*commonpb.Payload{p}); err == nil {
			t.Fatalf("decoded a fuzzed payload: %v", out)
		}
	})
}
