package stack

import "testing"

func TestTemporalVersionFits(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{"temporal version 1.5.1 (Server 1.29.1, UI 2.42.1)\n", true},
		{"temporal version 1.5.0 (Server 1.28.0, UI 2.40.0)", true}, // patch level ignored
		{"temporal version 1.6.2 (Server 1.30.0, UI 2.44.0)", true},
		{"temporal version v1.12.0", true},
		{"temporal version 1.4.9 (Server 1.27.0, UI 2.36.0)", false},
		{"temporal version 2.0.0 (Server 2.0.0, UI 3.0.0)", false},
		{"temporal version 0.0.0-DEV (Server 1.29.1, UI 2.42.1)", false},
		{"tctl version 1.18.0", false},
		{"", false},
	} {
		if _, got := TemporalVersionFits(tc.out); got != tc.want {
			t.Errorf("TemporalVersionFits(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
	if v, _ := TemporalVersionFits("temporal version 1.6.2 (Server 1.30.0)"); v != "1.6.2" {
		t.Errorf("version %q, want 1.6.2", v)
	}
}
