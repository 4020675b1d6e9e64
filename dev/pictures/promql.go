package pictures

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// The dashboard's queries are evaluated here over the samples the demo
// scraped, with the few PromQL forms dashboard.json uses: a selector with
// =, !=, =~ and !~ matchers; rate(selector[range]); sum, max, min, avg and
// count, with or without `by (labels)`; histogram_quantile; a number; and
// one binary operator (/, *, +, -) between two of them, matched on equal
// label sets. Anything else is an error naming the query, and the panel
// says so instead of drawing.

// Labels are a series' labels, __name__ included.
type Labels map[string]string

func (l Labels) key() string {
	keys := slices.Sorted(maps.Keys(l))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + strconv.Quote(l[k]) + ",")
	}
	return b.String()
}

// Scrape is every series' value at one time (seconds from the start).
type Scrape struct {
	At     float64
	Series map[string]Sample // by Labels.key
}

// Sample is one series' value.
type Sample struct {
	Labels Labels
	Value  float64
}

// vector is an instant vector: series by key.
type vector map[string]Sample

// node is a parsed query.
type node interface {
	eval(e *evaluator, i int) (vector, error)
}

type evaluator struct {
	scrapes []Scrape
	window  int // scrapes a range covers
}

// Eval evaluates query at each scrape from the window-th on and returns
// each result series' points (x: the scrape's time).
func Eval(query string, scrapes []Scrape, window int) (map[string][]Point, map[string]Labels, error) {
	n, err := parse(query)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", query, err)
	}
	e := &evaluator{scrapes: scrapes, window: max(window, 1)}
	points, labels := map[string][]Point{}, map[string]Labels{}
	for i := e.window; i < len(scrapes); i++ {
		v, err := n.eval(e, i)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", query, err)
		}
		for k, s := range v {
			if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
				continue
			}
			points[k] = append(points[k], Point{X: scrapes[i].At, Y: s.Value})
			labels[k] = s.Labels
		}
	}
	return points, labels, nil
}

// Point is one value of a series at a time.
type Point struct{ X, Y float64 }

type matcher struct {
	label, op, value string
	re               *regexp.Regexp
}

func (m matcher) matches(v string) bool {
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return m.re.MatchString(v)
	default: // "!~"
		return !m.re.MatchString(v)
	}
}

type selector struct {
	name     string
	matchers []matcher
	rangeLen bool // followed by [range]: only rate may take it
}

func (s *selector) eval(e *evaluator, i int) (vector, error) {
	out := vector{}
	for k, smp := range e.scrapes[i].Series {
		if s.matches(smp.Labels) {
			out[k] = smp
		}
	}
	return out, nil
}

func (s *selector) matches(l Labels) bool {
	if l["__name__"] != s.name {
		return false
	}
	for _, m := range s.matchers {
		if !m.matches(l[m.label]) {
			return false
		}
	}
	return true
}

type rate struct{ sel *selector }

// eval is the per-second increase over the window, counter resets
// counted from zero, the name dropped as PromQL drops it.
func (r *rate) eval(e *evaluator, i int) (vector, error) {
	from := e.scrapes[i-e.window]
	cur, _ := r.sel.eval(e, i)
	out := vector{}
	for k, s := range cur {
		inc, prev, ok := 0.0, 0.0, false
		if p, found := from.Series[k]; found {
			prev, ok = p.Value, true
		}
		if !ok {
			continue
		}
		for j := i - e.window + 1; j <= i; j++ {
			v, found := e.scrapes[j].Series[k]
			if !found {
				continue
			}
			if v.Value < prev {
				inc += v.Value
			} else {
				inc += v.Value - prev
			}
			prev = v.Value
		}
		l := maps.Clone(s.Labels)
		delete(l, "__name__")
		out[l.key()] = Sample{Labels: l, Value: inc / (e.scrapes[i].At - from.At)}
	}
	return out, nil
}

type aggregate struct {
	op  string
	by  []string
	arg node
}

