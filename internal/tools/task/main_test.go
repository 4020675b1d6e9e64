package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRepoRootFindsTheToolsModuleAbove(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(toolsModFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, toolsModFile), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, sub} {
		got, err := repoRoot(dir)
		if err != nil || got != root {
			t.Errorf("repoRoot(%s) = %q, %v; want %q", dir, got, err, root)
		}
	}
	if _, err := repoRoot(t.TempDir()); err == nil {
		t.Error("repoRoot outside a repository: no error")
	}
}

func TestTheRepositoryHasTheToolsModule(t *testing.T) {
	// This package is internal/tools/task: the root is three levels up.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(wd, "..", "..", "..")
	got, err := repoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Clean(got) != filepath.Clean(want) {
		t.Errorf("repoRoot = %s, want %s", got, want)
	}
}
