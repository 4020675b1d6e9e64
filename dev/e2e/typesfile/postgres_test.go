//go:build integration

package typesfile_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

// Each type signs with its own secret.
var pgSecrets = map[string]string{
	"posts":   "whsec_cG9zdHMtc2lnbmluZy1zZWNyZXQtMDEyMzQ1Njc4OQ==",
	"sampled": "whsec_c2FtcGxlZC1zaWduaW5nLXNlY3JldC0wMTIzNDU2Nzg=",
	"legacy":  "whsec_bGVnYWN5LXNpZ25pbmctc2VjcmV0LTAxMjM0NTY3ODk=",
	"notes":   "whsec_bm90ZXMtc2lnbmluZy1zZWNyZXQtMDEyMzQ1Njc4OQ==",
	"digest":  "whsec_ZGlnZXN0LXNpZ25pbmctc2VjcmV0LTAxMjM0NTY3ODk=",
}

// digestToken is the digest type's recipients endpoint's token, which the
// types file reads from a file.
const digestToken = "Bearer digest-7c2e41"

// pgTypes is the types file of the test: posts pages an author's followers
// from PostgreSQL by keyset; sampled every n-th of them (n from the
// payload: 0 divides by zero); legacy reads a column the table does not
// have (the query passes the load, which does not see the schema, and
// fails when it runs); notes has its recipients in the event; digest asks
// an HTTP endpoint (DIGEST_URL) with GET, its token from a file.
const pgTypes = `types:
  posts:
    page_size: 5000
    batch_size: 1000
    max_attempts: 2
    recipients:
      postgres:
        dsn_file: secrets/followers-dsn
        query: |
          SELECT follower_id AS id, webhook_url AS address
          FROM followers
          WHERE author_id = :payload.author_id::bigint
            AND follower_id > COALESCE(:cursor::bigint, 0)
          ORDER BY follower_id
          LIMIT :limit
        statement_timeout: 2s
    message:
      passthrough: {pointer: /post}
    channel:
      webhook: {signing_secret_file: secrets/posts-signing}
  sampled:
    recipients:
      postgres:
        dsn_file: secrets/followers-dsn
        query: |
          SELECT follower_id AS id, webhook_url AS address
          FROM followers
          WHERE author_id = :payload.author_id::bigint
            AND follower_id % :payload.every::int = 0
            AND follower_id > COALESCE(:cursor::bigint, 0)
          ORDER BY follower_id
          LIMIT :limit
    message:
      passthrough: {pointer: /post}
    channel:
      webhook: {signing_secret_file: secrets/sampled-signing}
  legacy:
    recipients:
      postgres:
        dsn_file: secrets/followers-dsn
        query: |
          SELECT follower_id AS id, webhook_url AS address
          FROM followers
          WHERE author_id = :payload.author_id::bigint AND NOT muted
            AND follower_id > COALESCE(:cursor::bigint, 0)
          ORDER BY follower_id
          LIMIT :limit
    message:
      passthrough: {pointer: /post}
    channel:
      webhook: {signing_secret_file: secrets/legacy-signing}
  notes:
    recipients:
      inline: {pointer: /to}
    message:
      template:
        text: '{"note": {{json .Payload.text}}}'
        content_type: application/json
    channel:
      webhook: {signing_secret_file: secrets/notes-signing}
  digest:
    max_attempts: 2
    recipients:
      http:
        url: DIGEST_URL
        method: GET
        headers:
          Authorization: {value_from: {file: secrets/digest-token}}
        cursor: {name: after}
        limit: {name: n}
        answer: {recipients: /data, id: /who, address: /hook, next_cursor: /more}
    message:
      passthrough: {pointer: /post}
    channel:
      webhook: {signing_secret_file: secrets/digest-signing}
`

