package main

import (
	"context"
	"flag"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/starter"
	"github.com/fanout/fanout/workflows/vocab"
)

// runSetup checks that Redis will not evict fanout's keys (its
// maxmemory-policy, config.CheckEviction) and registers fanout's search
// attributes on the namespace (TEMPORAL_NAMESPACE, or -namespace) through
// the operator service. It is idempotent: attributes already registered
// with the right type are kept; one registered with another type is an
// error.
func runSetup(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	ns := fs.String("namespace", "", "namespace to set up (default: TEMPORAL_NAMESPACE, or \"default\")")
	h := cli.Help{Name: "starter setup", Args: "[-namespace NS]", Summary: `starter setup registers fanout's search attributes (FanoutEventType, FanoutPriority,
FanoutStatus, FanoutFound, FanoutDelivered, FanoutFailed, FanoutScheduledFor) on the namespace
through the operator service. It is idempotent: attributes already registered with the right type are
kept; one registered with another type is an error. First it reads Redis's maxmemory-policy (FANOUT_REDIS_*)
and refuses one that can evict fanout's keys (volatile-*, allkeys-*) unless FANOUT_REDIS_ACCEPT_EVICTION=true:
the dedup gate, the at-most-once marks and the event record live there. Last it reports whether
the server dispatches task queues by fairness key (a probe: four workflows on a queue of its own,
terminated at once), which keeps a small event from waiting behind big events of its priority.`,
		Env: []cli.EnvGroup{cli.TemporalGroup(), {Vars: config.EnvVars(config.RedisConn{})}}}
	if err := cli.Parse(fs, args, h, false); err != nil {
		return err
	}
	if *ns == "" {
		opts, err := envconfig.LoadDefaultClientOptions()
		if err != nil {
			return fmt.Errorf("temporal config (TEMPORAL_*): %w", err)
		}
		*ns = opts.Namespace
	}
	if *ns == "" {
		*ns = client.DefaultNamespace
	}
	if err := checkRedis(ctx); err != nil {
		return err
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
	switch on, err := starter.ProbeFairness(ctx, tc, *ns); {
	case err != nil:
		fmt.Printf("setup: could not tell whether task-queue fairness is on: %v\n", err)
	case on:
		fmt.Println("setup: task-queue fairness is on: events of one priority take turns on its queues")
	default:
		fmt.Println("setup: task-queue fairness is OFF: a small event waits behind the batches big events of its priority queued first " +
			"(self-hosted: dynamic config matching.enableFairness=true; Temporal Cloud: the namespace's fairness setting; see docs/deploy.md, Fairness)")
	}
	return nil
}

// checkRedis reads the Redis configuration and refuses a Redis that can
// evict fanout's keys (config.CheckEviction); one it cannot reach or read
// is only warned about.
func checkRedis(ctx context.Context) error {
	var rc config.RedisConn
	if err := config.Load(&rc); err != nil {
		return err
	}
	rdb, err := config.RedisClient(rc)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer func() { _ = rdb.Close() }()
	if err := config.CheckEviction(ctx, rdb, rc, config.Logger("warn")); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}
