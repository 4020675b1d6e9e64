package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// digestRef is an image reference pinned by digest.
var digestRef = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// TestImagesPinned: every image fanout's deployment pulls is pinned by
// digest: the Dockerfile's bases and compose's third-party services
// (fanout's own is built there). The chart's and the kustomization's image
// are checked in deploy/validate.
func TestImagesPinned(t *testing.T) {
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	froms := 0
	for _, ins := range dockerInstructions(b) {
		w := shellWords(ins)
		if len(w) < 2 || !strings.EqualFold(w[0], "FROM") {
			continue
		}
		froms++
		ref := ""
		for _, x := range w[1:] {
			if !strings.HasPrefix(x, "--") {
				ref = x
				break
			}
		}
		if !digestRef.MatchString(ref) {
			t.Errorf("%s: FROM %s is not pinned by digest (name:tag@sha256:...)", dockerfile, ref)
		}
	}
	if froms == 0 {
		t.Errorf("%s: no FROM", dockerfile)
	}

	cs := loadCompose(t)
	for _, name := range cs.names {
		s := cs.services[name]
		if s.Image == "" || s.Build.Kind != 0 {
			continue // built here from the Dockerfile
		}
		if !digestRef.MatchString(s.Image) {
			t.Errorf("%s: service %s: image %s is not pinned by digest", composeFile, name, s.Image)
		}
	}
}
