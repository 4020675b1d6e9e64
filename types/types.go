// Package types is the stage that turns a types file into registered event
// types: event types defined in a file (YAML; JSON is accepted) rather than
// in Go, each with its fanout.TypeOptions, a recipients source, a message
// and a delivery channel.
//
//	types:
//	  news:
//	    batch_size: 500
//	    recipients:
//	      http:
//	        url: https://users.internal/followers
//	        headers:
//	          Authorization: {value_from: {file: secrets/users-token}}
//	    message:
//	      template: {text: '{"title": {{json .Payload.title}}}', content_type: application/json}
//	    channel:
//	      webhook: {signing_secret_file: secrets/news-signing}
//
// Load reads and checks a file, reporting every mistake at once, each with
// the file, line, type and field (Error); Build registers its types in a
// fanout.Registry. The options are fanout.TypeOptions' under their JSON
// names (the Go names in snake_case), with the Go API's defaults and
// checks. Relative paths in a file are under the file's directory.
//
// Recipients sources and channels are kinds registered by name
// (RegisterSource, RegisterChannel): this package has the "http" and
// "inline" sources and the "webhook" channel, each in a file of its own;
// another kind registers itself from its own package.
package types

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fanout/fanout"
)

// MaxFileBytes bounds a types file.
const MaxFileBytes = 4 << 20

// File is a loaded types file.
type File struct {
	Path  string
	Types []*Type // in the file's order
}

// Type is one event type of a file.
type Type struct {
	Name    string
	Line    int
	Options fanout.TypeOptions
	// SourceKind and ChannelKind name the kinds of its recipients source
	// and channel ("http", "webhook").
	SourceKind, ChannelKind string

	source  SourceConfig
	message *messageConfig
	channel ChannelConfig
}

// typeFields are the fields of a type besides its options.
var typeFields = []string{"recipients", "message", "channel"}

// Load reads and checks the types file at path. Its error joins every
// mistake found (each an *Error).
func Load(path string) (*File, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parseFile(path, b)
}

func readFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if fi.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, over %d", path, fi.Size(), MaxFileBytes)
	}
	return os.ReadFile(path)
}

// parseFile reads a types file's content; path names it in errors and roots
// its relative paths.
func parseFile(path string, b []byte) (*File, error) {
	l := &loader{file: path, dir: filepath.Dir(path), secrets: map[string]string{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, syntaxError(path, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{File: path, Line: 1, Err: errors.New("empty: want a mapping with a types field")}
	}
	root := Node{y: doc.Content[0], l: l}
	if a := checkAliases(root.y); a != nil {
		return nil, &Error{File: path, Line: a.Line, Err: errors.New("YAML anchors and aliases are not supported: write each value out")}
	}
	f := &File{Path: path}
	top, ok := root.Fields("types")
	if ok {
		if tn, ok := top.Need("types"); ok {
			f.Types = loadTypes(tn)
		}
	}
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return f, nil
}

// yamlLine finds the line in a YAML parser's message ("yaml: line 3: ...").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntaxError is a parser's error as an *Error at its line.
func syntaxError(path string, err error) error {
	msg := err.Error()
	line := 1
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return &Error{File: path, Line: line, Err: fmt.Errorf("not YAML or JSON: %s", msg)}
}

// checkAliases finds an alias: each is a way to repeat a large value
// (a "billion laughs") and to hide where a value comes from.
func checkAliases(y *yaml.Node) *yaml.Node {
	if y.Kind == yaml.AliasNode || y.Anchor != "" {
		return y
	}
	for _, c := range y.Content {
		if a := checkAliases(c); a != nil {
			return a
		}
	}
	return nil
}

// loadTypes reads the types: mapping.
func loadTypes(n Node) []*Type {
	if n.y.Kind != yaml.MappingNode {
		n.Errorf("want a mapping of type names to their definitions, got %s", kindName(n.y))
		return nil
	}
	var out []*Type
	seen := map[string]int{}
	for i := 0; i+1 < len(n.y.Content); i += 2 {
		k, v := n.y.Content[i], n.y.Content[i+1]
		name := k.Value
		tn := Node{y: v, l: n.l, typ: name}
		at := Node{y: k, l: n.l, typ: name}
		if k.Kind != yaml.ScalarNode {
			at.Errorf("a type name that is not a string")
			continue
		}
		if err := fanout.ValidateType(name); err != nil {
			at.Errorf("%v", err)
			continue
		}
		if first, dup := seen[name]; dup {
			at.Errorf("defined twice (first at line %d)", first)
			continue
		}
		seen[name] = k.Line
		if t := loadType(tn); t != nil {
			t.Line = k.Line
			out = append(out, t)
		}
	}
	return out
}

// loadType reads one type's definition; nil when it has mistakes (they are
// reported).
func loadType(n Node) *Type {
	before := len(n.l.errs)
	t := &Type{Name: n.typ}
	f, ok := n.Fields(slices.Concat(optionNames(), typeFields)...)
	if !ok && f.m == nil {
		return nil
	}
	t.Options = loadOptions(n, f)
	if rn, ok := f.Need("recipients"); ok {
		t.SourceKind, t.source = loadSource(rn)
	}
	if mn, ok := f.Need("message"); ok {
		t.message = loadMessage(mn)
	}
	if cn, ok := f.Need("channel"); ok {
		t.ChannelKind, t.channel = loadChannel(cn)
	}
	if len(n.l.errs) > before {
		return nil
	}
	return t
}
