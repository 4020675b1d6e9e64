package cli

import (
	"errors"
	"flag"
	"fmt"
	"testing"
)

func TestParseAndCode(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, 0},
		{[]string{"-h"}, 0},
		{[]string{"--help"}, 0},
		{[]string{"-n", "3"}, 0},
		{[]string{"-n", "x"}, 2},
		{[]string{"-bogus"}, 2},
		{[]string{"extra"}, 2},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.Int("n", 1, "a number")
		err := Parse(fs, tc.args, Help{Name: "t"}, false)
		if got := Code(err); got != tc.code {
			t.Errorf("Parse(%q) = %v: exit %d, want %d", tc.args, err, got, tc.code)
		}
	}
	if Code(errors.New("boom")) != 1 || Code(fmt.Errorf("wrapped: %w", Usagef("x"))) != 2 {
		t.Error("Code: a failure is 1, a wrapped usage error 2")
	}
}
