package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// registryTestHandler is a Handler whose Deliver returns a marker error, so a
// test can tell which handler Lookup returned.
type registryTestHandler struct{ name string }

func (h registryTestHandler) GetRecipients(context.Context, Event, string, int) (Page, error) {
	return Page{}, nil
}

func (h registryTestHandler) GenerateMessage(context.Context, Event) (Message, error) {
	return Message{}, nil
}

func (h registryTestHandler) Deliver(context.Context, Event, Recipient, Message) error {
	return errors.New(h.name)
}

func TestRegistryRegisterRejects(t *testing.T) {
	h := registryTestHandler{"h"}
	cases := []struct {
		name      string
		eventType string
		handler   Handler
		opts      TypeOptions
		want      []string // substrings of the error
	}{
		{"empty name", "", h, TypeOptions{}, []string{"empty type"}},
		{"nil handler", "t", nil, TypeOptions{}, []string{`"t"`, "nil handler"}},
		{"duplicate", "taken", h, TypeOptions{}, []string{`"taken"`, "already registered"}},

		{"BatchSize over MaxBatchSize", "t", h, TypeOptions{BatchSize: MaxBatchSize + 1}, []string{`"t"`, "BatchSize", fmt.Sprint(MaxBatchSize + 1)}},
		{"BatchSize negative", "t", h, TypeOptions{BatchSize: -1}, []string{"BatchSize"}},
		{"Window over MaxWindow", "t", h, TypeOptions{Window: MaxWindow + 1}, []string{"Window", fmt.Sprint(MaxWindow + 1)}},
		{"Window negative", "t", h, TypeOptions{Window: -1}, []string{"Window"}},
		{"PageSize over MaxPageSize", "t", h, TypeOptions{BatchSize: 1000, PageSize: MaxPageSize + 1}, []string{"PageSize"}},
		{"PageSize negative", "t", h, TypeOptions{PageSize: -1}, []string{"PageSize"}},
		{"PageSize over MaxBatchesPerPage batches", "t", h,
			TypeOptions{BatchSize: 10, PageSize: MaxBatchesPerPage*10 + 1}, []string{"PageSize", fmt.Sprint(MaxBatchesPerPage*10 + 1)}},
		{"PageSize over MaxBatchesPerPage batches of 1", "t", h,
			TypeOptions{BatchSize: 1, PageSize: MaxBatchesPerPage + 1}, []string{"PageSize"}},
		{"type with a slash", "a/b", h, TypeOptions{}, []string{"type", "'/'"}},
		{"type with a space", "order shipped", h, TypeOptions{}, []string{"type", "' '"}},
		{"unknown DefaultPriority", "t", h, TypeOptions{DefaultPriority: "urgent"}, []string{"DefaultPriority", "urgent"}},
		{"DefaultPriority differs in case", "t", h, TypeOptions{DefaultPriority: "High"}, []string{"DefaultPriority"}},
		{"DeliverConcurrency negative", "t", h, TypeOptions{DeliverConcurrency: -1}, []string{"DeliverConcurrency"}},
		{"MaxAttempts negative", "t", h, TypeOptions{MaxAttempts: -1}, []string{"MaxAttempts"}},
		{"MaxPages negative", "t", h, TypeOptions{MaxPages: -1}, []string{"MaxPages"}},
		{"DeliverTimeout too short for the default CallTimeout", "t", h, TypeOptions{DeliverTimeout: 8 * time.Second}, []string{"CallTimeout", "10s"}},
		{"FairnessWeight negative", "t", h, TypeOptions{FairnessWeight: -1}, []string{"FairnessWeight"}},
		{"FairnessWeight over MaxFairnessWeight", "t", h, TypeOptions{FairnessWeight: MaxFairnessWeight + 1}, []string{"FairnessWeight", "1001"}},
		{"FairnessWeight NaN", "t", h, TypeOptions{FairnessWeight: math.NaN()}, []string{"FairnessWeight", "NaN"}},
		{"MaxRecipients negative", "t", h, TypeOptions{MaxRecipients: -1}, []string{"MaxRecipients"}},
		{"CanaryRecipients negative", "t", h, TypeOptions{CanaryRecipients: -1}, []string{"CanaryRecipients"}},
		{"CanaryRecipients over MaxCanaryRecipients", "t", h, TypeOptions{CanaryRecipients: MaxCanaryRecipients + 1}, []string{"CanaryRecipients", "1000001"}},
		{"CanaryMaxFailureRatio of 1", "t", h, TypeOptions{CanaryRecipients: 10, CanaryMaxFailureRatio: 1}, []string{"CanaryMaxFailureRatio"}},
		{"CanaryMaxFailureRatio NaN", "t", h, TypeOptions{CanaryMaxFailureRatio: math.NaN()}, []string{"CanaryMaxFailureRatio", "NaN"}},
		{"TTL negative", "t", h, TypeOptions{TTL: -time.Second}, []string{"TTL"}},
		{"TTL over MaxTTL", "t", h, TypeOptions{TTL: MaxTTL + time.Second}, []string{"TTL", "720h0m1s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRegistry()
			if err := r.Register("taken", h, TypeOptions{}); err != nil {
				t.Fatalf("setup Register: %v", err)
			}
			err := r.Register(c.eventType, c.handler, c.opts)
			if err == nil {
				t.Fatalf("Register(%q, %v, %+v) = nil, want an error", c.eventType, c.handler, c.opts)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			// A rejected type is not registered (and "taken" keeps its first handler).
			if got := r.Types(); !reflect.DeepEqual(got, []string{"taken"}) {
				t.Errorf("Types after a rejected Register = %v, want [taken]", got)
			}
		})
	}
}

func TestRegistryRegisterAcceptsLimits(t *testing.T) {
	h := registryTestHandler{"h"}
	cases := []struct {
		name string
		opts TypeOptions
	}{
		{"zero options", TypeOptions{}},
		{"at every maximum", TypeOptions{BatchSize: MaxBatchSize, Window: MaxWindow, PageSize: MaxPageSize}},
		{"PageSize exactly MaxBatchesPerPage batches", TypeOptions{BatchSize: 10, PageSize: MaxBatchesPerPage * 10}},
		{"every priority", TypeOptions{DefaultPriority: PriorityLow}},
	}
	for _, c := range cases {
		if err := NewRegistry().Register("t", h, c.opts); err != nil {
			t.Errorf("%s: Register(%+v) = %v, want nil", c.name, c.opts, err)
		}
	}
}

func TestRegistryLookup(t *testing.T) {
	r := NewRegistry()
	custom := TypeOptions{
		DefaultPriority:    PriorityHigh,
		BatchSize:          100,
		PageSize:           300,
		Window:             7,
		DeliverConcurrency: 3,
		MaxAttempts:        2,
		DeliverTimeout:     time.Minute,
		CallTimeout:        DefaultCallTimeout,
		MaxPages:           40,
		MaxRecipients:      1_000_000,
		FairnessWeight:     2.5,
	}
	r.MustRegister("defaults", registryTestHandler{"defaults"}, TypeOptions{})
	r.MustRegister("custom", registryTestHandler{"custom"}, custom)
	r.MustRegister("small-batches", registryTestHandler{"small-batches"}, TypeOptions{BatchSize: 20})

	cases := []struct {
		eventType string
		wantOK    bool
		want      TypeOptions
	}{
		{"defaults", true, TypeOptions{
			DefaultPriority:    PriorityNormal,
			BatchSize:          DefaultBatchSize,
			PageSize:           DefaultPageBatches * DefaultBatchSize,
			Window:             DefaultWindow,
			DeliverConcurrency: DefaultDeliverConcurrency,
			MaxAttempts:        DefaultMaxAttempts,
			DeliverTimeout:     DefaultDeliverTimeout,
			CallTimeout:        DefaultCallTimeout,
			MaxPages:           DefaultMaxPages,
			FairnessWeight:     DefaultFairnessWeight,
		}},
		{"custom", true, custom},
		// PageSize defaults to 10 batches of the type's own BatchSize.
		{"small-batches", true, TypeOptions{
			DefaultPriority:    PriorityNormal,
			BatchSize:          20,
			PageSize:           200,
			Window:             DefaultWindow,
			DeliverConcurrency: DefaultDeliverConcurrency,
			MaxAttempts:        DefaultMaxAttempts,
			DeliverTimeout:     DefaultDeliverTimeout,
			CallTimeout:        DefaultCallTimeout,
			MaxPages:           DefaultMaxPages,
			FairnessWeight:     DefaultFairnessWeight,
		}},
		{"missing", false, TypeOptions{}},
	}
	for _, c := range cases {
		h, opts, ok := r.Lookup(c.eventType)
		if ok != c.wantOK {
			t.Fatalf("Lookup(%q) ok = %v, want %v", c.eventType, ok, c.wantOK)
		}
		if opts != c.want {
			t.Errorf("Lookup(%q) options = %+v, want %+v", c.eventType, opts, c.want)
		}
		if !ok {
			if h != nil {
				t.Errorf("Lookup(%q) handler = %v, want nil", c.eventType, h)
			}
			continue
		}
		if err := h.Deliver(context.Background(), Event{}, Recipient{}, Message{}); err == nil || err.Error() != c.eventType {
			t.Errorf("Lookup(%q) returned the handler of %v", c.eventType, err)
		}
	}
}

func TestRegistryTypesSorted(t *testing.T) {
	cases := [][]string{
		nil,
		{"only"},
		{"webhook", "email", "sms", "Push", "audit", "b2", "b10"},
	}
	for _, names := range cases {
		r := NewRegistry()
		for _, n := range names {
			r.MustRegister(n, registryTestHandler{n}, TypeOptions{})
		}
		want := slices.Clone(names)
		slices.Sort(want)
		got := r.Types()
		if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Errorf("Types() after registering %v = %v, want %v", names, got, want)
		}
		if got == nil {
			t.Errorf("Types() = nil, want a non-nil slice")
		}
	}
}

