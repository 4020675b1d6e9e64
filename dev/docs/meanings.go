package docs

// Meanings say what each variable of docs/configuration.md does, one
// table cell each; the names, defaults and readers come from the code
// (Configuration fails on a variable without a meaning, or a meaning of a
// variable no process reads).
var Meanings = map[string]string{
	// Must set.
	"TEMPORAL_ADDRESS":      "the Temporal frontend, `host:port` (Temporal Cloud: the namespace's gRPC endpoint)",
	"TEMPORAL_NAMESPACE":    "the namespace (Temporal Cloud: `<namespace>.<account id>`)",
	"FANOUT_KAFKA_BROKERS":  "Kafka brokers, comma-separated `host:port`",
	"FANOUT_REDIS_URL":      "Redis of the dedup gate and the event records: `redis[s]://[user[:password]@]host:port[,host:port...][/db][?options]` (`rediss`: TLS; several hosts: a cluster's seed nodes or the sentinels)",
	"FANOUT_RECIPIENTS_URL": "recipients endpoint of the `webhook` type, `http[s]://host[:port]/path`; trusted for its own host and port only (or define types in `FANOUT_TYPES_FILE`)",

	// Temporal.
	"TEMPORAL_API_KEY":                 "API key (Temporal Cloud); turns TLS on",
	"FANOUT_TEMPORAL_API_KEY_FILE":     "the API key from a file (a mounted Secret), re-read when the file changes; not with `TEMPORAL_API_KEY`",
	"TEMPORAL_TLS":                     "TLS to the frontend",
	"TEMPORAL_TLS_CLIENT_CERT_PATH":    "client certificate (mTLS), PEM file",
	"TEMPORAL_TLS_CLIENT_KEY_PATH":     "its key, PEM file",
	"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "CA that signed the server's certificate, PEM file (default: the system's)",
	"TEMPORAL_TLS_SERVER_NAME":         "the name the server's certificate carries",
	"TEMPORAL_PROFILE":                 "profile of the `temporal.toml` file to read",
	"TEMPORAL_CONFIG_FILE":             "path of the `temporal.toml` file (default: the temporal CLI's)",

	// Encryption.
	"FANOUT_CODEC_KEYS":      "AES-256-GCM keys of payloads, staged batches and dead letters: `id:base64,...`, each 32 random bytes; unset: no encryption",
	"FANOUT_CODEC_KEYS_FILE": "the same from a file, one `id:base64` a line (`#` comments); after those of `FANOUT_CODEC_KEYS`",
	"FANOUT_CODEC_KEY_ID":    "the active key, which encrypts (default: the first); every key decrypts",

	// Kafka.
	"FANOUT_KAFKA_TLS":                      "TLS to Kafka (`SSL`, or `SASL_SSL` with a mechanism); the other `FANOUT_KAFKA_TLS_*` need it",
	"FANOUT_KAFKA_TLS_CA_FILE":              "PEM CAs to trust instead of the system's (not needed for public CAs)",
	"FANOUT_KAFKA_TLS_CERT_FILE":            "PEM client certificate for mTLS; with `FANOUT_KAFKA_TLS_KEY_FILE`",
	"FANOUT_KAFKA_TLS_KEY_FILE":             "its PEM key",
	"FANOUT_KAFKA_TLS_SERVER_NAME":          "the name the brokers' certificates carry (default: each broker's host)",
	"FANOUT_KAFKA_TLS_INSECURE_SKIP_VERIFY": "accept any certificate: test clusters only",
	"FANOUT_KAFKA_SASL_MECHANISM":           "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`; unset: no SASL",
	"FANOUT_KAFKA_SASL_USERNAME":            "the SASL user (Confluent Cloud: the API key)",
	"FANOUT_KAFKA_SASL_PASSWORD":            "its password (Confluent Cloud: the API secret)",
	"FANOUT_KAFKA_SASL_PASSWORD_FILE":       "the password from a file; not with `FANOUT_KAFKA_SASL_PASSWORD`",

	// Redis.
	"FANOUT_REDIS_MODE":                   "`single`, `cluster`, `sentinel`, or `auto`: Sentinel with a master name, cluster with several hosts, else single (a cluster behind one configuration endpoint needs `cluster`)",
	"FANOUT_REDIS_MASTER_NAME":            "the primary the sentinels watch (Sentinel)",
	"FANOUT_REDIS_PASSWORD_FILE":          "the Redis password from a file; overrides the URL's",
	"FANOUT_REDIS_SENTINEL_PASSWORD_FILE": "the sentinels' own password, from a file",
	"FANOUT_REDIS_TLS_CA_FILE":            "a private CA for `rediss://` (default: the system's)",
	"FANOUT_REDIS_ACCEPT_EVICTION":        "start although Redis's `maxmemory-policy` can evict fanout's keys (refused otherwise)",

	// Codec server.
	"FANOUT_CODEC_TOKEN":        "bearer tokens it accepts, comma- or newline-separated, at least 16 characters each",
	"FANOUT_CODEC_TOKEN_FILE":   "the same from a file, one a line; not with `FANOUT_CODEC_TOKEN`",
	"FANOUT_CODEC_CORS_ORIGINS": "exact origins of your Temporal UI, comma-separated",
	"FANOUT_CODEC_HOSTS":        "with `-insecure-no-auth`: host names it answers for besides loopback ones (DNS rebinding)",

	// Logs, metrics, profiles.
	"FANOUT_LOG_LEVEL":    "`debug`, `info`, `warn`, `error`",
	"FANOUT_METRICS_ADDR": "serve Prometheus metrics at `http://<addr>/metrics` (production: `:9464`); unset: none",
	"FANOUT_PPROF_ADDR":   "serve `net/http/pprof` there, a loopback `host:port` only (`127.0.0.1:6060`)",

	// Worker.
	"FANOUT_QUEUES":               "task queues this process serves: `events`, `high`, `normal`, `low`",
	"FANOUT_BRIDGE":               "also run the bridge here (needs `events` in `FANOUT_QUEUES`): events start eagerly on this worker",
	"FANOUT_BATCH_SLOTS":          "a worker's budget: slots × `FANOUT_DELIVER_CONCURRENCY` calls in flight, shared by all its batches, high priority first",
	"FANOUT_BATCH_SLOTS_LOW":      "batch slots of the low-priority queue (unset: an eighth of `FANOUT_BATCH_SLOTS`, at least 1)",
	"FANOUT_GATE_TTL":             "life of a recipient's gate key (at least `1h`); must outlast every retry, reset and redrive of an event",
	"FANOUT_DEDUP":                "the Redis attempt-id gate that suppresses duplicates; `false` only to measure its cost",
	"FANOUT_DELIVERIES_DLQ_TOPIC": "where recipients given up go (`starter redrive` reads it)",
	"FANOUT_RETRY_INITIAL":        "first delivery retry delay (jittered)",
	"FANOUT_RETRY_MAX":            "largest delivery retry delay (a `Retry-After` is honoured up to 10 minutes)",
	"FANOUT_LOW_PRIORITY_BRAKE":   "while other priorities deliver, this worker delivers low-priority events at most this fast (`500/s`, `off`)",
	"FANOUT_UI_URL":               "the Temporal UI's base address (`http://localhost:8233`, `https://cloud.temporal.io`): `starter status` links each recipient's batch workflow there (`ui_url`); unset: no links",
	"USER":                        "who asked for a `starter resend` (`-by`'s default; else the OS's user), kept in the resend workflow's memo",
	"FANOUT_TYPES_FILE":           "a types file (YAML or JSON) whose event types are registered beside `webhook`; the bridge accepts them too",

	// The webhook type.
	"FANOUT_BATCH_SIZE":           "recipients per delivery batch",
	"FANOUT_PAGE_SIZE":            "recipients asked of the endpoint per page (unset: 10 batches, at most 20,000)",
	"FANOUT_WINDOW":               "delivery batches one event has open at once",
	"FANOUT_DELIVER_CONCURRENCY":  "concurrent deliveries per batch (more when the worker's budget has calls to spare)",
	"FANOUT_LOCAL_DELIVERY_MAX":   "audiences up to this size are delivered on the fast path, in the events worker; `-1` off",
	"FANOUT_LARGE_BATCH_SIZE":     "batch size once an event has filled its window (unset: the page size, at most 20,000; `-1`: `FANOUT_BATCH_SIZE`)",
	"FANOUT_SEMANTICS":            "`at-least-once` or `at-most-once` (needs `FANOUT_DEDUP=true`): [guarantees.md](guarantees.md)",
	"FANOUT_MAX_ATTEMPTS":         "delivery attempts per recipient before it is dead-lettered",
	"FANOUT_FAIRNESS_WEIGHT":      "the type's share of a task queue against other types' events (up to 1000; with task-queue fairness)",
	"FANOUT_DESTINATION_RATE":     "default limit per destination host, calls/s shared by every worker (unset: none); `starter limits` overrides it",
	"FANOUT_BREAKER_FAILURES":     "consecutive failed calls to one host that open its breaker; `-1`: no breaker",
	"FANOUT_BREAKER_COOLDOWN":     "how long an open breaker holds a host's calls before one probe call",
	"FANOUT_RECIPIENTS_URL_ALLOW": "where a payload's `recipients_url` may point: `scheme://host[:port][/path/]` entries; unset: nowhere",
	"FANOUT_WEBHOOK_SECRETS":      "Standard Webhooks secrets (`whsec_...`, comma-separated): every delivery is signed with each",
	"FANOUT_WEBHOOK_SECRETS_FILE": "the same from a file, one a line; not with `FANOUT_WEBHOOK_SECRETS`",
	"FANOUT_OUTBOUND_ALLOW":       "internal address ranges (CIDR) deliveries may reach; unset: public addresses only",
	"FANOUT_HTTP_TIMEOUT":         "per delivery request (the type's `CallTimeout`; at most `2m25s`)",

	// Bridge.
	"FANOUT_EVENTS_TOPIC":      "the events topic",
	"FANOUT_EVENTS_DLQ_TOPIC":  "where bad records go, with their reason",
	"FANOUT_EVENT_TTL":         "how long the event record keeps a started event's id (at least `1h`): longer than the events topic's retention",
	"FANOUT_CONSUMER_GROUP":    "the bridges' Kafka consumer group",
	"FANOUT_EVENT_TYPES":       "types a stand-alone bridge accepts (a bridge in a worker uses the worker's registry)",
	"FANOUT_MAX_PAYLOAD_BYTES": "larger payloads are dead-lettered (at most 1 MiB)",
	"FANOUT_COMMIT_INTERVAL":   "offsets are committed this often (`0`: each record, synchronously)",
	"FANOUT_SCHEDULE_HORIZON":  "how far ahead an event may be scheduled (1m..8784h): [scheduling.md](scheduling.md)",

	// OpenTelemetry.
	"OTEL_EXPORTER_OTLP_ENDPOINT":         "export spans with OTLP to this collector",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":  "the same, for spans only",
	"OTEL_EXPORTER_OTLP_PROTOCOL":         "`http/protobuf` (`:4318`) or `grpc` (`:4317`); another value stops the process",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":  "the same, for spans",
	"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "the same, for metrics",
	"OTEL_TRACES_EXPORTER":                "`otlp`, `console` or `none`",
	"OTEL_METRICS_EXPORTER":               "`otlp` also pushes the metrics; `prometheus` is refused (that is `FANOUT_METRICS_ADDR`)",
	"OTEL_SERVICE_NAME":                   "the resource's name (default `fanout-worker`, `fanout-bridge`, `fanout-publish`)",
	"OTEL_RESOURCE_ATTRIBUTES":            "more resource attributes, `k=v,...`",
	"OTEL_SDK_DISABLED":                   "`true`: export nothing",

	// Go runtime.
	"GOGC":       "the worker raises Go's collector target from 100 (allocation-heavy deliveries)",
	"GOMEMLIMIT": "set it near the container's memory limit",
}
