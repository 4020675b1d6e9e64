package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/fanout/fanout/internal/kafkatopic"
)

// KafkaSecurity is how fanout authenticates to Kafka and encrypts the
// connections: TLS and SASL. The bridge's and the worker's configurations
// both embed it, so every command that touches Kafka reads the same
// variables; KafkaConn turns it into the kafkatopic.Conn every Kafka
// writer, reader and dial of fanout takes.
//
// No error of it ever shows a password or a file's contents: errors name
// the variable, and a file by its path.
type KafkaSecurity struct {
	// KafkaTLS connects with TLS (Kafka's security.protocol SSL, or
	// SASL_SSL with a SASL mechanism). The other FANOUT_KAFKA_TLS_*
	// variables need it.
	KafkaTLS bool `env:"FANOUT_KAFKA_TLS"`
	// KafkaTLSCAFile: PEM certificates of the CAs to trust instead of the
	// system's (empty: the system's, right for a public CA such as
	// Confluent Cloud's or MSK's).
	KafkaTLSCAFile string `env:"FANOUT_KAFKA_TLS_CA_FILE"`
	// KafkaTLSCertFile and KafkaTLSKeyFile: a PEM client certificate and
	// its key, for brokers that authenticate clients by certificate (mTLS);
	// both or neither.
	KafkaTLSCertFile string `env:"FANOUT_KAFKA_TLS_CERT_FILE"`
	KafkaTLSKeyFile  string `env:"FANOUT_KAFKA_TLS_KEY_FILE"`
	// KafkaTLSServerName: the name the brokers' certificates must carry
	// (empty: the host of each broker address).
	KafkaTLSServerName string `env:"FANOUT_KAFKA_TLS_SERVER_NAME"`
	// KafkaTLSInsecureSkipVerify accepts any broker certificate: for a test
	// cluster only, never in production.
	KafkaTLSInsecureSkipVerify bool `env:"FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY"`
	// KafkaSASLMechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no
	// SASL).
	KafkaSASLMechanism string `env:"FANOUT_KAFKA_SASL_MECHANISM"`
	KafkaSASLUsername  string `env:"FANOUT_KAFKA_SASL_USERNAME"`
	// KafkaSASLPassword, or KafkaSASLPasswordFile: a file holding it (a
	// mounted Secret; surrounding white space is ignored). One of the two.
	KafkaSASLPassword     string `env:"FANOUT_KAFKA_SASL_PASSWORD"`
	KafkaSASLPasswordFile string `env:"FANOUT_KAFKA_SASL_PASSWORD_FILE"`
}

// SASL mechanism names, as Kafka and kcat spell them.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// KafkaConn is the connection to the brokers of FANOUT_KAFKA_BROKERS with
// the configured TLS and SASL (validated: Load fails on the same error).
func (k Kafka) KafkaConn() (kafkatopic.Conn, error) { return k.Conn(k.Brokers) }

// Conn builds the connection to brokers, reading the files it names.
func (s KafkaSecurity) Conn(brokers []string) (kafkatopic.Conn, error) {
	c := kafkatopic.Conn{Brokers: brokers}
	var err error
	if c.TLS, err = s.tlsConfig(); err != nil {
		return kafkatopic.Conn{}, err
	}
	if c.SASL, err = s.saslMechanism(); err != nil {
		return kafkatopic.Conn{}, err
	}
	return c, nil
}

