package types

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/fanout/fanout"
)

// The inline source: the recipients are in the event's payload, a list at
// a JSON pointer, each with an id and an address (at pointers in the
// item), for small events. It is bounded like a page (the list at most
// fanout.MaxPageBytes) and paged by offset: the cursor is the index of the
// page's first recipient.
//
//	recipients:
//	  inline: {pointer: /recipients, id: /id, address: /address}   # the defaults
func init() { RegisterSource("inline", loadInlineSource) }

// Defaults of the inline source and the HTTP source's answer.
var (
	DefaultInlinePointer     = Pointer{"recipients"}
	DefaultRecipientsPointer = Pointer{"recipients"}
	DefaultIDPointer         = Pointer{"id"}
	DefaultAddressPointer    = Pointer{"address"}
	DefaultNextCursorPointer = Pointer{"next_cursor"}
)

type inlineSource struct {
	list        Pointer
	id, address Pointer
}

func loadInlineSource(n Node) SourceConfig {
	f, ok := n.Fields("pointer", "id", "address")
	if !ok {
		return nil
	}
	s := &inlineSource{list: DefaultInlinePointer, id: DefaultIDPointer, address: DefaultAddressPointer}
	ok = readPointer(f, "pointer", &s.list) && readPointer(f, "id", &s.id) && readPointer(f, "address", &s.address)
	if !ok {
		return nil
	}
	return s
}

// readPointer sets *p from the field k when it is given.
func readPointer(f Fields, k string, p *Pointer) bool {
	pn, given := f.Get(k)
	if !given {
		return true
	}
	v, ok := pn.Pointer()
	if ok {
		*p = v
	}
	return ok
}

func (s *inlineSource) Open(*Type, Deps) (Source, error) { return s, nil }

func (s *inlineSource) Page(_ context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	off := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil || n < 0 || strconv.Itoa(n) != cursor {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_cursor: %.32q is not an offset", cursor))
		}
		off = n
	}
	raw, err := s.list.Find(ev.Payload)
	if err != nil {
		if errors.Is(err, errNotFound) {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: the payload has no recipients at %q", s.list.String()))
		}
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: the payload is not JSON: %w", err))
	}
	if len(raw) > fanout.MaxPageBytes {
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("page_too_large: the payload's recipients are over %d bytes", fanout.MaxPageBytes))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: the payload's recipients at %q are not a list", s.list.String()))
	}
	off = min(off, len(items))
	end := min(off+max(limit, 1), len(items))
	page := fanout.Page{Recipients: make([]fanout.Recipient, 0, end-off)}
	for i := off; i < end; i++ {
		r, err := item(items[i], s.id, s.address)
		if err != nil {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("invalid_page: recipient %d: %w", i, err))
		}
		page.Recipients = append(page.Recipients, r)
	}
	if end < len(items) {
		page.NextCursor = strconv.Itoa(end)
	}
	return page, nil
}

// item reads one recipient: its id (a string or a number) and address (a
// string; absent is empty).
func item(raw json.RawMessage, id, address Pointer) (fanout.Recipient, error) {
	var r fanout.Recipient
	// Top-level fields (the usual shape) from one decoding of the item.
	if len(id) == 1 && len(address) == 1 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return r, errors.New("not an object")
		}
		return recipientOf(m[id[0]], m[address[0]], id, address)
	}
	idRaw, err := id.Find(raw)
	if err != nil && !errors.Is(err, errNotFound) {
		return r, err
	}
	addrRaw, err := address.Find(raw)
	if err != nil && !errors.Is(err, errNotFound) {
		return r, err
	}
	return recipientOf(idRaw, addrRaw, id, address)
}

func recipientOf(idRaw, addrRaw json.RawMessage, id, address Pointer) (fanout.Recipient, error) {
	var r fanout.Recipient
	var ok bool
	if r.ID, ok = scalarText(idRaw); !ok {
		return r, fmt.Errorf("no string or number id at %q", id.String())
	}
	if len(addrRaw) > 0 && !isNull(addrRaw) {
		if err := json.Unmarshal(addrRaw, &r.Address); err != nil {
			return r, fmt.Errorf("the address at %q is not a string", address.String())
		}
	}
	return r, nil
}