// Issue 27's acceptance, items 1, 2 and 4, with the stock worker binary
// configured by FANOUT_TYPES_FILE on the real stack (the temporal dev
// server, redis-server, kfake over TCP, PostgreSQL, deliveries over
// loopback HTTP): a type defined only in the file pages 25,000 followers
// from PostgreSQL by keyset, one of its pages fails twice on its
// statement timeout (the test holds an ACCESS EXCLUSIVE lock on the table)
// and succeeds on its third attempt, as the history shows, and every
// follower gets one delivery that verifies with the type's secret and
// with no other type's. Query errors (division by zero, a column that does
// not exist, SQL in a payload field) fail their events with the reason in
// Temporal, the table untouched; recipients PostgreSQL returns are checked
// like any source's (the outbound guard, the address bound).
func TestPostgresTypesFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{InMemory: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Build(ctx); err != nil {
		t.Fatal(err)
	}
	dsn, stopPG, err := stack.StartPostgres(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer stopPG()
	// The destinations are on 127.0.0.2, the one range the worker may
	// deliver to (FANOUT_OUTBOUND_ALLOW); the stack's demo server, where
	// the digest type's endpoint is, is on 127.0.0.1.
	rc := startReceiver(t, "127.0.0.2:0", pgSecrets)

	// Author 7 has 25,000 followers, inserted in a random order; author 8
	// has three good ones and three the workers must refuse: on a loopback
	// address outside FANOUT_OUTBOUND_ALLOW, on a private address, and
	// with an address over fanout.MaxAddressLen.
	const audience = 25_000
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	hook := rc.URL + "/hook/"
	if _, err := admin.Exec(ctx, `
CREATE TABLE followers (
	author_id   bigint NOT NULL,
	follower_id bigint NOT NULL,
	webhook_url text   NOT NULL,
	PRIMARY KEY (author_id, follower_id)
);
INSERT INTO followers SELECT 7, g, '`+hook+`' || g FROM generate_series(1, `+strconv.Itoa(audience)+`) g ORDER BY random();
INSERT INTO followers SELECT 8, g, '`+hook+`' || g FROM generate_series(1, 3) g;
INSERT INTO followers VALUES
	(8, 4, 'http://127.0.0.1:`+strings.Split(rc.URL, ":")[2]+`/hook/4'),
	(8, 5, 'http://10.255.255.1/hook/5'),
	(8, 6, '`+hook+`6?pad=' || repeat('a', `+strconv.Itoa(fanout.MaxAddressLen)+`));
ANALYZE followers;`); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	digest := &digestEndpoint{n: 300, hook: hook, auth: map[string]int{}}
	var victimHits atomic.Int64
	digest.victim = s.Route(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		victimHits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})) + "/victim"
	digestURL := s.Route(digest) + "/digest"
	if !strings.HasPrefix(digestURL, "http://127.0.0.1:") {
		t.Fatalf("the digest endpoint is at %s, want 127.0.0.1 (outside the allowed range)", digestURL)
	}
	files := map[string]string{"secrets/followers-dsn": dsn + "\n", "secrets/digest-token": digestToken + "\n",
		"types.yaml": strings.Replace(pgTypes, "DIGEST_URL", digestURL, 1)}
	for typ, sec := range pgSecrets {
		files["secrets/"+typ+"-signing"] = sec + "\n"
	}
	writeFiles(t, dir, files)
	if err := s.StartWorker("worker", "events,high,normal,low",
		"FANOUT_BRIDGE=true", "FANOUT_TYPES_FILE="+filepath.Join(dir, "types.yaml"),
		// Deliveries may reach 127.0.0.2 (the receiver) only: the last of
		// a variable wins over the stack's 127.0.0.0/8.
		"FANOUT_OUTBOUND_ALLOW=127.0.0.2/32",
		"FANOUT_RETRY_INITIAL=200ms", "FANOUT_RETRY_MAX=1s",
	); err != nil {
		t.Fatal(err)
	}

	// The lock that makes one page fail: taken before the event, so that
	// the first page (read by the events worker when the event opens)
	// waits for it; a second lock is queued behind it and the first is
	// released, so the first page runs and the second lock is granted as
	// soon as it ends, before the next page asks.
	first := lockFollowers(ctx, t, dsn)
	stamp := time.Now().UTC().Format("150405.000")
	postID := "post-" + stamp
	payload := func(v map[string]any) json.RawMessage {
		v["post"] = map[string]string{"title": "hello"}
		b, _ := json.Marshal(v)
		return b
	}
	if err := s.Publisher.Publish(ctx, starter.Envelope{ID: postID, Type: "posts", Payload: payload(map[string]any{"author_id": 7})}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the first page waiting for the lock", func() (bool, error) {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fanout' AND wait_event_type = 'Lock'`).Scan(&n)
		return n > 0, err
	})
	second := lockFollowers(ctx, t, dsn, admin)
	first.release()
	second.granted(t)

	// The next page fails on its statement timeout until the lock goes:
	// released once its activity is on its third attempt.
	wid := vocab.WorkflowID("posts", postID)
	waitFor(t, 2*time.Minute, "a recipients page on its third attempt", func() (bool, error) {
		d, err := s.TC.DescribeWorkflow(ctx, wid, "")
		if err != nil {
			return false, err
		}
		for _, pa := range d.RawResponse.GetPendingActivities() {
			if pa.GetActivityType().GetName() == "RecipientsPage" && pa.GetAttempt() >= 3 {
				return true, nil
			}
		}
		return false, nil
	})
	second.release()

	// The other events, published now that the table is free.
	hostileID, sqlID, zeroID, sampleID, legacyID, notesID, digestID := "addrs-"+stamp, "sql-"+stamp, "zero-"+stamp, "sample-"+stamp, "legacy-"+stamp, "notes-"+stamp, "digest-"+stamp
	to := make([]map[string]string, 20)
	for i := range to {
		to[i] = map[string]string{"id": "n" + strconv.Itoa(i), "address": hook + "n" + strconv.Itoa(i)}
	}
	// The event's own recipients are checked like any source's: a repeat,
	// an id outside the grammar, a private address.
	to = append(to, to[0], map[string]string{"id": "bad id", "address": hook + "bad"}, map[string]string{"id": "n-private", "address": "http://10.255.255.1/hook"})
	notes, _ := json.Marshal(map[string]any{"text": "a note", "to": to})
	if err := s.Publisher.Publish(ctx,
		starter.Envelope{ID: hostileID, Type: "posts", Payload: payload(map[string]any{"author_id": 8})},
		starter.Envelope{ID: sqlID, Type: "posts", Payload: payload(map[string]any{"author_id": "7; DROP TABLE followers"})},
		starter.Envelope{ID: zeroID, Type: "sampled", Payload: payload(map[string]any{"author_id": 7, "every": 0})},
		starter.Envelope{ID: sampleID, Type: "sampled", Payload: payload(map[string]any{"author_id": 7, "every": 1000})},
		starter.Envelope{ID: legacyID, Type: "legacy", Payload: payload(map[string]any{"author_id": 7})},
		starter.Envelope{ID: notesID, Type: "notes", Payload: notes},
		starter.Envelope{ID: digestID, Type: "digest", Payload: payload(map[string]any{})},
	); err != nil {
		t.Fatal(err)
	}

	res, err := s.WaitWorkflow(ctx, wid, postID)
	if err != nil {
		t.Fatalf("%v (worker log: %s)", err, s.LogPath("worker"))
	}
	if got, repeated := rc.event("posts", postID); res.Delivered != audience || got != audience || repeated != 0 || res.Duplicates != 0 {
		t.Errorf("posts %s: %d delivered (%d duplicates), the receiver verified %d followers (%d more than once), want %d each once",
			postID, res.Delivered, res.Duplicates, got, repeated, audience)
	}
	pages, err := pageAttempts(ctx, s.TC, wid)
	if err != nil {
		t.Fatal(err)
	}
	third := 0
	for _, p := range pages {
		t.Logf("posts %s: a recipients page succeeded on attempt %d (before: %q)", postID, p.attempt, p.lastFailure)
		switch {
		case p.attempt == 3 && strings.Contains(p.lastFailure, "statement timeout"):
			third++
		case p.attempt != 1:
			t.Errorf("a recipients page succeeded on attempt %d after %q", p.attempt, p.lastFailure)
		}
	}
	if third != 1 || len(pages) < audience/5000 {
		t.Errorf("recipients pages in the history: %+v; want one succeeding on its 3rd attempt after a statement timeout, the others on their first", pages)
	}

	// Author 8: the good followers delivered; the others refused by the
	// outbound guard or as too long, and dead-lettered.
	res, err = s.WaitWorkflow(ctx, vocab.WorkflowID("posts", hostileID), hostileID)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := rc.event("posts", hostileID); res.Delivered != 3 || got != 3 || res.Failed != 3 || res.DeadLettered != 3 {
		t.Errorf("posts %s: progress %+v, the receiver saw %d; want 3 delivered, 3 failed and dead-lettered", hostileID, res.Progress, got)
	}

	// The sampled type works (every 1000th of 25,000 followers)...
	res, err = s.WaitWorkflow(ctx, vocab.WorkflowID("sampled", sampleID), sampleID)
	if got, _ := rc.event("sampled", sampleID); err != nil || res.Delivered != audience/1000 || got != audience/1000 {
		t.Errorf("sampled %s: %+v, %v; the receiver saw %d, want %d", sampleID, res.Progress, err, got, audience/1000)
	}
	// ... and query errors fail their events, the reason in Temporal.
	for _, c := range []struct{ typ, id, reason string }{
		{"sampled", zeroID, "division by zero (SQLSTATE 22012)"},
		{"legacy", legacyID, `column "muted" does not exist (SQLSTATE 42703)`},
		{"posts", sqlID, `invalid input syntax for type bigint: "7; DROP TABLE followers" (SQLSTATE 22P02)`},
	} {
		wid := vocab.WorkflowID(c.typ, c.id)
		if _, err := s.WaitWorkflow(ctx, wid, c.id); err == nil {
			t.Errorf("%s %s: completed, want it failed", c.typ, c.id)
			continue
		}
		status, msg, err := failure(ctx, s.TC, wid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %s: %v: %s", c.typ, c.id, status, msg)
		if status != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED || !strings.Contains(msg, c.reason) {
			t.Errorf("%s %s: %v in Temporal with %q, want failed with %q", c.typ, c.id, status, msg, c.reason)
		}
		if got, _ := rc.event(c.typ, c.id); got != 0 {
			t.Errorf("%s %s: %d deliveries, want none", c.typ, c.id, got)
		}
	}
	// The payload's SQL was a value: the table is there, every row in it.
	var rows int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM followers`).Scan(&rows); err != nil || rows != audience+6 {
		t.Errorf("followers after the events: %d rows, %v; want %d", rows, err, audience+6)
	}

	// The notes type signs with its own secret (the receiver checks that
	// the posts secret does not verify its deliveries, and the reverse).
	res, err = s.WaitWorkflow(ctx, vocab.WorkflowID("notes", notesID), notesID)
	if got, repeated := rc.event("notes", notesID); err != nil || res.Delivered != 20 || got != 20 || repeated != 0 || res.Duplicates != 1 || res.Failed != 2 || res.DeadLettered != 2 {
		t.Errorf("notes %s: %+v, %v; the receiver verified %d (%d more than once); want 20 delivered once, 1 duplicate, 2 failed and dead-lettered", notesID, res.Progress, err, got, repeated)
	}
	// The digest type's endpoint, on a loopback address the guard would
	// refuse, is reached (trusted for its own host and port), with the
	// token of its file; a recipient on that same host and port is not:
	// the guard refuses it and it is dead-lettered.
	res, err = s.WaitWorkflow(ctx, vocab.WorkflowID("digest", digestID), digestID)
	if got, _ := rc.event("digest", digestID); err != nil || res.Delivered != int64(digest.n) || got != digest.n || res.Failed != 1 || res.DeadLettered != 1 {
		t.Errorf("digest %s: %+v, %v; the receiver verified %d; want %d delivered, the same-host recipient failed and dead-lettered", digestID, res.Progress, err, got, digest.n)
	}
	digest.mu.Lock()
	if digest.requests < 2 || digest.auth[digestToken] != digest.requests {
		t.Errorf("the digest endpoint got %d requests with Authorization %v, want several, each with the file's token", digest.requests, digest.auth)
	}
	digest.mu.Unlock()
	if n := victimHits.Load(); n != 0 {
		t.Errorf("the recipient on the endpoint's host got %d requests, want none", n)
	}

	if bad := rc.refused(); len(bad) > 0 {
		t.Errorf("the receiver refused %d deliveries, first: %s", len(bad), bad[0])
	}
}

// tableLock is a transaction of the test's holding (or queued for) an
// ACCESS EXCLUSIVE lock on followers.
type tableLock struct {
	conn *pgx.Conn
	pid  uint32
	done chan error
	tx   pgx.Tx
	ctx  context.Context
}

// lockFollowers asks for the lock on a connection of its own. Without
// admin it waits until the lock is granted; with admin (a connection to
// watch with) it returns once the request is queued.
func lockFollowers(ctx context.Context, t *testing.T, dsn string, admin ...*pgx.Conn) *tableLock {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	l := &tableLock{conn: c, pid: c.PgConn().PID(), done: make(chan error, 1), ctx: ctx}
	if l.tx, err = c.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := l.tx.Exec(ctx, "LOCK TABLE followers IN ACCESS EXCLUSIVE MODE")
		l.done <- err
	}()
	if len(admin) == 0 {
		l.granted(t)
		return l
	}
	waitFor(t, 30*time.Second, "the second lock queued", func() (bool, error) {
		var n int
		err := admin[0].QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, int64(l.pid)).Scan(&n)
		return n > 0, err
	})
	return l
}

// granted waits for the lock.
func (l *tableLock) granted(t *testing.T) {
	t.Helper()
	select {
	case err := <-l.done:
		if err != nil {
			t.Fatalf("lock followers: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the lock on followers was not granted within a minute")
	}
}

// release ends the lock's transaction.
func (l *tableLock) release() { _ = l.tx.Rollback(l.ctx) }

// digestEndpoint answers GET ?after=&n= with {"data": [{"who", "hook"}],
// "more"}: n recipients on the receiver, then one whose address is
// victim, on the endpoint's own host and port. It records the
// Authorization header of every request.
type digestEndpoint struct {
	n            int
	hook, victim string
	mu           sync.Mutex
	requests     int
	auth         map[string]int
}

func (d *digestEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.requests++
	d.auth[r.Header.Get("Authorization")]++
	d.mu.Unlock()
	from, _ := strconv.Atoi(r.URL.Query().Get("after"))
	limit, err := strconv.Atoi(r.URL.Query().Get("n"))
	if r.Method != http.MethodGet || r.URL.Path != "/digest" || err != nil || limit < 1 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	type item struct {
		Who  string `json:"who"`
		Hook string `json:"hook"`
	}
	var out struct {
		Data []item `json:"data"`
		More string `json:"more,omitempty"`
	}
	out.Data = []item{}
	for i := from; i <= d.n && len(out.Data) < min(limit, 100); i++ {
		if i == d.n {
			out.Data = append(out.Data, item{"same-host", d.victim})
		} else {
			out.Data = append(out.Data, item{"d" + strconv.Itoa(i), d.hook + "d" + strconv.Itoa(i)})
		}
	}
	if next := from + len(out.Data); next <= d.n {
		out.More = strconv.Itoa(next)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
