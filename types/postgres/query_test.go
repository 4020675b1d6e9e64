package postgres

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/fanout/fanout"
)

const keyset = "SELECT follower_id AS id, url AS address FROM followers WHERE author_id = :payload.author_id AND follower_id > COALESCE(:cursor::bigint, 0) ORDER BY follower_id LIMIT :limit"

func TestParseQueryBindsNamedParameters(t *testing.T) {
	for _, tc := range []struct {
		name, in, sql string
		params        []string
	}{
		{"keyset", keyset,
			"SELECT follower_id AS id, url AS address FROM followers WHERE author_id = $1 AND follower_id > COALESCE($2::bigint, 0) ORDER BY follower_id LIMIT $3",
			[]string{"payload.author_id", "cursor", "limit"}},
		{"a name used twice is one parameter",
			"SELECT id, a AS address FROM t WHERE (:cursor IS NULL OR id > :cursor) AND t = :type AND e <> :id ORDER BY id LIMIT :limit",
			"SELECT id, a AS address FROM t WHERE ($1 IS NULL OR id > $1) AND t = $2 AND e <> $3 ORDER BY id LIMIT $4",
			[]string{"cursor", "type", "id", "limit"}},
		{"nested fields, array index, whole payload, casts",
			"select id, address from f(:payload::jsonb, :payload.a.b_c.0::int, :tenant, :priority) where id > :cursor order by id limit :limit;",
			"select id, address from f($1::jsonb, $2::int, $3, $4) where id > $5 order by id limit $6;",
			[]string{"payload", "payload.a.b_c.0", "tenant", "priority", "cursor", "limit"}},
		{"no parameters inside literals, quoted identifiers, comments",
			"SELECT id, ':nope' || E'\\':nope' || $$ :nope $$ || $t$ :nope $t$ AS address -- :nope\nFROM t /* :nope /* nested :nope */ still */ WHERE \":nope\" = 'a''b:nope' AND id > :cursor ORDER BY id LIMIT :limit",
			"SELECT id, ':nope' || E'\\':nope' || $$ :nope $$ || $t$ :nope $t$ AS address -- :nope\nFROM t /* :nope /* nested :nope */ still */ WHERE \":nope\" = 'a''b:nope' AND id > $1 ORDER BY id LIMIT $2",
			[]string{"cursor", "limit"}},
		{"a colon before a space or digit stays",
			"SELECT id, arr[1:2] AS address FROM t WHERE id > :cursor ORDER BY id LIMIT :limit",
			"SELECT id, arr[1:2] AS address FROM t WHERE id > $1 ORDER BY id LIMIT $2",
			[]string{"cursor", "limit"}},
		{"FETCH FIRST is a limit, and offset in words, literals or quotes is no OFFSET",
			"SELECT id, offset_url AS address FROM t WHERE id > :cursor AND \"offset\" > 0 AND note <> 'OFFSET 5' /* offset */ ORDER BY id FETCH FIRST :limit ROWS ONLY",
			"SELECT id, offset_url AS address FROM t WHERE id > $1 AND \"offset\" > 0 AND note <> 'OFFSET 5' /* offset */ ORDER BY id FETCH FIRST $2 ROWS ONLY",
			[]string{"cursor", "limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := parseQuery(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if q.sql != tc.sql {
				t.Errorf("sql\n got %s\nwant %s", q.sql, tc.sql)
			}
			if !reflect.DeepEqual(q.params, tc.params) {
				t.Errorf("params %q, want %q", q.params, tc.params)
			}
		})
	}
}

func TestParseQueryRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"OFFSET", "SELECT id, a AS address FROM t WHERE id > :cursor ORDER BY id LIMIT :limit OFFSET 10", "OFFSET is refused"},
		{"offset in lower case", "select id, a as address from t where id > :cursor order by id limit :limit offset :limit", "OFFSET is refused"},
		{"OFFSET in a subquery", "SELECT id, a AS address FROM (SELECT * FROM t Offset 5) s WHERE id > :cursor ORDER BY id LIMIT :limit", "OFFSET is refused"},
		{"OFFSET after a comment", "SELECT id, a AS address FROM t WHERE id > :cursor ORDER BY id LIMIT :limit /* c */OFFSET/* c */1", "OFFSET is refused"},
		{"no cursor", "SELECT id, a AS address FROM t ORDER BY id LIMIT :limit", "does not use :cursor"},
		{"no limit", "SELECT id, a AS address FROM t WHERE id > :cursor ORDER BY id", "does not use :limit"},
		{"no ORDER BY", "SELECT id, a AS address FROM t WHERE id > :cursor LIMIT :limit", "no ORDER BY"},
		{"ORDER BY only in a comment", "SELECT id, a AS address FROM t WHERE id > :cursor -- ORDER BY id\nLIMIT :limit", "no ORDER BY"},
		{"unknown parameter", "SELECT id, a AS address FROM t WHERE id > :cursor AND x = :author ORDER BY id LIMIT :limit", ":author at byte"},
		{"fields of another parameter", "SELECT id, a AS address FROM t WHERE id > :cursor.x ORDER BY id LIMIT :limit", "only :payload has fields"},
		{"positional parameter", "SELECT id, a AS address FROM t WHERE id > :cursor AND x = $1 ORDER BY id LIMIT :limit", "positional parameter"},
		{"two statements", "SELECT id, a AS address FROM t WHERE id > :cursor ORDER BY id LIMIT :limit; DELETE FROM t", "more than one statement"},
		{"unterminated literal", "SELECT id, 'a AS address FROM t WHERE id > :cursor ORDER BY id LIMIT :limit", "unterminated string literal"},
		{"unterminated E literal", "SELECT id, E'a\\' AS address", "unterminated string literal"},
		{"unterminated quoted identifier", "SELECT \"id, a AS address", "unterminated quoted identifier"},
		{"unterminated comment", "SELECT id /* a /* b */ FROM t", "unterminated comment"},
		{"unterminated dollar quote", "SELECT $x$ id, a AS address", "unterminated dollar-quoted"},
		{"empty", "  -- nothing\n", "empty query"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseQuery(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseQuery: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestArgsBindEventFields(t *testing.T) {
	q, err := parseQuery("SELECT id, a AS address FROM f(:id, :type, :priority, :tenant, :payload, :payload.author_id, :payload.big, :payload.nested.ok, :payload.list.1, :payload.obj, :payload.none, :payload.hostile) WHERE id > :cursor ORDER BY id LIMIT :limit")
	if err != nil {
		t.Fatal(err)
	}
	payload := `{"author_id": 42, "big": 12345678901234567890, "nested": {"ok": true}, "list": ["a", "b"], "obj": {"k": [1]}, "none": null, "hostile": "x'; DROP TABLE followers; --"}`
	ev := fanout.Event{ID: "e1", Type: "post", Payload: json.RawMessage(payload)}
	args, err := q.args(ev, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"e1", "post", nil, nil, payload, "42", "12345678901234567890", "true", "b", `{"k": [1]}`, nil, "x'; DROP TABLE followers; --", nil, 1000}
	if !reflect.DeepEqual(args, want) {
		t.Fatalf("args\n got %#v\nwant %#v", args, want)
	}
	ev.Priority, ev.Tenant = fanout.PriorityHigh, "acme"
	args, err = q.args(ev, "4711", 10)
	if err != nil {
		t.Fatal(err)
	}
	if args[2] != "high" || args[3] != "acme" || args[12] != "4711" || args[13] != 10 {
		t.Fatalf("priority, tenant, cursor, limit: %#v", args)
	}
}

func TestArgsRefuseMissingFields(t *testing.T) {
	for _, tc := range []struct{ param, payload, want string }{
		{"payload.author_id", `{"author": 1}`, "no field author_id"},
		{"payload.a.b", `{"a": 3}`, "no field a.b (a is not an object)"},
		{"payload.list.2", `{"list": [1, 2]}`, "no element list.2 (an array of 2)"},
		{"payload.list.x", `{"list": [1, 2]}`, "no element list.x"},
		{"payload.a", ``, "no payload"},
		{"payload.a", `{"a": `, "not valid JSON"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			q, err := parseQuery("SELECT id, a AS address FROM t WHERE x = :" + tc.param + " AND id > :cursor ORDER BY id LIMIT :limit")
			if err != nil {
				t.Fatal(err)
			}
			_, err = q.args(fanout.Event{ID: "e", Type: "t", Payload: json.RawMessage(tc.payload)}, "", 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("args: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