func (a *aggregate) eval(e *evaluator, i int) (vector, error) {
	in, err := a.arg.eval(e, i)
	if err != nil {
		return nil, err
	}
	type group struct {
		labels Labels
		vals   []float64
	}
	groups := map[string]*group{}
	for _, s := range in {
		l := Labels{}
		for _, b := range a.by {
			if v, ok := s.Labels[b]; ok {
				l[b] = v
			}
		}
		g := groups[l.key()]
		if g == nil {
			g = &group{labels: l}
			groups[l.key()] = g
		}
		g.vals = append(g.vals, s.Value)
	}
	out := vector{}
	for k, g := range groups {
		var v float64
		switch a.op {
		case "sum", "avg":
			for _, x := range g.vals {
				v += x
			}
			if a.op == "avg" {
				v /= float64(len(g.vals))
			}
		case "max":
			v = slices.Max(g.vals)
		case "min":
			v = slices.Min(g.vals)
		case "count":
			v = float64(len(g.vals))
		}
		out[k] = Sample{Labels: g.labels, Value: v}
	}
	return out, nil
}

type quantile struct {
	q   float64
	arg node
}

// eval is PromQL's histogram_quantile: linear within the bucket the rank
// falls in, the +Inf bucket's lower bound when it falls there.
func (h *quantile) eval(e *evaluator, i int) (vector, error) {
	in, err := h.arg.eval(e, i)
	if err != nil {
		return nil, err
	}
	type bucket struct{ le, n float64 }
	groups := map[string][]bucket{}
	glabels := map[string]Labels{}
	for _, s := range in {
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		l := maps.Clone(s.Labels)
		delete(l, "le")
		groups[l.key()] = append(groups[l.key()], bucket{le, s.Value})
		glabels[l.key()] = l
	}
	out := vector{}
	for k, bs := range groups {
		sort.Slice(bs, func(a, b int) bool { return bs[a].le < bs[b].le })
		total := bs[len(bs)-1].n
		if total <= 0 || !math.IsInf(bs[len(bs)-1].le, 1) {
			continue
		}
		rank := h.q * total
		v := math.NaN()
		for j, b := range bs {
			if b.n < rank {
				continue
			}
			switch {
			case math.IsInf(b.le, 1):
				v = bs[max(j-1, 0)].le
			case j == 0:
				v = b.le * rank / b.n
			default:
				lo := bs[j-1]
				v = lo.le + (b.le-lo.le)*(rank-lo.n)/(b.n-lo.n)
			}
			break
		}
		out[k] = Sample{Labels: glabels[k], Value: v}
	}
	return out, nil
}

type number float64

func (n number) eval(*evaluator, int) (vector, error) {
	return vector{"": {Labels: Labels{}, Value: float64(n)}}, nil
}

type binary struct {
	op   byte
	l, r node
}

func (b *binary) eval(e *evaluator, i int) (vector, error) {
	l, err := b.l.eval(e, i)
	if err != nil {
		return nil, err
	}
	r, err := b.r.eval(e, i)
	if err != nil {
		return nil, err
	}
	out := vector{}
	for k, ls := range l {
		rs, ok := r[k]
		if !ok {
			if s, scalar := r[""]; scalar && len(r) == 1 {
				rs, ok = s, true
			}
		}
		if !ok {
			continue
		}
		var v float64
		switch b.op {
		case '/':
			v = ls.Value / rs.Value
		case '*':
			v = ls.Value * rs.Value
		case '+':
			v = ls.Value + rs.Value
		case '-':
			v = ls.Value - rs.Value
		}
		out[k] = Sample{Labels: ls.Labels, Value: v}
	}
	return out, nil
}

// parser is a recursive-descent parser over the query's tokens.
type parser struct {
	toks []string
	pos  int
}

var tokenRE = regexp.MustCompile(`\s*(=~|!~|!=|"(?:[^"\\]|\\.)*"|[A-Za-z_:][A-Za-z0-9_:]*|[0-9]+(?:\.[0-9]+)?|\[[^\]]*\]|[(){},=/*+-])`)

func parse(q string) (node, error) {
	var toks []string
	rest := strings.TrimSpace(q)
	for rest != "" {
		m := tokenRE.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			return nil, fmt.Errorf("cannot read %q", rest)
		}
		toks = append(toks, rest[m[2]:m[3]])
		rest = strings.TrimLeftFunc(rest[m[1]:], unicode.IsSpace)
	}
	p := &parser{toks: toks}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.pos != len(p.toks) {
		return nil, fmt.Errorf("unexpected %q", p.toks[p.pos])
	}
	return n, nil
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) next() string { t := p.peek(); p.pos++; return t }

