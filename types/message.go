package types

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"

	"github.com/fanout/fanout"
)

// Content types of a message when the file names none.
const (
	DefaultPassthroughContentType = "application/json"
	DefaultTemplateContentType    = "text/plain; charset=utf-8"
)

// messageConfig is a type's message: a payload field passed through, or a
// template rendered over the event; once per event (the workflow calls
// GenerateMessage once).
type messageConfig struct {
	contentType string
	pointer     Pointer   // passthrough
	tmpl        *Template // template
}

func loadMessage(n Node) *messageConfig {
	kind, body, ok := n.OneOf("message", []string{"passthrough", "template"})
	if !ok {
		return nil
	}
	m := &messageConfig{}
	switch kind {
	case "passthrough":
		f, ok := body.Fields("pointer", "content_type")
		if !ok {
			return nil
		}
		m.pointer = Pointer{}
		if pn, given := f.Get("pointer"); given {
			if m.pointer, ok = pn.Pointer(); !ok {
				return nil
			}
		}
		if m.contentType, ok = contentType(f, DefaultPassthroughContentType); !ok {
			return nil
		}
	case "template":
		f, ok := body.Fields("text", "content_type")
		if !ok {
			return nil
		}
		tn, ok := f.Need("text")
		if !ok {
			return nil
		}
		text, ok := tn.String()
		if !ok {
			return nil
		}
		if m.contentType, ok = contentType(f, DefaultTemplateContentType); !ok {
			return nil
		}
		// The body and its content type within fanout.MaxMessageBytes.
		t, err := ParseTemplate(body.typ+".message", text, fanout.MaxMessageBytes-len(m.contentType))
		if err != nil {
			tn.Errorf("the template does not parse: %v", err)
			return nil
		}
		m.tmpl = t
	}
	return m
}

// contentType reads a content_type field (def when absent): a media type
// fanout.Message accepts.
func contentType(f Fields, def string) (string, bool) {
	cn, given := f.Get("content_type")
	if !given {
		return def, true
	}
	ct, ok := cn.String()
	if !ok {
		return "", false
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil {
		cn.Errorf("%.64q is not a media type: %v", ct, err)
		return "", false
	}
	if err := (fanout.Message{ContentType: ct}).Validate(); err != nil {
		cn.Errorf("%v", err)
		return "", false
	}
	return ct, true
}

// isJSON reports whether a media type is JSON (application/json, +json).
func isJSON(ct string) bool {
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// generate builds an event's message. Its failures are permanent: the same
// event gives the same message.
func (m *messageConfig) generate(ctx context.Context, ev fanout.Event) (fanout.Message, error) {
	msg := fanout.Message{ContentType: m.contentType}
	if m.tmpl != nil {
		payload, err := decodeJSON(ev.Payload)
		if err != nil {
			return msg, fanout.Permanent(fmt.Errorf("invalid_message: the payload is not JSON: %w", err))
		}
		body, err := m.tmpl.Execute(ctx, eventData{ID: ev.ID, Type: ev.Type, Priority: string(ev.Priority), Tenant: ev.Tenant, Payload: payload})
		if err != nil {
			return msg, fanout.Permanent(fmt.Errorf("invalid_message: the message template: %w", err))
		}
		msg.Body = body
	} else {
		raw, err := m.pointer.Find(ev.Payload)
		if err != nil {
			if errors.Is(err, errNotFound) {
				return msg, fanout.Permanent(fmt.Errorf("invalid_message: the payload has nothing at %q", m.pointer.String()))
			}
			return msg, fanout.Permanent(fmt.Errorf("invalid_message: the payload is not JSON: %w", err))
		}
		msg.Body = raw
		// A string sent as anything but JSON is its text, not its quoted
		// JSON.
		if !isJSON(m.contentType) {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				msg.Body = []byte(s)
			}
		}
		if len(msg.ContentType)+len(msg.Body) > fanout.MaxMessageBytes {
			return msg, fanout.Permanent(fmt.Errorf("invalid_message: the message is over %d bytes", fanout.MaxMessageBytes))
		}
	}
	return msg, nil
}
