//go:build integration

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/codec"
	"github.com/fanout/fanout/internal/codecserver"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workers/webhook"
)

// TestCodecUIShowsDecryptedInput checks in a real (headless) browser that
// the Temporal UI of an encrypting stack shows an event's payload in clear
// through the stack's codec server (--ui-codec-endpoint), and — the
// negative — that pointed at a codec server which requires a token the UI
// does not send (the UI's own "Data Encoder" override), it shows the
// payload encrypted and not the marker. The history itself never holds the
// marker; the temporal CLI shows it with --codec-endpoint and --codec-auth
// only.
func TestCodecUIShowsDecryptedInput(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium not found: install it (Debian: apt-get install -y chromium; .ci/run does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()

	uiPort, err := stack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The stack as task dev runs it: encrypted, the UI pointed at the
	// stack's codec server.
	s, err := stack.Start(ctx, stack.Options{InMemory: true, UIPort: uiPort, Log: os.Stderr, Encrypt: true, CodecServer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.CodecServerURL == "" || s.Keyring == nil {
		t.Fatalf("stack started no codec server (%q) or no keys", s.CodecServerURL)
	}
	keys := s.Keyring

	reg := fanout.NewRegistry()
	reg.MustRegister(webhook.EventType, &webhook.Handler{
		RecipientsURL: s.DemoURL + "/recipients",
		Client:        webhook.NewClient(10*time.Second, 16, netip.MustParsePrefix("127.0.0.1/32")),
	}, fanout.TypeOptions{})
	stopWorkers := s.RunWorkers(workers.Options{Registry: reg, Logger: st.logger})
	defer stopWorkers()
	_, stopBridge := s.RunBridge(starter.Config{Validator: starter.Validator{Types: []string{webhook.EventType}, MaxPayloadBytes: 4096}, Logger: st.logger})
	defer stopBridge()

	// The marker is the message text of the event's payload: it is in the
	// Fanout workflow's input.
	marker := "codec-ui-marker-" + randHex(t, 8)
	evID := "codec-ui-" + runID
	if err := s.Publish(ctx, stack.Event{ID: evID, Audience: 3, Text: marker}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	res, err := s.Wait(wctx, evID)
	wcancel()
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 3 {
		t.Fatalf("event delivered to %d of 3", res.Delivered)
	}
	wid := stack.WorkflowID(evID)

	// The history holds the input encrypted: no marker in its bytes.
	hist := s.TC.GetWorkflowHistory(ctx, wid, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var encrypted int
	for hist.HasNext() {
		ev, err := hist.Next()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.Marshal(ev)
		if bytes.Contains(b, []byte(marker)) {
			t.Fatalf("history event %d (%s) holds the marker in clear", ev.GetEventId(), ev.GetEventType())
		}
		if in := ev.GetWorkflowExecutionStartedEventAttributes().GetInput(); in != nil {
			for _, p := range in.GetPayloads() {
				if string(p.GetMetadata()[converter.MetadataEncoding]) == codec.MetadataEncodingEncrypted {
					encrypted++
				}
			}
		}
	}
	if encrypted == 0 {
		t.Fatal("the workflow's input is not encrypted")
	}

	// A codec server that wants a token the UI never sends: it allows the
	// UI's origin, so what refuses the UI is the token, not CORS.
	uiOrigin := fmt.Sprintf("http://127.0.0.1:%d", uiPort)
	token := randHex(t, 16)
	refusing, err := codecserver.New(codecserver.Options{
		Codecs: []converter.PayloadCodec{keys.PayloadCodec()}, Tokens: []string{token}, AllowedOrigins: []string{uiOrigin},
	})
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	rsrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		refusing.ServeHTTP(rec, r)
		if r.Method == http.MethodPost && rec.status == http.StatusUnauthorized {
			refused.Add(1)
		}
	}))
	defer rsrv.Close()

	// The temporal CLI reads the history in clear through the same server
	// with --codec-auth (the endpoint's {namespace} becomes the path), and
	// not without it.
	cli := func(extra ...string) (string, error) {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		args := append([]string{"workflow", "show", "--workflow-id", wid, "--address", s.TemporalAddr, "--namespace", "default", "--output", "json"}, extra...)
		out, err := exec.CommandContext(c, filepath.Join(s.Bin, "temporal"), args...).CombinedOutput()
		return string(out), err
	}
	// startedInput is the workflow's input in `workflow show -o json`
	// (payload data in base64), or nothing when the output is no history.
	startedInput := func(out string) (encoding string, data []byte) {
		var h struct {
			Events []struct {
				Started *struct {
					Input struct {
						Payloads []struct {
							Metadata map[string][]byte
							Data     []byte
						}
					}
				} `json:"workflowExecutionStartedEventAttributes"`
			}
		}
		if json.Unmarshal([]byte(out), &h) != nil || len(h.Events) == 0 || h.Events[0].Started == nil || len(h.Events[0].Started.Input.Payloads) == 0 {
			return "", nil
		}
		p := h.Events[0].Started.Input.Payloads[0]
		return string(p.Metadata[converter.MetadataEncoding]), p.Data
	}
	out, err := cli("--codec-endpoint", rsrv.URL+"/{namespace}", "--codec-auth", "Bearer "+token)
	if enc, data := startedInput(out); err != nil || enc != "json/plain" || !bytes.Contains(data, []byte(marker)) {
		t.Fatalf("temporal workflow show with --codec-auth: %v; input %s %q, want json/plain with the marker; output:\n%.2000s", err, enc, data, out)
	}
	before := refused.Load()
	out, _ = cli("--codec-endpoint", rsrv.URL)
	if _, data := startedInput(out); bytes.Contains(data, []byte(marker)) || strings.Contains(out, marker) || refused.Load() == before {
		t.Fatalf("temporal workflow show without --codec-auth (%d refusals): marker shown or server not asked:\n%.2000s", refused.Load()-before, out)
	}
	out, _ = cli()
	if enc, data := startedInput(out); enc != codec.MetadataEncodingEncrypted || bytes.Contains(data, []byte(marker)) {
		t.Fatalf("temporal workflow show without a codec: input %s, want %s without the marker:\n%.2000s", enc, codec.MetadataEncodingEncrypted, out)
	}

	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1400, 2000))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	page := fmt.Sprintf("%s/namespaces/default/workflows/%s", uiOrigin, url.PathEscape(wid))
	// bodyText waits (at most d) until the page's text satisfies cond (a
	// JavaScript expression) and returns the text, or the text it had.
	bodyText := func(d time.Duration, cond string) (string, error) {
		c, cancel := context.WithTimeout(bctx, d)
		defer cancel()
		_, err := chromedp.Run(c, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(250*time.Millisecond)))
		out, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		return out, err
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	got, err := bodyText(20*time.Second, fmt.Sprintf(`!!document.body && document.body.innerText.includes(%q)`, marker))
	if err != nil {
		t.Fatalf("the UI never showed the decrypted marker: %v; page text:\n%s", err, got)
	}

	// The negative: the UI's Data Encoder override, stored in the browser,
	// points it at the refusing codec server.
	mustJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	before = refused.Load()
	if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`localStorage.setItem("endpoint", %q); localStorage.setItem("overrideRemoteCodecConfiguration", "true")`, mustJSON(rsrv.URL))),
		chromedp.Navigate(page)); err != nil {
		t.Fatal(err)
	}
	// Undecoded, the UI shows the payload as stored: its metadata in base64
	// (the encoding "binary/encrypted") and the sealed data.
	encoding := base64.StdEncoding.EncodeToString([]byte(codec.MetadataEncodingEncrypted))
	got, err = bodyText(20*time.Second, fmt.Sprintf(`!!document.body && document.body.innerText.includes(%q)`, encoding))
	if err != nil {
		t.Fatalf("the UI never showed the encrypted payload: %v; page text:\n%s", err, got)
	}
	if strings.Contains(got, marker) {
		t.Fatalf("the UI showed the marker through a codec server that refused it")
	}
	if refused.Load() == before {
		t.Fatal("the refusing codec server was never asked by the UI: the negative proves nothing")
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
