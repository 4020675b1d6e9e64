//go:build integration

package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/types/postgres"
)

// The followers of author 1 (25,000) and author 2 (100), in a real
// PostgreSQL started for these tests.
const (
	followers = 25000
	pageLimit = 1000
)

var dsn string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fanout-postgres-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stop func()
	dsn, stop, err = stack.StartPostgres(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start postgres:", err)
		return 1
	}
	defer stop()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Inserted in a random order, so the table's physical order is not
	// the ids' order: only ORDER BY gives it.
	_, err = c.Exec(ctx, `
CREATE TABLE followers (
	author_id   bigint NOT NULL,
	follower_id bigint NOT NULL,
	handle      text   NOT NULL,
	url         text   NOT NULL,
	PRIMARY KEY (author_id, follower_id)
);
INSERT INTO followers
SELECT 1, g, 'user' || g, 'https://hooks.example.com/u/' || g FROM generate_series(1, 25000) g ORDER BY random();
INSERT INTO followers
SELECT 2, g, 'other' || g, 'https://hooks.example.com/o/' || g FROM generate_series(1, 100) g;
ANALYZE followers;`)
	_ = c.Close(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create followers:", err)
		return 1
	}
	return m.Run()
}

// newSource writes the DSN to a file and loads a source of query.
func newSource(t *testing.T, query string, timeout time.Duration) *postgres.Source {
	t.Helper()
	return newSourceDSN(t, dsn, query, timeout)
}