func (p *parser) expect(t string) error {
	if got := p.next(); got != t {
		return fmt.Errorf("want %q, got %q", t, got)
	}
	return nil
}

func (p *parser) expr() (node, error) {
	l, err := p.term()
	if err != nil {
		return nil, err
	}
	if op := p.peek(); op == "/" || op == "*" || op == "+" || op == "-" {
		p.next()
		r, err := p.term()
		if err != nil {
			return nil, err
		}
		return &binary{op: op[0], l: l, r: r}, nil
	}
	return l, nil
}

func (p *parser) labelList() ([]string, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var out []string
	for p.peek() != ")" {
		t := p.next()
		if t == "" {
			return nil, fmt.Errorf("unclosed label list")
		}
		if t != "," {
			out = append(out, t)
		}
	}
	p.next()
	return out, nil
}

func (p *parser) term() (node, error) {
	t := p.next()
	switch {
	case t == "(":
		n, err := p.expr()
		if err != nil {
			return nil, err
		}
		return n, p.expect(")")
	case t == "sum" || t == "max" || t == "min" || t == "avg" || t == "count":
		a := &aggregate{op: t}
		var err error
		if p.peek() == "by" {
			p.next()
			if a.by, err = p.labelList(); err != nil {
				return nil, err
			}
		}
		if err := p.expect("("); err != nil {
			return nil, err
		}
		if a.arg, err = p.expr(); err != nil {
			return nil, err
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		if p.peek() == "by" {
			p.next()
			if a.by, err = p.labelList(); err != nil {
				return nil, err
			}
		}
		return a, nil
	case t == "rate":
		if err := p.expect("("); err != nil {
			return nil, err
		}
		s, err := p.selector(p.next())
		if err != nil {
			return nil, err
		}
		if !s.rangeLen {
			return nil, fmt.Errorf("rate of %s without a range", s.name)
		}
		return &rate{sel: s}, p.expect(")")
	case t == "histogram_quantile":
		if err := p.expect("("); err != nil {
			return nil, err
		}
		q, err := strconv.ParseFloat(p.next(), 64)
		if err != nil {
			return nil, fmt.Errorf("histogram_quantile: %w", err)
		}
		if err := p.expect(","); err != nil {
			return nil, err
		}
		arg, err := p.expr()
		if err != nil {
			return nil, err
		}
		return &quantile{q: q, arg: arg}, p.expect(")")
	case t != "" && (t[0] >= '0' && t[0] <= '9'):
		v, err := strconv.ParseFloat(t, 64)
		return number(v), err
	case t != "" && (unicode.IsLetter(rune(t[0])) || t[0] == '_'):
		s, err := p.selector(t)
		if err != nil {
			return nil, err
		}
		if s.rangeLen {
			return nil, fmt.Errorf("range of %s outside rate", s.name)
		}
		return s, nil
	}
	return nil, fmt.Errorf("unexpected %q", t)
}

func (p *parser) selector(name string) (*selector, error) {
	s := &selector{name: name}
	if p.peek() == "{" {
		p.next()
		for p.peek() != "}" {
			label := p.next()
			if label == "," {
				continue
			}
			op := p.next()
			if op != "=" && op != "!=" && op != "=~" && op != "!~" {
				return nil, fmt.Errorf("matcher %s %q", label, op)
			}
			raw := p.next()
			val, err := strconv.Unquote(raw)
			if err != nil {
				return nil, fmt.Errorf("matcher %s: value %s", label, raw)
			}
			m := matcher{label: label, op: op, value: val}
			if op == "=~" || op == "!~" {
				if m.re, err = regexp.Compile("^(?:" + val + ")$"); err != nil {
					return nil, err
				}
			}
			s.matchers = append(s.matchers, m)
		}
		p.next()
	}
	if strings.HasPrefix(p.peek(), "[") {
		p.next()
		s.rangeLen = true
	}
	return s, nil
}