func (s KafkaSecurity) tlsConfig() (*tls.Config, error) {
	if !s.KafkaTLS {
		for _, v := range []struct{ name, val string }{
			{"FANOUT_KAFKA_TLS_CA_FILE", s.KafkaTLSCAFile},
			{"FANOUT_KAFKA_TLS_CERT_FILE", s.KafkaTLSCertFile},
			{"FANOUT_KAFKA_TLS_KEY_FILE", s.KafkaTLSKeyFile},
			{"FANOUT_KAFKA_TLS_SERVER_NAME", s.KafkaTLSServerName},
		} {
			if v.val != "" {
				return nil, fmt.Errorf("%s: set, but FANOUT_KAFKA_TLS is not true (set FANOUT_KAFKA_TLS=true to connect with TLS)", v.name)
			}
		}
		if s.KafkaTLSInsecureSkipVerify {
			return nil, errors.New("FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY: set, but FANOUT_KAFKA_TLS is not true")
		}
		return nil, nil
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         s.KafkaTLSServerName,
		InsecureSkipVerify: s.KafkaTLSInsecureSkipVerify,
	}
	if s.KafkaTLSCAFile != "" {
		pem, err := os.ReadFile(s.KafkaTLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("FANOUT_KAFKA_TLS_CA_FILE: cannot read %s: %w", s.KafkaTLSCAFile, pathless(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("FANOUT_KAFKA_TLS_CA_FILE: %s holds no PEM certificate", s.KafkaTLSCAFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case s.KafkaTLSCertFile != "" && s.KafkaTLSKeyFile == "":
		return nil, errors.New("FANOUT_KAFKA_TLS_KEY_FILE: empty, but FANOUT_KAFKA_TLS_CERT_FILE is set: a client certificate needs its key")
	case s.KafkaTLSCertFile == "" && s.KafkaTLSKeyFile != "":
		return nil, errors.New("FANOUT_KAFKA_TLS_CERT_FILE: empty, but FANOUT_KAFKA_TLS_KEY_FILE is set: a key needs its client certificate")
	case s.KafkaTLSCertFile != "":
		certPEM, err := os.ReadFile(s.KafkaTLSCertFile)
		if err != nil {
			return nil, fmt.Errorf("FANOUT_KAFKA_TLS_CERT_FILE: cannot read %s: %w", s.KafkaTLSCertFile, pathless(err))
		}
		keyPEM, err := os.ReadFile(s.KafkaTLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("FANOUT_KAFKA_TLS_KEY_FILE: cannot read %s: %w", s.KafkaTLSKeyFile, pathless(err))
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// crypto/tls's messages name PEM block types, never the
			// bytes; say which of the two files is at fault when we can.
			if !strings.Contains(string(certPEM), "CERTIFICATE") {
				return nil, fmt.Errorf("FANOUT_KAFKA_TLS_CERT_FILE: %s holds no PEM certificate", s.KafkaTLSCertFile)
			}
			if !strings.Contains(string(keyPEM), "PRIVATE KEY") {
				return nil, fmt.Errorf("FANOUT_KAFKA_TLS_KEY_FILE: %s holds no PEM private key", s.KafkaTLSKeyFile)
			}
			return nil, fmt.Errorf("FANOUT_KAFKA_TLS_CERT_FILE / FANOUT_KAFKA_TLS_KEY_FILE: %s and %s are not a certificate and its key: %w", s.KafkaTLSCertFile, s.KafkaTLSKeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (s KafkaSecurity) saslMechanism() (sasl.Mechanism, error) {
	if s.KafkaSASLMechanism == "" {
		for _, v := range []struct{ name, val string }{
			{"FANOUT_KAFKA_SASL_USERNAME", s.KafkaSASLUsername},
			{"FANOUT_KAFKA_SASL_PASSWORD", s.KafkaSASLPassword},
			{"FANOUT_KAFKA_SASL_PASSWORD_FILE", s.KafkaSASLPasswordFile},
		} {
			if v.val != "" {
				return nil, fmt.Errorf("%s: set, but FANOUT_KAFKA_SASL_MECHANISM is empty (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", v.name)
			}
		}
		return nil, nil
	}
	mech := strings.ToUpper(s.KafkaSASLMechanism)
	var algo scram.Algorithm
	switch mech {
	case SASLPlain:
	case SASLScramSHA256:
		algo = scram.SHA256
	case SASLScramSHA512:
		algo = scram.SHA512
	default:
		return nil, fmt.Errorf("FANOUT_KAFKA_SASL_MECHANISM: %.40q is not one of %s, %s, %s", s.KafkaSASLMechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
	if s.KafkaSASLUsername == "" {
		return nil, fmt.Errorf("FANOUT_KAFKA_SASL_USERNAME: empty, but FANOUT_KAFKA_SASL_MECHANISM is %s", mech)
	}
	password, passwordVar, err := s.password()
	if err != nil {
		return nil, err
	}
	if algo == nil {
		return hidden{plain.Mechanism{Username: s.KafkaSASLUsername, Password: password}}, nil
	}
	m, err := scram.Mechanism(algo, s.KafkaSASLUsername, password)
	if err != nil {
		// scram's error quotes the password: never pass it on. Find out
		// which of the two SASLprep refused.
		if _, uerr := scram.Mechanism(algo, s.KafkaSASLUsername, "x"); uerr != nil {
			return nil, errors.New("FANOUT_KAFKA_SASL_USERNAME: not a valid SCRAM user name (SASLprep refuses it: control or prohibited characters)")
		}
		return nil, fmt.Errorf("%s: not a valid SCRAM password (SASLprep refuses it: control or prohibited characters)", passwordVar)
	}
	return hidden{m}, nil
}

// password is the SASL password and the variable it came from.
func (s KafkaSecurity) password() (string, string, error) {
	switch {
	case s.KafkaSASLPassword != "" && s.KafkaSASLPasswordFile != "":
		return "", "", errors.New("FANOUT_KAFKA_SASL_PASSWORD and FANOUT_KAFKA_SASL_PASSWORD_FILE: both set; set one")
	case s.KafkaSASLPassword != "":
		return s.KafkaSASLPassword, "FANOUT_KAFKA_SASL_PASSWORD", nil
	case s.KafkaSASLPasswordFile != "":
		p, err := ReadSecretFile("FANOUT_KAFKA_SASL_PASSWORD_FILE", s.KafkaSASLPasswordFile)
		if err != nil {
			return "", "", err
		}
		return p, "FANOUT_KAFKA_SASL_PASSWORD_FILE", nil
	}
	return "", "", errors.New("FANOUT_KAFKA_SASL_PASSWORD / FANOUT_KAFKA_SASL_PASSWORD_FILE: neither set, but FANOUT_KAFKA_SASL_MECHANISM needs a password")
}

// pathless is the reason of a file error without the path (the message
// names the file once).
func pathless(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// hidden is a SASL mechanism that prints as its name only, so a Conn
// logged or printed with %v or %+v never shows the credentials inside.
type hidden struct{ sasl.Mechanism }

func (h hidden) String() string   { return h.Name() }
func (h hidden) GoString() string { return h.Name() }