func newSourceDSN(t *testing.T, dsn, query string, timeout time.Duration) *postgres.Source {
	t.Helper()
	f := filepath.Join(t.TempDir(), "followers.dsn")
	if err := os.WriteFile(f, []byte(dsn), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(postgres.Config{DSNFile: f, Query: query, StatementTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// admin is a connection of the test's own, which may write.
func admin(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func count(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), "SELECT count(*) FROM followers").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

const followersQuery = `
SELECT follower_id AS id, url AS address
FROM followers
WHERE author_id = :payload.author_id
  AND follower_id > COALESCE(:cursor::bigint, 0)
ORDER BY follower_id
LIMIT :limit`

func post(author any) fanout.Event {
	b, _ := json.Marshal(map[string]any{"author_id": author, "text": "hello"})
	return fanout.Event{ID: "post-1", Type: "new-post", Payload: b}
}

// pageAll pages ev's audience from the first page, limit rows at a time.
func pageAll(t *testing.T, s *postgres.Source, ev fanout.Event, limit int) (rs []fanout.Recipient, cursors []string) {
	t.Helper()
	ctx := context.Background()
	cursor := ""
	for range 1000 {
		cursors = append(cursors, cursor)
		p, err := s.Page(ctx, ev, cursor, limit)
		if err != nil {
			t.Fatalf("page at cursor %q: %v", cursor, err)
		}
		if len(p.Recipients) > limit {
			t.Fatalf("page at cursor %q: %d recipients, over %d", cursor, len(p.Recipients), limit)
		}
		rs = append(rs, p.Recipients...)
		if p.NextCursor == "" {
			return rs, cursors
		}
		cursor = p.NextCursor
	}
	t.Fatal("no end after 1000 pages")
	return nil, nil
}

// Paging 25,000 followers by 1,000 gives every id exactly once, in order,
// with its address; a page asked again later is the same page, even after
// rows were added before it (what OFFSET would get wrong).
func TestPagesEveryFollowerOnceInOrder(t *testing.T) {
	s := newSource(t, followersQuery, 0)
	rs, cursors := pageAll(t, s, post(1), pageLimit)
	if len(rs) != followers {
		t.Fatalf("%d recipients, want %d", len(rs), followers)
	}
	for i, r := range rs {
		want := fanout.Recipient{ID: strconv.Itoa(i + 1), Address: "https://hooks.example.com/u/" + strconv.Itoa(i+1)}
		if r != want {
			t.Fatalf("recipient %d is %+v, want %+v", i, r, want)
		}
	}
	// 25 full pages, then an empty last one (the 25th was full, so it had
	// a next cursor).
	if len(cursors) != followers/pageLimit+1 || cursors[1] != "1000" || cursors[25] != "25000" {
		t.Fatalf("cursors %q", cursors)
	}

	ctx := context.Background()
	page7, err := s.Page(ctx, post(1), cursors[7], pageLimit)
	if err != nil {
		t.Fatal(err)
	}
	if page7.Recipients[0].ID != "7001" || page7.NextCursor != "8000" {
		t.Fatalf("page 7 starts at %s and goes on at %s", page7.Recipients[0].ID, page7.NextCursor)
	}
	c := admin(t)
	if _, err := c.Exec(ctx, "INSERT INTO followers VALUES (1, 0, 'zero', 'https://hooks.example.com/u/0'), (1, -5, 'neg', 'x')"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = c.Exec(context.Background(), "DELETE FROM followers WHERE author_id = 1 AND follower_id <= 0")
	})
	again, err := s.Page(ctx, post(1), cursors[7], pageLimit)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, page7) {
		t.Fatalf("page 7 asked again differs: %d recipients from %s", len(again.Recipients), again.Recipients[0].ID)
	}
	// Author 2's 100 followers: one short page, no next cursor.
	p, err := s.Page(ctx, post(2), "", pageLimit)
	if err != nil || len(p.Recipients) != 100 || p.NextCursor != "" || p.Recipients[0].Address != "https://hooks.example.com/o/1" {
		t.Fatalf("author 2: %d recipients, next %q, %v", len(p.Recipients), p.NextCursor, err)
	}
}

// Text ids page the same way (COALESCE with the empty string for the
// first page), in the database's order, each once.
func TestPagesTextIDs(t *testing.T) {
	s := newSource(t, `SELECT handle AS id, url AS address FROM followers
		WHERE author_id = :payload.author_id AND handle > COALESCE(:cursor, '')
		ORDER BY handle LIMIT :limit`, 0)
	rs, _ := pageAll(t, s, post(1), 777)
	seen := map[string]bool{}
	for i, r := range rs {
		if seen[r.ID] {
			t.Fatalf("%s twice", r.ID)
		}
		seen[r.ID] = true
		if i > 0 && r.ID <= rs[i-1].ID { // the cluster's collation is C
			t.Fatalf("%s after %s", r.ID, rs[i-1].ID)
		}
	}
	if len(seen) != followers {
		t.Fatalf("%d distinct recipients, want %d", len(seen), followers)
	}
}

// One page fails twice before it succeeds, as the activity's retries would
// see it: first its statement times out (the rows are locked by another
// session), then its backend is terminated by an operator; both are
// transient, and the third try gets the same rows as that cursor gave
// before.
func TestPageFailsTwiceThenSamePage(t *testing.T) {
	const lock = 4711
	gated := fmt.Sprintf(`
WITH gate AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared(%d))
SELECT follower_id AS id, url AS address
FROM followers, gate
WHERE author_id = :payload.author_id
  AND follower_id > COALESCE(:cursor::bigint, 0)
ORDER BY follower_id
LIMIT :limit`, lock)
	ctx := context.Background()
	s := newSource(t, gated, 2*time.Second)
	want, err := s.Page(ctx, post(1), "12000", pageLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Recipients) != pageLimit || want.Recipients[0].ID != "12001" || want.NextCursor != "13000" {
		t.Fatalf("the page after 12000: %d recipients from %s, next %q", len(want.Recipients), want.Recipients[0].ID, want.NextCursor)
	}

	c := admin(t)
	if _, err := c.Exec(ctx, "SELECT pg_advisory_lock($1)", lock); err != nil {
		t.Fatal(err)
	}
	var terminated atomic.Int32
	var got fanout.Page
	var errs []error
	for attempt := 1; attempt <= 5; attempt++ {
		done := make(chan struct{})
		if attempt == 2 {
			// An operator terminates the backend waiting for the lock.
			go func() {
				defer close(done)
				o, err := pgx.Connect(ctx, dsn)
				if err != nil {
					return
				}
				defer func() { _ = o.Close(ctx) }()
				for range 200 {
					var n int32
					err := o.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity
						WHERE application_name = 'fanout' AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&n)
					if err == nil && n > 0 {
						terminated.Add(n)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		} else {
			close(done)
		}
		start := time.Now()
		got, err = s.Page(ctx, post(1), "12000", pageLimit)
		<-done
		if err == nil {
			break
		}
		t.Logf("attempt %d after %v: %v", attempt, time.Since(start).Round(time.Millisecond), err)
		if fanout.IsPermanent(err) {
			t.Fatalf("attempt %d failed permanently: %v", attempt, err)
		}
		errs = append(errs, err)
		if attempt == 2 {
			if _, err := c.Exec(ctx, "SELECT pg_advisory_unlock($1)", lock); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(errs) != 2 {
		t.Fatalf("%d failed attempts before success, want 2: %v", len(errs), errs)
	}
	if !strings.Contains(errs[0].Error(), "statement timeout") || !strings.Contains(errs[0].Error(), "57014") {
		t.Errorf("first failure %q: want the statement timeout", errs[0])
	}
	if terminated.Load() != 1 || !strings.Contains(errs[1].Error(), "terminating connection due to administrator command") {
		t.Errorf("second failure %q (%d backends terminated): want the terminated backend", errs[1], terminated.Load())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the retried page differs: %d recipients from %s, next %q", len(got.Recipients), got.Recipients[0].ID, got.NextCursor)
	}
}

// Errors asking again cannot fix are permanent and say why; none shows
// the DSN or its password.
func TestPermanentErrors(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	before := count(t, c)
	for _, tc := range []struct {
		name, query string
		ev          fanout.Event
		want        []string
	}{
		{"undefined column", strings.Replace(followersQuery, "url AS address", "nope_url AS address", 1), post(1),
			[]string{`column "nope_url" does not exist`, "42703"}},
		{"undefined table", strings.Replace(followersQuery, "FROM followers", "FROM followerz", 1), post(1),
			[]string{`relation "followerz" does not exist`, "42P01"}},
		{"syntax error", strings.Replace(followersQuery, "WHERE", "WHERE WHERE", 1), post(1),
			[]string{"syntax error", "42601"}},
		{"a payload value of the wrong type", followersQuery, post("abc"),
			[]string{`invalid input syntax for type bigint: "abc"`, "22P02"}},
		{"a write in the read-only transaction", `WITH d AS (DELETE FROM followers WHERE author_id = :payload.author_id AND follower_id > COALESCE(:cursor::bigint, 0)
			RETURNING follower_id AS id, url AS address) SELECT id, address FROM d ORDER BY id LIMIT :limit`, post(2),
			[]string{"read-only transaction", "25006"}},
		{"another shape", strings.Replace(followersQuery, "url AS address", "url AS address, handle", 1), post(1),
			[]string{"invalid_shape", `["id" "address" "handle"]`}},
		{"no address", strings.Replace(followersQuery, "url AS address", "url", 1), post(1),
			[]string{"invalid_shape", `["id" "url"]`}},
		{"the wrong order", strings.Replace(followersQuery, "ORDER BY follower_id", "ORDER BY follower_id DESC", 1), post(1),
			[]string{"invalid_order", "id 24999 does not follow 25000"}},
		{"more rows than the limit", strings.Replace(followersQuery, "LIMIT :limit", "LIMIT :limit + 1", 1), post(1),
			[]string{"invalid_shape", "more than 1000 rows"}},
		{"a NULL id", `SELECT NULLIF(follower_id, 3) AS id, url AS address FROM followers WHERE author_id = :payload.author_id
			AND follower_id > COALESCE(:cursor::bigint, 0) ORDER BY follower_id LIMIT :limit`, post(1),
			[]string{"invalid_shape", "row 3: id is NULL"}},
		{"a page over MaxPageBytes", `SELECT g AS id, repeat('x', 9000) AS address FROM generate_series(1, 2000) g
			WHERE g > COALESCE(:cursor::int, 0) ORDER BY g LIMIT :limit`, post(1),
			[]string{"page_too_large", "by row 932"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSource(t, tc.query, 0)
			_, err := s.Page(ctx, tc.ev, "", pageLimit)
			if err == nil {
				t.Fatal("the page succeeded")
			}
			if !fanout.IsPermanent(err) {
				t.Errorf("%v: not permanent", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: want %q in it", err, w)
				}
			}
			if strings.Contains(err.Error(), dsn) || strings.Contains(err.Error(), password(t)) {
				t.Errorf("%v shows the DSN", err)
			}
		})
	}
	if after := count(t, c); after != before {
		t.Fatalf("followers: %d rows, were %d", after, before)
	}
}

// password is the DSN's password.
func password(t *testing.T) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil || cfg.Password == "" {
		t.Fatalf("the test DSN has no password: %v", err)
	}
	return cfg.Password
}

// A wrong password is refused permanently, and the error shows neither
// DSN nor password.
func TestWrongPassword(t *testing.T) {
	pw := password(t)
	bad := strings.Replace(dsn, ":"+pw+"@", ":not-"+pw+"@", 1)
	s := newSourceDSN(t, bad, followersQuery, 0)
	_, err := s.Page(context.Background(), post(1), "", pageLimit)
	if err == nil || !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("a wrong password: %v, want a permanent authentication failure", err)
	}
	if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), bad) {
		t.Fatalf("%v shows the password", err)
	}
}

// Hostile payload values are values: they match nothing, change no row
// and page no one they should not.
func TestHostilePayload(t *testing.T) {
	ctx := context.Background()
	c := admin(t)
	before := count(t, c)
	byHandle := newSource(t, `SELECT follower_id AS id, url AS address FROM followers
		WHERE handle = :payload.handle AND follower_id > COALESCE(:cursor::bigint, 0)
		ORDER BY follower_id LIMIT :limit`, 0)
	ev := func(handle string) fanout.Event {
		b, _ := json.Marshal(map[string]string{"handle": handle})
		return fanout.Event{ID: "e", Type: "new-post", Payload: b}
	}
	p, err := byHandle.Page(ctx, ev("user42"), "", pageLimit)
	if err != nil || len(p.Recipients) != 1 || p.Recipients[0].ID != "42" {
		t.Fatalf("handle user42: %+v, %v", p, err)
	}
	for _, h := range []string{
		"x'; DROP TABLE followers; --",
		"' OR '1'='1",
		`user42' OR handle LIKE '%`,
		"user42\x00",
		`$$; DELETE FROM followers; $$`,
		`:cursor`,
	} {
		p, err := byHandle.Page(ctx, ev(h), "", pageLimit)
		if err != nil && !fanout.IsPermanent(err) {
			t.Fatalf("handle %q: %v", h, err)
		}
		if len(p.Recipients) != 0 {
			t.Fatalf("handle %q paged %d recipients", h, len(p.Recipients))
		}
	}
	// A number field given as SQL: refused as a value of the wrong type,
	// not run.
	_, err = newSource(t, followersQuery, 0).Page(ctx, post("1 OR 1=1"), "", pageLimit)
	if !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "22P02") {
		t.Fatalf("author_id \"1 OR 1=1\": %v", err)
	}
	var tables int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'followers'").Scan(&tables); err != nil || tables != 1 {
		t.Fatalf("the followers table: %d, %v", tables, err)
	}
	if after := count(t, c); after != before {
		t.Fatalf("followers: %d rows, were %d", after, before)
	}
}

