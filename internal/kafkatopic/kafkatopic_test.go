package kafkatopic

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestRefused: records a broker refuses for what they are are told apart
// from records that failed for a passing reason, per record and whatever
// the shape of the writer's error.
func TestRefused(t *testing.T) {
	tooLarge := fmt.Errorf("%w: the record is too large", kafka.MessageSizeTooLarge)
	for _, c := range []struct {
		name            string
		err             error
		n               int
		failed, refused []int
	}{
		{"written", nil, 3, nil, nil},
		{"one error for all", kafka.LeaderNotAvailable, 2, []int{0, 1}, nil},
		{"writer-side too large", kafka.MessageTooLargeError{}, 2, []int{0, 1}, []int{0, 1}},
		{"per record", kafka.WriteErrors{nil, tooLarge, kafka.RequestTimedOut, kafka.InvalidRecord}, 4, []int{1, 2, 3}, []int{1, 3}},
		{"wrapped per record", fmt.Errorf("dlq: %w", kafka.WriteErrors{kafka.RecordListTooLarge}), 1, []int{0}, []int{0}},
		{"other", errors.New("dial: refused"), 1, []int{0}, nil},
	} {
		failed, refused := Refused(c.err, c.n)
		if !slices.Equal(failed, c.failed) || !slices.Equal(refused, c.refused) {
			t.Errorf("%s: failed %v refused %v, want %v %v", c.name, failed, refused, c.failed, c.refused)
		}
	}
}
