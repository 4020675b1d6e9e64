// Package pictures makes the documentation's pictures from the real stack
// (go tool task pictures): a screenshot of the Temporal UI's page of one
// event, the Grafana dashboard (deploy/helm/fanout/files/dashboard.json)
// drawn from the metrics the demo's processes served, and
// docs/performance-figures.md from the footprint test's figures. Nothing
// here is drawn by hand.
//
// There is no Grafana to render the dashboard with, so Render lays its
// panels out from their gridPos and evaluates their queries itself (the
// PromQL forms the dashboard uses, over samples scraped once a second from
// the workers' /metrics and the Temporal dev server's); headless Chromium
// takes both screenshots, as the codec UI test does.
package pictures

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"

	"github.com/fanout/fanout/dev/stack"
)

// Options of Screenshots.
type Options struct {
	// OutDir receives ui-event.png and dashboard.png.
	OutDir string
	// Dashboard is the dashboard.json to draw.
	Dashboard string
	// Scale multiplies the demo's audiences (1: a 30,000-recipient event
	// beside small ones; the integration test uses less).
	Scale float64
	// Log receives progress; nil discards it.
	Log io.Writer
}

// Files Screenshots writes in OutDir.
const (
	UIFile        = "ui-event.png"
	DashboardFile = "dashboard.png"
)

// Window of the UI screenshot.
const uiWidth, uiHeight = 1400, 1000

// Screenshots runs the demo on a stack of its own and writes the two
// screenshots into o.OutDir.
func Screenshots(ctx context.Context, o Options) error {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Scale <= 0 {
		o.Scale = 1
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return errors.New("chromium not found: install it (Debian: apt-get install -y chromium; go run ./dev/cmd/preflight does)")
	}
	raw, err := os.ReadFile(o.Dashboard)
	if err != nil {
		return err
	}
	dash, err := ParseDashboard(raw)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	uiPort, err := stack.FreePort()
	if err != nil {
		return err
	}
	st, err := stack.Start(ctx, stack.Options{InMemory: true, UIPort: uiPort, TemporalMetrics: true, Log: o.Log})
	if err != nil {
		return err
	}
	defer st.Close()
	st.Sink.Fail = demoFailures()
	var targets []string
	for _, w := range []struct{ name, queues, extra string }{{"events", "events", "FANOUT_BRIDGE=true"}, {"delivery", "high,normal,low", ""}} {
		port, err := stack.FreePort()
		if err != nil {
			return err
		}
		env := []string{"FANOUT_METRICS_ADDR=127.0.0.1:" + strconv.Itoa(port)}
		if w.extra != "" {
			env = append(env, w.extra)
		}
		if err := st.StartWorker(w.name, w.queues, env...); err != nil {
			return err
		}
		targets = append(targets, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	}
	targets = append(targets, st.TemporalMetricsURL)

	sc := &scraper{targets: targets, start: time.Now()}
	sctx, stopScrape := context.WithCancel(ctx)
	scraped := make(chan struct{})
	go func() { defer close(scraped); sc.run(sctx, time.Second) }()
	big, err := runDemo(ctx, st, o)
	time.Sleep(6 * time.Second) // the dashboard's lines come back down
	stopScrape()
	<-scraped
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "[pictures] %d scrapes of %d targets\n", len(sc.scrapes), len(targets))

	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true), chromedp.WindowSize(uiWidth, uiHeight))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// The first action on bctx starts the browser, which lives as long as
	// bctx (a shorter context there would close it).
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		return fmt.Errorf("starting chromium: %w", err)
	}

	page := fmt.Sprintf("http://127.0.0.1:%d/namespaces/default/workflows/%s", uiPort, url.PathEscape(stack.WorkflowID(big.ID)))
	if err := uiShot(bctx, page, filepath.Join(o.OutDir, UIFile)); err != nil {
		return fmt.Errorf("the UI's event page: %w", err)
	}
	fmt.Fprintf(o.Log, "[pictures] wrote %s\n", filepath.Join(o.OutDir, UIFile))

	var html bytes.Buffer
	if err := Render(&html, dash, sc.scrapes, 5); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "pictures-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	htmlPath := filepath.Join(tmp, "dashboard.html")
	if err := os.WriteFile(htmlPath, html.Bytes(), 0o644); err != nil {
		return err
	}
	if err := pageShot(bctx, "file://"+htmlPath, filepath.Join(o.OutDir, DashboardFile)); err != nil {
		return fmt.Errorf("the dashboard: %w", err)
	}
	fmt.Fprintf(o.Log, "[pictures] wrote %s\n", filepath.Join(o.OutDir, DashboardFile))
	return nil
}

