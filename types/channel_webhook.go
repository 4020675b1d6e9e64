package types

import (
	"cmp"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/internal/config"
	"github.com/fanout/fanout/workers/webhook"
)

// The webhook channel: today's stock client (workers/webhook), an HTTP POST
// of the message to each recipient's address under the outbound guard,
// its redirects, bounds and per-host destinations (limits, breakers),
// signed the Standard Webhooks way with the type's own secret, so
// receivers of one type cannot forge another's deliveries.
//
//	channel:
//	  webhook:
//	    signing_secret_file: secrets/news-signing   # whsec_..., one per line during a rotation
func init() { RegisterChannel("webhook", loadWebhookChannel) }

type webhookChannel struct {
	signer *webhook.Signer
}

func loadWebhookChannel(n Node) ChannelConfig {
	f, ok := n.Fields("signing_secret_file")
	if !ok {
		return nil
	}
	sn, ok := f.Need("signing_secret_file")
	if !ok {
		return nil
	}
	s, ok := sn.SecretFile()
	if !ok {
		return nil
	}
	signer, err := webhook.NewSigner(config.SecretList(s)...)
	if err != nil {
		sn.Errorf("%v", err)
		return nil
	}
	if other, dup := n.l.secrets[s]; dup {
		sn.Errorf("the same signing secret as type %q: each type signs with its own, so receivers of one cannot forge the other's", other)
		return nil
	}
	n.l.secrets[s] = n.typ
	return &webhookChannel{signer: signer}
}

// Open makes the channel: a webhook.Handler used for its Deliver and
// DestinationKey, its client's timeout the type's CallTimeout.
func (c *webhookChannel) Open(t *Type, deps Deps) (Channel, error) {
	timeout := cmp.Or(t.Options.CallTimeout, fanout.DefaultCallTimeout)
	return &webhook.Handler{Client: webhook.NewClient(timeout, deps.inFlight(), deps.OutboundAllow...), Signer: c.signer}, nil
}
