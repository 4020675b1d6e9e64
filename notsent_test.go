package fanout

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestNotSent(t *testing.T) {
	if NotSent(nil) != nil {
		t.Error("NotSent(nil) is not nil")
	}
	base := errors.New("connection refused")
	err := fmt.Errorf("deliver: %w", NotSent(base))
	if !IsNotSent(err) || !errors.Is(err, base) {
		t.Errorf("IsNotSent(%v) = %v, errors.Is base = %v; want both", err, IsNotSent(err), errors.Is(err, base))
	}
	if IsNotSent(base) || IsNotSent(Permanent(base)) {
		t.Error("an unmarked error is NotSent")
	}
}

func TestSemanticsOf(t *testing.T) {
	for _, c := range []struct {
		ctx  context.Context
		want Semantics
	}{
		{context.Background(), AtLeastOnce},
		{WithSemantics(context.Background(), ""), AtLeastOnce},
		{WithSemantics(context.Background(), AtLeastOnce), AtLeastOnce},
		{WithSemantics(context.Background(), AtMostOnce), AtMostOnce},
		{WithSemantics(context.Background(), "exactly-once"), AtLeastOnce},
	} {
		if got := SemanticsOf(c.ctx); got != c.want {
			t.Errorf("SemanticsOf = %q, want %q", got, c.want)
		}
	}
}
