package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
)

// image is what the Dockerfile's final stage says about the processes it
// runs: the binaries it installs (name: path) and its ENTRYPOINT and CMD.
type image struct {
	file       string
	binaries   map[string]string
	entrypoint []string
	cmd        []string
}

var (
	fromLine = regexp.MustCompile(`(?i)^FROM\s`)
	copyLine = regexp.MustCompile(`(?i)^COPY\s+--from=\S+\s+(.+)$`)
	execLine = regexp.MustCompile(`(?i)^(ENTRYPOINT|CMD)\s+(\[.*\])\s*$`)
)

// readDockerfile reads the final stage's COPY --from lines into a
// directory (its binaries) and its exec-form ENTRYPOINT and CMD.
func readDockerfile(file string) (image, error) {
	f, err := os.Open(file)
	if err != nil {
		return image{}, err
	}
	defer func() { _ = f.Close() }()
	img := image{file: file, binaries: map[string]string{}}
	sc := bufio.NewScanner(f)
	var line string
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			line += cont + " "
			continue
		}
		line += l
		l, line = strings.TrimSpace(line), ""
		switch {
		case fromLine.MatchString(l):
			img = image{file: file, binaries: map[string]string{}} // a new stage
		case copyLine.MatchString(l):
			fields := strings.Fields(copyLine.FindStringSubmatch(l)[1])
			if len(fields) < 2 {
				continue
			}
			dst := fields[len(fields)-1]
			for _, src := range fields[:len(fields)-1] {
				name := path.Base(src)
				if strings.HasSuffix(dst, "/") {
					img.binaries[name] = dst + name
				} else {
					img.binaries[path.Base(dst)] = dst
				}
			}
		case execLine.MatchString(l):
			m := execLine.FindStringSubmatch(l)
			var argv []string
			if err := json.Unmarshal([]byte(m[2]), &argv); err != nil {
				return image{}, fmt.Errorf("%s: %s: %w", file, m[1], err)
			}
			if strings.EqualFold(m[1], "ENTRYPOINT") {
				img.entrypoint = argv
			} else {
				img.cmd = argv
			}
		}
	}
	if err := sc.Err(); err != nil {
		return image{}, err
	}
	if len(img.binaries) == 0 {
		return image{}, fmt.Errorf("%s: the final stage copies no binaries", file)
	}
	return img, nil
}

// argv is the process a container runs: entrypoint (or the image's) and
// command (or the image's CMD when the entrypoint is not overridden), as
// Kubernetes and compose combine them.
func (img image) argv(entrypoint, cmd []string) []string {
	ep, c := img.entrypoint, img.cmd
	if len(entrypoint) > 0 {
		ep, c = entrypoint, nil
	}
	if len(cmd) > 0 {
		c = cmd
	}
	return append(slices.Clone(ep), c...)
}

// binary maps argv[0] (a path the image installs, or a name found on the
// PATH, where the installed binaries are) to the binary's name.
func (img image) binary(argv []string) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("no command, and %s has no ENTRYPOINT or CMD", img.file)
	}
	name := path.Base(argv[0])
	p, ok := img.binaries[name]
	if !ok || (strings.Contains(argv[0], "/") && argv[0] != p) {
		return "", fmt.Errorf("runs %q, which %s does not install (it installs %v)", argv[0], img.file, img.binaries)
	}
	return name, nil
}
