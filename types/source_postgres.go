package types

import (
	"errors"

	"github.com/fanout/fanout/types/postgres"
)

// The postgres source (package types/postgres): the rows of a keyset query
// with named parameters, run read-only with a statement timeout; OFFSET is
// refused at load. The DSN is read from its file at load (relative to the
// types file's directory); the pool connects on the first page.
//
//	recipients:
//	  postgres:
//	    dsn_file: secrets/followers-dsn
//	    query: |
//	      SELECT follower_id AS id, webhook_url AS address FROM followers
//	      WHERE author_id = :payload.author_id::bigint AND follower_id > COALESCE(:cursor::bigint, 0)
//	      ORDER BY follower_id LIMIT :limit
//	    statement_timeout: 5s
func init() { RegisterSource(postgres.SourceName, loadPostgresSource) }

type postgresSource struct{ src *postgres.Source }

func loadPostgresSource(n Node) SourceConfig {
	f, ok := n.Fields(postgres.FieldDSNFile, postgres.FieldQuery, postgres.FieldStatementTimeout)
	if !ok {
		return nil
	}
	var cfg postgres.Config
	if dn, ok := f.Need(postgres.FieldDSNFile); !ok {
		return nil
	} else if cfg.DSNFile, ok = dn.FilePath(); !ok {
		return nil
	}
	if qn, ok := f.Need(postgres.FieldQuery); !ok {
		return nil
	} else if cfg.Query, ok = qn.String(); !ok {
		return nil
	}
	if tn, ok := f.Get(postgres.FieldStatementTimeout); ok {
		if cfg.StatementTimeout, ok = tn.Duration(); !ok {
			return nil
		}
	}
	src, err := postgres.New(cfg)
	if err != nil {
		// At the field New names, when the file gives it.
		var fe *postgres.FieldError
		if errors.As(err, &fe) {
			if c, ok := f.Get(fe.Field); ok {
				c.Errorf("%v", fe.Err)
				return nil
			}
		}
		n.Errorf("%v", err)
		return nil
	}
	return postgresSource{src: src}
}

func (p postgresSource) Open(*Type, Deps) (Source, error) { return p.src, nil }
