package vocab

import (
	"strings"
	"testing"

	"github.com/fanout/fanout"
)

func TestFairnessKey(t *testing.T) {
	long := fanout.Event{Type: strings.Repeat("t", fanout.MaxTypeLen), ID: strings.Repeat("i", fanout.MaxIDLen)}
	long2 := long
	long2.ID = strings.Repeat("i", fanout.MaxIDLen-1) + "j"
	cases := []struct {
		name string
		ev   fanout.Event
		want string
	}{
		{"event", fanout.Event{Type: "webhook", ID: "order-42"}, "e:webhook/order-42"},
		{"tenant shares the key", fanout.Event{Type: "webhook", ID: "order-42", Tenant: "acme"}, "t:acme"},
		{"longest tenant", fanout.Event{Type: "webhook", ID: "x", Tenant: strings.Repeat("a", fanout.MaxTenantLen)}, "t:" + strings.Repeat("a", fanout.MaxTenantLen)},
	}
	for _, c := range cases {
		if got := FairnessKey(c.ev); got != c.want {
			t.Errorf("%s: FairnessKey = %q, want %q", c.name, got, c.want)
		}
		if got := FairnessKey(c.ev); len(got) > MaxFairnessKeyLen {
			t.Errorf("%s: key of %d bytes, over %d", c.name, len(got), MaxFairnessKeyLen)
		}
	}
	k1, k2 := FairnessKey(long), FairnessKey(long2)
	if len(k1) != MaxFairnessKeyLen || len(k2) != MaxFairnessKeyLen {
		t.Errorf("longest ids give keys of %d and %d bytes, want %d", len(k1), len(k2), MaxFairnessKeyLen)
	}
	if k1 == k2 {
		t.Errorf("two long ids that differ in their last byte share the key %q", k1)
	}
	if !strings.HasPrefix(k1, "e:"+strings.Repeat("t", 28)) {
		t.Errorf("a long key %q does not start with the readable type", k1)
	}
	if a, b := FairnessKey(fanout.Event{Type: "a", ID: "b"}), FairnessKey(fanout.Event{Type: "b", ID: "b"}); a == b {
		t.Errorf("events of two types with one id share the key %q", a)
	}
}

func TestTaskPriority(t *testing.T) {
	p := TaskPriority(fanout.Event{Type: "webhook", ID: "a"}, 2.5)
	if p.FairnessKey != "e:webhook/a" || p.FairnessWeight != 2.5 || p.PriorityKey != 0 {
		t.Errorf("TaskPriority = %+v, want key e:webhook/a, weight 2.5, no priority key", p)
	}
	for _, c := range []struct {
		prio fanout.Priority
		want int
	}{{fanout.PriorityHigh, HighPriorityKey}, {fanout.PriorityNormal, 0}, {fanout.PriorityLow, 0}, {"", 0}} {
		if got := TaskPriority(fanout.Event{Type: "webhook", ID: "a", Priority: c.prio}, 0).PriorityKey; got != c.want {
			t.Errorf("priority %q: priority key %d, want %d", c.prio, got, c.want)
		}
	}
}
