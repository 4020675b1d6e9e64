package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/fanout/fanout"
	"github.com/fanout/fanout/activities/limits"
	"github.com/fanout/fanout/internal/config"
)

// Config is the stock webhook type as the environment sets it (the worker
// binary registers it under EventType): its fanout.TypeOptions (TypeOptions)
// and its Handler's endpoint, signing and outbound policy (Handler).
// config.Load reads it.
type Config struct {
	// The type's options; their defaults are fanout's (SetDefaults), and
	// 0 is fanout's default too.
	BatchSize          int `env:"FANOUT_BATCH_SIZE"`
	PageSize           int `env:"FANOUT_PAGE_SIZE"`
	Window             int `env:"FANOUT_WINDOW"`
	DeliverConcurrency int `env:"FANOUT_DELIVER_CONCURRENCY"`
	// LocalDeliveryMax: events of at most this many recipients are
	// delivered by the events worker in their first workflow task (0:
	// fanout's default, 100; -1: off).
	LocalDeliveryMax int `env:"FANOUT_LOCAL_DELIVERY_MAX"`
	// LargeBatchSize: batch size once an event has started a window of
	// batches (0: the page size, one batch per page; -1: FANOUT_BATCH_SIZE;
	// at most 20,000).
	LargeBatchSize int `env:"FANOUT_LARGE_BATCH_SIZE"`
	// Semantics is the type's delivery guarantee: at-least-once (the
	// default) or at-most-once (needs the worker's FANOUT_DEDUP=true).
	Semantics fanout.Semantics `env:"FANOUT_SEMANTICS"`
	// MaxAttempts: delivery attempts per recipient.
	MaxAttempts int `env:"FANOUT_MAX_ATTEMPTS"`
	// FairnessWeight: the type's events' share of a task queue against
	// other events' (with task-queue fairness on the server).
	FairnessWeight float64 `env:"FANOUT_FAIRNESS_WEIGHT"`
	// The type's flow control per destination: rate and breaker.
	limits.DestinationSettings

	// RecipientsURL: the type's recipients endpoint, an http(s) URL. The
	// operator sets it, so it is trusted for its own host and port: reached
	// wherever that host resolves (an in-cluster Service, a private or
	// loopback address) without an OutboundAllow entry (NewTrustedClient).
	RecipientsURL string `env:"FANOUT_RECIPIENTS_URL"`
	// RecipientsURLAllow: where an event's payload may point its
	// recipients_url: entries scheme://host[:port][/path/], matched on the
	// parsed URL (URLPrefix); empty: payloads cannot choose the endpoint.
	RecipientsURLAllow []string `env:"FANOUT_RECIPIENTS_URL_ALLOW" envSeparator:","`
	// WebhookSecrets: Standard Webhooks secrets ("whsec_..."); when set,
	// the type signs every delivery with each of them.
	WebhookSecrets []string `env:"FANOUT_WEBHOOK_SECRETS" envSeparator:","`
	// WebhookSecretsFile: the same secrets from a file (a mounted Secret),
	// one per line or comma-separated; not with FANOUT_WEBHOOK_SECRETS.
	WebhookSecretsFile string `env:"FANOUT_WEBHOOK_SECRETS_FILE"`
	// The process's outbound policy (FANOUT_OUTBOUND_ALLOW).
	Outbound
	// HTTPTimeout bounds a delivery request: the type's CallTimeout.
	HTTPTimeout time.Duration `env:"FANOUT_HTTP_TIMEOUT"`
}

// Outbound is where a process's deliveries may go beyond public addresses,
// as the environment sets it: the stock type's, and that of every type
// built from a types file (types.Deps.OutboundAllow). A main without the
// stock type loads it on its own.
type Outbound struct {
	// OutboundAllow: address ranges (CIDR or single addresses) deliveries
	// and payload recipients_urls may reach although they are loopback,
	// private, link-local or otherwise internal; empty: public addresses
	// only. RecipientsURL's host needs no entry.
	OutboundAllow string `env:"FANOUT_OUTBOUND_ALLOW"`
}

// Validate checks the ranges, naming the variable (config.Load calls it).
func (o *Outbound) Validate() error {
	if _, err := ParseAllow(o.OutboundAllow); err != nil {
		return fmt.Errorf("FANOUT_OUTBOUND_ALLOW: %w", err)
	}
	return nil
}

// Allow is the ranges parsed (Validate checked them).
func (o Outbound) Allow() []netip.Prefix {
	allow, _ := ParseAllow(o.OutboundAllow)
	return allow
}

// SetDefaults sets the type options' defaults, fanout's, so -h and the
// README show the values the type gets (config.Load calls it).
func (c *Config) SetDefaults() {
	c.BatchSize, c.Window = fanout.DefaultBatchSize, fanout.DefaultWindow
	c.DeliverConcurrency, c.LocalDeliveryMax = fanout.DefaultDeliverConcurrency, fanout.DefaultLocalDeliveryMax
	c.Semantics, c.MaxAttempts, c.HTTPTimeout = fanout.AtLeastOnce, fanout.DefaultMaxAttempts, fanout.DefaultCallTimeout
	c.FairnessWeight = fanout.DefaultFairnessWeight
	c.DestinationSettings.SetDefaults()
}

