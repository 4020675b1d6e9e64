//go:build integration

package stack

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartPostgres gives a server that takes the DSN's password and nothing
// else, and stop shuts it down and removes its data.
func TestStartPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	dsn, stop, err := StartPostgres(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	var data string
	err = c.QueryRow(ctx, "SHOW data_directory").Scan(&data)
	_ = c.Close(ctx)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		stop()
		t.Fatalf("the data directory: %v", err)
	}
	cfg, _ := pgx.ParseConfig(dsn)
	cfg.Password = "wrong"
	if c, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		_ = c.Close(ctx)
		stop()
		t.Fatal("a wrong password was accepted")
	}
	stop()
	if c, err := pgx.Connect(ctx, dsn); err == nil {
		_ = c.Close(ctx)
		t.Fatal("the server answers after stop")
	}
	if _, err := os.Stat(data); os.Geteuid() == 0 && !os.IsNotExist(err) {
		t.Fatalf("the data directory %s is left behind: %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres.log")); err != nil {
		t.Fatalf("no log: %v", err)
	}
}
