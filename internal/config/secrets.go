package config

import (
	"fmt"
	"os"
	"strings"
)

// maxSecretFileBytes bounds a secret file: keys, passwords and tokens are
// short; a larger file is a wrong path (a log, a binary), not a secret.
const maxSecretFileBytes = 64 << 10

// ReadSecretFile reads the secret file named by the variable name (a
// Kubernetes Secret mounted as a file), trimmed of surrounding white space.
// Its errors name the variable and the path, never the content.
func ReadSecretFile(name, path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %s is not a regular file", name, path)
	}
	if fi.Size() > maxSecretFileBytes {
		return "", fmt.Errorf("%s: %s is %d bytes, over %d: not a secret file", name, path, fi.Size(), maxSecretFileBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", name, path)
	}
	return s, nil
}

// SecretList splits a list of secrets given one per line or comma-separated.
func SecretList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == ',' || r == '\r' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
