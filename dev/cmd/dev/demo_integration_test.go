//go:build integration

package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/dev/demo"
	"github.com/fanout/fanout/dev/stack"
)

// demoFlags are task dev's flags on free ports, its state in a directory
// of the test's, with small audiences, exiting when done.
func demoFlags(t *testing.T, big, small int) flags {
	t.Helper()
	f := flags{big: big, small: small, exitWhenDone: true, dir: t.TempDir()}
	for _, p := range []*int{&f.temporalPort, &f.kafkaPort, &f.redisPort, &f.demoPort, &f.sinkPort, &f.codecPort} {
		var err error
		if *p, err = stack.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// checkOutcomes checks that every event was delivered to each recipient
// once, each delivery's signature checked at the sink with its type's
// secret, and returns the recipients reached by type.
func checkOutcomes(t *testing.T, out []outcome) map[string]int {
	t.Helper()
	byType := map[string]int{}
	for _, o := range out {
		st := o.Sink
		if st.Unique != o.Audience || st.Deliveries != o.Audience || st.Verified != o.Audience {
			t.Errorf("%s %s: %d recipients, %d deliveries, %d with a checked signature; want %d of each", o.Type, o.ID, st.Unique, st.Deliveries, st.Verified, o.Audience)
		}
		byType[o.Type] += st.Unique
	}
	return byType
}

// The demo of task dev as it ships: the types file of dev/demo runs on
// the real stack with PostgreSQL, `worker check-types` accepts it, and
// every follower of each author (new_post, from PostgreSQL) and every
// subscriber of each digest (HTTP source) gets the event once, signed with
// its type's own secret (the sink process checks each delivery with the
// Standard Webhooks library and refuses a bad one).
func TestDemoTypesFile(t *testing.T) {
	if !stack.PostgresInstalled() {
		t.Fatal("PostgreSQL is not installed: go tool task preflight installs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := demoFlags(t, 4000, 4)
	out, err := run(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	byType := checkOutcomes(t, out)
	want := 0
	for _, n := range followerCounts(f.big) {
		want += n
	}
	if byType[demo.NewPostType] != want || byType[demo.DigestType] == 0 {
		t.Errorf("reached %v, want %d followers of new_post and the digests' subscribers", byType, want)
	}

	// The file task dev ran, as a user checks it.
	file := filepath.Join(f.dir, "types", demo.TypesFileName)
	root, err := stack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command(filepath.Join(stack.BinDir(root), "worker"), "check-types", file).CombinedOutput()
	if err != nil {
		t.Fatalf("worker check-types %s: %v\n%s", file, err, b)
	}
	for _, w := range []string{"new_post  normal    postgres  webhook", "digest    low       http      webhook", "2 types, ok"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("worker check-types says\n%s\nwithout %q", b, w)
		}
	}
}

// Without PostgreSQL task dev still runs: the digest type alone.
func TestDemoWithoutPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := demoFlags(t, 3000, 3)
	f.noPostgres = true
	out, err := run(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	byType := checkOutcomes(t, out)
	if byType[demo.NewPostType] != 0 || byType[demo.DigestType] != 3000+10+16+22 {
		t.Errorf("reached %v, want digests alone (3,048 subscribers)", byType)
	}
}
