package config

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go/sasl/plain"

	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/internal/kafkatopic/kafkatest"
)

// kafkaSecret is in every password and file of the bad-value cases: no
// error may show it.
const kafkaSecret = "s3cr3t-Zq81"

// loadBoth loads the bridge and the worker configuration from env (on top
// of a clean FANOUT_* environment) and returns their errors.
func loadBoth(t *testing.T, env map[string]string) (b Bridge, w Worker, bridgeErr, workerErr error) {
	t.Helper()
	clearFanoutEnv(t)
	for k, v := range env {
		t.Setenv(k, v)
	}
	berr, werr := Load(&b), Load(&w)
	return b, w, berr, werr
}

// TestKafkaSecurityBadValues: every bad TLS or SASL setting fails start-up
// of both the bridge and the worker (which writes the deliveries DLQ and
// may run the bridge), with an error naming the variable to fix and
// showing neither the password nor a file's contents.
func TestKafkaSecurityBadValues(t *testing.T) {
	pki := kafkatest.NewPKI(t, "127.0.0.1")
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notPEM := file("not-pem", "-----BEGIN NOTHING-----\n"+kafkaSecret+"\n")
	passFile := file("password", kafkaSecret+"\n")
	ctlPassFile := file("ctl-password", kafkaSecret+"\x07\n")
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string // every one must be in the error
	}{
		{"TLS not a bool", map[string]string{"FANOUT_KAFKA_TLS": "maybe"}, []string{"FANOUT_KAFKA_TLS"}},
		{"skip-verify not a bool", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY": "please"}, []string{"FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY"}},
		{"CA file without TLS", map[string]string{"FANOUT_KAFKA_TLS_CA_FILE": pki.CAFile}, []string{"FANOUT_KAFKA_TLS_CA_FILE", "FANOUT_KAFKA_TLS is not true"}},
		{"server name without TLS", map[string]string{"FANOUT_KAFKA_TLS_SERVER_NAME": "kafka"}, []string{"FANOUT_KAFKA_TLS_SERVER_NAME"}},
		{"skip-verify without TLS", map[string]string{"FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY": "true"}, []string{"FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY"}},
		{"CA file missing", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CA_FILE": filepath.Join(dir, "absent.pem")}, []string{"FANOUT_KAFKA_TLS_CA_FILE", "absent.pem"}},
		{"CA file a directory", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CA_FILE": dir}, []string{"FANOUT_KAFKA_TLS_CA_FILE"}},
		{"CA file not PEM", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CA_FILE": notPEM}, []string{"FANOUT_KAFKA_TLS_CA_FILE", "no PEM certificate"}},
		{"cert without key", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CERT_FILE": pki.ClientCertFile}, []string{"FANOUT_KAFKA_TLS_KEY_FILE"}},
		{"key without cert", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_KEY_FILE": pki.ClientKeyFile}, []string{"FANOUT_KAFKA_TLS_CERT_FILE"}},
		{"cert file missing", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CERT_FILE": filepath.Join(dir, "absent.pem"), "FANOUT_KAFKA_TLS_KEY_FILE": pki.ClientKeyFile}, []string{"FANOUT_KAFKA_TLS_CERT_FILE"}},
		{"key file missing", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CERT_FILE": pki.ClientCertFile, "FANOUT_KAFKA_TLS_KEY_FILE": filepath.Join(dir, "absent.pem")}, []string{"FANOUT_KAFKA_TLS_KEY_FILE"}},
		{"cert file not PEM", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CERT_FILE": notPEM, "FANOUT_KAFKA_TLS_KEY_FILE": pki.ClientKeyFile}, []string{"FANOUT_KAFKA_TLS_CERT_FILE"}},
		{"key file not PEM", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CERT_FILE": pki.ClientCertFile, "FANOUT_KAFKA_TLS_KEY_FILE": notPEM}, []string{"FANOUT_KAFKA_TLS_KEY_FILE:", "no PEM private key"}},
		{"key of another certificate", map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_CERT_FILE": pki.ClientCertFile, "FANOUT_KAFKA_TLS_KEY_FILE": pki.ServerKeyFile}, []string{"FANOUT_KAFKA_TLS_KEY_FILE", "does not match"}},
		{"mechanism unknown", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "GSSAPI", "FANOUT_KAFKA_SASL_USERNAME": "u", "FANOUT_KAFKA_SASL_PASSWORD": kafkaSecret}, []string{"FANOUT_KAFKA_SASL_MECHANISM", "GSSAPI"}},
		{"AWS IAM not built in", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "AWS_MSK_IAM"}, []string{"FANOUT_KAFKA_SASL_MECHANISM"}},
		{"mechanism without username", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "PLAIN", "FANOUT_KAFKA_SASL_PASSWORD": kafkaSecret}, []string{"FANOUT_KAFKA_SASL_USERNAME"}},
		{"mechanism without password", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "FANOUT_KAFKA_SASL_USERNAME": "u"}, []string{"FANOUT_KAFKA_SASL_PASSWORD", "FANOUT_KAFKA_SASL_PASSWORD_FILE"}},
		{"password and password file", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "PLAIN", "FANOUT_KAFKA_SASL_USERNAME": "u", "FANOUT_KAFKA_SASL_PASSWORD": kafkaSecret, "FANOUT_KAFKA_SASL_PASSWORD_FILE": passFile}, []string{"FANOUT_KAFKA_SASL_PASSWORD and FANOUT_KAFKA_SASL_PASSWORD_FILE"}},
		{"password file missing", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "PLAIN", "FANOUT_KAFKA_SASL_USERNAME": "u", "FANOUT_KAFKA_SASL_PASSWORD_FILE": filepath.Join(dir, "absent")}, []string{"FANOUT_KAFKA_SASL_PASSWORD_FILE"}},
		{"password file empty", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "PLAIN", "FANOUT_KAFKA_SASL_USERNAME": "u", "FANOUT_KAFKA_SASL_PASSWORD_FILE": file("empty", "\n")}, []string{"FANOUT_KAFKA_SASL_PASSWORD_FILE", "empty"}},
		{"username without mechanism", map[string]string{"FANOUT_KAFKA_SASL_USERNAME": "u"}, []string{"FANOUT_KAFKA_SASL_USERNAME", "FANOUT_KAFKA_SASL_MECHANISM"}},
		{"password without mechanism", map[string]string{"FANOUT_KAFKA_SASL_PASSWORD": kafkaSecret}, []string{"FANOUT_KAFKA_SASL_PASSWORD", "FANOUT_KAFKA_SASL_MECHANISM"}},
		{"password file without mechanism", map[string]string{"FANOUT_KAFKA_SASL_PASSWORD_FILE": passFile}, []string{"FANOUT_KAFKA_SASL_PASSWORD_FILE"}},
		{"SCRAM password SASLprep refuses", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "FANOUT_KAFKA_SASL_USERNAME": "u", "FANOUT_KAFKA_SASL_PASSWORD": kafkaSecret + "\x07"}, []string{"FANOUT_KAFKA_SASL_PASSWORD:", "SCRAM password"}},
		{"SCRAM password file SASLprep refuses", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "FANOUT_KAFKA_SASL_USERNAME": "u", "FANOUT_KAFKA_SASL_PASSWORD_FILE": ctlPassFile}, []string{"FANOUT_KAFKA_SASL_PASSWORD_FILE:", "SCRAM password"}},
		{"SCRAM username SASLprep refuses", map[string]string{"FANOUT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "FANOUT_KAFKA_SASL_USERNAME": "u\x07", "FANOUT_KAFKA_SASL_PASSWORD": kafkaSecret}, []string{"FANOUT_KAFKA_SASL_USERNAME:"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, berr, werr := loadBoth(t, c.env)
			for who, err := range map[string]error{"bridge": berr, "worker": werr} {
				if err == nil {
					t.Errorf("%s: Load accepted %v", who, c.env)
					continue
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not say %q", who, err, w)
					}
				}
				if strings.Contains(err.Error(), kafkaSecret) {
					t.Errorf("%s: error shows the secret: %q", who, err)
				}
			}
		})
	}
}

