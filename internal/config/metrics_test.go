package config

import "testing"

// FANOUT_METRICS_ADDR: off by default, [host]:port when set, named when bad.
func TestMetricsAddr(t *testing.T) {
	clearFanoutEnv(t)
	var b Bridge
	var w Worker
	if err := Load(&b); err != nil || b.MetricsAddr != "" {
		t.Fatalf("bridge default: %q, %v; want metrics off", b.MetricsAddr, err)
	}
	if err := Load(&w); err != nil || w.MetricsAddr != "" {
		t.Fatalf("worker default: %q, %v; want metrics off", w.MetricsAddr, err)
	}
	for _, addr := range []string{":9464", "127.0.0.1:9464", "[::1]:0"} {
		t.Setenv("FANOUT_METRICS_ADDR", addr)
		if err := Load(&b); err != nil || b.MetricsAddr != addr {
			t.Errorf("bridge FANOUT_METRICS_ADDR=%s: %q, %v", addr, b.MetricsAddr, err)
		}
		if err := Load(&w); err != nil || w.MetricsAddr != addr {
			t.Errorf("worker FANOUT_METRICS_ADDR=%s: %q, %v", addr, w.MetricsAddr, err)
		}
	}
	runBadValues(t, []badValueCase{
		{"bridge metrics addr without port", bridge, map[string]string{"FANOUT_METRICS_ADDR": "localhost"}, "FANOUT_METRICS_ADDR"},
		{"worker metrics addr without port", worker, map[string]string{"FANOUT_METRICS_ADDR": "9464"}, "FANOUT_METRICS_ADDR"},
		{"worker metrics port not a number", worker, map[string]string{"FANOUT_METRICS_ADDR": ":http-alt"}, "FANOUT_METRICS_ADDR"},
		{"bridge metrics port out of range", bridge, map[string]string{"FANOUT_METRICS_ADDR": ":70000"}, "FANOUT_METRICS_ADDR"},
	})
}
