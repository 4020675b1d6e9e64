// Package postgres is the postgres recipients source of the types file:
// an event type's recipients are the rows of a keyset query on a
// PostgreSQL database (github.com/jackc/pgx/v5).
//
// # The query
//
// The query returns two columns, id and address (alias them), ordered by
// id, after the cursor, at most :limit rows:
//
//	SELECT follower_id AS id, webhook_url AS address
//	FROM followers
//	WHERE author_id = :payload.author_id
//	  AND follower_id > COALESCE(:cursor::bigint, 0)
//	ORDER BY follower_id
//	LIMIT :limit
//
// It pages by keyset: the next page's cursor is the last row's id, and
// there is no next page when fewer than :limit rows come back. :cursor is
// NULL on the first page, hence the COALESCE (with 0 for positive ids).
// For ids of any sign, or text ids, write one of (PostgreSQL cannot tell
// the type of a parameter used only in IS NULL: cast it):
//
//	AND (:cursor::bigint IS NULL OR follower_id > :cursor::bigint)
//	AND handle > COALESCE(:cursor, '')
//
// Because a page is "the :limit rows after this id", a page asked twice is
// the same page (a retry, a batch fetched again), whatever rows were added
// before it since; OFFSET paging would shift, so a query with OFFSET is
// refused at load.
//
// Named parameters, each sent to PostgreSQL as a parameter of the
// statement ($1, $2, ...), never spliced into its text, so no payload can
// change the query; PostgreSQL reads each as the type the query gives it
// (cast where it cannot tell: :payload.author_id::bigint):
//
//	:cursor     the page's cursor: the previous page's last id, NULL at first
//	:limit      the most rows the page may have (an integer)
//	:id         the event's id
//	:type       the event's type
//	:priority   the event's priority (NULL when it has none)
//	:tenant     the event's tenant (NULL when it has none)
//	:payload    the event's payload, as JSON text (for a json/jsonb parameter)
//	:payload.a.b  the field a.b of the payload (a number field of an array
//	            is its index): a string as itself, a number as its literal,
//	            true/false, an object or array as JSON text, null as NULL;
//	            an event without the field fails with its name
//
// At load (New) the query is scanned, not parsed: named parameters and
// words are found outside string literals ('...', E'...', $tag$...$tag$),
// quoted identifiers and comments, and words match case-insensitively. It
// must use :cursor and :limit, have an ORDER BY, be one statement, use no
// positional parameter ($1) and no OFFSET (a column named offset is
// written "offset"). What the scanner cannot check (that the order is by
// the id column, that the filter is id > :cursor) is checked on each page
// where it can be: no row may have the cursor's id, and integer ids must
// increase.
//
// # Running it
//
// Each page runs in its own read-only transaction (BEGIN READ ONLY) with
// SET LOCAL statement_timeout (Config.StatementTimeout). The pool
// (pgxpool) connects on the first page; the DSN is read from a file at
// load and appears in no error (errors name the file). A page is bounded
// like every page: at most :limit rows and fanout.MaxPageBytes of ids and
// addresses (more fails the event: page_too_large); each recipient is then
// checked by the activity like any source's (fanout.ValidateID,
// fanout.MaxAddressLen).
//
// Errors: what asking again cannot fix is permanent (fanout.Permanent: the
// event fails with the reason in the Temporal UI): a query PostgreSQL
// refuses (syntax, an undefined column or table, a value of the wrong
// type, a write in the read-only transaction), a wrong shape or order of
// rows, a payload without a field the query uses, a refused login. A
// connection failure, a statement timeout, a backend terminated, a
// serialization failure or a server out of resources is transient: the
// activity retries it.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/config"
)

// SourceName is the source's name in a types file.
const SourceName = "postgres"

// DefaultStatementTimeout bounds a page's query when Config leaves it 0.
// It is under the 30 s a page has as a local activity, so a slow query
// fails as a timeout (and is retried) before its activity does.
const DefaultStatementTimeout = 10 * time.Second

