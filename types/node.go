package types

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fanout/fanout/internal/config"
)

// Error is one mistake in a types file: where it is (the file, the line,
// the type and the field, a dotted path under the type's definition) and
// what is wrong.
type Error struct {
	File  string
	Line  int
	Type  string // "" for a mistake outside any type
	Field string // "" for the type itself
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	if e.Type != "" {
		fmt.Fprintf(&b, "type %q: ", e.Type)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// loader collects the errors of one file.
type loader struct {
	file string // as given, for messages
	dir  string // relative paths in the file are under it
	errs []error
	// secrets are the per-type signing secrets seen so far, by value, with
	// the type that has each (two types must not share one).
	secrets map[string]string
}

// Node is one value of a types file and where it is, so that what reads it
// (this package, and the source and channel kinds registered with
// RegisterSource and RegisterChannel) reports every mistake with the file,
// line, type and field. Its methods report a mistake and return false;
// the file's Load returns them all.
type Node struct {
	y    *yaml.Node
	l    *loader
	typ  string
	path string
}

// Line is the node's line in the file.
func (n Node) Line() int { return n.y.Line }

// Path is the node's field path under its type ("recipients.http.url").
func (n Node) Path() string { return n.path }

// Type is the name of the type the node belongs to.
func (n Node) Type() string { return n.typ }

// Errorf reports a mistake at n.
func (n Node) Errorf(format string, args ...any) {
	n.l.errs = append(n.l.errs, &Error{File: n.l.file, Line: n.y.Line, Type: n.typ, Field: n.path, Err: fmt.Errorf(format, args...)})
}

// child is the node of key k under n.
func (n Node) child(k string, y *yaml.Node) Node {
	p := k
	if n.path != "" {
		p = n.path + "." + k
	}
	return Node{y: y, l: n.l, typ: n.typ, path: p}
}

// Fields are the fields of a mapping node, by key.
type Fields struct {
	n Node
	m map[string]Node
}

// Fields reads n as a mapping whose keys are among known, reporting any
// other key (at its line), a key given twice, and a node that is not a
// mapping.
func (n Node) Fields(known ...string) (Fields, bool) {
	f := Fields{n: n}
	if n.y.Kind != yaml.MappingNode {
		n.Errorf("want a mapping of %s, got %s", strings.Join(known, ", "), kindName(n.y))
		return f, false
	}
	f.m = map[string]Node{}
	ok := true
	for i := 0; i+1 < len(n.y.Content); i += 2 {
		k, v := n.y.Content[i], n.y.Content[i+1]
		c := n.child(k.Value, v)
		switch {
		case k.Kind != yaml.ScalarNode:
			Node{y: k, l: n.l, typ: n.typ, path: n.path}.Errorf("a key that is not a name")
			ok = false
		case !slices.Contains(known, k.Value):
			Node{y: k, l: n.l, typ: n.typ, path: c.path}.Errorf("unknown field (known here: %s)", strings.Join(known, ", "))
			ok = false
		case f.m[k.Value].y != nil:
			Node{y: k, l: n.l, typ: n.typ, path: c.path}.Errorf("given twice (first at line %d)", f.m[k.Value].y.Line)
			ok = false
		default:
			f.m[k.Value] = c
		}
	}
	return f, ok
}

// Get returns the field k, if given.
func (f Fields) Get(k string) (Node, bool) {
	c, ok := f.m[k]
	return c, ok
}

// Need returns the field k, reporting it missing (at the mapping's line).
func (f Fields) Need(k string) (Node, bool) {
	c, ok := f.m[k]
	if !ok {
		f.n.child(k, f.n.y).Errorf("missing")
	}
	return c, ok
}

// Has reports whether the field k is given.
func (f Fields) Has(k string) bool { _, ok := f.m[k]; return ok }

// OneOf reads n as a mapping of exactly one of kinds, and returns which
// and its value: none or two are mistakes (named "what": "source").
func (n Node) OneOf(what string, kinds []string) (string, Node, bool) {
	f, ok := n.Fields(kinds...)
	if !ok {
		return "", Node{}, false
	}
	var given []string
	for _, k := range kinds {
		if f.Has(k) {
			given = append(given, k)
		}
	}
	switch len(given) {
	case 0:
		n.Errorf("no %s: want one of %s", what, strings.Join(kinds, ", "))
		return "", Node{}, false
	case 1:
		return given[0], f.m[given[0]], true
	default:
		n.Errorf("%d %ss (%s): want exactly one", len(given), what, strings.Join(given, ", "))
		return "", Node{}, false
	}
}

func kindName(y *yaml.Node) string {
	switch y.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if y.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", clip(y.Value))
	}
	return "a document"
}

// clip shortens a value shown in a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// String reads n as a string.
func (n Node) String() (string, bool) {
	if n.y.Kind != yaml.ScalarNode || n.y.Tag != "!!str" {
		n.Errorf("want a string, got %s", kindName(n.y))
		return "", false
	}
	return n.y.Value, true
}

// Int reads n as an integer.
func (n Node) Int() (int64, bool) {
	var v int64
	if n.y.Kind != yaml.ScalarNode || n.y.Tag != "!!int" || n.y.Decode(&v) != nil {
		n.Errorf("want an integer, got %s", kindName(n.y))
		return 0, false
	}
	return v, true
}

// Float reads n as a number.
func (n Node) Float() (float64, bool) {
	var v float64
	if n.y.Kind != yaml.ScalarNode || (n.y.Tag != "!!int" && n.y.Tag != "!!float") || n.y.Decode(&v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		n.Errorf("want a number, got %s", kindName(n.y))
		return 0, false
	}
	return v, true
}

// Duration reads n as a Go duration ("30s", "2m").
func (n Node) Duration() (time.Duration, bool) {
	s, ok := n.String()
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n.Errorf("want a duration such as 30s or 2m: %v", err)
		return 0, false
	}
	return d, true
}

// FilePath reads n as a path; a relative one is under the types file's
// directory.
func (n Node) FilePath() (string, bool) {
	p, ok := n.String()
	if !ok {
		return "", false
	}
	if p == "" {
		n.Errorf("empty path")
		return "", false
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(n.l.dir, p)
	}
	return p, true
}

// SecretFile reads the secret in the file n names (trimmed; at most 64 KiB;
// see config.ReadSecretFile). Its errors name the path, never the content.
func (n Node) SecretFile() (string, bool) {
	p, ok := n.FilePath()
	if !ok {
		return "", false
	}
	s, err := config.ReadSecretFile("secret file", p)
	if err != nil {
		n.Errorf("%v", err)
		return "", false
	}
	return s, true
}

// Pointer reads n as a JSON pointer (RFC 6901: "" or "/a/b", with ~0 and ~1
// escapes).
func (n Node) Pointer() (Pointer, bool) {
	s, ok := n.String()
	if !ok {
		return nil, false
	}
	p, err := ParsePointer(s)
	if err != nil {
		n.Errorf("%v", err)
		return nil, false
	}
	return p, true
}