// Every query mode pgx offers but the simple protocol (refused at load)
// sends the parameters as parameters and pages alike: a DSN for PgBouncer
// in transaction mode may ask for exec or describe_exec.
func TestQueryExecModes(t *testing.T) {
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec"} {
		t.Run(mode, func(t *testing.T) {
			s := newSourceDSN(t, dsn+"&default_query_exec_mode="+mode, followersQuery, 0)
			rs, cursors := pageAll(t, s, post(2), 30)
			if len(rs) != 100 || len(cursors) != 4 || rs[99].ID != "100" || cursors[3] != "90" {
				t.Fatalf("%d recipients, cursors %q", len(rs), cursors)
			}
			_, err := s.Page(context.Background(), post(`x'; DROP TABLE followers; --`), "", 30)
			if !fanout.IsPermanent(err) || !strings.Contains(err.Error(), "22P02") {
				t.Fatalf("a hostile author_id: %v", err)
			}
		})
	}
}

// The general form of the first page's filter, for ids of any sign,
// pages alike (with the cast the package documentation asks for: without
// it PostgreSQL cannot type :cursor in IS NULL).
func TestCursorIsNullForm(t *testing.T) {
	s := newSource(t, `SELECT follower_id AS id, url AS address FROM followers
		WHERE author_id = :payload.author_id AND (:cursor::bigint IS NULL OR follower_id > :cursor::bigint)
		ORDER BY follower_id LIMIT :limit`, 0)
	rs, cursors := pageAll(t, s, post(2), 40)
	if len(rs) != 100 || rs[0].ID != "1" || rs[99].ID != "100" || len(cursors) != 3 || cursors[2] != "80" {
		t.Fatalf("%d recipients, cursors %q", len(rs), cursors)
	}
}
