// Package limits holds the per-destination rate limits and circuit breakers
// of the delivery workers (issue 14): the destination keys (cleaned, they
// come from hostile addresses), the rate grammar, the run-time overrides in
// Redis that `starter limits` writes and the workers read through a short
// cache, the shared limiter (GCRA in Redis, github.com/go-redis/redis_rate)
// and the in-process breakers (github.com/sony/gobreaker).
//
// Redis keys (every one carries the event type):
//
//	fanout:limits:<type>            hash of the type's overrides: "default" and "dest:<key>" → rate
//	rate:fanout:rate:<type>:<key>   the limiter's GCRA state of one destination (redis_rate adds "rate:")
package limits

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout"
)

// MaxKeyLen bounds a destination key as it appears in Redis keys, results,
// heartbeats and the UI.
const MaxKeyLen = 80

// MaxRate bounds a rate (calls per second).
const MaxRate = 1e6

// Field names of a type's overrides hash.
const (
	fieldDefault = "default"
	destPrefix   = "dest:"
)

// CleanKey returns the destination key k as fanout uses it: lower-case, of
// letters, digits and ".-_:[]~" only, at most MaxKeyLen bytes. A key that
// is not already so (too long, other bytes) keeps a readable prefix of its
// allowed bytes and ends in "~" and a hash of the whole key, so two
// different keys never share a limit by accident. "" is "-". CleanKey of a
// clean key is that key, so an operator can name a key as the UI shows it.
func CleanKey(k string) string {
	if k == "" {
		return "-"
	}
	if clean(k) {
		return k // the common case, per delivery: one pass, no allocation
	}
	lower := strings.ToLower(k)
	if len(lower) <= MaxKeyLen && strings.IndexFunc(lower, func(c rune) bool { return !keyByte(c) }) < 0 {
		return lower
	}
	sum := sha256.Sum256([]byte(k))
	tail := "~" + hex.EncodeToString(sum[:8])
	var b strings.Builder
	for _, c := range lower {
		if b.Len() >= MaxKeyLen-len(tail) {
			break
		}
		if keyByte(c) {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String() + tail
}

// HostKey is the canonical destination key of an address's host (host or
// host:port, as in a URL) under scheme ("http", "https"): lower-case, the
// host name without its trailing dot, the port without leading zeros and
// without the scheme's default (80, 443), so that "h", "h." and "h:443"
// under https are one destination. An unchanged host is returned as is
// (no allocation on the delivery path).
func HostKey(scheme, host string) string {
	host = strings.ToLower(host)
	name, port, hasPort := host, "", false
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		name, port, hasPort = host[:i], host[i+1:], true
	}
	p := strings.TrimLeft(port, "0")
	if p == "" && port != "" {
		p = "0"
	}
	trimmed := strings.TrimRight(name, ".")
	if trimmed == "" {
		trimmed = name
	}
	if p == "" || scheme == "https" && p == "443" || scheme == "http" && p == "80" {
		if !hasPort && trimmed == name {
			return host
		}
		return trimmed
	}
	if trimmed == name && p == port {
		return host
	}
	return trimmed + ":" + p
}

// ParseKey reads a destination key as an operator names it (`starter
// limits -dest`): a key as the workers compute it, in any case. It refuses
// what no destination has as its key: a URL or path, bytes outside the
// key's, a trailing dot (the key of "h." is "h"), more than MaxKeyLen
// bytes; such a limit would never apply.
func ParseKey(s string) (string, error) {
	k := strings.ToLower(s)
	switch {
	case k == "":
		return "", errors.New("empty destination key")
	case strings.Contains(k, "://"):
		return "", fmt.Errorf("%.64q is a URL, not a destination key (the webhook type's is the address's host[:port], e.g. hooks.example.com)", s)
	case len(k) > MaxKeyLen:
		return "", fmt.Errorf("destination key of %d bytes, over %d", len(k), MaxKeyLen)
	case !clean(k):
		return "", fmt.Errorf("%.64q cannot be a destination key (letters, digits and .-_:[]~ only)", s)
	}
	if name, _, _ := strings.Cut(k, ":"); strings.HasSuffix(name, ".") && !strings.HasPrefix(k, "[") {
		return "", fmt.Errorf("%.64q cannot be a destination key: keys name a host without its trailing dot", s)
	}
	return k, nil
}

// keyBytes are the bytes of a clean key.
var keyBytes = func() (t [256]bool) {
	for c := range 256 {
		t[c] = keyByte(rune(c))
	}
	return t
}()

// clean reports whether k is already a clean key.
func clean(k string) bool {
	if len(k) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !keyBytes[k[i]] {
			return false
		}
	}
	return true
}

func keyByte(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune(".-_:[]~", c)
}

// RateKey is the limiter's key of destination dest (cleaned) of the type.
func RateKey(eventType, dest string) string { return "fanout:rate:" + eventType + ":" + dest }

// ConfigKey is the hash of the type's overrides.
func ConfigKey(eventType string) string { return "fanout:limits:" + eventType }

// ParseRate reads a rate in calls per second: "200", "200/s", "12.5/s",
// "600/m", "3600/h", at least fanout.MinRate ("1/h"); "0", "off" and "none"
// are no limit (0).
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	switch t {
	case "off", "none":
		return 0, nil
	case "":
		return 0, errors.New("empty rate (want e.g. 200/s, 600/m or off)")
	}
	per := 1.0
	if num, unit, ok := strings.Cut(t, "/"); ok {
		switch unit {
		case "s":
		case "m":
			per = 60
		case "h":
			per = 3600
		default:
			return 0, fmt.Errorf("rate %.32q: unknown unit %.8q (want /s, /m or /h)", s, unit)
		}
		t = num
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("rate %.32q: not a number (want e.g. 200/s, 600/m or off)", s)
	}
	f /= per
	if err := checkRate(f); err != nil {
		return 0, fmt.Errorf("rate %.32q: %w", s, err)
	}
	return f, nil
}

