package kafkatopic

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// TopicSpec is a topic to create.
type TopicSpec struct {
	Name       string
	Partitions int
	// ReplicationFactor -1 takes the broker's default.replication.factor
	// (Kafka 2.4 and later).
	ReplicationFactor int
	// Retention is the topic's retention.ms; 0 takes the broker's
	// log.retention.*.
	Retention time.Duration
}

// Topic is a topic as the brokers describe it.
type Topic struct {
	Name string
	// Created: CreateTopics created it; else it existed and was left as it
	// was.
	Created           bool
	Partitions        int
	ReplicationFactor int // replicas of partition 0
	// Retention is its retention.ms (-1: forever); RetentionKnown is false
	// when the broker did not report it.
	Retention      time.Duration
	RetentionKnown bool
}

// CreateTopics creates the topics of specs that do not exist, through the
// controller (CreateTopics, connecting as c says); those that exist are
// left as they are. It returns every topic as the brokers then describe it
// (DescribeTopics), in the order of specs.
func CreateTopics(ctx context.Context, c Conn, specs []TopicSpec) ([]Topic, error) {
	if len(c.Brokers) == 0 {
		return nil, errNoBrokers
	}
	cl := client(c)
	req := &kafka.CreateTopicsRequest{}
	names := make([]string, len(specs))
	for i, s := range specs {
		tc := kafka.TopicConfig{Topic: s.Name, NumPartitions: s.Partitions, ReplicationFactor: s.ReplicationFactor}
		if s.Retention != 0 {
			tc.ConfigEntries = []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: strconv.FormatInt(s.Retention.Milliseconds(), 10)}}
		}
		req.Topics = append(req.Topics, tc)
		names[i] = s.Name
	}
	res, err := cl.CreateTopics(ctx, req)
	if err != nil {
		return nil, err
	}
	created := map[string]bool{}
	var errs []error
	for _, name := range names {
		switch err := res.Errors[name]; {
		case err == nil:
			created[name] = true
		case errors.Is(err, kafka.TopicAlreadyExists):
		default:
			errs = append(errs, fmt.Errorf("create topic %s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	topics, err := describe(ctx, cl, names)
	for i := range topics {
		topics[i].Created = created[topics[i].Name]
	}
	return topics, err
}

// DescribeTopics reads the partitions, replication factor and retention of
// the named topics (Metadata and DescribeConfigs, connecting as c says),
// in the order given. A topic that does not exist is an error.
func DescribeTopics(ctx context.Context, c Conn, names []string) ([]Topic, error) {
	if len(c.Brokers) == 0 {
		return nil, errNoBrokers
	}
	return describe(ctx, client(c), names)
}

func client(c Conn) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(c.Brokers...), Transport: c.Transport(), Timeout: 30 * time.Second}
}

func describe(ctx context.Context, cl *kafka.Client, names []string) ([]Topic, error) {
	// A topic just created may take a moment to show in every broker's
	// metadata.
	var md *kafka.MetadataResponse
	for attempt := 0; ; attempt++ {
		var err error
		if md, err = cl.Metadata(ctx, &kafka.MetadataRequest{Topics: names}); err != nil {
			return nil, fmt.Errorf("metadata of %v: %w", names, err)
		}
		if metadataComplete(md, names) || attempt == 20 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	byName := map[string]kafka.Topic{}
	for _, t := range md.Topics {
		byName[t.Name] = t
	}
	dreq := &kafka.DescribeConfigsRequest{}
	for _, n := range names {
		dreq.Resources = append(dreq.Resources, kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeTopic, ResourceName: n, ConfigNames: []string{"retention.ms"}})
	}
	dres, err := cl.DescribeConfigs(ctx, dreq)
	if err != nil {
		return nil, fmt.Errorf("configs of %v: %w", names, err)
	}
	retention := map[string]time.Duration{}
	for _, r := range dres.Resources {
		for _, e := range r.ConfigEntries {
			if ms, err := strconv.ParseInt(e.ConfigValue, 10, 64); r.Error == nil && e.ConfigName == "retention.ms" && err == nil {
				retention[r.ResourceName] = time.Duration(ms) * time.Millisecond
				if ms < 0 {
					retention[r.ResourceName] = -1
				}
			}
		}
	}
	out := make([]Topic, 0, len(names))
	for _, n := range names {
		t, ok := byName[n]
		switch {
		case !ok:
			return nil, fmt.Errorf("topic %s: not in the brokers' metadata", n)
		case t.Error != nil:
			return nil, fmt.Errorf("topic %s: %w", n, t.Error)
		}
		d := Topic{Name: n, Partitions: len(t.Partitions)}
		for _, p := range t.Partitions {
			if p.ID == 0 {
				d.ReplicationFactor = len(p.Replicas)
			}
		}
		d.Retention, d.RetentionKnown = retention[n]
		out = append(out, d)
	}
	return out, nil
}

// metadataComplete reports whether md has every named topic, without error
// and with partitions.
func metadataComplete(md *kafka.MetadataResponse, names []string) bool {
	seen := 0
	for _, t := range md.Topics {
		if t.Error == nil && len(t.Partitions) > 0 {
			for _, n := range names {
				if t.Name == n {
					seen++
				}
			}
		}
	}
	return seen == len(names)
}
