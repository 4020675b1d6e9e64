package stack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisSlots is the number of hash slots of a Redis Cluster.
const redisSlots = 16384

// StartRedisCluster starts a Redis Cluster of n masters (no replicas) on free
// 127.0.0.1 ports, without persistence, its node files and logs in dir, and
// waits until every node reports cluster_state:ok. The slots are split
// evenly, in order; the nodes meet through CLUSTER MEET (what
// `redis-cli --cluster create` does, without needing redis-cli). addrs are
// the masters' host:port; stop kills them (they die with this process too).
func StartRedisCluster(ctx context.Context, dir string, n int) (addrs []string, stop func(), err error) {
	if n < 1 {
		return nil, nil, fmt.Errorf("redis cluster of %d nodes", n)
	}
	var procs []*Proc
	kill := func() {
		for _, p := range procs {
			p.Kill()
		}
	}
	defer func() {
		if err != nil {
			kill()
		}
	}()
	buses := make([]int, n)
	for i := range n {
		p, addr, err := startRedisNode(ctx, dir, fmt.Sprintf("cluster-%d", i), func(port int) ([]string, error) {
			bus, err := freeBusPort(port)
			if err != nil {
				return nil, err
			}
			buses[i] = bus
			return []string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i)),
				"--cluster-node-timeout", "5000"}, nil
		})
		if err != nil {
			return nil, nil, err
		}
		procs = append(procs, p)
		addrs = append(addrs, addr)
	}
	clients := make([]*redis.Client, n)
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a})
		defer func() { _ = clients[i].Close() }()
	}
	for i, c := range clients {
		lo, hi := i*redisSlots/n, (i+1)*redisSlots/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return nil, nil, fmt.Errorf("redis cluster: node %s: add slots %d-%d: %w", addrs[i], lo, hi, err)
		}
	}
	for i, a := range addrs[1:] {
		host, port, _ := strings.Cut(a, ":")
		// The bus port is not port+10000 here: MEET must name it.
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", host, port, buses[i+1]).Err(); err != nil {
			return nil, nil, fmt.Errorf("redis cluster: meet %s: %w", a, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return nil, nil, fmt.Errorf("redis cluster: node %s not ok after 30s: %v %q", addrs[i], err, info)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return addrs, kill, nil
}

// StartRedisSentinel starts a Redis primary and one sentinel watching it as
// masterName, on free 127.0.0.1 ports, without persistence (the sentinel
// writes its configuration file in dir), and waits until the sentinel
// names the primary. stop kills both.
func StartRedisSentinel(ctx context.Context, dir, masterName string) (sentinelAddr, primaryAddr string, stop func(), err error) {
	var procs []*Proc
	kill := func() {
		for _, p := range procs {
			p.Kill()
		}
	}
	defer func() {
		if err != nil {
			kill()
		}
	}()
	p, primaryAddr, err := startRedisNode(ctx, dir, "primary", nil)
	if err != nil {
		return "", "", nil, err
	}
	procs = append(procs, p)
	host, port, _ := strings.Cut(primaryAddr, ":")
	conf := filepath.Join(dir, "sentinel.conf")
	p, sentinelAddr, err = startRedisNode(ctx, dir, "sentinel", func(int) ([]string, error) {
		// The sentinel rewrites its configuration file: it must exist.
		body := fmt.Sprintf("sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 5000\n", masterName, host, port, masterName)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return nil, err
		}
		return []string{"--sentinel"}, nil
	}, conf)
	if err != nil {
		return "", "", nil, err
	}
	procs = append(procs, p)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinelAddr})
	defer func() { _ = sc.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := sc.GetMasterAddrByName(ctx, masterName).Result()
		if err == nil && len(got) == 2 && got[0]+":"+got[1] == primaryAddr {
			return sentinelAddr, primaryAddr, kill, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", "", nil, fmt.Errorf("redis sentinel %s does not name %s after 30s: %v %v", sentinelAddr, masterName, got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startRedisNode starts one redis-server named name on a free port, its log
// in dir, with the arguments extra returns for that port, and waits until it
// answers PING; a port taken meanwhile is retried on another. conf, when
// given, is the configuration file, which must come first.
func startRedisNode(ctx context.Context, dir, name string, extra func(port int) ([]string, error), conf ...string) (*Proc, string, error) {
	return startRedisNodeTLS(ctx, dir, name, extra, nil, conf...)
}

// startRedisNodeTLS is startRedisNode, checking readiness over TLS with
// tlsConfig when set.
func startRedisNodeTLS(ctx context.Context, dir, name string, extra func(port int) ([]string, error), tlsConfig *tls.Config, conf ...string) (*Proc, string, error) {
	bin, err := ensureRedisServer(io.Discard)
	if err != nil {
		return nil, "", err
	}
	var lastErr error
	for range 5 {
		port, err := FreePort()
		if err != nil {
			return nil, "", err
		}
		args := append(append([]string{}, conf...), "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", dir)
		if extra != nil {
			more, err := extra(port)
			if err != nil {
				return nil, "", err
			}
			args = append(args, more...)
		}
		p, err := startProc("redis-"+name, filepath.Join(dir, "redis-"+name+".log"), bin, args, nil)
		if err != nil {
			return nil, "", err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		err = waitRedis(ctx, p, addr, tlsConfig)
		if err == nil {
			return p, addr, nil
		}
		if !errors.Is(err, ErrRedisExited) {
			return nil, "", fmt.Errorf("redis-server %s: %w", name, err)
		}
		lastErr = fmt.Errorf("redis-server %s exited at start (port %d taken?); see %s: %w", name, port, filepath.Join(dir, "redis-"+name+".log"), err)
	}
	return nil, "", lastErr
}

// StartRedisTLS starts a redis-server that speaks only TLS, with the
// server certificate and key in certFile and keyFile and its CA in caFile
// (which redis-server requires; clients are not asked for certificates), on a free 127.0.0.1 port, without persistence; args
// are more redis-server arguments (e.g. "--user", "app", "on", ">pw",
// "~*", "+@all"). stop kills it.
func StartRedisTLS(ctx context.Context, dir, certFile, keyFile, caFile string, args ...string) (addr string, stop func(), err error) {
	p, addr, err := startRedisNodeTLS(ctx, dir, "tls", func(port int) ([]string, error) {
		return append([]string{"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
			"--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no"}, args...), nil
	}, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return "", nil, err
	}
	return addr, p.Kill, nil
}

// StartRedisArgs starts a plain redis-server on a free 127.0.0.1 port,
// without persistence, with more redis-server arguments (e.g.
// "--maxmemory-policy", "allkeys-lru"); stop kills it.
func StartRedisArgs(ctx context.Context, dir string, args ...string) (addr string, stop func(), err error) {
	p, addr, err := startRedisNode(ctx, dir, "args", func(int) ([]string, error) { return args, nil })
	if err != nil {
		return "", nil, err
	}
	return addr, p.Kill, nil
}

// freeBusPort is a free port for a cluster node's bus, other than port.
func freeBusPort(port int) (int, error) {
	for range 10 {
		p, err := FreePort()
		if err != nil {
			return 0, err
		}
		if p != port {
			return p, nil
		}
	}
	return 0, errors.New("no free port for the cluster bus")
}

// MasterKeyCounts returns the number of keys on each master of the cluster
// (DBSIZE), by address: tests check that keys spread over the shards.
func MasterKeyCounts(ctx context.Context, c *redis.ClusterClient) (map[string]int64, error) {
	var mu sync.Mutex
	out := map[string]int64{}
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		out[m.Options().Addr] = n
		mu.Unlock()
		return nil
	})
	return out, err
}

// TB is the part of testing.TB the test helpers here use (the stack
// package does not import testing).
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Fatal(args ...any)
}

// TestRedisCluster starts a Redis Cluster of three masters for one test,
// stopped when it ends, and returns a cluster client of it (seeded with
// the first master only, as a configuration endpoint is) and the masters'
// addresses.
func TestRedisCluster(t TB) (*redis.ClusterClient, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs, stop, err := StartRedisCluster(ctx, t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs[:1]})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, addrs
}
