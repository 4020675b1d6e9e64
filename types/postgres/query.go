package postgres

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fanout/fanout"
)

// query is a source's query with its named parameters turned into pgx's
// positional ones: sql has $1..$n where the text had :name, and params[i]
// is the name $i+1 stands for (a name used twice is one parameter).
type query struct {
	sql    string
	params []string
}

// Parameter names a query may use (see the package documentation).
const (
	ParamCursor   = "cursor"
	ParamLimit    = "limit"
	ParamID       = "id"
	ParamType     = "type"
	ParamPriority = "priority"
	ParamTenant   = "tenant"
	ParamPayload  = "payload"
)

var knownParams = []string{ParamCursor, ParamLimit, ParamID, ParamType, ParamPriority, ParamTenant, ParamPayload}

// parseQuery reads q: the named parameters outside string literals, quoted
// identifiers and comments become $1..$n, and the words there are checked:
// no OFFSET, an ORDER BY, one statement, no positional parameter, and
// :cursor and :limit both used.
//
// It is a scanner, not a SQL parser: it knows PostgreSQL's lexical
// structure (strings '...' with a quote doubled inside, E'...' with backslash escapes,
// dollar-quoted $tag$...$tag$, quoted identifiers "...", -- and nested
// /* */ comments, the :: cast) well enough to tell a word of the query from
// text inside those, and matches words case-insensitively. A column named
// offset must be quoted ("offset") to pass; an array slice a[lo:hi] with
// an identifier after the colon reads as a parameter (write a[lo : hi]).
func parseQuery(q string) (query, error) {
	var (
		out       strings.Builder
		index     = map[string]int{}
		params    []string
		words     []string
		semicolon = -1 // where a ';' ended the statement
	)
	// significant refuses anything but space and comments after a ';'.
	significant := func() error {
		if semicolon >= 0 {
			return fmt.Errorf("more than one statement: text after the ';' at byte %d", semicolon)
		}
		return nil
	}
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '-' && strings.HasPrefix(q[i:], "--"):
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				end = len(q) - i
			}
			out.WriteString(q[i : i+end])
			i += end
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			end, err := blockComment(q, i)
			if err != nil {
				return query{}, err
			}
			out.WriteString(q[i:end])
			i = end
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			out.WriteByte(c)
			i++
		case c == ';':
			if err := significant(); err != nil {
				return query{}, err
			}
			semicolon = i
			out.WriteByte(c)
			i++
		case c == '\'':
			if err := significant(); err != nil {
				return query{}, err
			}
			end, err := stringLiteral(q, i, false)
			if err != nil {
				return query{}, err
			}
			out.WriteString(q[i:end])
			i = end
		case c == '"':
			if err := significant(); err != nil {
				return query{}, err
			}
			end, err := quotedIdent(q, i)
			if err != nil {
				return query{}, err
			}
			out.WriteString(q[i:end])
			i = end
		case identStart(c):
			if err := significant(); err != nil {
				return query{}, err
			}
			j := i + 1
			for j < len(q) && (identChar(q[j]) || q[j] == '$') {
				j++
			}
			word := q[i:j]
			if (word == "e" || word == "E") && j < len(q) && q[j] == '\'' {
				end, err := stringLiteral(q, j, true)
				if err != nil {
					return query{}, err
				}
				out.WriteString(q[i:end])
				i = end
				continue
			}
			words = append(words, strings.ToLower(word))
			out.WriteString(word)
			i = j
		case c == '$':
			if err := significant(); err != nil {
				return query{}, err
			}
			if i+1 < len(q) && isDigit(q[i+1]) {
				return query{}, fmt.Errorf("positional parameter at byte %d: use named parameters (:cursor, :limit, :payload.field, ...)", i)
			}
			end, ok, err := dollarQuoted(q, i)
			if err != nil {
				return query{}, err
			}
			if !ok {
				end = i + 1
			}
			out.WriteString(q[i:end])
			i = end
		case c == ':':
			if err := significant(); err != nil {
				return query{}, err
			}
			if i+1 < len(q) && q[i+1] == ':' {
				out.WriteString("::")
				i += 2
				continue
			}
			if i+1 >= len(q) || !identStart(q[i+1]) {
				out.WriteByte(c)
				i++
				continue
			}
			name, end := paramName(q, i+1)
			if err := checkParam(name); err != nil {
				return query{}, fmt.Errorf("parameter :%s at byte %d: %w", name, i, err)
			}
			n, ok := index[name]
			if !ok {
				params = append(params, name)
				n = len(params)
				index[name] = n
			}
			out.WriteString("$" + strconv.Itoa(n))
			i = end
		default:
			if err := significant(); err != nil {
				return query{}, err
			}
			out.WriteByte(c)
			i++
		}
	}
	if len(words) == 0 {
		return query{}, errors.New("empty query")
	}
	if slices.Contains(words, "offset") {
		return query{}, errors.New("OFFSET is refused: page by keyset (WHERE id > :cursor ... ORDER BY id LIMIT :limit), so that a page asked twice is the same page")
	}
	if !hasOrderBy(words) {
		return query{}, errors.New("no ORDER BY: a keyset query orders by id (ORDER BY id), so that the last row's id is the next page's cursor")
	}
	for _, p := range []string{ParamCursor, ParamLimit} {
		if _, ok := index[p]; !ok {
			return query{}, fmt.Errorf("the query does not use :%s: a keyset query filters id > :cursor and ends with LIMIT :limit", p)
		}
	}
	return query{sql: out.String(), params: params}, nil
}

