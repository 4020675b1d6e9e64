package starter

import (
	"fmt"
	"time"

	"github.com/fanout/fanout/activities"
	"github.com/fanout/fanout/internal/kafkatopic"
)

// Defaults of `starter setup -topics` (its flags -partitions, -retention,
// -dlq-partitions, -dlq-retention, -replication).
const (
	// DefaultEventsPartitions bounds how many bridges (one lane per
	// partition) share the events topic; 12 splits evenly among 1, 2, 3, 4,
	// 6 or 12 of them, and a topic's partitions can be added, never taken
	// away.
	DefaultEventsPartitions = 12
	// DefaultEventsRetention is well under DefaultEventTTL: the Redis
	// event record must outlast the topic, or a replay of it would start
	// events again.
	DefaultEventsRetention = 7 * 24 * time.Hour
	// DefaultDLQPartitions: dead letters are few and read whole by the
	// redrives; three spread them over a three-broker cluster.
	DefaultDLQPartitions = 3
	// DefaultDLQRetention gives a month to fix the cause and redrive.
	DefaultDLQRetention = 30 * 24 * time.Hour
	// DefaultReplicationFactor -1 takes the brokers' own
	// default.replication.factor.
	DefaultReplicationFactor = -1
)

// DefaultEventTTL is FANOUT_EVENT_TTL's default: a month, beyond
// DefaultEventsRetention.
const DefaultEventTTL = 30 * 24 * time.Hour

// Topics are fanout's three topics as the environment names them, with the
// brokers (`starter setup -topics` creates them): the events topic and its
// DLQ (Kafka), and the deliveries DLQ the workers write.
type Topics struct {
	Kafka
	DeliveriesDLQ string `env:"FANOUT_DELIVERIES_DLQ_TOPIC"`
	// EventTTL is the bridge's FANOUT_EVENT_TTL: the events topic's
	// retention must be shorter.
	EventTTL time.Duration `env:"FANOUT_EVENT_TTL"`
}

// SetDefaults sets the topics' defaults (config.Load calls it).
func (t *Topics) SetDefaults() {
	t.Kafka.SetDefaults()
	t.DeliveriesDLQ = activities.DefaultDeliveriesDLQTopic
	t.EventTTL = DefaultEventTTL
}

// Validate checks the names, naming the variable (config.Load calls it).
func (t *Topics) Validate() error {
	if err := t.Check(); err != nil {
		return err
	}
	switch t.DeliveriesDLQ {
	case "":
		return fmt.Errorf("FANOUT_DELIVERIES_DLQ_TOPIC: empty")
	case t.EventsTopic, t.EventsDLQ:
		return fmt.Errorf("FANOUT_DELIVERIES_DLQ_TOPIC: %q is also FANOUT_EVENTS_TOPIC or FANOUT_EVENTS_DLQ_TOPIC", t.DeliveriesDLQ)
	}
	return nil
}

// TopicSizes are the partitions and retentions of fanout's topics.
type TopicSizes struct {
	Partitions, DLQPartitions int
	Retention, DLQRetention   time.Duration
	ReplicationFactor         int
}

// Specs are the three topics to create with these sizes. It refuses a
// partition count under 1, a retention under an hour, a replication factor
// under 1 other than -1, and an events retention not shorter than
// FANOUT_EVENT_TTL, naming the flag.
func (t Topics) Specs(s TopicSizes) ([]kafkatopic.TopicSpec, error) {
	switch {
	case s.Partitions < 1:
		return nil, fmt.Errorf("-partitions %d: want 1 or more", s.Partitions)
	case s.DLQPartitions < 1:
		return nil, fmt.Errorf("-dlq-partitions %d: want 1 or more", s.DLQPartitions)
	case s.Retention < time.Hour:
		return nil, fmt.Errorf("-retention %v: want 1h or more", s.Retention)
	case s.DLQRetention < time.Hour:
		return nil, fmt.Errorf("-dlq-retention %v: want 1h or more", s.DLQRetention)
	case s.ReplicationFactor < 1 && s.ReplicationFactor != -1:
		return nil, fmt.Errorf("-replication %d: want 1 or more, or -1 for the brokers' default", s.ReplicationFactor)
	case s.Retention >= t.EventTTL:
		return nil, fmt.Errorf("-retention %v: the events topic must be kept for less than FANOUT_EVENT_TTL (%v), or a replay of it after the event records expired would start events again", s.Retention, t.EventTTL)
	}
	return []kafkatopic.TopicSpec{
		{Name: t.EventsTopic, Partitions: s.Partitions, ReplicationFactor: s.ReplicationFactor, Retention: s.Retention},
		{Name: t.EventsDLQ, Partitions: s.DLQPartitions, ReplicationFactor: s.ReplicationFactor, Retention: s.DLQRetention},
		{Name: t.DeliveriesDLQ, Partitions: s.DLQPartitions, ReplicationFactor: s.ReplicationFactor, Retention: s.DLQRetention},
	}, nil
}
