package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workers/webhook"
	"github.com/fanout/fanout/workflows/vocab"
)

// fileType is heavy-file's event type, defined in a types file
// (writeBenchTypes) and served by the same worker processes as the
// environment's webhook type.
const fileType = "heavy_file"

// fileSigningSecret signs fileType's deliveries (a bench-only secret: the
// types file's webhook channel always signs). It differs from
// benchSigningSecret, which signs the webhook type's in heavy-file.
const fileSigningSecret = "whsec_aGVhdnktZmlsZS1iZW5jaC1vbmx5LXNlY3JldC0zMmI="

// writeBenchTypes writes heavy-file's types file into dir and returns its
// path: fileType is the webhook type of the bench's environment as a types
// file writes it: the bench's recipients source in the same protocol (the
// http source's default body and answer), the payload's message passed
// through as the webhook type sends it, every option at fanout's default,
// as the environment leaves the webhook type's.
func writeBenchTypes(dir, recipientsURL string) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, fileType+"-signing"), []byte(fileSigningSecret+"\n"), 0o600); err != nil {
		return "", err
	}
	text := `# heavy-file's event type (dev/cmd/bench): the environment's webhook type, from a file.
types:
  ` + fileType + `:
    recipients:
      http: {url: "` + recipientsURL + `"}
    message:
      passthrough: {pointer: /message, content_type: application/json}
    channel:
      webhook: {signing_secret_file: ` + fileType + `-signing}
`
	path := filepath.Join(dir, "bench-types.yaml")
	return path, os.WriteFile(path, []byte(text), 0o644)
}

// heavyFile measures heavy's event with fileType against the same event
// with the environment's webhook type, side by side in this run: after a
// small unmeasured event of each, heavyFilePairs pairs of runs at half
// heavy's size to the same sink, webhook then file, then file then
// webhook, and so on. The file's type always signs, so the webhook type's
// runs sign too (a delivery worker with FANOUT_WEBHOOK_SECRETS replaces the
// stock one meanwhile, as -secure has it throughout). The row is the file
// type's (its runs together); the ratio is the median over the pairs of
// its deliveries/s over the webhook type's, and the CPU ratio the same for
// CPU per delivery.
func (b *bench) heavyFile(ctx context.Context) (_ Row, err error) {
	if b.typesFile == "" {
		return Row{}, fmt.Errorf("no types file: the workers started without heavy-file")
	}
	if !b.secure {
		b.st.Stop("delivery")
		if err := b.st.StartWorker("delivery-signed", "high,normal", "FANOUT_TYPES_FILE="+b.typesFile, "FANOUT_WEBHOOK_SECRETS="+benchSigningSecret); err != nil {
			return Row{}, err
		}
		defer func() {
			b.st.Stop("delivery-signed")
			if rerr := b.st.Restart("delivery"); rerr != nil && err == nil {
				err = rerr
			}
		}()
		if err := b.waitPoller(ctx, "delivery-signed"); err != nil {
			return Row{}, err
		}
	}
	// Warm both types up (the new worker's connections, each type's
	// clients) with a small event each, not measured.
	for _, typ := range []string{webhook.EventType, fileType} {
		if _, err := b.heavyRunType(ctx, "heavy-file-warmup-"+typ, max(b.sz.heavy/100, 100), typ); err != nil {
			return Row{}, err
		}
	}
	type sum struct {
		secs, deliveries float64
		cpu              map[string]float64
	}
	runs := map[string]*sum{webhook.EventType: {cpu: map[string]float64{}}, fileType: {cpu: map[string]float64{}}}
	var last Row
	var order []string
	// Pairs of runs, each pair's order the reverse of the one before
	// (webhook, file, file, webhook, ...), each run at half heavy's size:
	// the ratio is the median of the pairs' (a drift of the machine, or a
	// run slowed by something else on it, weighs on one pair).
	var ratios, cpuRatios []float64
	size := max(b.sz.heavy/2, 1)
	for p := range heavyFilePairs {
		pair := []string{webhook.EventType, fileType}
		if p%2 == 1 {
			pair = []string{fileType, webhook.EventType}
		}
		got := map[string]Row{}
		for _, typ := range pair {
			r, err := b.heavyRunType(ctx, fmt.Sprintf("heavy-file-%d-%s", len(order)+1, typ), size, typ)
			if err != nil {
				return Row{}, err
			}
			s := runs[typ]
			s.secs += r.Seconds
			s.deliveries += float64(r.Size)
			for p, v := range r.CPUSeconds {
				s.cpu[p] += v
			}
			order = append(order, fmt.Sprintf("%s %.0f/s", typ, r.DeliveriesPerSec))
			got[typ], last = r, r
		}
		ratios = append(ratios, got[fileType].DeliveriesPerSec/got[webhook.EventType].DeliveriesPerSec)
		_, fileCPU := perDelivery(got[fileType].CPUSeconds, got[fileType].Size)
		_, envCPU := perDelivery(got[webhook.EventType].CPUSeconds, got[webhook.EventType].Size)
		if envCPU > 0 {
			cpuRatios = append(cpuRatios, fileCPU/envCPU)
		}
	}
	file, env := runs[fileType], runs[webhook.EventType]
	r := Row{Size: int(file.deliveries), Seconds: file.secs, DeliveriesPerSec: file.deliveries / file.secs, PeakRSSMB: last.PeakRSSMB,
		CPUSeconds: roundCPU(file.cpu)}
	envRate := env.deliveries / env.secs
	r.Ratio, r.RatioOf = median(ratios), "file/env webhook, median of pairs"
	r.CPUUsPerDelivery, r.CPUUsPerDeliveryTotal = perDelivery(file.cpu, int(file.deliveries))
	_, envCPU := perDelivery(env.cpu, int(env.deliveries))
	if len(cpuRatios) > 0 {
		r.CPURatio, r.CPURatioOf = median(cpuRatios), "file/env webhook, median of pairs"
	}
	r.Notes = fmt.Sprintf("type %s from a types file against webhook from the environment, both signed, same source, sink and defaults; %d pairs of %d-recipient runs, in order: %v; ratios by pair %s; webhook %.0f/s, %.1f CPU µs/delivery",
		fileType, heavyFilePairs, size, order, fmtRatios(ratios), envRate, envCPU)
	return r, nil
}

// heavyFilePairs is how many pairs of runs heavy-file compares.
const heavyFilePairs = 4

// median is the median of xs (0: none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// fmtRatios lists ratios with two decimals.
func fmtRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// waitPoller waits (at most a minute) until the worker process name polls
// the normal delivery queue: its identity is "<pid>@<host>", and the
// pollers the server lists include the ones of stopped workers for a
// while.
func (b *bench) waitPoller(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	prefix := strconv.Itoa(b.st.Proc(name).Pid()) + "@"
	for {
		for _, tt := range []enums.TaskQueueType{enums.TASK_QUEUE_TYPE_WORKFLOW, enums.TASK_QUEUE_TYPE_ACTIVITY} {
			d, err := b.st.TC.DescribeTaskQueue(ctx, vocab.DeliveryTaskQueue(fanout.PriorityNormal), tt)
			if err != nil {
				continue
			}
			for _, p := range d.GetPollers() {
				if strings.HasPrefix(p.GetIdentity(), prefix) {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not poll the delivery queue: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
