package limits

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestCleanKey(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "-",
		"Hooks.Example.COM:8443": "hooks.example.com:8443",
		"[::1]:80":               "[::1]:80",
		"webhook":                "webhook",
	} {
		if got := CleanKey(in); got != want {
			t.Errorf("CleanKey(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("a", 200)
	a, b := CleanKey(long), CleanKey(long+"b")
	if len(a) > MaxKeyLen || a == b || !strings.HasPrefix(a, "aaaa") || !strings.Contains(a, "~") {
		t.Errorf("long keys: %q, %q: want bounded, distinct, readable", a, b)
	}
	if x, y := CleanKey("evil host\n{x}"), CleanKey("evil_host__x_"); x == y || strings.ContainsAny(x, " \n{}") {
		t.Errorf("hostile key %q (vs %q): want only allowed bytes and distinct from a lookalike", x, y)
	}
}

func FuzzCleanKey(f *testing.F) {
	for _, s := range []string{"", "a", "Host:1", "\xff\x00", strings.Repeat("é", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := CleanKey(s)
		if k == "" || len(k) > MaxKeyLen || strings.IndexFunc(k, func(c rune) bool { return !keyByte(c) }) >= 0 {
			t.Fatalf("CleanKey(%q) = %q", s, k)
		}
		if CleanKey(k) != k {
			t.Fatalf("CleanKey not idempotent on %q", k)
		}
	})
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"200": 200, "200/s": 200, " 12.5/S ": 12.5, "600/m": 10, "3600/h": 1, "off": 0, "none": 0, "0": 0, "1/h": 1.0 / 3600} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	// Issue 23, item 8: slower than fanout.MinRate (one call an hour) is refused.
	for _, in := range []string{"", "-1", "abc", "1/d", "NaN", "Inf", "2e6", "1/s/s", "0.5/h", "0.0001", "1e-300"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q): no error", in)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"200", "200/s", "1.5/m", "off", "-1", "1e300/h", "/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if math.IsNaN(r) || r < 0 || r > MaxRate {
			t.Fatalf("ParseRate(%q) = %v", s, r)
		}
		// What FormatRate writes reads back (to 6 digits).
		back, err := ParseRate(FormatRate(r))
		if err != nil || math.Abs(back-r) > r*1e-5 {
			t.Fatalf("FormatRate(%v) = %q reads back as %v, %v", r, FormatRate(r), back, err)
		}
	})
}

func FuzzParseOverrides(f *testing.F) {
	f.Add("default", "200", "dest:a", "off")
	f.Add("dest:", "1", "bogus", "x")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		o := parseOverrides(map[string]string{k1: v1, k2: v2})
		for k, r := range o.Dest {
			if k == "" || r < 0 || r > MaxRate || math.IsNaN(r) {
				t.Fatalf("dest %q rate %v", k, r)
			}
		}
		if n := len(o.Dest) + len(o.Bad); o.HasDefault && n > 1 || n > 2 {
			t.Fatalf("%+v from two fields", o)
		}
	})
}

func TestParseOverrides(t *testing.T) {
	o := parseOverrides(map[string]string{"default": "100/s", "dest:a.example:8080": "200", "dest:b": "off", "dest:c": "nope", "other": "1"})
	if !o.HasDefault || o.Default != 100 || o.Dest["a.example:8080"] != 200 || o.Rate("b", 5) != 0 || o.Rate("z", 5) != 100 || len(o.Bad) != 2 {
		t.Fatalf("%+v", o)
	}
}

// TestLimitOf: redis_rate's integer rate per period is the rate, and the
// burst a tenth of a second's worth.
func TestLimitOf(t *testing.T) {
	for _, r := range []float64{200, 0.5, 12.5, 1e-3, MaxRate} {
		l := LimitOf(r)
		got := float64(l.Rate) / l.Period.Seconds()
		if math.Abs(got-r) > r*1e-3 || l.Burst < 1 || l.Burst > max(1, int(r/10)) {
			t.Errorf("LimitOf(%v) = %+v (%v/s)", r, l, got)
		}
	}
	if l := LimitOf(200); l.Burst != 20 || l.Period != 10*time.Second {
		t.Errorf("LimitOf(200) = %+v", l)
	}
}

func TestResolveBreaker(t *testing.T) {
	if s := ResolveBreaker(fanoutOpts(0, 0)); s.Failures != 5 || s.Cooldown != 30*time.Second {
		t.Errorf("defaults: %+v", s)
	}
	if s := ResolveBreaker(fanoutOpts(-1, time.Second)); s.Failures > 0 || s.Cooldown != time.Second {
		t.Errorf("off: %+v", s)
	}
}
