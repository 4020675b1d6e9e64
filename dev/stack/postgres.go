package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresUser is the role StartPostgres creates (with a random password),
// and, when this process runs as root, the system user the server runs as:
// postgres refuses to run as root, and Debian's package creates that user.
const PostgresUser = "postgres"

// StartPostgres starts a throwaway PostgreSQL server on a free 127.0.0.1
// port and waits until it answers. Its log is dir/postgres.log. Its data
// live in dir/postgres, or, when this process runs as root, in a
// directory of its own under the system's temporary directory owned by the
// postgres system user (dir may not be reachable by that user), which stop
// removes. The cluster is made by initdb with the superuser PostgresUser
// and a random password (scram-sha-256 over TCP, no Unix socket), no
// fsync (the data are thrown away). dsn is a URL for the database
// "postgres"; stop shuts the server down (the kernel kills it should this
// process die first: Pdeathsig).
//
// The server binaries come from PATH or Debian's /usr/lib/postgresql/*/bin
// (the highest version); when they are missing and this process runs as
// root, Debian's postgresql package is installed with apt-get.
func StartPostgres(ctx context.Context, dir string) (dsn string, stop func(), err error) {
	bins, err := postgresBinaries(os.Stderr)
	if err != nil {
		return "", nil, err
	}
	cred, base, cleanup, err := postgresBase(dir)
	if err != nil {
		return "", nil, err
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	logPath := filepath.Join(dir, "postgres.log")
	data := filepath.Join(base, "data")
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return "", nil, err
	}
	password := hex.EncodeToString(secret)
	pwfile := filepath.Join(base, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return "", nil, err
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", nil, err
		}
	}
	initdb := exec.CommandContext(ctx, bins.initdb, "-D", data, "-U", PostgresUser, "--pwfile", pwfile,
		"-A", "scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("initdb: %w: %s", err, tail(out, 2000))
	}
	_ = os.Remove(pwfile)

	// A free port can be taken before the server binds it: try again on
	// another, as Stack.startRedis does.
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return "", nil, err
		}
		p, err := startProcAs("postgres", logPath, bins.postgres, []string{"-D", data, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "max_connections=50", "-c", "shared_buffers=32MB"}, cred)
		if err != nil {
			return "", nil, err
		}
		dsn := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", PostgresUser, password, port)
		err = waitPostgres(ctx, p, dsn)
		if err == nil {
			return dsn, func() { stopPostgres(p); cleanup() }, nil
		}
		stopPostgres(p)
		if !errors.Is(err, errPostgresExited) {
			return "", nil, err
		}
	}
	return "", nil, fmt.Errorf("postgres did not start after 3 tries; see %s", logPath)
}

// stopPostgres shuts the server p down with SIGINT, its fast shutdown:
// backends end and its shared memory is released (a SIGKILL would leave
// the SysV segment behind); SIGKILL after 10 s.
func stopPostgres(p *Proc) {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(p.Pid(), syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
}

var errPostgresExited = errors.New("postgres exited at start")

// waitPostgres waits until the server p answers a query on dsn, for at
// most 30 s.
func waitPostgres(ctx context.Context, p *Proc, dsn string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if p.Exited() {
			return errPostgresExited
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := pgx.Connect(cctx, dsn)
		if err == nil {
			err = c.Ping(cctx)
			_ = c.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres not ready after 30 s (its log has why)")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// postgresBase makes the directory of the cluster: dir/postgres for a
// user other than root; for root, a temporary directory owned by the
// postgres system user, whose credential cred is then set.
func postgresBase(dir string) (cred *syscall.Credential, base string, cleanup func(), err error) {
	if os.Geteuid() != 0 {
		base = filepath.Join(dir, "postgres")
		_ = os.RemoveAll(base)
		if err := os.MkdirAll(base, 0o700); err != nil {
			return nil, "", nil, err
		}
		return nil, base, func() {}, nil
	}
	u, err := user.Lookup(PostgresUser)
	if err != nil {
		return nil, "", nil, fmt.Errorf("postgres refuses to run as root and there is no %q system user to run it as (Debian's postgresql package creates it): %w", PostgresUser, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", nil, fmt.Errorf("user %s: %w", PostgresUser, err)
	}
	cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	base, err = os.MkdirTemp("", "fanout-postgres-")
	if err != nil {
		return nil, "", nil, err
	}
	if err := os.Chown(base, int(uid), int(gid)); err != nil {
		_ = os.RemoveAll(base)
		return nil, "", nil, err
	}
	return cred, base, func() { _ = os.RemoveAll(base) }, nil
}

type postgresBins struct{ initdb, postgres string }

// postgresBinaries finds initdb and postgres, installing Debian's
// postgresql package when they are missing and this process runs as root.
func postgresBinaries(progress io.Writer) (postgresBins, error) {
	if b, ok := findPostgres(); ok {
		return b, nil
	}
	if os.Geteuid() != 0 {
		return postgresBins{}, errors.New("postgres server binaries (initdb, postgres) not found: install them (Debian/Ubuntu: sudo apt-get install -y postgresql; macOS: brew install postgresql)")
	}
	fmt.Fprintln(progress, "postgres not found; installing postgresql with apt-get...")
	for _, args := range [][]string{{"update"}, {"install", "-y", "postgresql"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Stdout, cmd.Stderr = progress, progress
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if err := cmd.Run(); err != nil {
			return postgresBins{}, fmt.Errorf("apt-get %s: %w (install postgresql by hand)", strings.Join(args, " "), err)
		}
	}
	if b, ok := findPostgres(); ok {
		return b, nil
	}
	return postgresBins{}, errors.New("postgresql installed, but initdb and postgres are still not found")
}

// PostgresInstalled reports whether the PostgreSQL server binaries are
// on this machine (PATH or Debian's /usr/lib/postgresql/*/bin), without
// installing them as StartPostgres does for root.
func PostgresInstalled() bool {
	_, ok := findPostgres()
	return ok
}

// findPostgres finds initdb and postgres.
func findPostgres() (postgresBins, bool) {
	initdb, err1 := exec.LookPath("initdb")
	server, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil {
		return postgresBins{initdb, server}, true
	}
	// Debian keeps the server binaries out of PATH, one folder per
	// major version.
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorOf(b) - majorOf(a) })
	for _, d := range dirs {
		b := postgresBins{filepath.Join(d, "initdb"), filepath.Join(d, "postgres")}
		if isFile(b.initdb) && isFile(b.postgres) {
			return b, true
		}
	}
	return postgresBins{}, false
}

// majorOf is the version of a /usr/lib/postgresql/<version>/bin folder.
func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// startProcAs is startProc with the child run under cred (nil: this
// process's user): its own process group, killed with this process.
func startProcAs(name, logPath, bin string, args []string, cred *syscall.Credential) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return launch(name, logPath, cmd)
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
