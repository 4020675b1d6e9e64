package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/limits"
	"github.com/fanout/fanout/internal/cli"
	"github.com/fanout/fanout/internal/config"
)

// limitsHelp is `starter limits -h`.
func limitsHelp() cli.Help {
	return cli.Help{Name: "starter limits", Args: "set|unset|show -type TYPE [-dest HOST] [-rate RATE]",
		Summary: `starter limits changes the per-destination rate limits of an event type at run time,
without a restart: the delivery workers read them from Redis within a few seconds. A limit
is shared by every delivery worker. "set -type T -rate R" sets the type's default per
destination (replacing its DestinationRate, FANOUT_DESTINATION_RATE for webhook); with
"-dest KEY" it sets one destination's: its key as the workers compute it (the webhook
type's is the address's host[:port], lower-case, without a trailing dot or the scheme's
default port: hooks.example.com for https://Hooks.Example.com:443/x). RATE is 200, 200/s, 600/m, 3600/h, or off (no limit). "unset" removes an
override (the type's own default applies again); "show" lists them.`,
		Env: []cli.EnvGroup{{Vars: config.EnvVars(config.RedisConn{})}}}
}

// limitsArgs are the parsed arguments of `starter limits`.
type limitsArgs struct {
	verb, eventType, dest string
	rate                  float64
}

// parseLimitsArgs reads `starter limits`'s verb and flags.
func parseLimitsArgs(args []string) (limitsArgs, error) {
	var a limitsArgs
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	fs.StringVar(&a.eventType, "type", "", "the event type (required)")
	fs.StringVar(&a.dest, "dest", "", "a destination key (the webhook type: host or host:port, no default port); empty: the type's default")
	rate := fs.String("rate", "", "calls per second shared by every worker: 200, 200/s, 600/m, 3600/h or off (set only)")
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		a.verb, args = args[0], args[1:]
	}
	if err := cli.Parse(fs, args, limitsHelp(), false); err != nil {
		return a, err
	}
	if !slices.Contains([]string{"set", "unset", "show"}, a.verb) {
		return a, cli.Usagef("want set, unset or show, got %q", a.verb)
	}
	if err := fanout.ValidateType(a.eventType); err != nil {
		return a, cli.Usagef("-type: %v", err)
	}
	if a.dest != "" {
		k, err := limits.ParseKey(a.dest)
		if err != nil {
			return a, cli.Usagef("-dest: %v", err)
		}
		a.dest = k
	}
	switch {
	case a.verb == "set" && *rate == "":
		return a, cli.Usagef("set needs -rate")
	case a.verb != "set" && *rate != "":
		return a, cli.Usagef("-rate is for set only")
	case a.verb == "show" && a.dest != "":
		return a, cli.Usagef("show lists every destination of the type; no -dest")
	}
	if a.verb == "set" {
		r, err := limits.ParseRate(*rate)
		if err != nil {
			return a, cli.Usagef("-rate: %v", err)
		}
		a.rate = r
	}
	return a, nil
}

func runLimits(ctx context.Context, args []string) error {
	a, err := parseLimitsArgs(args)
	if err != nil {
		return err
	}
	var cfg config.RedisConn
	if err := config.Load(&cfg); err != nil {
		return err
	}
	rdb, err := config.RedisClient(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	st := limits.Store{RDB: rdb}
	switch a.verb {
	case "set":
		if err := st.Set(ctx, a.eventType, a.dest, a.rate); err != nil {
			return err
		}
	case "unset":
		if err := st.Unset(ctx, a.eventType, a.dest); err != nil {
			return err
		}
	}
	o, err := st.Load(ctx, a.eventType)
	if err != nil {
		return err
	}
	printLimits(os.Stdout, a.eventType, o)
	return nil
}

// printLimits lists a type's overrides, sorted.
func printLimits(w io.Writer, eventType string, o limits.Overrides) {
	def := "the type's DestinationRate (FANOUT_DESTINATION_RATE for webhook)"
	if o.HasDefault {
		def = limits.FormatRate(o.Default)
	}
	fmt.Fprintf(w, "limits of %s (in force on the workers within %v):\n  default per destination: %s\n", eventType, limits.RefreshEvery, def)
	keys := make([]string, 0, len(o.Dest))
	for k := range o.Dest {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %s\n", k, limits.FormatRate(o.Dest[k]))
	}
	for _, f := range o.Bad {
		fmt.Fprintf(w, "  (ignored, not a rate: field %.64q)\n", f)
	}
}
