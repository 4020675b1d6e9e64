package types

import (
	"context"
	"errors"
	"fmt"

	"github.com/fanout/fanout"
)

// handler is a file type's fanout.Handler: its source, message and channel.
type handler struct {
	source  Source
	message *messageConfig
	channel Channel
}

func (h *handler) GetRecipients(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	return h.source.Page(ctx, ev, cursor, limit)
}

func (h *handler) GenerateMessage(ctx context.Context, ev fanout.Event) (fanout.Message, error) {
	return h.message.generate(ctx, ev)
}

func (h *handler) Deliver(ctx context.Context, ev fanout.Event, r fanout.Recipient, m fanout.Message) error {
	return h.channel.Deliver(ctx, ev, r, m)
}

// keyedHandler is a handler whose channel names destinations.
type keyedHandler struct {
	*handler
	keyer fanout.DestinationKeyer
}

func (h keyedHandler) DestinationKey(r fanout.Recipient) string { return h.keyer.DestinationKey(r) }

// Handler makes the type's fanout.Handler: it opens its source and channel.
func (t *Type) Handler(deps Deps) (fanout.Handler, error) {
	src, err := t.source.Open(t, deps)
	if err != nil {
		return nil, fmt.Errorf("recipients.%s: %w", t.SourceKind, err)
	}
	ch, err := t.channel.Open(t, deps)
	if err != nil {
		return nil, fmt.Errorf("channel.%s: %w", t.ChannelKind, err)
	}
	h := &handler{source: src, message: t.message, channel: ch}
	if k, ok := ch.(fanout.DestinationKeyer); ok {
		return keyedHandler{handler: h, keyer: k}, nil
	}
	return h, nil
}

// Build registers every type of f in reg. A type reg already has (the
// stock worker's env-configured webhook type, a Go type) is refused, as is
// every other mistake, each named by the file, line and type; nothing is
// registered unless every type is.
func Build(f *File, reg *fanout.Registry, deps Deps) error {
	var errs []error
	handlers := make([]fanout.Handler, len(f.Types))
	for i, t := range f.Types {
		if _, _, dup := reg.Lookup(t.Name); dup {
			errs = append(errs, &Error{File: f.Path, Line: t.Line, Type: t.Name, Err: errors.New("already registered (by the worker's environment or in Go): each type is defined once")})
			continue
		}
		h, err := t.Handler(deps)
		if err != nil {
			errs = append(errs, &Error{File: f.Path, Line: t.Line, Type: t.Name, Err: err})
			continue
		}
		handlers[i] = h
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for i, t := range f.Types {
		if err := reg.Register(t.Name, handlers[i], t.Options); err != nil {
			errs = append(errs, &Error{File: f.Path, Line: t.Line, Type: t.Name, Err: err})
		}
	}
	return errors.Join(errs...)
}
