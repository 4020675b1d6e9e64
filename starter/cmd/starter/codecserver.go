package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/internal/codecserver"
	"github.com/fanout/fanout/internal/config"
)

// runCodecServer serves the payload codec for the Temporal UI and the
// temporal CLI (internal/codecserver): keys from FANOUT_CODEC_KEYS /
// FANOUT_CODEC_KEYS_FILE / FANOUT_CODEC_KEY_ID, bearer tokens from
// FANOUT_CODEC_TOKEN / FANOUT_CODEC_TOKEN_FILE, the UI's origins from
// FANOUT_CODEC_CORS_ORIGINS.
func runCodecServer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("codec-server", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8234", "listen address (host:port); in production put TLS in front (the UI passes its access token to https endpoints only)")
	noAuth := fs.Bool("insecure-no-auth", false, "serve without a bearer token: loopback addresses only (the dev server's UI has no login, so no token to pass)")
	maxBody := fs.Int64("max-body-bytes", codecserver.DefaultMaxBodyBytes, "largest request body; larger ones get 413")
	h := cli.Help{Name: "starter codec-server", Args: "[flags]", Summary: `starter codec-server serves the payload codec (POST /encode, /decode) to the Temporal UI
and the temporal CLI, so operators see encrypted payloads in clear. It holds the keys: run it
for operators only, behind TLS, with a bearer token (FANOUT_CODEC_TOKEN(_FILE)).`,
		Env: []cli.EnvGroup{{Vars: config.EnvVars(codecserver.Config{}, config.Codec{})}}}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return err
	}
	var cfg codecserver.Config
	if err := config.Load(&cfg); err != nil {
		return err
	}
	log := config.Logger(cfg.LogLevel)
	keys, err := config.LoadKeyring()
	if err != nil {
		return err
	}
	if keys == nil {
		return errors.New("codec-server: no keys: set FANOUT_CODEC_KEYS or FANOUT_CODEC_KEYS_FILE (the workers' keys)")
	}
	tokens, _ := cfg.Tokens() // checked by Load
	if len(tokens) == 0 && !*noAuth {
		return errors.New("codec-server: no token: set FANOUT_CODEC_TOKEN or FANOUT_CODEC_TOKEN_FILE (or, on loopback only, pass -insecure-no-auth)")
	}
	if len(tokens) > 0 && *noAuth {
		return errors.New("codec-server: -insecure-no-auth together with FANOUT_CODEC_TOKEN(_FILE): use one")
	}
	srv, err := codecserver.Listen(*addr, codecserver.Options{
		Codecs: []converter.PayloadCodec{keys.PayloadCodec()}, Tokens: tokens, InsecureNoAuth: *noAuth,
		AllowedHosts: cfg.Hosts(), AllowedOrigins: cfg.Origins(), MaxBodyBytes: *maxBody, Logger: log,
	})
	if err != nil {
		return err
	}
	auth := fmt.Sprintf("bearer token (%d accepted)", len(tokens))
	if *noAuth {
		auth = "NONE (-insecure-no-auth, loopback)"
	}
	log.Info("codec server listening", "endpoint", srv.URL(), "auth", auth, "cors_origins", cfg.Origins(),
		"key_ids", keys.KeyIDs(), "active_key_id", keys.ActiveKeyID())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
