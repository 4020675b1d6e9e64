//go:build integration

package kafkatopic_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/internal/kafkatopic/kafkatest"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workers"
	"github.com/fanout/fanout/workflows/vocab"
)

// The users of the secured broker, one per SASL mechanism fanout supports.
var secureUsers = []struct{ mech, user, pass string }{
	{config.SASLScramSHA256, "fanout-256", "pw-256-Lk2"},
	{config.SASLScramSHA512, "fanout-512", "pw-512-Qm7"},
	{config.SASLPlain, "fanout-plain", "pw-plain-Vx4"},
}

// topics of one mechanism's run, so the runs do not read each other's records.
func topics(mech string) (events, eventsDLQ, deliveriesDLQ string) {
	m := strings.ToLower(mech)
	return "ev-" + m, "evdlq-" + m, "deldlq-" + m
}

// secureBroker is a kfake broker on 127.0.0.1 that speaks only TLS (a
// certificate of pki's CA) and asks every connection for SASL, with a
// superuser per mechanism of secureUsers.
func secureBroker(t *testing.T) (addr string, pki *kafkatest.PKI) {
	t.Helper()
	pki = kafkatest.NewPKI(t, "127.0.0.1", "localhost")
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.TLS(pki.ServerTLS()), kfake.EnableSASL()}
	var names []string
	for _, u := range secureUsers {
		opts = append(opts, kfake.Superuser(u.mech, u.user, u.pass))
		ev, evdlq, deldlq := topics(u.mech)
		names = append(names, ev, evdlq, deldlq)
	}
	opts = append(opts, kfake.SeedTopics(1, names...))
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addr = c.ListenAddrs()[0]
	advertiseHandshakeV0(t, c, addr, pki)
	return addr, pki
}

// advertiseHandshakeV0 makes kfake advertise SaslHandshake from version 0,
// as Kafka brokers do: kfake serves only v1 and says so, and librdkafka
// (kcat) enables SASL only when a broker lists v0, so without this kcat
// fails with "SASL Handshake not supported by broker". Clients still
// negotiate v1, the version kfake serves. The rest of kfake's ApiVersions
// answer is its own, read once from the broker.
func advertiseHandshakeV0(t *testing.T, c *kfake.Cluster, addr string, pki *kafkatest.PKI) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.Pool(), MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	req := kmsg.NewPtrApiVersionsRequest() // v0: a request header v1, a response header v0
	msg := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	msg = binary.BigEndian.AppendUint16(msg, 0)      // version
	msg = binary.BigEndian.AppendUint32(msg, 1)      // correlation id
	msg = binary.BigEndian.AppendUint16(msg, 0xffff) // null client id
	msg = req.AppendTo(msg)
	if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)); err != nil {
		t.Fatal(err)
	}
	size := make([]byte, 4)
	if _, err := io.ReadFull(conn, size); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size))
	if _, err := io.ReadFull(conn, body); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	if err := resp.ReadFrom(body[4:]); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("kfake's ApiVersions: %v (error code %d)", err, resp.ErrorCode)
	}
	found := false
	for i := range resp.ApiKeys {
		if resp.ApiKeys[i].ApiKey == int16(kmsg.SASLHandshake) {
			resp.ApiKeys[i].MinVersion, found = 0, true
		}
	}
	if !found {
		t.Fatal("kfake does not advertise SaslHandshake")
	}
	c.ControlKey(int16(kmsg.ApiVersions), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		out := *resp
		out.ApiKeys = slices.Clone(resp.ApiKeys)
		out.Version = r.GetVersion()
		return &out, nil, true
	})
}

