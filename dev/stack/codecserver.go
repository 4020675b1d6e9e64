package stack

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/converter"

	"github.com/fanout/fanout/internal/codecserver"
)

// startCodecServer starts the codec server of Options.CodecServer in this
// process on 127.0.0.1 (before the dev server, whose UI is pointed at it
// with --ui-codec-endpoint). Without CodecServerTokens it serves without a
// token, which codecserver allows on loopback only: the dev server's UI has
// no login, so it has no access token to pass.
func (s *Stack) startCodecServer(codec converter.PayloadCodec) error {
	if codec == nil {
		return errors.New("stack: Options.CodecServer needs a codec (Options.CodecServerCodec)")
	}
	uiOrigins := []string{}
	if s.opts.UIPort != 0 {
		// The browser's origin is the address typed: both loopback names.
		uiOrigins = append(uiOrigins, fmt.Sprintf("http://127.0.0.1:%d", s.opts.UIPort), fmt.Sprintf("http://localhost:%d", s.opts.UIPort))
	}
	srv, err := codecserver.Listen(fmt.Sprintf("127.0.0.1:%d", s.opts.CodecServerPort), codecserver.Options{
		Codecs: []converter.PayloadCodec{codec}, Tokens: s.opts.CodecServerTokens, InsecureNoAuth: len(s.opts.CodecServerTokens) == 0,
		AllowedOrigins: uiOrigins,
	})
	if err != nil {
		return fmt.Errorf("codec server: %w", err)
	}
	s.codecSrv = srv
	s.CodecServerURL = srv.URL()
	go func() { _ = srv.Serve() }()
	return nil
}