// MaxStatementTimeout bounds Config.StatementTimeout: under the 5 minutes a
// recipients page activity has to run (workflows' stepContext).
const MaxStatementTimeout = 4 * time.Minute

// DefaultConnectTimeout bounds connecting when the DSN sets no
// connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// Config is a postgres source as the types file writes it (dsn_file,
// query, statement_timeout).
type Config struct {
	// DSNFile is the file holding the DSN (a postgres:// URL or
	// keyword=value pairs), never written inline: a regular file of at
	// most 64 KiB, read like every secret file (config.ReadSecretFile).
	DSNFile string
	// Query is the keyset query with named parameters (see the package
	// documentation).
	Query string
	// StatementTimeout bounds each page's query (SET LOCAL
	// statement_timeout). 0: DefaultStatementTimeout; at most
	// MaxStatementTimeout.
	StatementTimeout time.Duration
}

// Source pages recipients from PostgreSQL; it is safe for concurrent use.
type Source struct {
	cfg     Config
	q       query
	timeout time.Duration
	poolCfg *pgxpool.Config
	secrets []string // the DSN and its password, scrubbed from errors

	mu     sync.Mutex
	pool   *pgxpool.Pool
	closed bool
}

// FieldError is New's error: the field of Config at fault, by its name in
// the types file, and why.
type FieldError struct {
	// Field is dsn_file, query or statement_timeout.
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

// Names of Config's fields in a types file.
const (
	FieldDSNFile          = "dsn_file"
	FieldQuery            = "query"
	FieldStatementTimeout = "statement_timeout"
)

func fieldErr(field, format string, a ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, a...)}
}

// New validates cfg (the query parses into named parameters, :cursor and
// :limit are used, no OFFSET, the DSN file exists and holds a DSN) and
// returns a Source; it connects lazily, on the first page. Its error is a
// *FieldError naming the field.
func New(cfg Config) (*Source, error) {
	timeout := cfg.StatementTimeout
	switch {
	case timeout < 0:
		return nil, fieldErr(FieldStatementTimeout, "%v is negative", timeout)
	case timeout > MaxStatementTimeout:
		return nil, fieldErr(FieldStatementTimeout, "%v is over %v (a recipients page has 5 minutes)", timeout, MaxStatementTimeout)
	case timeout == 0:
		timeout = DefaultStatementTimeout
	}
	if timeout < time.Millisecond {
		return nil, fieldErr(FieldStatementTimeout, "%v is under 1ms (PostgreSQL counts in milliseconds)", timeout)
	}
	q, err := parseQuery(cfg.Query)
	if err != nil {
		return nil, &FieldError{Field: FieldQuery, Err: err}
	}
	if cfg.DSNFile == "" {
		return nil, fieldErr(FieldDSNFile, "empty (the DSN is read from a file, never written inline)")
	}
	// Read as a secret file: a regular file (not a FIFO or a device, which
	// would block the start or fill the memory), bounded, trimmed, not
	// empty; its errors name the path, never the content.
	dsn, err := config.ReadSecretFile("DSN file", cfg.DSNFile)
	if err != nil {
		return nil, &FieldError{Field: FieldDSNFile, Err: err}
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message quotes the DSN (its password masked at best):
		// none of it is repeated.
		return nil, fieldErr(FieldDSNFile, "%s does not hold a PostgreSQL connection string (a postgres:// URL or keyword=value pairs)", cfg.DSNFile)
	}
	if pc.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		// pgx would write the parameters into the query's text (escaped);
		// this source sends them as parameters, always.
		return nil, fieldErr(FieldDSNFile, "%s sets default_query_exec_mode=simple_protocol, which puts parameters in the query's text; leave it out or use exec", cfg.DSNFile)
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "fanout"
	}
	s := &Source{cfg: cfg, q: q, timeout: timeout, poolCfg: pc, secrets: []string{dsn}}
	if pc.ConnConfig.Password != "" {
		s.secrets = append(s.secrets, pc.ConnConfig.Password)
	}
	return s, nil
}

