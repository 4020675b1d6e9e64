package deploy

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// labelSelector is a Kubernetes label selector.
type labelSelector struct {
	MatchLabels      map[string]str `yaml:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `yaml:"key"`
		Operator string   `yaml:"operator"`
		Values   []string `yaml:"values"`
	} `yaml:"matchExpressions"`
}

// matches reports whether labels satisfy the selector (In, NotIn, Exists,
// DoesNotExist, as Kubernetes evaluates them).
func (s labelSelector) matches(labels map[string]str) (bool, error) {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false, nil
		}
	}
	for _, e := range s.MatchExpressions {
		v, ok := labels[e.Key]
		switch e.Operator {
		case "In":
			if !ok || !slices.Contains(e.Values, string(v)) {
				return false, nil
			}
		case "NotIn":
			if ok && slices.Contains(e.Values, string(v)) {
				return false, nil
			}
		case "Exists":
			if !ok {
				return false, nil
			}
		case "DoesNotExist":
			if ok {
				return false, nil
			}
		default:
			return false, fmt.Errorf("matchExpressions operator %q is not one Kubernetes knows", e.Operator)
		}
	}
	return true, nil
}

type npPeer struct {
	IPBlock *struct {
		CIDR   string   `yaml:"cidr"`
		Except []string `yaml:"except"`
	} `yaml:"ipBlock"`
	NamespaceSelector *labelSelector `yaml:"namespaceSelector"`
	PodSelector       *labelSelector `yaml:"podSelector"`
}

type npRule struct {
	Ports []struct {
		Protocol string `yaml:"protocol"`
		Port     int    `yaml:"port"`
	} `yaml:"ports"`
	To   []npPeer `yaml:"to"`
	From []npPeer `yaml:"from"`
}

type networkPolicy struct {
	object `yaml:",inline"`
	Spec   struct {
		PodSelector labelSelector `yaml:"podSelector"`
		PolicyTypes []string      `yaml:"policyTypes"`
		Ingress     []npRule      `yaml:"ingress"`
		Egress      []npRule      `yaml:"egress"`
	} `yaml:"spec"`
}

// egressRule is one port a pod may reach and to whom (nil peers: anywhere).
type egressRule struct {
	port  string // "TCP/443"
	peers []npPeer
}

// TestNetworkPolicies: every fanout pod is selected by a default-deny policy
// (ingress and egress), and the policies that select it open exactly the
// connections its configuration names: DNS and Temporal for all; Kafka and
// Redis for workers and the bridge; the recipients source for the events
// worker; public destinations on 80/443 (never the private, loopback or
// metadata ranges) for workers; nothing more for the setup Job.
func TestNetworkPolicies(t *testing.T) {
	m := loadManifests(t)
	var pols []networkPolicy
	for _, d := range m.docs {
		if d.obj.Kind == "NetworkPolicy" {
			pols = append(pols, decodeDoc[networkPolicy](t, d))
		}
	}
	if len(pols) == 0 {
		t.Fatalf("no NetworkPolicy in %s", k8sDir)
	}
	img := parseDockerfile(t)
	subs := starterSubcommands(t)
	wnames, all := m.workloads()
	for _, name := range wnames {
		w := all[name]
		where := m.where[name]
		labels := w.Spec.Template.Metadata.Labels
		denied := false
		var egress []egressRule
		ingressPorts := map[string]bool{}
		for _, p := range pols {
			ok, err := p.Spec.PodSelector.matches(labels)
			if err != nil {
				t.Errorf("NetworkPolicy %s: %v", p.Metadata.Name, err)
			}
			if !ok {
				continue
			}
			if slices.Contains(p.Spec.PolicyTypes, "Ingress") && slices.Contains(p.Spec.PolicyTypes, "Egress") &&
				len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 {
				denied = true
			}
			for _, r := range p.Spec.Egress {
				if len(r.Ports) == 0 {
					t.Errorf("NetworkPolicy %s: an egress rule without ports opens every port", p.Metadata.Name)
				}
				for _, port := range r.Ports {
					egress = append(egress, egressRule{port: cmpOr(port.Protocol, "TCP") + "/" + strconv.Itoa(port.Port), peers: r.To})
				}
			}
			for _, r := range p.Spec.Ingress {
				if len(r.From) == 0 {
					t.Errorf("NetworkPolicy %s: an ingress rule without from lets anyone in", p.Metadata.Name)
				}
				for _, port := range r.Ports {
					ingressPorts[cmpOr(port.Protocol, "TCP")+"/"+strconv.Itoa(port.Port)] = true
				}
			}
		}
		if !denied {
			t.Errorf("%s: no default-deny NetworkPolicy (policyTypes Ingress and Egress, no rules) selects its pods %v", where, labels)
		}
		for _, c := range w.Spec.Template.Spec.Containers {
			role, _ := checkCommand(k8sCommand(c), img, subs)
			envm, _ := m.containerEnv(c)
			want, err := neededEgress(role, envm)
			if err != nil {
				t.Errorf("%s container %s: %v", where, c.Name, err)
				continue
			}
			allowed := map[string]bool{}
			for _, e := range egress {
				allowed[e.port] = true
			}
			for _, port := range want {
				if !allowed[port] {
					t.Errorf("%s container %s (%s): its configuration needs egress to %s; no NetworkPolicy selecting it allows it", where, c.Name, role, port)
				}
			}
			for port := range allowed {
				if !slices.Contains(want, port) && port != "TCP/53" && port != "UDP/53" {
					t.Errorf("%s container %s (%s): egress to %s is allowed but nothing in its configuration uses it", where, c.Name, role, port)
				}
			}
			// Destinations: only public addresses.
			for _, e := range egress {
				if e.port != "TCP/443" && e.port != "TCP/80" {
					continue
				}
				for _, peer := range e.peers {
					if peer.IPBlock == nil {
						continue
					}
					for _, private := range []string{"10.0.0.1", "172.16.0.1", "192.168.0.1", "127.0.0.1", "169.254.169.254", "100.64.0.1", "::1", "fd00::1", "fe80::1"} {
						if cidrAllows(peer.IPBlock.CIDR, peer.IPBlock.Except, private) {
							t.Errorf("%s container %s: egress on %s reaches %s (%s except %v); exclude the private, loopback and metadata ranges", where, c.Name, e.port, private, peer.IPBlock.CIDR, peer.IPBlock.Except)
						}
					}
				}
			}
			if metrics := envm["FANOUT_METRICS_ADDR"]; metrics != "" && role != "starter setup" {
				_, port, _ := net.SplitHostPort(metrics)
				if !ingressPorts["TCP/"+port] {
					t.Errorf("%s container %s: Prometheus cannot scrape FANOUT_METRICS_ADDR=%s: no ingress on %s", where, c.Name, metrics, port)
				}
			}
		}
	}
	// The policies are applied with the rest.
	k := m.kustomizations[0]
	for _, d := range m.docs {
		if d.obj.Kind == "NetworkPolicy" {
			file, _, _ := strings.Cut(strings.TrimPrefix(d.where, k8sDir+string(filepath.Separator)), "#")
			if !slices.Contains(k.Resources, file) {
				t.Errorf("%s: not in %s's resources", d.where, kustomizationFile)
			}
		}
	}
}

// neededEgress is the egress a process of role makes with environment envm
// (beyond DNS): "TCP/<port>" of Temporal, Kafka, Redis, the recipients
// source and destinations.
func neededEgress(role string, envm map[string]string) ([]string, error) {
	var out []string
	add := func(p string) {
		if !slices.Contains(out, "TCP/"+p) {
			out = append(out, "TCP/"+p)
		}
	}
	addr := cmpOr(envm["TEMPORAL_ADDRESS"], "localhost:7233")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("TEMPORAL_ADDRESS %q: %v", addr, err)
	}
	add(port)
	if role != "worker" && role != "bridge" {
		return out, nil
	}
	for _, b := range strings.Split(envm["FANOUT_KAFKA_BROKERS"], ",") {
		_, port, err := net.SplitHostPort(strings.TrimSpace(b))
		if err != nil {
			return nil, fmt.Errorf("FANOUT_KAFKA_BROKERS %q: %v", b, err)
		}
		add(port)
	}
	for _, raw := range strings.Split(cmpOr(envm["FANOUT_REDIS_URL"], "redis://localhost:6379"), ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("FANOUT_REDIS_URL: not a URL")
		}
		add(cmpOr(u.Port(), "6379"))
	}
	if role == "worker" {
		add("443")
		add("80")
		if queues, _ := parseQueues(envm["FANOUT_QUEUES"]); slices.Contains(queues, "events") && envm["FANOUT_RECIPIENTS_URL"] != "" {
			u, err := url.Parse(envm["FANOUT_RECIPIENTS_URL"])
			if err != nil {
				return nil, fmt.Errorf("FANOUT_RECIPIENTS_URL: not a URL")
			}
			add(cmpOr(u.Port(), map[string]string{"http": "80", "https": "443"}[u.Scheme]))
		}
	}
	return out, nil
}

// cidrAllows reports whether ip is in cidr and in none of except.
func cidrAllows(cidr string, except []string, ip string) bool {
	addr := net.ParseIP(ip)
	_, n, err := net.ParseCIDR(cidr)
	if err != nil || !n.Contains(addr) || (addr.To4() == nil) != (n.IP.To4() == nil) {
		return false
	}
	for _, e := range except {
		if _, en, err := net.ParseCIDR(e); err == nil && en.Contains(addr) {
			return false
		}
	}
	return true
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
