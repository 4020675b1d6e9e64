package stack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"
)

// ShowHistory is a workflow's history as the pinned temporal CLI exports it
// (`temporal workflow show --output json`), with extra flags appended (e.g.
// --codec-endpoint).
func (s *Stack) ShowHistory(ctx context.Context, wid string, extra ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := append([]string{"workflow", "show", "--workflow-id", wid, "--address", s.TemporalAddr, "--namespace", "default", "--output", "json"}, extra...)
	out, err := exec.CommandContext(ctx, filepath.Join(s.Bin, "temporal"), args...).Output()
	if err != nil {
		return nil, fmt.Errorf("temporal workflow show %s: %w", wid, err)
	}
	return out, nil
}

// EachJSONString calls fn with every string of a decoded JSON value, at any
// depth (how exported histories and JSON records carry bytes: base64).
func EachJSONString(v any, fn func(string)) {
	switch x := v.(type) {
	case string:
		fn(x)
	case []any:
		for _, e := range x {
			EachJSONString(e, fn)
		}
	case map[string]any:
		for _, e := range x {
			EachJSONString(e, fn)
		}
	}
}
