package config

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The Redis deployments fanout connects to (FANOUT_REDIS_MODE).
const (
	// RedisAuto picks the mode from the other variables: sentinel when
	// FANOUT_REDIS_MASTER_NAME is set, cluster when FANOUT_REDIS_URL names
	// several hosts, single otherwise. A cluster reached through one
	// configuration endpoint (ElastiCache, Memorystore) needs
	// FANOUT_REDIS_MODE=cluster: one address looks like a single node.
	RedisAuto = "auto"
	// RedisSingle is one Redis server (or a proxy in front of several).
	RedisSingle = "single"
	// RedisCluster is a Redis Cluster: the URL's hosts are seed nodes (or
	// one configuration endpoint); the client follows the cluster's slots.
	RedisCluster = "cluster"
	// RedisSentinel is a primary and its replicas watched by Sentinel: the
	// URL's hosts are the sentinels, FANOUT_REDIS_MASTER_NAME the primary's
	// name; the client follows failovers.
	RedisSentinel = "sentinel"
)

// maxCAFileBytes bounds FANOUT_REDIS_TLS_CA_FILE (a system bundle is about
// 200 KB).
const maxCAFileBytes = 4 << 20

// redisSetup is a validated Redis configuration: the mode and the go-redis
// options of that mode (exactly one is set).
type redisSetup struct {
	mode     string
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// RedisClient returns a client of the Redis that c describes: a
// *redis.Client for one server or Sentinel, a *redis.ClusterClient for a
// cluster. Its errors name the variable and never show a password.
func RedisClient(c RedisConn) (redis.UniversalClient, error) {
	s, err := c.setup()
	if err != nil {
		return nil, err
	}
	switch s.mode {
	case RedisCluster:
		return redis.NewClusterClient(s.cluster), nil
	case RedisSentinel:
		return redis.NewFailoverClient(s.failover), nil
	default:
		return redis.NewClient(s.single), nil
	}
}

// setup parses and checks c, reading the password and CA files.
//
// FANOUT_REDIS_URL is redis[s]://[user[:password]@]host[:port][,host[:port]...][/db][?option=value...]:
// rediss is TLS; the user and password authenticate to the Redis servers
// (an ACL user, or only a password for requirepass); several hosts are the
// seed nodes of a cluster or the sentinels; the options are go-redis's URL
// options of the mode (dial_timeout, pool_size, ...).
func (c RedisConn) setup() (redisSetup, error) {
	u, hosts, query, err := parseRedisURL(c.URL)
	if err != nil {
		return redisSetup{}, err
	}
	mode, err := c.mode(hosts)
	if err != nil {
		return redisSetup{}, err
	}
	cred, err := c.credentials(u)
	if err != nil {
		return redisSetup{}, err
	}
	return redisOptions(c.URL, mode, u, hosts, query, cred, c.MasterName)
}

// redisBad is the error of a FANOUT_REDIS_URL the setup refuses, which
// shows the URL without its password.
func redisBad(raw, format string, args ...any) error {
	return fmt.Errorf("FANOUT_REDIS_URL: %s: %s", shownURL(raw), fmt.Sprintf(format, args...))
}

// parseRedisURL checks FANOUT_REDIS_URL's scheme, hosts and options and
// returns it parsed, with its hosts and query.
func parseRedisURL(raw string) (*url.URL, []string, url.Values, error) {
	if raw == "" {
		return nil, nil, nil, errors.New("FANOUT_REDIS_URL: empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the URL, and its reason may quote a
		// piece of the password ("invalid port"): show neither.
		return nil, nil, nil, fmt.Errorf("FANOUT_REDIS_URL: %s is not a URL (with several hosts, give each its port; percent-encode reserved characters of the user and password, or give the password in FANOUT_REDIS_PASSWORD_FILE)", shownURL(raw))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, nil, nil, redisBad(raw, "scheme %q: want redis:// or rediss:// (TLS)", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, nil, nil, redisBad(raw, "no host: want redis[s]://[user[:password]@]host[:port][,host[:port]...][/db]")
	}
	hosts, err := splitHosts(u.Host)
	if err != nil {
		return nil, nil, nil, redisBad(raw, "%v", err)
	}
	query := u.Query()
	for _, k := range []string{"password", "username", "sentinel_password", "sentinel_username", "addr", "master_name"} {
		if query.Has(k) {
			switch k {
			case "addr":
				return nil, nil, nil, redisBad(raw, "option addr: list the hosts comma-separated in the URL's host")
			case "master_name":
				return nil, nil, nil, redisBad(raw, "option master_name: set FANOUT_REDIS_MASTER_NAME")
			default:
				return nil, nil, nil, redisBad(raw, "option %s: give the user and password in the URL's user info or FANOUT_REDIS_PASSWORD_FILE (FANOUT_REDIS_SENTINEL_PASSWORD_FILE for the sentinels)", k)
			}
		}
	}
	return u, hosts, query, nil
}

// mode is FANOUT_REDIS_MODE, or the mode the URL's hosts and
// FANOUT_REDIS_MASTER_NAME imply (auto), checked against them.
func (c RedisConn) mode(hosts []string) (string, error) {
	mode := strings.ToLower(strings.TrimSpace(c.Mode))
	switch mode {
	case "", RedisAuto:
		switch {
		case c.MasterName != "":
			mode = RedisSentinel
		case len(hosts) > 1:
			mode = RedisCluster
		default:
			mode = RedisSingle
		}
	case RedisSingle, RedisCluster, RedisSentinel:
	default:
		return "", fmt.Errorf("FANOUT_REDIS_MODE: %q: want auto, single, cluster or sentinel", c.Mode)
	}
	switch {
	case mode == RedisSingle && len(hosts) > 1:
		return "", redisBad(c.URL, "%d hosts, but FANOUT_REDIS_MODE is single (several hosts are a cluster's seed nodes or the sentinels)", len(hosts))
	case mode == RedisSentinel && c.MasterName == "":
		return "", errors.New("FANOUT_REDIS_MASTER_NAME: empty; Sentinel mode needs the name of the primary the sentinels watch")
	case mode != RedisSentinel && c.MasterName != "":
		return "", fmt.Errorf("FANOUT_REDIS_MASTER_NAME: set, but FANOUT_REDIS_MODE is %s (it names a Sentinel primary)", mode)
	case mode != RedisSentinel && c.SentinelPasswordFile != "":
		return "", fmt.Errorf("FANOUT_REDIS_SENTINEL_PASSWORD_FILE: set, but FANOUT_REDIS_MODE is %s", mode)
	}
	return mode, nil
}

// redisCredentials are the user, passwords and TLS roots of the
// connections.
type redisCredentials struct {
	user, password, sentinelPassword string
	roots                            *x509.CertPool
}

// credentials reads the user and password from the URL or the password
// file, the sentinels' password file, and the TLS CA file.
func (c RedisConn) credentials(u *url.URL) (redisCredentials, error) {
	var cr redisCredentials
	var err error
	cr.user = u.User.Username()
	cr.password, _ = u.User.Password()
	if c.PasswordFile != "" {
		if cr.password, err = ReadSecretFile("FANOUT_REDIS_PASSWORD_FILE", c.PasswordFile); err != nil {
			return cr, err
		}
	}
	if c.SentinelPasswordFile != "" {
		if cr.sentinelPassword, err = ReadSecretFile("FANOUT_REDIS_SENTINEL_PASSWORD_FILE", c.SentinelPasswordFile); err != nil {
			return cr, err
		}
	}
	if c.TLSCAFile != "" {
		if u.Scheme != "rediss" {
			return cr, fmt.Errorf("FANOUT_REDIS_TLS_CA_FILE: set, but FANOUT_REDIS_URL is not rediss:// (TLS)")
		}
		if cr.roots, err = readCAFile(c.TLSCAFile); err != nil {
			return cr, err
		}
	}
	return cr, nil
}

// redisOptions builds go-redis's options of the mode. go-redis parses the
// rest (database, options) from a URL without the user info, so no error
// of its can quote a password.
func redisOptions(raw, mode string, u *url.URL, hosts []string, query url.Values, cr redisCredentials, masterName string) (redisSetup, error) {
	plain := url.URL{Scheme: u.Scheme, Host: hosts[0], Path: u.Path}
	goRedisErr := func(err error) (redisSetup, error) {
		return redisSetup{}, redisBad(raw, "%s", strings.TrimPrefix(err.Error(), "redis: "))
	}
	s := redisSetup{mode: mode}
	switch mode {
	case RedisSingle:
		plain.RawQuery = query.Encode()
		o, err := redis.ParseURL(plain.String())
		if err != nil {
			return goRedisErr(err)
		}
		o.Username, o.Password = cr.user, cr.password
		o.TLSConfig = tlsConfig(o.TLSConfig, cr.roots)
		s.single = o
	case RedisCluster:
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return redisSetup{}, redisBad(raw, "database %q: a Redis Cluster has only database 0", p)
		}
		plain.Path = ""
		for _, h := range hosts[1:] {
			query.Add("addr", h)
		}
		plain.RawQuery = query.Encode()
		o, err := redis.ParseClusterURL(plain.String())
		if err != nil {
			return goRedisErr(err)
		}
		o.Username, o.Password = cr.user, cr.password
		o.TLSConfig = tlsConfig(o.TLSConfig, cr.roots)
		s.cluster = o
	case RedisSentinel:
		query.Set("master_name", masterName)
		for _, h := range hosts[1:] {
			query.Add("addr", h)
		}
		plain.RawQuery = query.Encode()
		o, err := redis.ParseFailoverURL(plain.String())
		if err != nil {
			return goRedisErr(err)
		}
		o.Username, o.Password = cr.user, cr.password
		o.SentinelPassword = cr.sentinelPassword
		o.TLSConfig = tlsConfig(o.TLSConfig, cr.roots)
		s.failover = o
	}
	return s, nil
}

// tlsConfig is the TLS configuration of every connection (nil: no TLS):
// go-redis's from the URL (skip_verify where it offers it) without its
// server name, so each node of a cluster, and the primary a sentinel names,
// is verified against the address it is dialed at, not the URL's first
// host; roots, when set, are the only trusted CAs.
func tlsConfig(parsed *tls.Config, roots *x509.CertPool) *tls.Config {
	if parsed == nil {
		return nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, InsecureSkipVerify: parsed.InsecureSkipVerify}
}

// splitHosts splits the URL's host on commas, each host:port (port 6379
// when left out).
func splitHosts(h string) ([]string, error) {
	parts := strings.Split(h, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		host, port, err := net.SplitHostPort(p)
		if err != nil && !strings.Contains(p, ":") {
			host, port, err = p, "6379", nil
		}
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("host %d (%q) is not host[:port]", i+1, p)
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}

// readCAFile reads the PEM certificates of FANOUT_REDIS_TLS_CA_FILE.
func readCAFile(path string) (*x509.CertPool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("FANOUT_REDIS_TLS_CA_FILE: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxCAFileBytes {
		return nil, fmt.Errorf("FANOUT_REDIS_TLS_CA_FILE: %s is not a regular file of at most %d bytes", path, maxCAFileBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("FANOUT_REDIS_TLS_CA_FILE: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("FANOUT_REDIS_TLS_CA_FILE: %s holds no PEM certificate", path)
	}
	return pool, nil
}

// redactURL is raw with the password of its user info replaced: everything
// between the first ':' after "://" and the last '@', so a password with
// unescaped reserved characters ('/', '?', '#', '@') is hidden whole too.
func redactURL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	colon := strings.IndexByte(rest[:at], ':')
	if colon < 0 {
		return raw
	}
	return raw[:i+3] + rest[:colon+1] + "xxxxx" + rest[at:]
}

// shownURL is raw as errors show it: its password replaced and its options
// left out (a password given as an option is refused, not shown).
func shownURL(raw string) string {
	s, _, _ := strings.Cut(redactURL(raw), "?")
	return s
}

// evicts reports whether a maxmemory-policy may evict keys: every policy
// but noeviction (volatile-* evicts the keys that have a TTL, which are all
// of fanout's; allkeys-* any key).
func evicts(policy string) bool {
	return strings.HasPrefix(policy, "volatile-") || strings.HasPrefix(policy, "allkeys-")
}

// CheckEviction reads the maxmemory-policy of the Redis rdb reaches (each
// master of a cluster) and refuses, naming FANOUT_REDIS_ACCEPT_EVICTION, a
// policy that can evict fanout's keys: the attempt-id gate and delivered
// marks (duplicates), the at-most-once sending marks (a second call) and
// the event record (a replayed event fanned out again) live there, and
// Redis under memory pressure would drop them silently. With
// c.AcceptEviction such a policy is only logged. A policy that cannot be
// read (CONFIG and INFO both refused, or Redis not reachable yet) is
// logged and start-up goes on.
func CheckEviction(ctx context.Context, rdb redis.UniversalClient, c RedisConn, log *slog.Logger) error {
	policies := map[string]string{}
	var mu sync.Mutex
	read := func(ctx context.Context, n *redis.Client) error {
		p, err := maxmemoryPolicy(ctx, n)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Options().Addr, err)
		}
		mu.Lock()
		policies[n.Options().Addr] = p
		mu.Unlock()
		return nil
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, read)
	} else if n, ok := rdb.(*redis.Client); ok {
		err = read(ctx, n)
	} else {
		err = fmt.Errorf("client %T", rdb)
	}
	if err != nil {
		log.Warn("cannot read Redis's maxmemory-policy; make sure it is noeviction, or fanout's dedup gate, at-most-once marks and event record may be evicted", "err", err)
		return nil
	}
	for addr, p := range policies {
		if !evicts(p) {
			continue
		}
		if c.AcceptEviction {
			log.Warn("Redis may evict fanout's keys (accepted by FANOUT_REDIS_ACCEPT_EVICTION): an evicted key can mean a duplicate delivery, a second at-most-once call or a replayed event fanned out again", "redis", addr, "maxmemory_policy", p)
			continue
		}
		return fmt.Errorf("FANOUT_REDIS_ACCEPT_EVICTION: Redis %s has maxmemory-policy %s, which can evict fanout's dedup gate, at-most-once marks and event record (duplicate deliveries, second at-most-once calls, replayed events fanned out again); set maxmemory-policy noeviction, or set FANOUT_REDIS_ACCEPT_EVICTION=true to accept that", addr, p)
	}
	return nil
}

// maxmemoryPolicy is the server's maxmemory-policy: from CONFIG GET, or,
// where CONFIG is disabled or renamed (managed Redis), from INFO memory.
func maxmemoryPolicy(ctx context.Context, n *redis.Client) (string, error) {
	m, cerr := n.ConfigGet(ctx, "maxmemory-policy").Result()
	if p := m["maxmemory-policy"]; cerr == nil && p != "" {
		return p, nil
	}
	info, err := n.Info(ctx, "memory").Result()
	if err != nil {
		return "", fmt.Errorf("CONFIG GET: %v; INFO memory: %w", cerr, err)
	}
	for line := range strings.Lines(info) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("CONFIG GET: %v; INFO memory has no maxmemory_policy", cerr)
}
