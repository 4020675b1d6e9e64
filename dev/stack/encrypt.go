package stack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fanout/fanout/internal/codec"
)

// CodecKeysFile is the file in a stack's Dir that holds its key with
// Options.Encrypt (one "id:base64" line, FANOUT_CODEC_KEYS_FILE's format).
const CodecKeysFile = "codec-keys"

// devKeyID is the id of the key a stack generates.
const devKeyID = "dev1"

// setupKeyring reads the stack's key from Dir/codec-keys, or generates a
// random one there (mode 0600) on the first start: a kept Dir (task dev's
// .dev) reads its old histories, staged batches and dead letters on the
// next run, and a temporary Dir gets a fresh key each run.
func (s *Stack) setupKeyring() error {
	path := filepath.Join(s.Dir, CodecKeysFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b = []byte(codec.FormatKey(codec.NewKey(devKeyID)) + "\n")
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		return fmt.Errorf("stack codec keys: %w", err)
	}
	keys, err := codec.ParseKeyFile(string(b))
	if err != nil {
		return fmt.Errorf("stack codec keys %s: %w", path, err)
	}
	if s.Keyring, err = codec.New(keys...); err != nil {
		return fmt.Errorf("stack codec keys %s: %w", path, err)
	}
	s.KeysFile = path
	return nil
}
