package fanout

import (
	"strings"
	"testing"
)

func TestIDGrammar(t *testing.T) {
	good := []string{"a", "order-42", "user@example.com", "8f14e45f-ceea-467f-a0e6-0e9b1c7d2f3a", "a.b_c~d+e=f,g", strings.Repeat("x", MaxIDLen)}
	bad := []string{"", "x/batch/0", "v2/batch/3", "a#0", "a:b", "a b", "a\nb", "a\x00b", "a\u202eb", "é", strings.Repeat("x", MaxIDLen+1)}
	for _, id := range good {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range bad {
		if err := ValidateID(id); err == nil {
			t.Errorf("ValidateID(%q) = nil, want an error", id)
		}
	}
	for _, typ := range []string{"webhook", "order-shipped", "v1.email_digest"} {
		if err := ValidateType(typ); err != nil {
			t.Errorf("ValidateType(%q) = %v", typ, err)
		}
	}
	for _, typ := range []string{"", "a/b", "a@b", "a b", strings.Repeat("t", MaxTypeLen+1)} {
		if err := ValidateType(typ); err == nil {
			t.Errorf("ValidateType(%q) = nil, want an error", typ)
		}
	}
}

// FuzzValidateID: whatever ValidateID accepts cannot carry a separator of
// the ids and keys built from it, so no event id can equal another
// execution's workflow id or another key's prefix.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"a", "x/batch/0", "a#1", "a:b", "\u202e", "\x00", strings.Repeat("9", 201), "user@example.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateID(s) != nil {
			return
		}
		if len(s) == 0 || len(s) > MaxIDLen || strings.ContainsAny(s, "/:# \t\r\n\x00") {
			t.Fatalf("ValidateID accepted %q", s)
		}
		for _, r := range s {
			if r > 127 {
				t.Fatalf("ValidateID accepted non-ASCII %q", s)
			}
		}
	})
}