// checkRate refuses a rate outside MinRate..MaxRate (0: no limit).
func checkRate(f float64) error {
	if math.IsNaN(f) || f < 0 || f > MaxRate || f > 0 && f < fanout.MinRate {
		return fmt.Errorf("outside 1/h (fanout.MinRate)..%v/s, or off", MaxRate)
	}
	return nil
}

// FormatRate writes a rate as ParseRate reads it ("200/s", "off").
func FormatRate(f float64) string {
	if f <= 0 {
		return "off"
	}
	return strconv.FormatFloat(f, 'g', 6, 64) + "/s"
}

// Overrides are a type's run-time limits: Default replaces the type's
// DestinationRate when HasDefault, Dest a destination's limit (0: none).
type Overrides struct {
	HasDefault bool
	Default    float64
	Dest       map[string]float64
	// Bad lists fields that did not parse (ignored).
	Bad []string
}

// Rate is the limit of destination key: its override, the overridden
// default, or def (the type's DestinationRate).
func (o Overrides) Rate(key string, def float64) float64 {
	if r, ok := o.Dest[key]; ok {
		return r
	}
	if o.HasDefault {
		return o.Default
	}
	return def
}

// Store reads and writes the overrides in Redis.
type Store struct{ RDB redis.UniversalClient }

// Set sets the type's default (dest "") or a destination's limit.
func (s Store) Set(ctx context.Context, eventType, dest string, perSecond float64) error {
	if err := checkRate(perSecond); err != nil {
		return fmt.Errorf("rate %v: %w", perSecond, err)
	}
	return s.RDB.HSet(ctx, ConfigKey(eventType), field(dest), strconv.FormatFloat(perSecond, 'g', -1, 64)).Err()
}

// Unset removes the type's default override (dest "") or a destination's.
func (s Store) Unset(ctx context.Context, eventType, dest string) error {
	return s.RDB.HDel(ctx, ConfigKey(eventType), field(dest)).Err()
}

func field(dest string) string {
	if dest == "" {
		return fieldDefault
	}
	return destPrefix + CleanKey(dest)
}

// Load reads the type's overrides.
func (s Store) Load(ctx context.Context, eventType string) (Overrides, error) {
	m, err := s.RDB.HGetAll(ctx, ConfigKey(eventType)).Result()
	if err != nil {
		return Overrides{}, err
	}
	return parseOverrides(m), nil
}

func parseOverrides(m map[string]string) Overrides {
	var o Overrides
	for f, v := range m {
		r, err := ParseRate(v)
		switch {
		case err != nil:
			o.Bad = append(o.Bad, f)
		case f == fieldDefault:
			o.HasDefault, o.Default = true, r
		case strings.HasPrefix(f, destPrefix) && len(f) > len(destPrefix):
			if o.Dest == nil {
				o.Dest = map[string]float64{}
			}
			o.Dest[strings.TrimPrefix(f, destPrefix)] = r
		default:
			o.Bad = append(o.Bad, f)
		}
	}
	return o
}

// RefreshEvery is how long a worker keeps a type's overrides before it
// reads them again: a change is in force within this long.
const RefreshEvery = 3 * time.Second

// Cache is a worker's view of the overrides, read again every RefreshEvery.
type Cache struct {
	Store Store
	mu    sync.Mutex
	m     map[string]cached
}

type cached struct {
	o  Overrides
	at time.Time
}

// Get returns the type's overrides, reading them when older than
// RefreshEvery. When Redis fails it keeps what it had (none at first) and
// returns the error with it.
func (c *Cache) Get(ctx context.Context, eventType string) (Overrides, error) {
	c.mu.Lock()
	e, ok := c.m[eventType]
	c.mu.Unlock()
	if ok && time.Since(e.at) < RefreshEvery {
		return e.o, nil
	}
	o, err := c.Store.Load(ctx, eventType)
	if err != nil {
		return e.o, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]cached{}
	}
	c.m[eventType] = cached{o: o, at: time.Now()}
	c.mu.Unlock()
	return o, nil
}

// Limiter is the limit shared by every delivery worker: GCRA in Redis.
type Limiter struct{ rl *redis_rate.Limiter }

// NewLimiter returns the limiter over rdb.
func NewLimiter(rdb redis.UniversalClient) *Limiter { return &Limiter{rl: redis_rate.NewLimiter(rdb)} }

// Take asks for one call to dest (cleaned) of the type at perSecond: 0 when
// it may go now (the call is counted), else how long to wait before asking
// again (nothing counted).
func (l *Limiter) Take(ctx context.Context, eventType, dest string, perSecond float64) (time.Duration, error) {
	res, err := l.rl.Allow(ctx, RateKey(eventType, dest), LimitOf(perSecond))
	if err != nil {
		return 0, err
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	return max(res.RetryAfter, time.Millisecond), nil
}

// LimitOf is perSecond as redis_rate's integer rate per period, with a
// burst of a tenth of a second's worth (at least 1): a 10-second window
// sees at most 1 % over the rate.
func LimitOf(perSecond float64) redis_rate.Limit {
	n := max(1, int(math.Round(perSecond*10)))
	period := time.Duration(float64(n) / perSecond * float64(time.Second))
	return redis_rate.Limit{Rate: n, Period: max(period, time.Millisecond), Burst: max(1, int(perSecond/10))}
}
