package fanout

import (
	"fmt"
	"strings"
)

// Event ids, recipient ids and event type names follow one grammar, checked
// where they enter fanout: the bridge checks event ids and types, Register
// checks types, the recipients page check checks recipient ids. They end up
// in workflow ids, Redis keys and attempt ids, so the grammar leaves out the
// separators those use ('/', ':', '#'), white space, and control and format
// characters (bidi marks):
//
//	id        = 1*200 id-char
//	id-char   = ALPHA / DIGIT / "-" / "_" / "." / "~" / "+" / "=" / "@" / ","
//	type      = 1*64 type-char
//	type-char = ALPHA / DIGIT / "-" / "_" / "."
//	tenant    = 1*62 id-char
const (
	MaxIDLen     = 200
	MaxTypeLen   = 64
	MaxTenantLen = 62
)

const (
	typeChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
	idChars   = typeChars + "~+=@,"
)

// ValidateID reports whether id follows the id grammar, naming what is wrong.
func ValidateID(id string) error { return validateName("id", id, MaxIDLen, idChars) }

// ValidateTenant reports whether an event's tenant follows the tenant
// grammar (an id of at most MaxTenantLen bytes: with a two-byte prefix it
// becomes a fairness key, which Temporal bounds to 64 bytes).
func ValidateTenant(t string) error { return validateName("tenant", t, MaxTenantLen, idChars) }

// ValidateType reports whether t follows the type grammar.
func ValidateType(t string) error { return validateName("type", t, MaxTypeLen, typeChars) }

func validateName(what, s string, maxLen int, allowed string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case len(s) > maxLen:
		return fmt.Errorf("%s of %d bytes is over %d", what, len(s), maxLen)
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(allowed, s[i]) < 0 {
			return fmt.Errorf("%s has %q at byte %d; allowed: letters, digits and %q", what, s[i], i, allowed[62:])
		}
	}
	return nil
}
