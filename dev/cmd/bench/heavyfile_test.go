package main

import (
	"cmp"
	"reflect"
	"testing"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/types"
	"github.com/fanout/fanout/workers/webhook"
)

// heavy-file's type is the environment's webhook type as a file writes it:
// it loads, pages from the http source, delivers by the webhook channel,
// and has the webhook type's options as the bench's environment leaves
// them (page, batch, window, concurrency, attempts, timeouts...).
func TestBenchTypesFileIsTheWebhookType(t *testing.T) {
	path, err := writeBenchTypes(t.TempDir(), "http://127.0.0.1:8090/recipients")
	if err != nil {
		t.Fatal(err)
	}
	f, err := types.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Types) != 1 || f.Types[0].Name != fileType || f.Types[0].SourceKind != "http" || f.Types[0].ChannelKind != "webhook" {
		t.Fatalf("types %+v, want %s from http by webhook", f.Types, fileType)
	}
	var env webhook.Config
	env.SetDefaults()
	got, want := effective(f.Types[0].Options), effective(env.TypeOptions())
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the file's type options\n%+v\ndiffer from the webhook type's\n%+v", got, want)
	}
}

// effective are the options a type runs with: WithDefaults, and the
// defaults its 0s mean where they are resolved later (fanout.TypeOptions).
func effective(o fanout.TypeOptions) fanout.TypeOptions {
	o = o.WithDefaults()
	o.LocalDeliveryMax = cmp.Or(o.LocalDeliveryMax, fanout.DefaultLocalDeliveryMax)
	o.BreakerFailures = cmp.Or(o.BreakerFailures, fanout.DefaultBreakerFailures)
	o.BreakerCooldown = cmp.Or(o.BreakerCooldown, fanout.DefaultBreakerCooldown)
	o.Semantics = cmp.Or(o.Semantics, fanout.AtLeastOnce)
	return o
}