// Validate checks the settings, naming the variable (config.Load calls it).
func (c *Config) Validate() error {
	if err := c.Check(); err != nil {
		return err
	}
	if err := c.TypeOptions().Validate(); err != nil {
		// TypeOptions name the field; say which variable set it.
		return errors.New(typeOptionVars.Replace(err.Error()))
	}
	if c.MaxAttempts < 1 {
		return fmt.Errorf("FANOUT_MAX_ATTEMPTS: %d is under 1", c.MaxAttempts)
	}
	if err := c.Outbound.Validate(); err != nil {
		return err
	}
	if c.RecipientsURL != "" {
		if _, err := endpointAddr(c.RecipientsURL); err != nil {
			return fmt.Errorf("FANOUT_RECIPIENTS_URL: %w (want http[s]://host[:port]/path)", err)
		}
	}
	if _, err := ParseURLPrefixes(c.RecipientsURLAllow); err != nil {
		return fmt.Errorf("FANOUT_RECIPIENTS_URL_ALLOW: %w (want scheme://host[:port][/path/])", err)
	}
	if _, err := c.signer(); err != nil {
		return err
	}
	if c.HTTPTimeout <= 0 {
		return fmt.Errorf("FANOUT_HTTP_TIMEOUT: must be positive")
	}
	return nil
}

// typeOptionVars maps TypeOptions' field names in its errors to the
// variables that set them.
var typeOptionVars = strings.NewReplacer(
	"BatchSize:", "FANOUT_BATCH_SIZE:", "PageSize:", "FANOUT_PAGE_SIZE:", "Window:", "FANOUT_WINDOW:",
	"DeliverConcurrency:", "FANOUT_DELIVER_CONCURRENCY:", "MaxAttempts:", "FANOUT_MAX_ATTEMPTS:",
	"LocalDeliveryMax:", "FANOUT_LOCAL_DELIVERY_MAX:", "LargeBatchSize:", "FANOUT_LARGE_BATCH_SIZE:",
	"Semantics:", "FANOUT_SEMANTICS:", "CallTimeout:", "FANOUT_HTTP_TIMEOUT:",
	"DestinationRate:", "FANOUT_DESTINATION_RATE:", "BreakerCooldown:", "FANOUT_BREAKER_COOLDOWN:",
	"FairnessWeight:", "FANOUT_FAIRNESS_WEIGHT:")

// TypeOptions are the type's options.
func (c *Config) TypeOptions() fanout.TypeOptions {
	return fanout.TypeOptions{
		BatchSize: c.BatchSize, PageSize: c.PageSize, Window: c.Window,
		DeliverConcurrency: c.DeliverConcurrency, MaxAttempts: c.MaxAttempts,
		LocalDeliveryMax: c.LocalDeliveryMax, LargeBatchSize: c.LargeBatchSize,
		CallTimeout:     c.HTTPTimeout,
		Semantics:       c.Semantics,
		FairnessWeight:  c.FairnessWeight,
		DestinationRate: c.DestinationRate, BreakerFailures: c.BreakerFailures, BreakerCooldown: c.BreakerCooldown,
	}
}

// Handler is the type's handler as configured (Validate checked it), its
// clients' idle pools sized for inFlight deliveries at once (the worker's
// workers.Config.DeliveriesInFlight): the guarded client of deliveries and
// payload recipients_urls, and the trusted one of RecipientsURL.
func (c *Config) Handler(inFlight int) *Handler {
	allow := c.Allow() // checked by Validate
	h := &Handler{
		RecipientsURL:      c.RecipientsURL,
		RecipientsURLAllow: c.RecipientsURLAllow,
		Client:             NewClient(c.HTTPTimeout, inFlight, allow...),
	}
	if c.RecipientsURL != "" {
		h.TrustedClient, _ = NewTrustedClient(c.HTTPTimeout, inFlight, []string{c.RecipientsURL}, allow...) // checked by Validate
	}
	h.Signer, _ = c.signer() // checked by Validate
	return h
}

// signer is the signer of FANOUT_WEBHOOK_SECRETS or
// FANOUT_WEBHOOK_SECRETS_FILE; nil when neither is set.
func (c *Config) signer() (*Signer, error) {
	secrets, name := c.WebhookSecrets, "FANOUT_WEBHOOK_SECRETS"
	if c.WebhookSecretsFile != "" {
		if len(secrets) > 0 {
			return nil, fmt.Errorf("FANOUT_WEBHOOK_SECRETS_FILE: set together with FANOUT_WEBHOOK_SECRETS; use one")
		}
		name = "FANOUT_WEBHOOK_SECRETS_FILE"
		s, err := config.ReadSecretFile(name, c.WebhookSecretsFile)
		if err != nil {
			return nil, err
		}
		secrets = config.SecretList(s)
	}
	if len(secrets) == 0 {
		return nil, nil
	}
	s, err := NewSigner(secrets...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}
