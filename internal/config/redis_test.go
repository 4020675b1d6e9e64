package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// writeFile writes content to a new file in t's temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testCAPEM is a self-signed CA certificate in PEM.
func testCAPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fanout test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// TestRedisSetup: each way of writing the Redis variables gives the client
// mode, addresses, credentials, database, options and TLS it says.
func TestRedisSetup(t *testing.T) {
	ca := writeFile(t, "ca.pem", testCAPEM(t))
	pwFile := writeFile(t, "password", "fr0m-file\n")
	sentinelPW := writeFile(t, "sentinel-password", "sentinel-pw")
	wantTLS := func(t *testing.T, c *tls.Config, roots, skip bool) {
		t.Helper()
		switch {
		case c == nil:
			t.Fatal("no TLS config; want TLS")
		case c.ServerName != "":
			t.Errorf("ServerName %q; want empty (each node verified at the address it is dialed at)", c.ServerName)
		case c.MinVersion != tls.VersionTLS12:
			t.Errorf("MinVersion %x; want TLS 1.2", c.MinVersion)
		case (c.RootCAs != nil) != roots:
			t.Errorf("RootCAs set = %v; want %v", c.RootCAs != nil, roots)
		case c.InsecureSkipVerify != skip:
			t.Errorf("InsecureSkipVerify = %v; want %v", c.InsecureSkipVerify, skip)
		}
	}
	cases := []struct {
		name  string
		conn  RedisConn
		mode  string
		check func(t *testing.T, s redisSetup)
	}{
		{"the default", RedisConn{URL: "redis://localhost:6379/0"}, RedisSingle, func(t *testing.T, s redisSetup) {
			if o := s.single; o.Addr != "localhost:6379" || o.DB != 0 || o.TLSConfig != nil || o.Password != "" {
				t.Errorf("options %+v", o)
			}
		}},
		{"TLS, ACL user, database", RedisConn{URL: "rediss://app:pw@redis.example:6380/2", Mode: "single"}, RedisSingle, func(t *testing.T, s redisSetup) {
			o := s.single
			if o.Addr != "redis.example:6380" || o.Username != "app" || o.Password != "pw" || o.DB != 2 {
				t.Errorf("Addr %q Username %q Password %q DB %d", o.Addr, o.Username, o.Password, o.DB)
			}
			wantTLS(t, o.TLSConfig, false, false)
		}},
		{"password only, percent-encoded", RedisConn{URL: "redis://:p%40ss%2Fw@h"}, RedisSingle, func(t *testing.T, s redisSetup) {
			if o := s.single; o.Addr != "h:6379" || o.Username != "" || o.Password != "p@ss/w" {
				t.Errorf("Addr %q Username %q Password %q", o.Addr, o.Username, o.Password)
			}
		}},
		{"options and skip_verify", RedisConn{URL: "rediss://h:6379/0?dial_timeout=3s&pool_size=7&skip_verify=true"}, RedisSingle, func(t *testing.T, s redisSetup) {
			if o := s.single; o.DialTimeout != 3*time.Second || o.PoolSize != 7 {
				t.Errorf("DialTimeout %v PoolSize %d", o.DialTimeout, o.PoolSize)
			}
			wantTLS(t, s.single.TLSConfig, false, true)
		}},
		{"password file overrides the URL's", RedisConn{URL: "redis://app:old@h:6379", PasswordFile: pwFile}, RedisSingle, func(t *testing.T, s redisSetup) {
			if o := s.single; o.Username != "app" || o.Password != "fr0m-file" {
				t.Errorf("Username %q Password %q", o.Username, o.Password)
			}
		}},
		{"several hosts are a cluster", RedisConn{URL: "redis://a:7000,b:7001,c:6379", Mode: "auto"}, RedisCluster, func(t *testing.T, s redisSetup) {
			if o := s.cluster; !slices.Equal(o.Addrs, []string{"a:7000", "b:7001", "c:6379"}) || o.TLSConfig != nil {
				t.Errorf("Addrs %v TLS %v", o.Addrs, o.TLSConfig)
			}
		}},
		{"cluster through one TLS endpoint, ACL user, private CA", RedisConn{URL: "rediss://app:pw@clustercfg.example:6379/0?pool_size=9", Mode: "Cluster", TLSCAFile: ca}, RedisCluster, func(t *testing.T, s redisSetup) {
			o := s.cluster
			if !slices.Equal(o.Addrs, []string{"clustercfg.example:6379"}) || o.Username != "app" || o.Password != "pw" || o.PoolSize != 9 {
				t.Errorf("Addrs %v Username %q Password %q PoolSize %d", o.Addrs, o.Username, o.Password, o.PoolSize)
			}
			wantTLS(t, o.TLSConfig, true, false)
		}},
		{"sentinel", RedisConn{URL: "redis://app:pw@s1:26379,s2:26379,s3:26379/1", MasterName: "mymaster"}, RedisSentinel, func(t *testing.T, s redisSetup) {
			o := s.failover
			if !slices.Equal(o.SentinelAddrs, []string{"s1:26379", "s2:26379", "s3:26379"}) || o.MasterName != "mymaster" ||
				o.DB != 1 || o.Username != "app" || o.Password != "pw" || o.SentinelPassword != "" || o.TLSConfig != nil {
				t.Errorf("options %+v", o)
			}
		}},
		{"sentinel with TLS and its own password", RedisConn{URL: "rediss://:pw@s1:26379", Mode: "sentinel", MasterName: "m", SentinelPasswordFile: sentinelPW, TLSCAFile: ca}, RedisSentinel, func(t *testing.T, s redisSetup) {
			o := s.failover
			if o.Password != "pw" || o.SentinelPassword != "sentinel-pw" || o.MasterName != "m" {
				t.Errorf("Password %q SentinelPassword %q MasterName %q", o.Password, o.SentinelPassword, o.MasterName)
			}
			wantTLS(t, o.TLSConfig, true, false)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.conn.setup()
			if err != nil {
				t.Fatal(err)
			}
			if s.mode != c.mode {
				t.Fatalf("mode %q; want %q", s.mode, c.mode)
			}
			c.check(t, s)
			rdb, err := RedisClient(c.conn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rdb.Close() }()
			if _, isCluster := rdb.(*redis.ClusterClient); isCluster != (c.mode == RedisCluster) {
				t.Errorf("client %T for mode %s", rdb, c.mode)
			}
		})
	}
}

