package activities

import "github.com/fanout/fanout"

// Yielding reports whether, as of y's last read, a batch of priority p (a
// large one, or not) of the event with fairness key key yields to another
// event's signal: what a worker's Calls reads from y (Calls.yields), with
// nothing held or waiting on the worker itself.
func (y *Yields) Yielding(p fanout.Priority, large bool, key string) bool {
	c := NewCalls(1)
	c.remote = y
	return c.yields(rankOf(p, share{large: large}), key)
}
