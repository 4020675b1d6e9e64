package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
)

// FollowersReader is the role SeedFollowers creates for the readers of
// the followers table: it may only SELECT from it.
const FollowersReader = "fanout_reader"

// SeedFollowers creates the followers table of the demo's new_post type
// (dev/demo/types.yaml) in the database of dsn, a superuser's URL as
// StartPostgres returns, and fills it: author i+1 has counts[i] followers,
// ids 1..counts[i], each with the webhook address deliverURL. It creates
// the role FollowersReader with a random password, allowed only to read
// the table, and returns its DSN, what the types file's dsn_file should
// hold: the source runs read-only anyway, and a reader's role keeps it so
// in the database too.
func SeedFollowers(ctx context.Context, dsn, deliverURL string, counts []int) (readerDSN string, err error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "postgres" {
		return "", fmt.Errorf("seed followers: want a postgres:// URL")
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("seed followers: %w", err)
	}
	defer func() { _ = c.Close(ctx) }()
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return "", err
	}
	password := hex.EncodeToString(secret)
	stmts := []string{
		`DROP TABLE IF EXISTS followers`,
		`CREATE TABLE followers (
			author_id   bigint NOT NULL,
			follower_id bigint NOT NULL,
			webhook_url text   NOT NULL,
			PRIMARY KEY (author_id, follower_id))`,
		`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '` + FollowersReader + `') THEN
				CREATE ROLE ` + FollowersReader + ` LOGIN;
			END IF;
		END $$`,
		// The password is hex: nothing to quote.
		`ALTER ROLE ` + FollowersReader + ` PASSWORD '` + password + `'`,
		`GRANT SELECT ON followers TO ` + FollowersReader,
	}
	for _, q := range stmts {
		if _, err := c.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("seed followers: %w", err)
		}
	}
	for i, n := range counts {
		if _, err := c.Exec(ctx, `INSERT INTO followers (author_id, follower_id, webhook_url)
			SELECT $1::bigint, g, $2::text FROM generate_series(1, $3::bigint) AS g`, int64(i+1), deliverURL, int64(n)); err != nil {
			return "", fmt.Errorf("seed followers of author %d: %w", i+1, err)
		}
	}
	if _, err := c.Exec(ctx, `ANALYZE followers`); err != nil {
		return "", fmt.Errorf("seed followers: %w", err)
	}
	r := *u
	r.User = url.UserPassword(FollowersReader, password)
	return r.String(), nil
}
