package activities

import "sync"

// Slots counts the DeliverBatch attempts a worker runs on each delivery
// queue against the queue's batch slots (the worker's activity slots
// there). Each attempt reports how many of them were free once it started
// (DeliverBatchResult.SlotsFree, of Slots), and an event's workflow keeps
// its window where the workers leave a quarter of their slots free
// (workflows, the adaptive window): a batch of another event then finds a
// free slot and starts at once, instead of waiting for a running batch to
// end. The calls in flight stay bounded by the pool (Calls), so slots left
// free cost no throughput while the running batches keep it busy.
type Slots struct {
	mu   sync.Mutex
	size map[string]int
	busy map[string]int
}

// NewSlots is a count with no queue: Set each delivery queue's slots.
func NewSlots() *Slots { return &Slots{size: map[string]int{}, busy: map[string]int{}} }

// Set sets the batch slots of queue.
func (s *Slots) Set(queue string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.size[queue] = n
}

// take counts an attempt running on queue until release is called, and
// returns the slots of queue still free and its slots (0, 0 for a queue
// without Set, or a nil Slots).
func (s *Slots) take(queue string) (free, size int, release func()) {
	if s == nil {
		return 0, 0, func() {}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	size = s.size[queue]
	if size <= 0 {
		return 0, 0, func() {}
	}
	s.busy[queue]++
	return max(size-s.busy[queue], 0), size, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.busy[queue]--
	}
}