// TestRedisSetupRefuses: bad Redis variables fail start-up with an error
// naming the variable at fault, never showing a password.
func TestRedisSetupRefuses(t *testing.T) {
	ca := writeFile(t, "ca.pem", testCAPEM(t))
	notPEM := writeFile(t, "not.pem", "s3cret is not a certificate")
	empty := writeFile(t, "empty", " \n")
	missing := filepath.Join(t.TempDir(), "missing")
	cases := []struct {
		name string
		conn RedisConn
		want string // the variable the error names, and what it says
	}{
		{"empty URL", RedisConn{}, "FANOUT_REDIS_URL: empty"},
		{"scheme", RedisConn{URL: "http://user:s3cret@redis.example"}, "FANOUT_REDIS_URL: http://user:xxxxx@redis.example: scheme"},
		{"unix socket", RedisConn{URL: "unix:///tmp/redis.sock"}, "FANOUT_REDIS_URL"},
		{"no host", RedisConn{URL: "redis://:s3cret@/0"}, "no host"},
		{"bad port", RedisConn{URL: "redis://user:s3cret@h:notaport/0"}, "is not a URL"},
		{"unescaped slash in the password", RedisConn{URL: "redis://user:s3cret/x@h:6379/0"}, "redis://user:xxxxx@h:6379/0 is not a URL"},
		{"bad second host", RedisConn{URL: "redis://:s3cret@a:1,:2"}, "host 2"},
		{"the last host without its port", RedisConn{URL: "redis://:s3cret@a:1,b"}, "give each its port"},
		{"bad database", RedisConn{URL: "rediss://:s3cret@h:6380/abc"}, "invalid database number"},
		{"unknown option", RedisConn{URL: "redis://user:s3cret@h:6379/0?nosuch=1"}, "unexpected option: nosuch"},
		{"unknown cluster option", RedisConn{URL: "redis://user:s3cret@a:1,b:2?nosuch=1"}, "unexpected option: nosuch"},
		{"password as an option", RedisConn{URL: "redis://h:6379/0?password=s3cret"}, "option password"},
		{"sentinel password as an option", RedisConn{URL: "redis://h:26379?sentinel_password=s3cret", MasterName: "m"}, "option sentinel_password"},
		{"addr option", RedisConn{URL: "redis://a:1?addr=b:2"}, "comma-separated"},
		{"master_name option", RedisConn{URL: "redis://a:1?master_name=m"}, "FANOUT_REDIS_MASTER_NAME"},
		{"mode", RedisConn{URL: "redis://h", Mode: "replicated"}, `FANOUT_REDIS_MODE: "replicated"`},
		{"single with several hosts", RedisConn{URL: "redis://:s3cret@a:1,b:2", Mode: "single"}, "2 hosts, but FANOUT_REDIS_MODE is single"},
		{"sentinel without a master name", RedisConn{URL: "redis://s1:26379", Mode: "sentinel"}, "FANOUT_REDIS_MASTER_NAME: empty"},
		{"master name outside sentinel mode", RedisConn{URL: "redis://a:1,b:2", Mode: "cluster", MasterName: "m"}, "FANOUT_REDIS_MASTER_NAME: set, but FANOUT_REDIS_MODE is cluster"},
		{"sentinel password outside sentinel mode", RedisConn{URL: "redis://h", SentinelPasswordFile: empty}, "FANOUT_REDIS_SENTINEL_PASSWORD_FILE: set"},
		{"cluster database", RedisConn{URL: "redis://:s3cret@a:1,b:2/3"}, "only database 0"},
		{"missing password file", RedisConn{URL: "redis://h", PasswordFile: missing}, "FANOUT_REDIS_PASSWORD_FILE"},
		{"empty password file", RedisConn{URL: "redis://h", PasswordFile: empty}, "FANOUT_REDIS_PASSWORD_FILE: " + empty + " is empty"},
		{"empty sentinel password file", RedisConn{URL: "redis://h", MasterName: "m", SentinelPasswordFile: empty}, "FANOUT_REDIS_SENTINEL_PASSWORD_FILE"},
		{"CA without TLS", RedisConn{URL: "redis://:s3cret@h", TLSCAFile: ca}, "FANOUT_REDIS_TLS_CA_FILE: set, but FANOUT_REDIS_URL is not rediss://"},
		{"CA file not PEM", RedisConn{URL: "rediss://:s3cret@h", TLSCAFile: notPEM}, "FANOUT_REDIS_TLS_CA_FILE: " + notPEM + " holds no PEM certificate"},
		{"missing CA file", RedisConn{URL: "rediss://h", TLSCAFile: missing}, "FANOUT_REDIS_TLS_CA_FILE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, try := range []func() error{
				c.conn.Check,
				func() error { _, err := RedisClient(c.conn); return err },
			} {
				err := try()
				if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %v; want one containing %q and no password", err, c.want)
				}
			}
		})
	}
}