// runDemo publishes the demo's events (a big one, one of 2,000 on low
// priority, and small ones on high, a few at a time) and waits until all
// are done; it returns the big one, whose page the UI screenshot shows.
func runDemo(ctx context.Context, st *stack.Stack, o Options) (stack.Event, error) {
	sc := func(n int) int { return max(int(float64(n)*o.Scale), 20) }
	big := stack.Event{ID: "demo-big", Audience: sc(30_000), Priority: "normal", DuplicateEvery: 500}
	mid := stack.Event{ID: "demo-low", Audience: sc(2000), Priority: "low"}
	all := []stack.Event{big, mid}
	fmt.Fprintf(o.Log, "[pictures] demo: %d recipients, %d on low priority and small events on high\n", big.Audience, mid.Audience)
	if err := st.Publish(ctx, big, mid); err != nil {
		return big, err
	}
	for i := range 20 {
		smalls := []stack.Event{{ID: fmt.Sprintf("demo-small-%d-a", i), Audience: 20, Priority: "high"}, {ID: fmt.Sprintf("demo-small-%d-b", i), Audience: 50, Priority: "high"}}
		if err := st.Publish(ctx, smalls...); err != nil {
			return big, err
		}
		all = append(all, smalls...)
		time.Sleep(time.Second)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(8)
	for _, e := range all {
		g.Go(func() error {
			_, err := st.Wait(wctx, e.ID)
			return err
		})
	}
	return big, g.Wait()
}

// demoFailures has the sink refuse some deliveries, so that the
// dashboard's retries, failures and dead letters have something to show:
// one recipient in 40 is unavailable at its first call (retried), one in
// 400 is gone (404: a permanent failure, dead-lettered).
func demoFailures() func(event, recipient string) (int, time.Duration) {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(event, recipient string) (int, time.Duration) {
		h := fnv.New32a()
		_, _ = io.WriteString(h, event+"/"+recipient)
		n := h.Sum32()
		switch {
		case n%400 == 0:
			return http.StatusNotFound, 0
		case n%40 == 0:
			mu.Lock()
			defer mu.Unlock()
			if !seen[event+"/"+recipient] {
				seen[event+"/"+recipient] = true
				return http.StatusServiceUnavailable, 0
			}
		}
		return 0, 0
	}
}

// uiShot opens the UI's page of a workflow, waits until it shows the
// workflow completed, and takes a screenshot of the window.
func uiShot(bctx context.Context, page, out string) error {
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(uiWidth, uiHeight), chromedp.Navigate(page)); err != nil {
		return err
	}
	// Polled here rather than with chromedp.Poll: the UI replaces its
	// page's context while it loads, which fails a Poll under way.
	var text string
	for {
		t, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		if err == nil {
			text = t
			if strings.Contains(text, "Completed") && strings.Contains(text, "Fanout") {
				break
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the page never showed the workflow completed; page text: %.500s", text)
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // the timeline and the event history finish drawing
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		return err
	}
	return os.WriteFile(out, png, 0o644)
}

// pageShot takes a screenshot of a whole page.
func pageShot(bctx context.Context, page, out string) error {
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Navigate(page)); err != nil {
		return err
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return err
	}
	return os.WriteFile(out, png, 0o644)
}

// scraper reads its targets' Prometheus metrics every interval.
type scraper struct {
	targets []string
	start   time.Time
	scrapes []Scrape
}

func (s *scraper) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		at := time.Since(s.start).Seconds()
		series := map[string]Sample{}
		for _, u := range s.targets {
			_ = scrapeInto(ctx, u, series) // a target not up yet has nothing to add
		}
		s.scrapes = append(s.scrapes, Scrape{At: at, Series: series})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrapeInto reads one target into series: counters and gauges by name,
// histograms as their _bucket (with le), _count and _sum series.
func scrapeInto(ctx context.Context, target string, series map[string]Sample) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	instance := req.URL.Host
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			addMetric(series, name, instance, m)
		}
	}
	return nil
}

// addMetric adds one metric of a target (its instance label, as
// Prometheus adds it) to series.
func addMetric(series map[string]Sample, name, instance string, m *dto.Metric) {
	base := Labels{"instance": instance}
	for _, l := range m.GetLabel() {
		base[l.GetName()] = l.GetValue()
	}
	put := func(n string, extra Labels, v float64) {
		l := maps.Clone(base)
		maps.Copy(l, extra)
		l["__name__"] = n
		series[l.key()] = Sample{Labels: l, Value: v}
	}
	switch {
	case m.Counter != nil:
		put(name, nil, m.Counter.GetValue())
	case m.Gauge != nil:
		put(name, nil, m.Gauge.GetValue())
	case m.Untyped != nil:
		put(name, nil, m.Untyped.GetValue())
	case m.Histogram != nil:
		h := m.Histogram
		inf := false
		for _, b := range h.GetBucket() {
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
			put(name+"_bucket", Labels{"le": strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)}, float64(b.GetCumulativeCount()))
		}
		if !inf { // the text format's +Inf bucket is the count
			put(name+"_bucket", Labels{"le": "+Inf"}, float64(h.GetSampleCount()))
		}
		put(name+"_count", nil, float64(h.GetSampleCount()))
		put(name+"_sum", nil, h.GetSampleSum())
	}
}
