package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/internal/kafkatopic"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

// runSetup checks that Redis will not evict fanout's keys (its
// maxmemory-policy, config.CheckEviction), creates the Kafka topics with
// -topics, registers fanout's search attributes on the namespace
// (TEMPORAL_NAMESPACE, or -namespace) through the operator service, and
// checks the server's version and capabilities (starter.Checks). It is
// idempotent: attributes already registered with the right type and topics
// that exist are kept; an attribute registered with another type is an
// error, and so is a server that lacks what fanout requires.
func runSetup(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	ns := fs.String("namespace", "", "namespace to set up (default: TEMPORAL_NAMESPACE, or \"default\")")
	topics := fs.Bool("topics", false, "also create the Kafka topics (FANOUT_EVENTS_TOPIC, FANOUT_EVENTS_DLQ_TOPIC, FANOUT_DELIVERIES_DLQ_TOPIC) that do not exist")
	var sz starter.TopicSizes
	fs.IntVar(&sz.Partitions, "partitions", starter.DefaultEventsPartitions, "with -topics: partitions of the events topic (at most this many bridges share it)")
	fs.DurationVar(&sz.Retention, "retention", starter.DefaultEventsRetention, "with -topics: retention of the events topic (shorter than FANOUT_EVENT_TTL)")
	fs.IntVar(&sz.DLQPartitions, "dlq-partitions", starter.DefaultDLQPartitions, "with -topics: partitions of each DLQ topic")
	fs.DurationVar(&sz.DLQRetention, "dlq-retention", starter.DefaultDLQRetention, "with -topics: retention of each DLQ topic (the time to fix a cause and redrive)")
	fs.IntVar(&sz.ReplicationFactor, "replication", starter.DefaultReplicationFactor, "with -topics: replication factor of the topics (-1: the brokers' default.replication.factor)")
	h := cli.Help{Name: "starter setup", Args: "[-namespace NS] [-topics [-partitions N] [-retention D] ...]", Summary: `starter setup prepares what fanout needs before any worker or bridge starts. It is idempotent.

First it reads Redis's maxmemory-policy (FANOUT_REDIS_*) and refuses one that can evict fanout's
keys (volatile-*, allkeys-*) unless FANOUT_REDIS_ACCEPT_EVICTION=true: the dedup gate, the
at-most-once marks and the event record live there. With -topics it creates the Kafka topics
that do not exist (the events topic and both DLQs, with the partitions and retentions of the
flags); topics that exist are left as they are and reported. It registers fanout's search
attributes (FanoutEventType, FanoutPriority, FanoutStatus, FanoutFound, FanoutDelivered,
FanoutFailed, FanoutScheduledFor, FanoutExpired) on the namespace through the operator service: attributes
already registered with the right type are kept; one registered with another type is an error.
Last it checks the server: its version (` + starter.MinTemporalServer + ` or later), Workflow Update and eager
workflow start (the namespace's capabilities), user metadata and task-queue backlog stats (a
probe workflow), and task-queue fairness (a probe: four workflows on a queue of its own), printing
ok or MISSING with the setting that turns each on, with Redis's version (` + starter.MinRedis + ` or later);
it fails when a required one is missing.`,
		Env: []cli.EnvGroup{cli.TemporalGroup(), {Vars: config.EnvVars(config.RedisConn{})},
			{Title: "with -topics", Vars: config.EnvVars(starter.Topics{})}}}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return err
	}
	var tcfg starter.Topics
	var specs []kafkatopic.TopicSpec
	if *topics {
		if err := config.Load(&tcfg); err != nil {
			return err
		}
		var err error
		if specs, err = tcfg.Specs(sz); err != nil {
			return cli.Usagef("%v", err)
		}
	}
	if *ns == "" {
		var err error
		if *ns, err = starter.TemporalNamespace(); err != nil {
			return err
		}
	}
	redisCheck, err := checkRedis(ctx)
	if err != nil {
		return err
	}
	if *topics {
		if err := createTopics(ctx, tcfg, specs); err != nil {
			return err
		}
	}
	tc, err := config.DialTemporal(ctx, config.Logger("warn"))
	if err != nil {
		return err
	}
	defer tc.Close()
	outcomes, err := vocab.Ensure(ctx, tc.OperatorService(), *ns, vocab.SearchAttributes())
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	added := 0
	for _, o := range outcomes {
		what := "kept "
		if o.Added {
			what = "added"
			added++
		}
		fmt.Printf("%s  %-16s %s\n", what, o.Name, vocab.TypeName(o.Type))
	}
	fmt.Printf("setup: namespace %q has fanout's %d search attributes (%d added, %d already there)\n", *ns, len(outcomes), added, len(outcomes)-added)
	checks := append([]starter.Check{redisCheck}, starter.Checks(starter.ReadServer(ctx, tc, *ns))...)
	fmt.Printf("setup: Redis, the Temporal server and namespace %q:\n", *ns)
	for _, c := range checks {
		fmt.Println("  " + c.String())
	}
	if m := starter.Missing(checks); len(m) > 0 {
		what := make([]string, len(m))
		for i, c := range m {
			what[i] = c.What
		}
		return fmt.Errorf("the server lacks what fanout requires: %s (see the lines above)", strings.Join(what, "; "))
	}
	return nil
}

// createTopics creates the topics of specs that do not exist and prints
// each with its partitions, replication factor and retention as the brokers
// report them.
func createTopics(ctx context.Context, t starter.Topics, specs []kafkatopic.TopicSpec) error {
	kc, err := t.KafkaConn()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	got, err := kafkatopic.CreateTopics(ctx, kc, specs)
	if err != nil {
		return fmt.Errorf("setup: topics: %w", err)
	}
	var differ []string
	for i, tp := range got {
		what := "exists "
		if tp.Created {
			what = "created"
		}
		retention := "retention not reported"
		switch {
		case tp.RetentionKnown && tp.Retention < 0:
			retention = "retention forever"
		case tp.RetentionKnown:
			retention = "retention " + tp.Retention.String()
		}
		fmt.Printf("%s  %-28s %d partitions, replication %d, %s\n", what, tp.Name, tp.Partitions, tp.ReplicationFactor, retention)
		if !tp.Created && tp.Partitions < specs[i].Partitions {
			differ = append(differ, fmt.Sprintf("%s has %d partitions, fewer than the %d asked (left as it is; add them with kafka-topics.sh --alter)", tp.Name, tp.Partitions, specs[i].Partitions))
		}
	}
	for _, d := range differ {
		fmt.Println("setup: note: " + d)
	}
	fmt.Printf("setup: Kafka has fanout's %d topics\n", len(got))
	return nil
}

// checkRedis reads the Redis configuration and refuses a Redis that can
// evict fanout's keys (config.CheckEviction); one it cannot reach or read
// is only warned about. It returns the check of Redis's version.
func checkRedis(ctx context.Context) (starter.Check, error) {
	var rc config.RedisConn
	if err := config.Load(&rc); err != nil {
		return starter.Check{}, err
	}
	rdb, err := config.RedisClient(rc)
	if err != nil {
		return starter.Check{}, fmt.Errorf("config: %w", err)
	}
	defer func() { _ = rdb.Close() }()
	if err := config.CheckEviction(ctx, rdb, rc, config.Logger("warn")); err != nil {
		return starter.Check{}, fmt.Errorf("config: %w", err)
	}
	info, err := rdb.Info(ctx, "server").Result()
	version := ""
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version = v
		}
	}
	if err == nil && version == "" {
		err = errors.New("INFO server has no redis_version")
	}
	return starter.RedisCheck(version, err), nil
}
