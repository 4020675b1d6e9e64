package demo

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// TypesYAML is the demo's types file as shipped (dev/demo/types.yaml).
//
//go:embed types.yaml
var TypesYAML []byte

// The demo file's event types.
const (
	// NewPostType: a new post reaches its author's followers, rows of a
	// PostgreSQL table (payload: author_id, title).
	NewPostType = "new_post"
	// DigestType: a digest reaches its subscribers, from the demo
	// recipients source over HTTP (payload: audience, subject).
	DigestType = "digest"
)

// TypesFileName is the name WriteTypes gives the file.
const TypesFileName = "types.yaml"

// DefaultSourceURL is the demo recipients source's base URL in the shipped
// file: task dev's default -demo-port.
const DefaultSourceURL = "http://127.0.0.1:8090"

// Files of the types file's secrets, relative to its directory.
const (
	FollowersDSNFile = "secrets/followers-dsn"
)

// SigningSecretFile is the file of a type's signing secret, relative to
// the types file's directory.
func SigningSecretFile(typ string) string { return "secrets/" + typ + "-signing" }

// SigningSecrets makes sure each type's signing secret is in dir (the
// types file's directory), generating it there on the first call (random,
// mode 0600) and keeping it after, so a receiver set up with it keeps
// working across runs. It returns each type's secret file by type.
func SigningSecrets(dir string) (map[string]string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o700); err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, typ := range []string{NewPostType, DigestType} {
		p := filepath.Join(dir, SigningSecretFile(typ))
		if err := keepSecret(p); err != nil {
			return nil, err
		}
		files[typ] = p
	}
	return files, nil
}

// WriteTypes writes the demo's types file into dir and returns its path
// (dir/types.yaml): the shipped bytes, with the recipients source's
// address alone rewritten when sourceURL is not DefaultSourceURL. Beside
// it, dir/secrets/followers-dsn holds dsn, and each type's signing secret
// is made by SigningSecrets.
func WriteTypes(dir, sourceURL, dsn string) (string, error) {
	if dsn == "" {
		return "", errors.New("no DSN for the followers")
	}
	text := TypesYAML
	if sourceURL != DefaultSourceURL {
		old := []byte("url: " + DefaultSourceURL + "/")
		if bytes.Count(text, old) != 1 {
			return "", fmt.Errorf("the shipped types file has not one %q to rewrite", old)
		}
		text = bytes.Replace(text, old, []byte("url: "+sourceURL+"/"), 1)
	}
	if _, err := SigningSecrets(dir); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, FollowersDSNFile), []byte(dsn+"\n"), 0o600); err != nil {
		return "", err
	}
	path := filepath.Join(dir, TypesFileName)
	return path, os.WriteFile(path, text, 0o644)
}

// keepSecret keeps the Standard Webhooks secret in path, or generates one
// there.
func keepSecret(path string) error {
	if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return nil
	} else if err != nil && !os.IsNotExist(err) {
		return err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	return os.WriteFile(path, []byte("whsec_"+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}