// Close closes the pool's connections; a Page after it fails.
func (s *Source) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.pool != nil {
		s.pool.Close()
		s.pool = nil
	}
}

// connect returns the pool, made on first use.
func (s *Source) connect() (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("postgres source closed")
	}
	if s.pool == nil {
		p, err := pgxpool.NewWithConfig(context.Background(), s.poolCfg)
		if err != nil {
			return nil, s.fail("open pool", err)
		}
		s.pool = p
	}
	return s.pool, nil
}

// Page returns one page of recipients for ev after cursor, at most limit:
// the query's rows in their order, and as next cursor the last row's id
// when the page is full.
func (s *Source) Page(ctx context.Context, ev fanout.Event, cursor string, limit int) (fanout.Page, error) {
	if limit <= 0 {
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("postgres recipients: limit %d", limit))
	}
	args, err := s.q.args(ev, cursor, limit)
	if err != nil {
		return fanout.Page{}, fanout.Permanent(fmt.Errorf("postgres recipients: %w", err))
	}
	pool, err := s.connect()
	if err != nil {
		return fanout.Page{}, err
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fanout.Page{}, s.fail("begin", err)
	}
	// Nothing to commit: the transaction only reads. The rollback is
	// bounded, not the caller's context's: that may have ended.
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = "+strconv.FormatInt(s.timeout.Milliseconds(), 10)); err != nil {
		return fanout.Page{}, s.fail("set statement_timeout", err)
	}
	qctx, stop := context.WithCancel(ctx)
	defer stop()
	// Every column comes back as text: an id of any type (integer, uuid,
	// text) becomes the recipient id and cursor as PostgreSQL writes it,
	// and goes back as :cursor in the same form.
	rows, err := tx.Query(qctx, s.q.sql, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
	if err != nil {
		return fanout.Page{}, s.fail("query", err)
	}
	page, err := readPage(rows, cursor, limit)
	if err != nil {
		// Refused on what was read (the shape comes from the statement's
		// description): the rest is not worth reading.
		stop()
		rows.Close()
		return fanout.Page{}, err
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fanout.Page{}, s.fail("query", err)
	}
	return page, nil
}

// Reasons that start the errors of pages the source refuses.
const (
	ReasonInvalidShape = "invalid_shape"
	ReasonInvalidOrder = "invalid_order"
	ReasonPageTooLarge = "page_too_large"
)

// rowSource is what readPage reads of pgx.Rows.
type rowSource interface {
	FieldDescriptions() []pgconn.FieldDescription
	Next() bool
	RawValues() [][]byte
	Err() error
}