// secureEnv sets the environment a deployment sets for user u on the
// broker at addr, the password from a file for SCRAM-SHA-512 (a mounted
// Secret) and from the variable otherwise.
func secureEnv(t *testing.T, addr string, pki *kafkatest.PKI, mech, user, pass string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FANOUT_") {
			t.Setenv(k, "")
			_ = os.Unsetenv(k)
		}
	}
	t.Setenv("FANOUT_KAFKA_BROKERS", addr)
	t.Setenv("FANOUT_KAFKA_TLS", "true")
	t.Setenv("FANOUT_KAFKA_TLS_CA_FILE", pki.CAFile)
	t.Setenv("FANOUT_KAFKA_SASL_MECHANISM", mech)
	t.Setenv("FANOUT_KAFKA_SASL_USERNAME", user)
	if mech == config.SASLScramSHA512 {
		f := filepath.Join(t.TempDir(), "kafka-password")
		if err := os.WriteFile(f, []byte(pass+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("FANOUT_KAFKA_SASL_PASSWORD_FILE", f)
	} else {
		t.Setenv("FANOUT_KAFKA_SASL_PASSWORD", pass)
	}
	ev, evdlq, deldlq := topics(mech)
	t.Setenv("FANOUT_EVENTS_TOPIC", ev)
	t.Setenv("FANOUT_EVENTS_DLQ_TOPIC", evdlq)
	t.Setenv("FANOUT_DELIVERIES_DLQ_TOPIC", deldlq)
}

// readTopic is every record of topic, read with ReadAll through kc.
func readTopic(t *testing.T, kc kafkatopic.Conn, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []kafka.Message
	if err := kafkatopic.ReadAll(ctx, kc, topic, func(m kafka.Message) error { out = append(out, m); return nil }); err != nil {
		t.Fatalf("ReadAll %s: %v", topic, err)
	}
	return out
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestKafkaTLSAndSASL: with the FANOUT_KAFKA_* variables of a TLS
// listener with a private CA and each SASL mechanism (SCRAM-SHA-256,
// SCRAM-SHA-512 with the password from a file, PLAIN), every Kafka path of
// fanout works through the configuration the binaries load: the publisher,
// the bridge (its consumer-group reader, its events-DLQ writer, its
// commits: a second bridge of the group does not see the record again),
// the deliveries DLQ writer of the worker, ReadAll, and redrive-events
// (its publisher, and its reader of a cut dead letter's original). The
// broker answers nothing without TLS and SASL, so each success is the
// secured path's.
func TestKafkaTLSAndSASL(t *testing.T) {
	addr, pki := secureBroker(t)
	for _, u := range secureUsers {
		t.Run(u.mech, func(t *testing.T) {
			secureEnv(t, addr, pki, u.mech, u.user, u.pass)
			var bcfg starter.Settings
			if err := config.Load(&bcfg); err != nil {
				t.Fatal(err)
			}
			var wcfg workers.Config
			if err := config.Load(&wcfg); err != nil {
				t.Fatal(err)
			}
			kc, err := bcfg.KafkaConn()
			if err != nil {
				t.Fatal(err)
			}
			if want := "SASL_SSL " + u.mech; kc.Security() != want {
				t.Fatalf("connection %s, want %s", kc.Security(), want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ev, evdlq, deldlq := topics(u.mech)

			// The publisher (`starter publish`): one bad record.
			pub := starter.NewPublisher(kc, ev)
			if err := pub.PublishRecords(ctx, kafka.Message{Key: []byte("bad"), Value: []byte("not json")}); err != nil {
				t.Fatalf("publish: %v", err)
			}
			_ = pub.Close()

			// The bridge (`starter bridge`, or the worker's): it reads the
			// record in its consumer group and dead-letters it, all over
			// TLS and SASL. A bad record needs no Temporal.
			runBridge := func(want int64) {
				t.Helper()
				sc, err := bcfg.Config(nil, slog.New(slog.DiscardHandler), nil)
				if err != nil {
					t.Fatal(err)
				}
				sc.Events, sc.CommitInterval = nil, 0
				b := starter.New(sc, setUpTemporal{})
				bctx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- b.Run(bctx) }()
				deadline := time.Now().Add(45 * time.Second)
				for b.Stats.DeadLettered.Load() < want && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(300 * time.Millisecond) // a record read again would be dead-lettered by now
				stop()
				if err := <-done; err != nil {
					t.Fatalf("bridge: %v", err)
				}
				if got := b.Stats.DeadLettered.Load(); got != want {
					t.Fatalf("bridge dead-lettered %d records, want %d", got, want)
				}
			}
			runBridge(1)
			dls := readTopic(t, kc, evdlq)
			if len(dls) != 1 || string(dls[0].Value) != "not json" || header(dls[0], starter.HeaderReason) == "" {
				t.Fatalf("events DLQ holds %d records, want the bad record with its reason: %+v", len(dls), dls)
			}
			// Committed through the secured connection: a second bridge of
			// the group sees only the record published after.
			pub = starter.NewPublisher(kc, ev)
			if err := pub.PublishRecords(ctx, kafka.Message{Key: []byte("bad2"), Value: []byte("{also not json")}); err != nil {
				t.Fatalf("publish: %v", err)
			}
			_ = pub.Close()
			runBridge(1)
			if dls = readTopic(t, kc, evdlq); len(dls) != 2 || string(dls[1].Value) != "{also not json" {
				t.Fatalf("events DLQ holds %d records after the second bridge, want 2 (the first record committed)", len(dls))
			}

			// The worker's deliveries DLQ writer, read back with ReadAll.
			wkc, err := wcfg.Kafka().KafkaConn()
			if err != nil {
				t.Fatal(err)
			}
			dlw := activities.NewDeadLetterWriter(wkc, wcfg.DeliveriesDLQ)
			letter := activities.DeadLetter{EventID: "e1", EventType: "webhook", AttemptID: "a1", Recipient: fanout.Recipient{ID: "r1"}, Attempts: 8, LastError: "HTTP 503", Time: time.Now().UTC()}
			if err := dlw.Publish(ctx, []activities.DeadLetter{letter}); err != nil {
				t.Fatalf("deliveries DLQ: %v", err)
			}
			_ = dlw.Close()
			recs := readTopic(t, kc, deldlq)
			var got activities.DeadLetter
			if len(recs) != 1 || json.Unmarshal(recs[0].Value, &got) != nil || got.EventID != "e1" || got.Recipient.ID != "r1" {
				t.Fatalf("deliveries DLQ holds %d records, want the dead letter of e1/r1", len(recs))
			}

			// redrive-events: a cut dead letter's original is read back
			// from the events topic (its own reader), the rest re-published.
			w := kafkatopic.NewWriter(kc, evdlq)
			err = w.WriteMessages(ctx, kafka.Message{Key: []byte("bad"), Value: []byte("cut"), Headers: []kafka.Header{
				{Key: starter.HeaderReason, Value: []byte("too_large")}, {Key: starter.HeaderTruncated, Value: []byte("600000")},
				{Key: starter.HeaderSourceTopic, Value: []byte(ev)}, {Key: starter.HeaderSourcePartition, Value: []byte("0")},
				{Key: starter.HeaderSourceOffset, Value: []byte(strconv.Itoa(0))},
			}})
			_ = w.Close()
			if err != nil {
				t.Fatal(err)
			}
			rr, err := starter.RedriveEvents(ctx, starter.RedriveEventsOptions{Kafka: kc, DLQTopic: evdlq, EventsTopic: ev, Rate: 1000})
			if err != nil || rr.Republished != 3 || rr.FromSource != 1 || rr.Lost != 0 {
				t.Fatalf("redrive-events: %+v, %v; want 3 re-published, 1 of them from the source", rr, err)
			}
			evs := readTopic(t, kc, ev)
			if len(evs) != 5 || string(evs[4].Value) != "not json" {
				t.Fatalf("events topic holds %d records after the redrive, want 5, the last the cut letter's original", len(evs))
			}

			// kcat, as the README tells users to run it, reads what fanout
			// wrote, and fanout reads what kcat wrote.
			args := kcatArgs(addr, pki.CAFile, u.mech, u.user, u.pass)
			out := kcat(t, "", append(args, "-C", "-t", evdlq, "-o", "beginning", "-e", "-q", "-f", "%s\n")...)
			if !strings.Contains(out, "not json") {
				t.Errorf("kcat consumed %q from the events DLQ, want fanout's dead letter", out)
			}
			kcat(t, "from kcat\n", append(args, "-P", "-t", deldlq)...)
			if recs := readTopic(t, kc, deldlq); len(recs) != 2 || string(recs[1].Value) != "from kcat" {
				t.Errorf("fanout read %d records of the deliveries DLQ after kcat produced, want kcat's last", len(recs))
			}
		})
	}
}

// TestKafkaSecurityRefusals: what is not allowed fails, with an error that
// says why: a wrong password (and the error does not show it), a client
// without TLS, a client that does not trust the CA, a client expecting
// another server name, and a client without SASL.
func TestKafkaSecurityRefusals(t *testing.T) {
	addr, pki := secureBroker(t)
	u := secureUsers[0]
	ev, _, _ := topics(u.mech)
	good := func(t *testing.T) kafkatopic.Conn {
		t.Helper()
		secureEnv(t, addr, pki, u.mech, u.user, u.pass)
		var cfg starter.Kafka
		if err := config.Load(&cfg); err != nil {
			t.Fatal(err)
		}
		kc, err := cfg.KafkaConn()
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	// The good connection works, so each refusal below is the broker's
	// answer to what differs.
	pub := starter.NewPublisher(good(t), ev)
	if err := pub.PublishRecords(context.Background(), kafka.Message{Value: []byte("ok")}); err != nil {
		t.Fatalf("the good connection: %v", err)
	}
	_ = pub.Close()
	if err := good(t).Check(context.Background()); err != nil {
		t.Fatalf("Check of the good connection: %v", err)
	}

	readErr := func(t *testing.T, kc kafkatopic.Conn) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		n := 0
		err := kafkatopic.ReadAll(ctx, kc, ev, func(kafka.Message) error { n++; return nil })
		if err == nil || n > 0 {
			t.Fatalf("read %d records, err %v: want a refusal", n, err)
		}
		return err
	}

	t.Run("wrong password", func(t *testing.T) {
		const wrong = "not-the-password-7Hc"
		secureEnv(t, addr, pki, u.mech, u.user, wrong)
		var cfg starter.Kafka
		if err := config.Load(&cfg); err != nil {
			t.Fatal(err)
		}
		kc, err := cfg.KafkaConn()
		if err != nil {
			t.Fatal(err)
		}
		err = readErr(t, kc)
		if !errors.Is(err, kafka.SASLAuthenticationFailed) || strings.Contains(err.Error(), wrong) {
			t.Errorf("reader: %v; want SASL authentication failed, without the password", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The start-up check the worker runs says it as clearly.
		if err := kc.Check(ctx); !errors.Is(err, kafka.SASLAuthenticationFailed) || strings.Contains(err.Error(), wrong) ||
			!strings.Contains(err.Error(), "SASL_SSL SCRAM-SHA-256") {
			t.Errorf("Check: %v; want SASL authentication failed naming the security, without the password", err)
		}
		// The bridge says so in its log, where kafka-go's reader alone
		// would retry in silence.
		var logged bytes.Buffer
		b := starter.New(starter.Config{Kafka: kc, Topic: ev, GroupID: "g", DLQTopic: "evdlq-x", Logger: slog.New(slog.NewJSONHandler(&syncWriter{w: &logged}, nil))}, setUpTemporal{})
		bctx, stop := context.WithTimeout(ctx, 3*time.Second)
		if err := b.Run(bctx); err != nil {
			t.Errorf("bridge: %v", err)
		}
		stop()
		if l := logged.String(); !strings.Contains(l, "cannot connect to Kafka as configured") || !strings.Contains(l, "SASL Authentication Failed") || strings.Contains(l, wrong) {
			t.Errorf("bridge log %s: want the SASL failure, without the password", l)
		}
		// The writer fails too. (kfake hangs up on a failed SCRAM
		// exchange where Kafka answers error 58, so kafka-go's writer
		// reports an unexpected EOF here, and SASLAuthenticationFailed
		// against a real broker.)
		w := kafkatopic.NewWriter(kc, ev)
		defer func() { _ = w.Close() }()
		if err = w.WriteMessages(ctx, kafka.Message{Value: []byte("x")}); err == nil || strings.Contains(err.Error(), wrong) {
			t.Errorf("writer: %v; want an error, without the password", err)
		}
	})
	t.Run("plain TCP to the TLS listener", func(t *testing.T) {
		kc := good(t)
		kc.TLS = nil
		_ = readErr(t, kc) // the refusal is all this case checks
	})
	t.Run("a client that does not trust the CA", func(t *testing.T) {
		kc := good(t)
		kc.TLS = &tls.Config{MinVersion: tls.VersionTLS12} // the system's CAs
		var ua x509.UnknownAuthorityError
		if err := readErr(t, kc); !errors.As(err, &ua) {
			t.Errorf("err %v (%T), want an unknown certificate authority", err, err)
		}
		if err := kc.Check(context.Background()); !errors.As(err, &ua) {
			t.Errorf("Check: %v, want an unknown certificate authority", err)
		}
	})
	t.Run("a server name the certificate does not carry", func(t *testing.T) {
		secureEnv(t, addr, pki, u.mech, u.user, u.pass)
		t.Setenv("FANOUT_KAFKA_TLS_SERVER_NAME", "kafka.example.com")
		var cfg starter.Kafka
		if err := config.Load(&cfg); err != nil {
			t.Fatal(err)
		}
		kc, err := cfg.KafkaConn()
		if err != nil {
			t.Fatal(err)
		}
		var he x509.HostnameError
		if err := readErr(t, kc); !errors.As(err, &he) {
			t.Errorf("err %v (%T), want a certificate name mismatch", err, err)
		}
	})
	t.Run("TLS without SASL", func(t *testing.T) {
		kc := good(t)
		kc.SASL = nil
		_ = readErr(t, kc) // the refusal is all this case checks
	})
	t.Run("kcat with a wrong password", func(t *testing.T) {
		args := kcatArgs(addr, pki.CAFile, u.mech, u.user, "wrong-password")
		cmd := exec.Command("kcat", append(args, "-L", "-m", "5")...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("kcat with a wrong password listed the cluster: %s", out)
		}
	})
}

// syncWriter serializes writes (the bridge logs from several goroutines).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// kcatArgs are the kcat flags of the README for a SASL_SSL cluster with a
// private CA.
func kcatArgs(addr, caFile, mech, user, pass string) []string {
	return []string{"-b", addr, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=" + mech,
		"-X", "sasl.username=" + user, "-X", "sasl.password=" + pass, "-X", "ssl.ca.location=" + caFile}
}

func kcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatal("kcat not found: install Debian's kcat (apt-get install -y kcat); .ci/run does")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v: %s", strings.Join(args[len(args)-4:], " "), err, errb.String())
	}
	return out.String()
}

// setUpTemporal is the Temporal client of bridges that start nothing (the
// records here are bad ones, or never read): it answers the bridge's read
// of the namespace's search attributes, before it consumes, with fanout's.
type setUpTemporal struct{ client.Client }

func (setUpTemporal) OperatorService() operatorservice.OperatorServiceClient { return setUpOperator{} }

type setUpOperator struct {
	operatorservice.OperatorServiceClient
}

func (setUpOperator) ListSearchAttributes(context.Context, *operatorservice.ListSearchAttributesRequest, ...grpc.CallOption) (*operatorservice.ListSearchAttributesResponse, error) {
	have := map[string]enumspb.IndexedValueType{}
	for _, a := range vocab.SearchAttributes() {
		have[a.Name] = a.Type
	}
	return &operatorservice.ListSearchAttributesResponse{CustomAttributes: have}, nil
}
