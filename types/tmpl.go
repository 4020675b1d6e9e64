package types

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/template"
	"text/template/parse"
	"time"
)

// Bounds of a template's execution (a message's, an HTTP source's body).
// text/template cannot be interrupted, so a template is bounded by what it
// may do rather than by stopping it:
//   - it has no functions that reach outside the event: text/template's
//     built-ins (none reads a file or the environment) and json, which
//     marshals its argument;
//   - it defines and calls no templates ({{define}}, {{template}},
//     {{block}} are refused at load), so it cannot recurse;
//   - every {{range}} iteration is a step (the loader puts a step at the
//     start of each range body): past MaxTemplateSteps steps, or once its
//     TemplateTimeout has passed, the next step ends the execution with an
//     error. Between two steps a template does a bounded amount of work:
//     its own text, over the event (whose size Kafka bounds);
//   - its output is cut off past its limit (fanout.MaxMessageBytes for a
//     message): the write fails and the execution ends.
//
// The execution runs in a goroutine that the caller stops waiting for at
// the timeout; it then ends at its next step.
const (
	MaxTemplateSteps = 1_000_000
	TemplateTimeout  = 2 * time.Second
)

// stepFunc is the function the loader calls at each range iteration.
const stepFunc = "fanoutStep"

// pureFuncs are the functions a template may call besides text/template's
// built-ins: none reads anything but its arguments.
var pureFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	stepFunc: func() string { return "" }, // replaced per execution
}

// Template is a parsed, bounded template.
type Template struct {
	t        *template.Template
	maxBytes int
}

// ParseTemplate parses text as a bounded template whose output is at most
// maxBytes.
func ParseTemplate(name, text string, maxBytes int) (*Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(pureFuncs).Parse(text)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) != 1 || t.Tree == nil {
		return nil, errors.New("defines templates ({{define}} or {{block}}): not allowed in a types file")
	}
	step, err := template.New("step").Funcs(pureFuncs).Parse("{{" + stepFunc + "}}")
	if err != nil {
		return nil, err
	}
	if err := instrument(t.Root, step.Root.Nodes[0]); err != nil {
		return nil, err
	}
	return &Template{t: t, maxBytes: maxBytes}, nil
}

// instrument puts step at the start of every range body under n, and
// refuses {{template}} calls.
func instrument(n parse.Node, step parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := instrument(c, step); err != nil {
				return err
			}
		}
	case *parse.TemplateNode:
		return errors.New("calls a template ({{template}}): not allowed in a types file")
	case *parse.IfNode:
		return instrumentBranch(&n.BranchNode, step)
	case *parse.WithNode:
		return instrumentBranch(&n.BranchNode, step)
	case *parse.RangeNode:
		if err := instrumentBranch(&n.BranchNode, step); err != nil {
			return err
		}
		if n.List == nil {
			n.List = &parse.ListNode{NodeType: parse.NodeList}
		}
		n.List.Nodes = append([]parse.Node{step}, n.List.Nodes...)
	}
	return nil
}

func instrumentBranch(b *parse.BranchNode, step parse.Node) error {
	if err := instrument(b.List, step); err != nil {
		return err
	}
	if b.ElseList != nil {
		return instrument(b.ElseList, step)
	}
	return nil
}

// errOutputTooLarge ends an execution whose output passes its limit.
var errOutputTooLarge = errors.New("output too large")

// limitWriter keeps at most max bytes.
type limitWriter struct {
	buf bytes.Buffer
	max int
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.max {
		return 0, fmt.Errorf("%w: over %d bytes", errOutputTooLarge, w.max)
	}
	return w.buf.Write(p)
}

// Execute renders the template over data within its bounds.
func (t *Template) Execute(ctx context.Context, data any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, TemplateTimeout)
	defer cancel()
	steps := 0
	// A clone per execution: its step function counts this execution's
	// steps (the clone shares the parsed tree, which execution only reads).
	c, err := t.t.Clone()
	if err != nil {
		return nil, err
	}
	c.Funcs(template.FuncMap{stepFunc: func() (string, error) {
		steps++
		if steps > MaxTemplateSteps {
			return "", fmt.Errorf("over %d range iterations", MaxTemplateSteps)
		}
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("over %v: %w", TemplateTimeout, err)
		}
		return "", nil
	}})
	w := &limitWriter{max: t.maxBytes}
	done := make(chan error, 1)
	go func() { done <- c.Execute(w, data) }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return w.buf.Bytes(), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("template ran over %v", TemplateTimeout)
	}
}

// eventData is an event as templates see it: .ID, .Type, .Priority,
// .Tenant, and .Payload decoded from JSON (numbers keep their text).
type eventData struct {
	ID, Type, Priority, Tenant string
	Payload                    any
}

// decodeJSON decodes raw JSON for a template (nil when empty).
func decodeJSON(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
