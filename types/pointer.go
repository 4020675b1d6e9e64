package types

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Pointer is a parsed JSON pointer (RFC 6901): its reference tokens,
// unescaped. The empty pointer is the whole document.
type Pointer []string

// ParsePointer parses a JSON pointer: "" or tokens each after a "/", with
// "~0" for "~" and "~1" for "/".
func ParsePointer(s string) (Pointer, error) {
	if s == "" {
		return Pointer{}, nil
	}
	if s[0] != '/' {
		return nil, fmt.Errorf("%.64q is not a JSON pointer: it does not start with \"/\" (the whole document is \"\")", s)
	}
	toks := strings.Split(s[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || t[j+1] != '0' && t[j+1] != '1') {
				return nil, fmt.Errorf("%.64q is not a JSON pointer: \"~\" not followed by 0 or 1", s)
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

func (p Pointer) String() string {
	var b strings.Builder
	for _, t := range p {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// errNotFound: the pointer names nothing in the document.
var errNotFound = errors.New("not found")

// Find returns the raw JSON the pointer names in doc (errNotFound when it
// names nothing). doc is read one level at a time, so the value keeps its
// bytes (numbers, key order) as the document has them.
func (p Pointer) Find(doc json.RawMessage) (json.RawMessage, error) {
	cur := doc
	for _, t := range p {
		cur = bytes.TrimLeft(cur, " \t\r\n")
		if len(cur) == 0 {
			return nil, errNotFound
		}
		switch cur[0] {
		case '{':
			var m map[string]json.RawMessage
			if err := json.Unmarshal(cur, &m); err != nil {
				return nil, err
			}
			v, ok := m[t]
			if !ok {
				return nil, errNotFound
			}
			cur = v
		case '[':
			var a []json.RawMessage
			if err := json.Unmarshal(cur, &a); err != nil {
				return nil, err
			}
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(a) || strconv.Itoa(i) != t {
				return nil, errNotFound
			}
			cur = a[i]
		default:
			return nil, errNotFound
		}
	}
	return cur, nil
}

// isNull reports whether raw is JSON null.
func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// scalarText is the text of a JSON string or number (an id, a cursor).
func scalarText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	case c == '-' || c >= '0' && c <= '9':
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", false
		}
		return n.String(), true
	}
	return "", false
}
