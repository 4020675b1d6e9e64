package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/fanout/fanout/internal/codec"
)

// TestLoadKeyring: no variables mean no encryption; keys come from
// FANOUT_CODEC_KEYS and FANOUT_CODEC_KEYS_FILE (in that order), the first
// is active unless FANOUT_CODEC_KEY_ID names another, and every key opens
// what the others sealed before a rotation.
func TestLoadKeyring(t *testing.T) {
	t.Setenv("FANOUT_CODEC_KEYS", "")
	t.Setenv("FANOUT_CODEC_KEYS_FILE", "")
	t.Setenv("FANOUT_CODEC_KEY_ID", "")
	if k, err := LoadKeyring(); err != nil || k != nil {
		t.Fatalf("no keys: %v, %v; want nil, nil", k, err)
	}
	a, b, c := codec.NewKey("a"), codec.NewKey("b"), codec.NewKey("c-2025")
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte("# rotated 2025\n"+codec.FormatKey(c)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FANOUT_CODEC_KEYS", codec.FormatKey(a)+","+codec.FormatKey(b))
	t.Setenv("FANOUT_CODEC_KEYS_FILE", file)
	k, err := LoadKeyring()
	if err != nil {
		t.Fatal(err)
	}
	if k.ActiveKeyID() != "a" || strings.Join(k.KeyIDs(), ",") != "a,b,c-2025" {
		t.Fatalf("active %s, ids %v", k.ActiveKeyID(), k.KeyIDs())
	}
	sealedByA := k.Seal([]byte("x"))
	t.Setenv("FANOUT_CODEC_KEY_ID", "c-2025")
	k, err = LoadKeyring()
	if err != nil || k.ActiveKeyID() != "c-2025" {
		t.Fatalf("FANOUT_CODEC_KEY_ID=c-2025: %v, %v", k, err)
	}
	if pt, err := k.Open(sealedByA); err != nil || string(pt) != "x" {
		t.Fatalf("after the rotation a's value: %q, %v", pt, err)
	}
	// The file alone.
	t.Setenv("FANOUT_CODEC_KEYS", "")
	t.Setenv("FANOUT_CODEC_KEY_ID", "")
	if k, err = LoadKeyring(); err != nil || k.ActiveKeyID() != "c-2025" {
		t.Fatalf("file alone: %v, %v", k, err)
	}
}

// TestLoadKeyringErrors: each bad setting fails naming its variable, and
// no error shows key material.
func TestLoadKeyringErrors(t *testing.T) {
	k := codec.NewKey("k1")
	secret := codec.FormatKey(k)[len("k1:"):]
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		keys, file, id, want string
	}{
		{keys: secret, want: "FANOUT_CODEC_KEYS: entry 1"},                             // the id forgotten
		{keys: "k1:" + secret[:30], want: "FANOUT_CODEC_KEYS: entry 1: key id \"k1\""}, // short key
		{keys: codec.FormatKey(k) + ",k1:" + secret, want: "given twice"},
		{keys: "bad id!:" + secret, want: "FANOUT_CODEC_KEYS: entry 1"},
		{keys: codec.FormatKey(k), id: "k2", want: "FANOUT_CODEC_KEY_ID: \"k2\" is none of the keys' ids (k1)"},
		{keys: codec.FormatKey(k), id: "k 2", want: "FANOUT_CODEC_KEY_ID: key id of 3 bytes"},
		{id: "k1", want: "FANOUT_CODEC_KEY_ID: set, but no keys"},
		{file: filepath.Join(dir, "missing"), want: "FANOUT_CODEC_KEYS_FILE: stat"},
		{file: write("empty", "# nothing\n\n"), want: "FANOUT_CODEC_KEYS_FILE: " + filepath.Join(dir, "empty") + " holds no key"},
		{file: write("bad", codec.FormatKey(k)+"\n"+secret+"\n"), want: "FANOUT_CODEC_KEYS_FILE: " + filepath.Join(dir, "bad") + ": line 2"},
	}
	for _, c := range cases {
		t.Setenv("FANOUT_CODEC_KEYS", c.keys)
		t.Setenv("FANOUT_CODEC_KEYS_FILE", c.file)
		t.Setenv("FANOUT_CODEC_KEY_ID", c.id)
		_, err := LoadKeyring()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("keys %.12q file %q id %q: %v; want %q", c.keys, c.file, c.id, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), secret[:16]) {
			t.Errorf("error shows the key: %v", err)
		}
		var cfg Codec
		cfg.Keys, cfg.KeysFile, cfg.KeyID = c.keys, c.file, c.id
		if cfg.Validate() == nil {
			t.Errorf("Validate accepted what LoadKeyring refused: %v", err)
		}
	}
}

// TestWithKeyring: the client options encrypt payloads and failures with
// the keyring, and a nil keyring leaves them alone.
func TestWithKeyring(t *testing.T) {
	var o client.Options
	WithKeyring(nil)(&o)
	if o.DataConverter != nil || o.FailureConverter != nil {
		t.Fatal("a nil keyring changed the options")
	}
	k, err := codec.New(codec.NewKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	WithKeyring(k)(&o)
	p, err := o.DataConverter.ToPayload("an address")
	if err != nil || string(p.Metadata[codec.MetadataEncryptionKeyID]) != "k1" {
		t.Fatalf("payload %v, %v: not encrypted with k1", p, err)
	}
	f := o.FailureConverter.ErrorToFailure(errString("dial https://secret.example/hook"))
	if strings.Contains(f.GetMessage(), "secret.example") || f.GetEncodedAttributes() == nil {
		t.Fatalf("failure message in clear: %q", f.GetMessage())
	}
	if back := o.FailureConverter.FailureToError(f); !strings.Contains(back.Error(), "secret.example") {
		t.Fatalf("failure does not decode: %v", back)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
