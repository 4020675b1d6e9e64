//go:build integration

package kafkatopic_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fanout/fanout/internal/kafkatopic"
)

// CreateTopics against a three-broker kfake over TCP: the topics come out
// with the partitions, replication factors and retentions asked, read back
// with Metadata and DescribeConfigs; a second call with other sizes leaves
// them as they are and says they existed. (kfake replicates nothing: the
// replication factor read back is the replica list kfake assigns, not
// copies kept in sync, and retention is only the configured value here.)
func TestCreateTopics(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kc := kafkatopic.Conn{Brokers: c.ListenAddrs()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	specs := []kafkatopic.TopicSpec{
		{Name: "events", Partitions: 6, ReplicationFactor: 3, Retention: 48 * time.Hour},
		{Name: "events-dlq", Partitions: 2, ReplicationFactor: 1, Retention: 30 * 24 * time.Hour},
		{Name: "deliveries-dlq", Partitions: 3, ReplicationFactor: -1, Retention: 90 * time.Minute},
	}
	got, err := kafkatopic.CreateTopics(ctx, kc, specs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(specs) {
		t.Fatalf("got %d topics, want %d: %+v", len(got), len(specs), got)
	}
	for i, s := range specs {
		g := got[i]
		if g.Name != s.Name || !g.Created || g.Partitions != s.Partitions || !g.RetentionKnown || g.Retention != s.Retention {
			t.Errorf("topic %d: %+v, want created %+v", i, g, s)
		}
		if s.ReplicationFactor > 0 && g.ReplicationFactor != s.ReplicationFactor {
			t.Errorf("topic %s: replication %d, want %d", s.Name, g.ReplicationFactor, s.ReplicationFactor)
		}
		if s.ReplicationFactor == -1 && g.ReplicationFactor < 1 {
			t.Errorf("topic %s: replication %d with the brokers' default", s.Name, g.ReplicationFactor)
		}
	}
	t.Logf("the brokers' default replication factor came out as %d", got[2].ReplicationFactor)

	// Again, asking for more partitions and another retention: left alone.
	again := []kafkatopic.TopicSpec{{Name: "events", Partitions: 12, ReplicationFactor: 1, Retention: time.Hour}, {Name: "new", Partitions: 1, ReplicationFactor: 1}}
	got, err = kafkatopic.CreateTopics(ctx, kc, again)
	if err != nil {
		t.Fatal(err)
	}
	if g := got[0]; g.Created || g.Partitions != 6 || g.Retention != 48*time.Hour {
		t.Errorf("existing topic: %+v, want it as created before (6 partitions, 48h) and not created", g)
	}
	if g := got[1]; !g.Created || g.Partitions != 1 {
		t.Errorf("new topic: %+v", g)
	}
	// A retention left to the broker is its log.retention (kfake: 7 days).
	if g := got[1]; !g.RetentionKnown || g.Retention != 7*24*time.Hour {
		t.Errorf("new topic without a retention: %+v, want the broker's 168h", g)
	}

	// Described on their own, and a topic that does not exist is an error.
	d, err := kafkatopic.DescribeTopics(ctx, kc, []string{"events-dlq"})
	if err != nil || len(d) != 1 || d[0].Partitions != 2 || d[0].Created {
		t.Errorf("DescribeTopics(events-dlq) = %+v, %v", d, err)
	}
	if d, err := kafkatopic.DescribeTopics(ctx, kc, []string{"nope"}); err == nil {
		t.Errorf("DescribeTopics(nope) = %+v, want an error", d)
	}
}
