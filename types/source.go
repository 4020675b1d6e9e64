package types

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/fanout/fanout"
)

// Source is a type's recipients source: the page of an event's audience at
// cursor ("" is the first), at most limit recipients (fanout.Handler's
// GetRecipients). fanout checks every page as it checks a Go handler's
// (ids, address lengths, fanout.MaxPageBytes).
type Source interface {
	Page(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error)
}

// SourceConfig is a source as a file defines it, checked at load; Open
// makes the Source when the type is built.
type SourceConfig interface {
	Open(t *Type, deps Deps) (Source, error)
}

// SourceKind reads one kind of source from its node in a file (under
// recipients.<kind>), reporting its mistakes on n (Node.Errorf and the
// readers, which name the file, line, type and field); it returns nil when
// it found any.
type SourceKind func(n Node) SourceConfig

// ChannelConfig is a channel as a file defines it, checked at load; Open
// makes the Channel when the type is built.
type ChannelConfig interface {
	Open(t *Type, deps Deps) (Channel, error)
}

// Channel delivers a message to one recipient (fanout.Handler's Deliver).
// A Channel that is also a fanout.DestinationKeyer has its deliveries
// limited and broken per destination.
type Channel interface {
	Deliver(ctx context.Context, ev fanout.Event, r fanout.Recipient, m fanout.Message) error
}

// ChannelKind reads one kind of channel from its node (under
// channel.<kind>), as SourceKind does.
type ChannelKind func(n Node) ChannelConfig

// Deps are what a type's source and channel need from the process that
// builds them.
type Deps struct {
	// InFlight is the most deliveries the process makes at once (the
	// worker's workers.Config.DeliveriesInFlight): a channel's HTTP client
	// keeps as many idle connections. 0: 64.
	InFlight int
	// OutboundAllow are the private ranges deliveries may reach
	// (FANOUT_OUTBOUND_ALLOW, webhook.ParseAllow); empty: public
	// addresses only. A source's configured endpoint needs no entry (it is
	// trusted for its own host and port, webhook.NewTrustedClient).
	OutboundAllow []netip.Prefix
}

func (d Deps) inFlight() int {
	if d.InFlight <= 0 {
		return 64
	}
	return d.InFlight
}

var (
	kindsMu  sync.RWMutex
	sources  = map[string]SourceKind{}
	channels = map[string]ChannelKind{}
)

// RegisterSource adds a kind of recipients source, named in files under
// recipients: (a package's init: types.RegisterSource("postgres", Load)).
// It panics on a name registered twice.
func RegisterSource(name string, k SourceKind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := sources[name]; dup {
		panic(fmt.Sprintf("types: source %q registered twice", name))
	}
	sources[name] = k
}

// RegisterChannel adds a kind of channel, named in files under channel:.
// It panics on a name registered twice.
func RegisterChannel(name string, k ChannelKind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := channels[name]; dup {
		panic(fmt.Sprintf("types: channel %q registered twice", name))
	}
	channels[name] = k
}

func sortedKeys[V any](m map[string]V) []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func loadSource(n Node) (string, SourceConfig) {
	kind, body, ok := n.OneOf("source", sortedKeys(sources))
	if !ok {
		return "", nil
	}
	kindsMu.RLock()
	k := sources[kind]
	kindsMu.RUnlock()
	return kind, k(body)
}

func loadChannel(n Node) (string, ChannelConfig) {
	kind, body, ok := n.OneOf("channel", sortedKeys(channels))
	if !ok {
		return "", nil
	}
	kindsMu.RLock()
	k := channels[kind]
	kindsMu.RUnlock()
	return kind, k(body)
}
