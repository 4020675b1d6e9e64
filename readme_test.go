package fanout_test

// The README's other checks (links, length, wording, the types file
// example) and docs/configuration.md's are in dev/docs.

import (
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeGoProgram is the Go program of README.md's "Define an event type in
// Go" section (its first go block, a package main) and the README line it
// starts on.
func readmeGoProgram(t *testing.T, readme string) (src string, line int) {
	t.Helper()
	const section = "\n## Define an event type in Go\n"
	i := strings.Index(readme, section)
	if i < 0 {
		t.Fatalf("README.md has no%s", strings.TrimRight(section, "\n"))
	}
	start := i + len(section)
	end := len(readme)
	if j := strings.Index(readme[start:], "\n## "); j >= 0 {
		end = start + j
	}
	const fence = "\n```go\n"
	k := strings.Index(readme[start:end], fence)
	if k < 0 {
		t.Fatal("README.md, Define an event type in Go: no ```go block")
	}
	body := start + k + len(fence)
	stop := strings.Index(readme[body:end], "\n```")
	if stop < 0 {
		t.Fatal("README.md, Define an event type in Go: the ```go block is not closed")
	}
	src = readme[body : body+stop+1]
	if !strings.HasPrefix(src, "package main\n") {
		t.Fatalf("README.md, Define an event type in Go: the first go block is not a program (package main): %.40q", src)
	}
	return src, strings.Count(readme[:body], "\n") + 1
}

// exampleDir is the package the README's program is compiled as, through
// go build -overlay: inside this module (its imports resolve with this
// go.mod) but never on disk.
const exampleDir = "readme-example-program"

// TestREADMEGoExample: the README's Go program is the one compiled, as it
// stands (errors point at README.md's lines); a user who copies it gets a
// program that builds against this module.
func TestREADMEGoExample(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, line := readmeGoProgram(t, string(b))
	if formatted, err := format.Source([]byte(src)); err == nil && string(formatted) != src {
		t.Errorf("the README's Go example (README.md line %d) is not gofmt-formatted", line)
	}
	bin, err := buildProgram(t, fmt.Sprintf("//line README.md:%d\n%s", line, src))
	if err != nil {
		t.Fatalf("the README's Go example (README.md line %d) does not compile: %v", line, err)
	}
	// It is a main of its own on the stock wiring: workers.Main's -h names
	// its Go type and the variables it reads, the types file's among them,
	// and starts nothing (the type's own Redis is never dialled).
	if !strings.Contains(src, "\tworkers.Main(reg") {
		t.Errorf("the README's Go example (README.md line %d) does not run its registry with workers.Main", line)
	}
	out, err := exec.Command(bin, "-h").Output()
	if err != nil {
		t.Fatalf("the README's program -h: %v", err)
	}
	for _, want := range []string{"order-shipped", "FANOUT_TYPES_FILE", "FANOUT_QUEUES", "FANOUT_BRIDGE", "TEMPORAL_ADDRESS", "-version"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the README's program -h does not mention %s:\n%s", want, out)
		}
	}
}

// The check fires: the same program with one undefined name does not build.
func TestREADMEGoExampleCheckFires(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, _ := readmeGoProgram(t, string(b))
	broken := strings.Replace(src, "func main() {\n", "func main() {\n\tundefinedInTheREADME()\n", 1)
	if broken == src {
		t.Fatal("the README's program has no func main")
	}
	if _, err := buildProgram(t, broken); err == nil || !strings.Contains(err.Error(), "undefinedInTheREADME") {
		t.Fatalf("a broken program built: %v", err)
	}
}

// buildProgram compiles src as package exampleDir of this module and
// returns the binary.
func buildProgram(t *testing.T, src string) (string, error) {
	t.Helper()
	if _, err := os.Stat(exampleDir); err == nil {
		t.Fatalf("%s exists in the tree; the overlay would mix with it", exampleDir)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(wd, exampleDir, "main.go"): file}})
	if err != nil {
		t.Fatal(err)
	}
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "example")
	out, err := exec.Command("go", "build", "-overlay", ovFile, "-o", bin, "./"+exampleDir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	return bin, nil
}