// readPage reads the rows of one page (each column in text format),
// checking their shape, order and size.
func readPage(rows rowSource, cursor string, limit int) (fanout.Page, error) {
	var (
		rs      []fanout.Recipient
		size    int
		idCol   = -1
		addrCol int
		integer bool  // the ids are integers: they must increase
		last    int64 // the last integer id (or the cursor)
	)
	// shape finds the columns; the statement's description comes with
	// its first row, or at its end (when it failed, there is none: the
	// caller reports the failure).
	shape := func() error {
		fields := rows.FieldDescriptions()
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.Name
		}
		var err error
		if idCol, addrCol, err = columns(names); err != nil {
			return fanout.Permanent(err)
		}
		// Integer ids must increase: the check a scanner of the query
		// cannot make (ORDER BY some other column, id >= :cursor).
		if integer = isInteger(fields[idCol].DataTypeOID); integer && cursor != "" {
			if last, err = strconv.ParseInt(cursor, 10, 64); err != nil {
				integer = false
			}
		}
		return nil
	}
	for rows.Next() {
		if idCol < 0 {
			if err := shape(); err != nil {
				return fanout.Page{}, err
			}
		}
		n := len(rs) + 1
		if n > limit {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("%s: the query returned more than %d rows (:limit): end it with LIMIT :limit", ReasonInvalidShape, limit))
		}
		v := rows.RawValues()
		if v[idCol] == nil {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("%s: row %d: id is NULL", ReasonInvalidShape, n))
		}
		r := fanout.Recipient{ID: string(v[idCol]), Address: string(v[addrCol])}
		if size += len(r.ID) + len(r.Address); size > fanout.MaxPageBytes {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("%s: the page's ids and addresses are over %d bytes by row %d", ReasonPageTooLarge, fanout.MaxPageBytes, n))
		}
		if cursor != "" && r.ID == cursor {
			return fanout.Page{}, fanout.Permanent(fmt.Errorf("%s: row %d has the cursor's id %.64q: the query must keep only ids after it (id > :cursor)", ReasonInvalidOrder, n, r.ID))
		}
		if integer {
			id, err := strconv.ParseInt(r.ID, 10, 64)
			if err == nil && (id <= last && (n > 1 || cursor != "")) {
				return fanout.Page{}, fanout.Permanent(fmt.Errorf("%s: row %d: id %d does not follow %d: the query must keep ids after :cursor and ORDER BY id", ReasonInvalidOrder, n, id, last))
			}
			last = id
		}
		rs = append(rs, r)
	}
	if idCol < 0 && rows.Err() == nil {
		// No row: the shape of an empty result is checked too.
		if err := shape(); err != nil {
			return fanout.Page{}, err
		}
	}
	p := fanout.Page{Recipients: rs}
	if len(rs) == limit {
		p.NextCursor = rs[len(rs)-1].ID
	}
	return p, nil
}

// columns finds the id and address columns among a result's names: there
// must be exactly these two.
func columns(names []string) (idCol, addrCol int, err error) {
	idCol, addrCol = -1, -1
	for i, n := range names {
		switch n {
		case "id":
			if idCol < 0 {
				idCol = i
				continue
			}
		case "address":
			if addrCol < 0 {
				addrCol = i
				continue
			}
		}
		idCol = -2 // a repeated or another column
	}
	if len(names) != 2 || idCol < 0 || addrCol < 0 {
		return 0, 0, fmt.Errorf("%s: the query returns the columns %q; want exactly id and address (alias them: SELECT follower_id AS id, webhook_url AS address)", ReasonInvalidShape, names)
	}
	return idCol, addrCol, nil
}

// isInteger reports whether oid is smallint, integer or bigint.
func isInteger(oid uint32) bool {
	return oid == 20 || oid == 21 || oid == 23 // int8, int2, int4
}

// fail makes err the source's error: its message without the DSN or the
// password, permanent when asking again cannot fix it (see permanent).
func (s *Source) fail(what string, err error) error {
	msg := err.Error()
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// Not pgx's "failed to connect to `user=... database=...`": the
		// cause only, after the file the DSN came from.
		if inner := errors.Unwrap(ce); inner != nil {
			msg = inner.Error()
		}
		what = fmt.Sprintf("connect (DSN from %s)", s.cfg.DSNFile)
	}
	for _, secret := range s.secrets {
		msg = strings.ReplaceAll(msg, secret, "[redacted]")
	}
	e := fmt.Errorf("postgres recipients: %s: %s", what, msg)
	if permanent(err) {
		return fanout.Permanent(e)
	}
	return e
}

// permanent reports whether a failure of PostgreSQL's will happen again
// when the page is asked again: any error the server answers with, except
// those of its classes that pass (08 connection exception, 40 transaction
// rollback (serialization failure, deadlock), 53 insufficient resources,
// 55P03 lock not available, 57 operator intervention (statement timeout,
// query canceled, backend terminated, shutdown), 58 system error, XX
// internal error). An error without a server's answer (the network, a
// context ending) is transient.
func permanent(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return false
	}
	if pg.Code == "55P03" {
		return false
	}
	switch pg.Code[:min(2, len(pg.Code))] {
	case "08", "40", "53", "57", "58", "XX":
		return false
	}
	return true
}
