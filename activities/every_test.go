package activities

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryIsDueOncePerInterval(t *testing.T) {
	var e every
	var got atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			if e.due(time.Hour) {
				got.Add(1)
			}
		})
	}
	wg.Wait()
	if n := got.Load(); n != 1 {
		t.Fatalf("due %d times among 64 racing callers, want 1", n)
	}
	if e.due(time.Hour) {
		t.Fatal("due again within the interval")
	}
	if !e.due(0) {
		t.Fatal("not due once the interval passed")
	}
}
