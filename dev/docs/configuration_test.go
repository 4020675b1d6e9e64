package docs

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fanout/fanout/internal/config"
)

const root = "../.."

// TestConfigurationPageIsCurrent: docs/configuration.md is what the code
// generates now (go tool task docs rewrites it).
func TestConfigurationPageIsCurrent(t *testing.T) {
	want, err := Configuration(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, ConfigurationPage))
	if err != nil {
		t.Fatal(err)
	}
	if line := firstDifference(got, want); line > 0 {
		t.Fatalf("%s is stale from line %d: run go tool task docs", ConfigurationPage, line)
	}
}

// firstDifference is the first line (1-based) where a and b differ, 0 if
// they are equal.
func firstDifference(a, b []byte) int {
	if bytes.Equal(a, b) {
		return 0
	}
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range min(len(al), len(bl)) {
		if !bytes.Equal(al[i], bl[i]) {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// The staleness check fires: a default changed in the code (here, in the
// generated text) is a difference.
func TestConfigurationStaleCheckFires(t *testing.T) {
	page, err := Configuration(root)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(page, []byte("| `8` |"), []byte("| `9` |"), 1)
	if bytes.Equal(edited, page) {
		t.Fatal("the page has no default `8` to change")
	}
	if firstDifference(page, edited) == 0 || firstDifference(page, page) != 0 {
		t.Fatal("firstDifference misses a changed default")
	}
}

// Every variable has a meaning, and every meaning is of a variable read.
func TestMeaningsMatchVariables(t *testing.T) {
	vars, err := Variables(root)
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	for _, v := range vars {
		read[v.Name] = true
		if Meanings[v.Name] == "" {
			t.Errorf("%s has no meaning", v.Name)
		}
	}
	for n := range Meanings {
		if !read[n] {
			t.Errorf("Meanings explains %s, which no process reads", n)
		}
	}
}

var rowName = regexp.MustCompile("^\\| `([A-Z][A-Z0-9_]*)` \\|")

// pageRows are the variables the page's tables list, in order.
func pageRows(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ConfigurationPage))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		if m := rowName.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// readByLibraries are variables read by the libraries fanout calls rather
// than by fanout's own code, which the page lists because they configure
// fanout's processes: the temporal CLI's (envconfig, listed by
// config.TemporalEnv), the Go runtime's memory limit, and the
// OpenTelemetry resource's (resource.WithFromEnv).
func readByLibraries() map[string]bool {
	out := map[string]bool{"GOMEMLIMIT": true, "OTEL_SERVICE_NAME": true, "OTEL_RESOURCE_ATTRIBUTES": true}
	for _, e := range config.TemporalEnv {
		out[e.Name] = true
	}
	return out
}

// indirect are the variables read through a non-constant name
// (os.Getenv(x)), by the function and name they are read through: each must
// be explained here, so a new one fails the test until it is.
var indirect = map[string][]string{
	// config.DialTemporal: os.Getenv(TemporalAPIKeyFileVar).
	"TemporalAPIKeyFileVar": {config.TemporalAPIKeyFileVar},
	// telemetry.otlpProtocol(signalVar): called with these two.
	"signalVar": {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"},
	// types' value_from {env: NAME}: names a types file chooses, not
	// fanout's (the page says so).
	"name": nil,
}

// codeReads greps fanout's Go code (tests, dev/ tooling and the pinned
// tools' modules apart) for the variables it reads: every `env:"NAME"`
// tag and every os.Getenv / os.LookupEnv, by its constant name or through
// indirect.
func codeReads(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{} // name → where
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "dev", "internal/tools", ".git", ".dev", ".bin", "deploy/validate", "deploy/monitoring":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Field:
				if n.Tag != nil {
					tag, _ := strconv.Unquote(n.Tag.Value)
					if name, _, _ := strings.Cut(reflect.StructTag(tag).Get("env"), ","); name != "" {
						out[name] = fset.Position(n.Pos()).String()
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, isIdent := sel.X.(*ast.Ident); !isIdent || x.Name != "os" || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") || len(n.Args) != 1 {
					return true
				}
				where := fset.Position(n.Pos()).String()
				switch a := n.Args[0].(type) {
				case *ast.BasicLit:
					s, _ := strconv.Unquote(a.Value)
					out[s] = where
				case *ast.Ident:
					ns, ok := indirect[a.Name]
					if !ok {
						t.Errorf("%s: os.%s(%s): a variable read through a name the test does not know; add it to indirect", where, sel.Sel.Name, a.Name)
					}
					for _, s := range ns {
						out[s] = where
					}
				case *ast.SelectorExpr:
					ns, ok := indirect[a.Sel.Name]
					if !ok {
						t.Errorf("%s: os.%s(%s): add it to indirect", where, sel.Sel.Name, a.Sel.Name)
					}
					for _, s := range ns {
						out[s] = where
					}
				default:
					t.Errorf("%s: os.%s with an expression the test cannot read", where, sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConfigurationListsWhatTheCodeReads: the page lists every variable the
// code reads (a grep of its env tags and os.Getenv calls), each once, and
// nothing else (what libraries read for fanout apart, named above).
func TestConfigurationListsWhatTheCodeReads(t *testing.T) {
	rows := pageRows(t)
	if len(rows) < 60 {
		t.Fatalf("read only %d rows from %s", len(rows), ConfigurationPage)
	}
	listed := map[string]bool{}
	for _, r := range rows {
		if listed[r] {
			t.Errorf("%s lists %s twice", ConfigurationPage, r)
		}
		listed[r] = true
	}
	code := codeReads(t)
	for _, want := range []string{"FANOUT_QUEUES", "FANOUT_KAFKA_SASL_PASSWORD_FILE", "FANOUT_CODEC_TOKEN", "GOGC", "OTEL_SDK_DISABLED", config.TemporalAPIKeyFileVar} {
		if code[want] == "" {
			t.Fatalf("the grep of the code missed %s: %v", want, slices.Sorted(maps.Keys(code)))
		}
	}
	for n, where := range code {
		if !listed[n] {
			t.Errorf("%s reads %s; %s does not list it (is its struct read by a process in readers?)", where, n, ConfigurationPage)
		}
	}
	lib := readByLibraries()
	for _, r := range rows {
		if code[r] == "" && !lib[r] {
			t.Errorf("%s lists %s, which no code reads", ConfigurationPage, r)
		}
	}
}

// The grep sees a tag and a call it has not been told about.
func TestCodeReadsCheckFires(t *testing.T) {
	src := "package p\nimport \"os\"\ntype S struct{ X int `env:\"FANOUT_NEW_KNOB\"` }\nfunc f() { _ = os.Getenv(\"OTEL_NEW\") }\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		if fl, ok := n.(*ast.Field); ok && fl.Tag != nil {
			tag, _ := strconv.Unquote(fl.Tag.Value)
			found = append(found, reflect.StructTag(tag).Get("env"))
		}
		if c, ok := n.(*ast.CallExpr); ok {
			if lit, ok := c.Args[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				found = append(found, s)
			}
		}
		return true
	})
	if !slices.Equal(found, []string{"FANOUT_NEW_KNOB", "OTEL_NEW"}) {
		t.Fatalf("found %v", found)
	}
	listed := map[string]bool{}
	for _, r := range pageRows(t) {
		listed[r] = true
	}
	if listed["FANOUT_NEW_KNOB"] || !listed["FANOUT_QUEUES"] {
		t.Fatal("pageRows is wrong")
	}
}
