// Command worker is fanout's stock worker binary: it serves the task queues
// named in FANOUT_QUEUES with the built-in "webhook" event type (recipients
// from FANOUT_RECIPIENTS_URL, delivery by HTTP POST) and the types of
// FANOUT_TYPES_FILE. With FANOUT_BRIDGE=true it also runs the Kafka bridge,
// starting events eagerly on its own events worker. It is workers.Main with
// the webhook type: a main of one's own is the same call with its Go types.
package main

import (
	"github.com/fanout/fanout"
	"github.com/fanout/fanout/workers"
)

func main() {
	workers.Main(fanout.NewRegistry(), workers.WithWebhook())
}