// TestKafkaSecurityGoodValues: the variables become the Conn every Kafka
// client of fanout uses, the same for the bridge and the worker; the CA
// file is the only CA trusted, the client certificate is presented, the
// password file's trailing newline is not part of the password, and
// printing the Conn shows no password.
func TestKafkaSecurityGoodValues(t *testing.T) {
	pki := kafkatest.NewPKI(t, "127.0.0.1", "kafka.internal")
	passFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(passFile, []byte(kafkaSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("plain by default", func(t *testing.T) {
		b, w, berr, werr := loadBoth(t, nil)
		if berr != nil || werr != nil {
			t.Fatal(berr, werr)
		}
		for _, kc := range []kafkatopic.Conn{mustConn(t, b.KafkaConn), mustConn(t, w.KafkaConn)} {
			if kc.TLS != nil || kc.SASL != nil || kc.Security() != "PLAINTEXT" {
				t.Errorf("default connection is %s (TLS %v, SASL %v), want PLAINTEXT", kc.Security(), kc.TLS, kc.SASL)
			}
		}
	})

	t.Run("TLS with a private CA, a client certificate and SCRAM-SHA-512", func(t *testing.T) {
		b, w, berr, werr := loadBoth(t, map[string]string{
			"FANOUT_KAFKA_BROKERS":            "k1:9096,k2:9096",
			"FANOUT_KAFKA_TLS":                "true",
			"FANOUT_KAFKA_TLS_CA_FILE":        pki.CAFile,
			"FANOUT_KAFKA_TLS_CERT_FILE":      pki.ClientCertFile,
			"FANOUT_KAFKA_TLS_KEY_FILE":       pki.ClientKeyFile,
			"FANOUT_KAFKA_TLS_SERVER_NAME":    "kafka.internal",
			"FANOUT_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-512",
			"FANOUT_KAFKA_SASL_USERNAME":      "fanout",
			"FANOUT_KAFKA_SASL_PASSWORD_FILE": passFile,
		})
		if berr != nil || werr != nil {
			t.Fatal(berr, werr)
		}
		for who, kc := range map[string]kafkatopic.Conn{"bridge": mustConn(t, b.KafkaConn), "worker": mustConn(t, w.KafkaConn)} {
			if got := strings.Join(kc.Brokers, ","); got != "k1:9096,k2:9096" {
				t.Errorf("%s: brokers %s", who, got)
			}
			if kc.Security() != "SASL_SSL SCRAM-SHA-512" {
				t.Errorf("%s: security %q, want SASL_SSL SCRAM-SHA-512", who, kc.Security())
			}
			if kc.TLS == nil {
				t.Fatalf("%s: no TLS", who)
			}
			if kc.TLS.ServerName != "kafka.internal" || kc.TLS.InsecureSkipVerify || len(kc.TLS.Certificates) != 1 {
				t.Errorf("%s: TLS server name %q, skip-verify %v, %d client certificates", who, kc.TLS.ServerName, kc.TLS.InsecureSkipVerify, len(kc.TLS.Certificates))
			}
			srv, _ := x509.ParseCertificate(pki.Server.Certificate[0])
			if _, err := srv.Verify(x509.VerifyOptions{Roots: kc.TLS.RootCAs, DNSName: "kafka.internal"}); err != nil {
				t.Errorf("%s: the CA file's CA is not trusted: %v", who, err)
			}
			if _, err := srv.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), DNSName: "kafka.internal"}); err == nil {
				t.Errorf("%s: verification passes without the CA: the test proves nothing", who)
			}
			for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
				if s := fmt.Sprintf(f, kc); strings.Contains(s, kafkaSecret) {
					t.Errorf("%s: %s of the Conn shows the password: %s", who, f, s)
				}
			}
		}
	})

	t.Run("PLAIN from a password file, mechanism in any case", func(t *testing.T) {
		b, _, berr, werr := loadBoth(t, map[string]string{
			"FANOUT_KAFKA_SASL_MECHANISM":     "plain",
			"FANOUT_KAFKA_SASL_USERNAME":      "api-key",
			"FANOUT_KAFKA_SASL_PASSWORD_FILE": passFile,
		})
		if berr != nil || werr != nil {
			t.Fatal(berr, werr)
		}
		kc := mustConn(t, b.KafkaConn)
		if kc.Security() != "SASL_PLAINTEXT PLAIN" || kc.TLS != nil {
			t.Errorf("security %q, want SASL_PLAINTEXT PLAIN", kc.Security())
		}
		for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
			if s := fmt.Sprintf(f, kc); strings.Contains(s, kafkaSecret) {
				t.Errorf("%s of the Conn shows the password: %s", f, s)
			}
		}
		h, ok := kc.SASL.(hidden)
		if !ok {
			t.Fatalf("SASL mechanism %T is not wrapped to hide its credentials", kc.SASL)
		}
		if m, ok := h.Mechanism.(plain.Mechanism); !ok || m.Username != "api-key" || m.Password != kafkaSecret {
			t.Errorf("PLAIN mechanism %T user %q; password from the file without its newline: %v", h.Mechanism, m.Username, m.Password == kafkaSecret)
		}
	})

	t.Run("TLS with the system CAs and skip-verify only when asked", func(t *testing.T) {
		b, _, berr, werr := loadBoth(t, map[string]string{"FANOUT_KAFKA_TLS": "true"})
		if berr != nil || werr != nil {
			t.Fatal(berr, werr)
		}
		kc := mustConn(t, b.KafkaConn)
		if kc.Security() != "SSL" || kc.TLS.RootCAs != nil || kc.TLS.InsecureSkipVerify {
			t.Errorf("security %q, root CAs %v, skip-verify %v: want SSL with the system's CAs, verified", kc.Security(), kc.TLS.RootCAs, kc.TLS.InsecureSkipVerify)
		}
		b, _, berr, werr = loadBoth(t, map[string]string{"FANOUT_KAFKA_TLS": "true", "FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY": "true"})
		if berr != nil || werr != nil {
			t.Fatal(berr, werr)
		}
		if kc := mustConn(t, b.KafkaConn); !kc.TLS.InsecureSkipVerify {
			t.Error("FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY=true did not skip verification")
		}
	})
}

func mustConn(t *testing.T, f func() (kafkatopic.Conn, error)) kafkatopic.Conn {
	t.Helper()
	kc, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return kc
}
