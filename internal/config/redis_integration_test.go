//go:build integration

package config_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fanout/fanout/dev/stack"
	"github.com/fanout/fanout/internal/config"
)

// TestRedisClientCluster: FANOUT_REDIS_MODE=cluster with one seed node, an
// ACL user and its password in FANOUT_REDIS_PASSWORD_FILE gives a cluster
// client that reaches every master as that user.
func TestRedisClientCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs, stop, err := stack.StartRedisCluster(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	for _, a := range addrs { // ACLs are per node
		c := redis.NewClient(&redis.Options{Addr: a})
		err := c.Do(ctx, "ACL", "SETUSER", "app", "on", ">app-pw", "~fanout:*", "+@all").Err()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	rdb, err := config.RedisClient(config.RedisConn{URL: "redis://app:wrong@" + addrs[0], Mode: "cluster",
		PasswordFile: writeFile(t, "pw", "app-pw\n")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rdb.Close() }()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("client %T; want *redis.ClusterClient", rdb)
	}
	const keys = 60
	for i := range keys {
		if err := rdb.Set(ctx, fmt.Sprintf("fanout:test:%d", i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	counts, err := stack.MasterKeyCounts(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	for a, n := range counts {
		if n == 0 {
			t.Errorf("master %s got none of %d keys: %v", a, keys, counts)
		}
	}
	err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		who, err := m.Do(ctx, "ACL", "WHOAMI").Text()
		if err == nil && who != "app" {
			err = fmt.Errorf("%s: connected as %q, want app", m.Options().Addr, who)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
	if err := rdb.Set(ctx, "other:key", 1, time.Minute).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("SET outside the user's keys: %v; want NOPERM (the client is not the default user)", err)
	}
}

// TestRedisClientSentinel: FANOUT_REDIS_MASTER_NAME with the sentinel's
// address gives a client that writes to the primary the sentinel names.
func TestRedisClientSentinel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sentinel, primary, stop, err := stack.StartRedisSentinel(ctx, t.TempDir(), "fanout-primary")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	conn := config.RedisConn{URL: "redis://" + sentinel + "/0", MasterName: "fanout-primary"}
	if mode, err := config.RedisMode(conn); err != nil || mode != config.RedisSentinel {
		t.Fatalf("setup: mode %q, %v; want sentinel", mode, err)
	}
	rdb, err := config.RedisClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rdb.Close() }()
	if err := rdb.Set(ctx, "fanout:e:sentinel-test", "through-sentinel", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: primary})
	defer func() { _ = direct.Close() }()
	if v, err := direct.Get(ctx, "fanout:e:sentinel-test").Result(); err != nil || v != "through-sentinel" {
		t.Errorf("the primary %s holds %q, %v; want the value written through the sentinel", primary, v, err)
	}
	if role, err := direct.Do(ctx, "ROLE").Slice(); err != nil || len(role) == 0 || role[0] != "master" {
		t.Errorf("ROLE of %s: %v, %v", primary, role, err)
	}
}

// TestRedisClientTLS: a rediss:// URL with an ACL user and
// FANOUT_REDIS_TLS_CA_FILE connects to a TLS-only redis-server whose
// certificate a private CA signed, as that user; without the CA file the
// certificate is refused.
func TestRedisClientTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := testServerCert(t)
	caFile, certFile, keyFile := writeFile(t, "ca.pem", caPEM), writeFile(t, "cert.pem", certPEM), writeFile(t, "key.pem", keyPEM)
	addr, stop, err := stack.StartRedisTLS(ctx, dir, certFile, keyFile, caFile, "--user", "app", "on", ">app-pw", "~*", "+@all")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	rdb, err := config.RedisClient(config.RedisConn{URL: "rediss://app:app-pw@" + addr + "/0", TLSCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rdb.Close() }()
	if who, err := rdb.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "app" {
		t.Errorf("ACL WHOAMI over TLS: %q, %v; want app", who, err)
	}

	untrusted, err := config.RedisClient(config.RedisConn{URL: "rediss://app:app-pw@" + addr + "/0?max_retries=-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = untrusted.Close() }()
	if err := untrusted.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("PING without the private CA: %v; want a certificate error", err)
	}
}

// testServerCert returns a CA and a server certificate for 127.0.0.1 it
// signed, with the server's key, in PEM.
func testServerCert(t *testing.T) (caPEM, certPEM, keyPEM string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fanout test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	return enc("CERTIFICATE", caDER), enc("CERTIFICATE", der), enc("EC PRIVATE KEY", keyDER)
}

// writeFile writes content to a file named name in a temporary directory
// and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
