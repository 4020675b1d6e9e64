package codecserver

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fanout/fanout/internal/config"
)

// Config is the codec server's environment (read with config.Load). The
// codec's keys come from the codec's own variables (FANOUT_CODEC_KEYS...).
type Config struct {
	// Token holds the accepted bearer token(s), comma- or newline-separated
	// (two while rotating: add the new one, move the callers, drop the old).
	Token string `env:"FANOUT_CODEC_TOKEN"`
	// TokenFile is a file holding the token(s), one a line (a mounted
	// secret); set it or Token, not both.
	TokenFile string `env:"FANOUT_CODEC_TOKEN_FILE"`
	// CORSOrigins are the origins of the Temporal UI that may call the
	// server from a browser, e.g. https://temporal.example.com.
	CORSOrigins []string `env:"FANOUT_CODEC_CORS_ORIGINS" envSeparator:","`
	// HostsAllowed are the host names (no port) a server without a token
	// (-insecure-no-auth) answers for besides loopback ones (localhost,
	// 127.0.0.0/8, ::1): any other Host header is refused, so a page on a
	// DNS name rebound to 127.0.0.1 cannot read decrypted payloads.
	HostsAllowed []string `env:"FANOUT_CODEC_HOSTS" envSeparator:","`
	LogLevel     string   `env:"FANOUT_LOG_LEVEL"`
}

// maxTokenFileBytes bounds the token file: a token file is small.
const maxTokenFileBytes = 64 << 10

// SetDefaults sets the log level's default, every process's (config.Load
// calls it).
func (c *Config) SetDefaults() { c.LogLevel = config.DefaultLogLevel }

// Validate checks the variables; it reads the token file, and names the
// variable at fault, never a token.
func (c *Config) Validate() error {
	if _, err := c.Tokens(); err != nil {
		return err
	}
	for _, o := range c.CORSOrigins {
		if err := ValidateOrigin(strings.TrimSpace(o)); err != nil {
			return fmt.Errorf("FANOUT_CODEC_CORS_ORIGINS: %w", err)
		}
	}
	for _, h := range c.Hosts() {
		if err := ValidateHost(h); err != nil {
			return fmt.Errorf("FANOUT_CODEC_HOSTS: %w", err)
		}
	}
	return nil
}

// Hosts are HostsAllowed without surrounding white space.
func (c *Config) Hosts() []string { return trimmed(c.HostsAllowed) }

// Origins are CORSOrigins without surrounding white space.
func (c *Config) Origins() []string { return trimmed(c.CORSOrigins) }

// trimmed is ss without surrounding white space and without empty items.
func trimmed(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Tokens are the configured tokens (none when neither variable is set).
func (c *Config) Tokens() ([]string, error) {
	raw, name := c.Token, "FANOUT_CODEC_TOKEN"
	if c.TokenFile != "" {
		if c.Token != "" {
			return nil, errors.New("FANOUT_CODEC_TOKEN_FILE: set together with FANOUT_CODEC_TOKEN; use one")
		}
		name = "FANOUT_CODEC_TOKEN_FILE"
		fi, err := os.Stat(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if !fi.Mode().IsRegular() || fi.Size() > maxTokenFileBytes {
			return nil, fmt.Errorf("%s: %s is not a regular file of at most %d bytes", name, c.TokenFile, maxTokenFileBytes)
		}
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		raw = string(b)
		if strings.TrimSpace(raw) == "" {
			return nil, fmt.Errorf("%s: %s is empty", name, c.TokenFile)
		}
	}
	var out []string
	for i, t := range strings.FieldsFunc(raw, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if strings.ContainsAny(t, " \t") {
			return nil, fmt.Errorf("%s: token %d contains white space", name, i+1)
		}
		if len(t) < 16 {
			return nil, fmt.Errorf("%s: token %d is shorter than 16 characters (use e.g. openssl rand -hex 32)", name, i+1)
		}
		out = append(out, t)
	}
	return out, nil
}
