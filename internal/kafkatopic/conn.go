package kafkatopic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// Conn is how fanout connects to Kafka: the bootstrap brokers and, when
// the cluster asks for them, TLS and a SASL mechanism. Every writer, reader
// and dial of fanout's takes one (NewWriter, NewSingleWriter, NewReader,
// NewConsumerGroup, ReadAll, Dialer, Transport), so no Kafka connection can leave out the
// security the configuration asked for. A Conn with neither TLS nor SASL
// is plain TCP (local development).
type Conn struct {
	Brokers []string
	// TLS, when set, wraps every connection in TLS with this configuration
	// (the CA to trust, a client certificate, the server name).
	TLS *tls.Config
	// SASL, when set, authenticates every connection with this mechanism
	// (kafka-go's sasl/plain or sasl/scram), after TLS when both are set.
	SASL sasl.Mechanism
}

// errNoBrokers is returned by dials of a Conn without brokers.
var errNoBrokers = errors.New("kafka: no brokers")

// Dialer is a kafka.Dialer connecting as c says, for kafka.Reader and the
// direct dials (partitions, leaders, offsets).
func (c Conn) Dialer() *kafka.Dialer {
	return &kafka.Dialer{
		Timeout:       10 * time.Second,
		DualStack:     true,
		TLS:           c.TLS,
		SASLMechanism: c.SASL,
	}
}

// Transport is a kafka.Transport connecting as c says, for kafka.Writer and
// kafka.Client. Each call returns a new one (with its own connection pool),
// closed with the writer that uses it.
func (c Conn) Transport() *kafka.Transport {
	return &kafka.Transport{
		DialTimeout: 10 * time.Second,
		TLS:         c.TLS,
		SASL:        c.SASL,
	}
}

// Check connects to the first broker as c says (TCP, TLS handshake,
// SASL authentication) and hangs up: a process that writes to Kafka only
// now and then (the worker, for dead letters) calls it at start-up, so a
// wrong CA or password shows at once, with kafka-go's clear error (e.g.
// "SASL Authentication Failed"), rather than at the first write.
func (c Conn) Check(ctx context.Context) error {
	if len(c.Brokers) == 0 {
		return errNoBrokers
	}
	conn, err := c.Dialer().DialContext(ctx, "tcp", c.Brokers[0])
	if err != nil {
		return fmt.Errorf("kafka %s (%s): %w", c.Brokers[0], c.Security(), err)
	}
	return conn.Close()
}

// NewReader is kafka.NewReader for rc with c's brokers and dialer (any
// Brokers or Dialer of rc are replaced).
func NewReader(c Conn, rc kafka.ReaderConfig) *kafka.Reader {
	rc.Brokers = c.Brokers
	rc.Dialer = c.Dialer()
	return kafka.NewReader(rc)
}

// NewConsumerGroup is kafka.NewConsumerGroup for gc with c's brokers and
// dialer (any Brokers or Dialer of gc are replaced).
func NewConsumerGroup(c Conn, gc kafka.ConsumerGroupConfig) (*kafka.ConsumerGroup, error) {
	gc.Brokers = c.Brokers
	gc.Dialer = c.Dialer()
	return kafka.NewConsumerGroup(gc)
}

// Security names how c connects, in Kafka's security.protocol words and
// the SASL mechanism (e.g. "SASL_SSL SCRAM-SHA-512"), for logs. It never
// includes a credential.
func (c Conn) Security() string {
	switch {
	case c.TLS != nil && c.SASL != nil:
		return "SASL_SSL " + c.SASL.Name()
	case c.SASL != nil:
		return "SASL_PLAINTEXT " + c.SASL.Name()
	case c.TLS != nil:
		return "SSL"
	}
	return "PLAINTEXT"
}
