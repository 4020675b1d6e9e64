// Package configtest helps the stages test their settings: a clean FANOUT_*
// environment, and tables of bad values whose errors must name a variable.
package configtest

import (
	"os"
	"strings"
	"testing"
)

// ClearFanoutEnv unsets every FANOUT_* variable for the test (t.Setenv
// restores them afterwards), so defaults are what the test sees.
func ClearFanoutEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "FANOUT_") {
			t.Setenv(k, "")
			if err := os.Unsetenv(k); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// BadValue is an environment that must make a load fail with an error
// naming Want.
type BadValue struct {
	Name string
	Env  map[string]string
	Want string // the variable the error must name
}

// RunBadValues runs load (config.Load of some settings) in each case's
// environment, on top of a clean one, and fails unless it returns an error
// naming the case's variable.
func RunBadValues(t *testing.T, load func() error, cases []BadValue) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			ClearFanoutEnv(t)
			for k, v := range c.Env {
				t.Setenv(k, v)
			}
			err := load()
			if err == nil {
				t.Fatalf("Load with %v succeeded, want an error naming %s", c.Env, c.Want)
			}
			if !strings.Contains(err.Error(), c.Want) {
				t.Fatalf("Load with %v: error %q does not name %s", c.Env, err, c.Want)
			}
		})
	}
}

// Bad is the case name: env must fail naming want.
func Bad(name string, env map[string]string, want string) BadValue {
	return BadValue{Name: name, Env: env, Want: want}
}
