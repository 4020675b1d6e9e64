package config

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
)

// TemporalAPIKeyFileVar names a file holding the Temporal API key (a
// mounted Secret), for deployments that keep secrets out of the environment.
// The temporal CLI has no such variable, so it is fanout's own; with it set,
// TEMPORAL_API_KEY must be empty. The file is read again when it changes, so
// a rotated Secret takes effect without a restart.
const TemporalAPIKeyFileVar = "FANOUT_TEMPORAL_API_KEY_FILE"

// applyAPIKeyFile sets opts' credentials from FANOUT_TEMPORAL_API_KEY_FILE,
// and TLS as TEMPORAL_API_KEY would, unless TEMPORAL_TLS=false.
func applyAPIKeyFile(opts *client.Options) error {
	path := os.Getenv(TemporalAPIKeyFileVar)
	if path == "" {
		return nil
	}
	if os.Getenv("TEMPORAL_API_KEY") != "" {
		return fmt.Errorf("%s: set together with TEMPORAL_API_KEY; use one", TemporalAPIKeyFileVar)
	}
	k := &fileKey{path: path}
	if _, err := k.get(context.Background()); err != nil {
		return err
	}
	opts.Credentials = client.NewAPIKeyDynamicCredentials(k.get)
	if opts.ConnectionOptions.TLS == nil && !opts.ConnectionOptions.TLSDisabled {
		opts.ConnectionOptions.TLS = &tls.Config{}
	}
	return nil
}

// fileKey is a secret file read again when its modification time or size
// changes (a Kubernetes Secret update swaps the file behind a symlink).
type fileKey struct {
	path string

	mu    sync.Mutex
	key   string
	mtime time.Time
	size  int64
	next  time.Time // the next stat; at most one a second
}

func (k *fileKey) get(context.Context) (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	if k.key != "" && now.Before(k.next) {
		return k.key, nil
	}
	k.next = now.Add(time.Second)
	fi, err := os.Stat(k.path)
	if err == nil && k.key != "" && fi.ModTime().Equal(k.mtime) && fi.Size() == k.size {
		return k.key, nil
	}
	key, err := ReadSecretFile(TemporalAPIKeyFileVar, k.path)
	if err != nil {
		if k.key != "" {
			return k.key, nil // keep the last good key while the file is swapped
		}
		return "", err
	}
	k.key = key
	if fi != nil {
		k.mtime, k.size = fi.ModTime(), fi.Size()
	}
	return key, nil
}