func TestRegistryMustRegisterPanics(t *testing.T) {
	r := NewRegistry()
	r.MustRegister("t", registryTestHandler{"t"}, TypeOptions{})
	defer func() {
		if recover() == nil {
			t.Error("MustRegister of a duplicate did not panic")
		}
	}()
	r.MustRegister("t", registryTestHandler{"t"}, TypeOptions{})
}

func TestPermanent(t *testing.T) {
	base := errors.New("404 not found")
	perm := Permanent(base)
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", base, false},
		{"permanent", perm, true},
		{"wrapped once", fmt.Errorf("deliver: %w", perm), true},
		{"wrapped twice", fmt.Errorf("batch: %w", fmt.Errorf("deliver: %w", perm)), true},
		{"joined", errors.Join(io.EOF, perm), true},
		{"formatted with %v loses the mark", fmt.Errorf("deliver: %v", perm), false},
		{"retry-after of a permanent error", RetryAfter(time.Second, perm), true},
	}
	for _, c := range cases {
		if got := IsPermanent(c.err); got != c.want {
			t.Errorf("%s: IsPermanent(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}

	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	if !errors.Is(perm, base) {
		t.Error("Permanent(err) does not unwrap to err")
	}
	if !strings.Contains(perm.Error(), base.Error()) {
		t.Errorf("Permanent(err).Error() = %q, want it to contain %q", perm.Error(), base.Error())
	}
}

func TestRetryAfter(t *testing.T) {
	base := errors.New("429 too many requests")
	ra := RetryAfter(7*time.Second, base)
	cases := []struct {
		name   string
		err    error
		want   time.Duration
		wantOK bool
	}{
		{"nil", nil, 0, false},
		{"plain", base, 0, false},
		{"retry-after", ra, 7 * time.Second, true},
		{"zero delay", RetryAfter(0, base), 0, true},
		{"wrapped once", fmt.Errorf("deliver: %w", ra), 7 * time.Second, true},
		{"wrapped twice", fmt.Errorf("batch: %w", fmt.Errorf("deliver: %w", ra)), 7 * time.Second, true},
		{"formatted with %v loses the delay", fmt.Errorf("deliver: %v", ra), 0, false},
		{"outermost wins", RetryAfter(time.Minute, fmt.Errorf("inner: %w", ra)), time.Minute, true},
		{"permanent is not retry-after", Permanent(base), 0, false},
		{"permanent around retry-after", Permanent(ra), 7 * time.Second, true},
	}
	for _, c := range cases {
		d, ok := RetryAfterOf(c.err)
		if d != c.want || ok != c.wantOK {
			t.Errorf("%s: RetryAfterOf(%v) = %v, %v; want %v, %v", c.name, c.err, d, ok, c.want, c.wantOK)
		}
	}

	if RetryAfter(time.Second, nil) != nil {
		t.Error("RetryAfter(d, nil) != nil")
	}
	if !errors.Is(ra, base) {
		t.Error("RetryAfter(d, err) does not unwrap to err")
	}
	if IsPermanent(ra) {
		t.Error("RetryAfter error reported permanent")
	}
	if msg := ra.Error(); !strings.Contains(msg, base.Error()) || !strings.Contains(msg, "7s") {
		t.Errorf("RetryAfter Error() = %q, want the delay and the cause", msg)
	}
}