func hasOrderBy(words []string) bool {
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "order" && words[i+1] == "by" {
			return true
		}
	}
	return false
}

// identStart reports whether c starts a PostgreSQL identifier or key word
// (a letter, '_', or a byte of a non-ASCII letter).
func identStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func identChar(c byte) bool { return identStart(c) || isDigit(c) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// paramName reads a parameter name at q[i:]: an identifier, then any
// number of '.' and a field (letters, digits, '_'). It stops before "::".
func paramName(q string, i int) (name string, end int) {
	j := i
	for j < len(q) && identChar(q[j]) && q[j] < 0x80 {
		j++
	}
	for j+1 < len(q) && q[j] == '.' && (identChar(q[j+1]) && q[j+1] < 0x80) {
		j++
		for j < len(q) && identChar(q[j]) && q[j] < 0x80 {
			j++
		}
	}
	return q[i:j], j
}

// checkParam reports whether name is a parameter the source binds.
func checkParam(name string) error {
	head, _, dotted := strings.Cut(name, ".")
	switch {
	case head == ParamPayload:
		return nil
	case dotted:
		return fmt.Errorf("only :payload has fields (:payload.author_id); :%s has none", head)
	}
	if slices.Contains(knownParams, name) {
		return nil
	}
	return fmt.Errorf("unknown parameter; known: :cursor, :limit, :id, :type, :priority, :tenant, :payload and :payload.<field>[.<field>...]")
}

// stringLiteral returns the end of the string literal starting at q[i]
// (a quote): two quotes are one quote inside it, and, when escapes is
// set (E'...'), so is a backslash and a quote.
func stringLiteral(q string, i int, escapes bool) (int, error) {
	for j := i + 1; j < len(q); j++ {
		switch q[j] {
		case '\\':
			if escapes {
				j++
			}
		case '\'':
			if j+1 < len(q) && q[j+1] == '\'' {
				j++
				continue
			}
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string literal at byte %d", i)
}

// quotedIdent returns the end of the quoted identifier at q[i].
func quotedIdent(q string, i int) (int, error) {
	for j := i + 1; j < len(q); j++ {
		if q[j] == '"' {
			if j+1 < len(q) && q[j+1] == '"' {
				j++
				continue
			}
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated quoted identifier at byte %d", i)
}

// blockComment returns the end of the /* comment */ at q[i]; they nest.
func blockComment(q string, i int) (int, error) {
	depth := 0
	for j := i; j+1 < len(q); j++ {
		switch {
		case q[j] == '/' && q[j+1] == '*':
			depth++
			j++
		case q[j] == '*' && q[j+1] == '/':
			depth--
			j++
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unterminated comment at byte %d", i)
}

// dollarQuoted returns the end of the dollar-quoted string at q[i] ($$...$$
// or $tag$...$tag$); ok is false when q[i] starts none.
func dollarQuoted(q string, i int) (end int, ok bool, err error) {
	j := i + 1
	for j < len(q) && q[j] != '$' {
		if !identChar(q[j]) || (j == i+1 && isDigit(q[j])) {
			return 0, false, nil
		}
		j++
	}
	if j >= len(q) {
		return 0, false, nil
	}
	tag := q[i : j+1]
	k := strings.Index(q[j+1:], tag)
	if k < 0 {
		return 0, false, fmt.Errorf("unterminated dollar-quoted string %s at byte %d", tag, i)
	}
	return j + 1 + k + len(tag), true, nil
}

// args binds the query's parameters for one page of ev: each a string (or
// nil, SQL NULL) sent as a parameter, never spliced into the text, so
// PostgreSQL reads it as a value of the type the query gives that
// parameter; :limit is an integer.
func (q query) args(ev fanout.Event, cursor string, limit int) ([]any, error) {
	args := make([]any, len(q.params))
	for i, name := range q.params {
		switch name {
		case ParamCursor:
			args[i] = nullIfEmpty(cursor)
		case ParamLimit:
			args[i] = limit
		case ParamID:
			args[i] = ev.ID
		case ParamType:
			args[i] = ev.Type
		case ParamPriority:
			args[i] = nullIfEmpty(string(ev.Priority))
		case ParamTenant:
			args[i] = nullIfEmpty(ev.Tenant)
		case ParamPayload:
			args[i] = nullIfEmpty(string(bytes.TrimSpace(ev.Payload)))
		default: // payload.<path>
			v, err := payloadField(ev.Payload, strings.Split(name, ".")[1:])
			if err != nil {
				return nil, fmt.Errorf(":%s: %w", name, err)
			}
			args[i] = v
		}
	}
	return args, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// payloadField is the value at path in the JSON payload, as a parameter:
// a string as itself, a number as its literal text (exact), true or false,
// an object or array as its JSON text, null as nil (SQL NULL). A field
// that is not there is an error: a query run without it would page an
// audience nobody meant.
func payloadField(payload json.RawMessage, path []string) (any, error) {
	raw := json.RawMessage(bytes.TrimSpace(payload))
	if len(raw) == 0 {
		return nil, errors.New("the event has no payload")
	}
	for k, field := range path {
		at := strings.Join(path[:k+1], ".")
		switch raw[0] {
		case '{':
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(raw, &obj); err != nil {
				return nil, fmt.Errorf("payload is not valid JSON: %w", err)
			}
			v, ok := obj[field]
			if !ok {
				return nil, fmt.Errorf("the payload has no field %s", at)
			}
			raw = bytes.TrimSpace(v)
		case '[':
			var arr []json.RawMessage
			if err := json.Unmarshal(raw, &arr); err != nil {
				return nil, fmt.Errorf("payload is not valid JSON: %w", err)
			}
			n, err := strconv.Atoi(field)
			if err != nil || n < 0 || n >= len(arr) {
				return nil, fmt.Errorf("the payload has no element %s (an array of %d)", at, len(arr))
			}
			raw = bytes.TrimSpace(arr[n])
		default:
			return nil, fmt.Errorf("the payload has no field %s (%s is not an object)", at, strings.Join(path[:k], "."))
		}
	}
	if !json.Valid(raw) {
		return nil, errors.New("payload is not valid JSON")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return s, nil
	case 'n':
		return nil, nil
	default: // number, true, false, object, array: their JSON text
		return string(raw), nil
	}
}