// TestRedisVariablesLoad: the Redis variables reach both the worker's and
// the bridge's configuration, and a bad one fails Load naming it.
func TestRedisVariablesLoad(t *testing.T) {
	clearFanoutEnv(t)
	pw := writeFile(t, "pw", "from-file")
	t.Setenv("FANOUT_REDIS_URL", "redis://app@s1:26379,s2:26379")
	t.Setenv("FANOUT_REDIS_MODE", "sentinel")
	t.Setenv("FANOUT_REDIS_MASTER_NAME", "mymaster")
	t.Setenv("FANOUT_REDIS_PASSWORD_FILE", pw)
	var w Worker
	var b Bridge
	if err := Load(&w); err != nil {
		t.Fatal(err)
	}
	if err := Load(&b); err != nil {
		t.Fatal(err)
	}
	want := RedisConn{URL: "redis://app@s1:26379,s2:26379", Mode: "sentinel", MasterName: "mymaster", PasswordFile: pw}
	if w.RedisConn != want || b.RedisConn != want {
		t.Errorf("worker %+v, bridge %+v; want %+v", w.RedisConn, b.RedisConn, want)
	}
	s, err := b.setup()
	if err != nil || s.failover == nil || s.failover.Password != "from-file" || s.failover.Username != "app" {
		t.Errorf("setup %+v, %v", s.failover, err)
	}

	t.Setenv("FANOUT_REDIS_MODE", "cluster")
	for _, load := range []func() error{
		func() error { var w Worker; return Load(&w) },
		func() error { var b Bridge; return Load(&b) },
	} {
		if err := load(); err == nil || !strings.Contains(err.Error(), "FANOUT_REDIS_MASTER_NAME") {
			t.Errorf("Load: %v; want an error naming FANOUT_REDIS_MASTER_NAME", err)
		}
	}
}

// TestRedactURL: the password is hidden even when it holds unescaped
// reserved characters.
func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://user:s3cret@host:6379/0":   "redis://user:xxxxx@host:6379/0",
		"redis://:s3/c?r#et@host:6379/0":    "redis://:xxxxx@host:6379/0",
		"redis://u:s3cret@x@host:6379":      "redis://u:xxxxx@host:6379",
		"redis://host:6379/0":               "redis://host:6379/0",
		"redis://user@host:6379/0":          "redis://user@host:6379/0",
		"not a url":                         "not a url",
		"rediss://a:s3cret@h1:1,h2:2/0?x=y": "rediss://a:xxxxx@h1:1,h2:2/0?x=y",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q; want %q", raw, got, want)
		}
	}
}
