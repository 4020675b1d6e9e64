package starter

import (
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"
)

// Only Temporal's own message about one of fanout's attributes makes the
// bridge wait for setup; an event whose id spells an attribute's name is
// still dead-lettered when its start is refused for something else.
func TestNamesSearchAttribute(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("start workflow for event e1: %w", serviceerror.NewInvalidArgument("Namespace default has no mapping defined for search attribute FanoutEventType")), true},
		{serviceerror.NewInvalidArgument("search attribute FanoutScheduledFor is not defined"), true},
		{fmt.Errorf("start workflow for event search-attribute-FanoutStatus: %w", serviceerror.NewInvalidArgument("WorkflowId is too long")), false},
		{serviceerror.NewInvalidArgument("search attribute OtherAttr is not defined"), false},
		{serviceerror.NewUnavailable("search attribute FanoutStatus is not defined"), false},
		{fmt.Errorf("search attribute FanoutStatus is not defined"), false},
	} {
		if got := namesSearchAttribute(tc.err); got != tc.want {
			t.Errorf("namesSearchAttribute(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
